/* logprobs.cuh - block-wide argmax and log-softmax with the top-N
 * alternatives, shared by the sampler (sample.cu) and prompt logprobs
 * (prompt_lp.cu). Device code only; not for use outside
 * backends/engine/cuda/. */
#ifndef PL_CUDA_LOGPROBS_CUH
#define PL_CUDA_LOGPROBS_CUH

#include <math.h>

#include "backends/engine/cuda/sample.cuh"

#define SAMPLE_THREADS 1024

/* Monotone map float -> uint32 (larger float, larger key). */
static __device__ __forceinline__ uint32_t fkey(float f)
{
    uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Block argmax (lowest index on ties) over x, skipping ids in excl[0..n_excl). */
static __device__ int block_argmax(const float *x, int n, const int32_t *excl, int n_excl,
                                   float *sv, int *si)
{
    float best = -INFINITY;
    int bi = -1;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = x[i];
        if (v > best || (v == best && bi < 0)) {
            int skip = 0;
            for (int e = 0; e < n_excl; e++)
                skip |= excl[e] == i;
            if (!skip) { best = v; bi = i; }
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi >= 0 && (bi < 0 || ov > best || (ov == best && oi < bi))) { best = ov; bi = oi; }
    }
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) { sv[w] = best; si[w] = bi; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 1; i < (int)(blockDim.x >> 5); i++)
            if (si[i] >= 0 && (si[0] < 0 || sv[i] > sv[0] || (sv[i] == sv[0] && si[i] < si[0]))) {
                sv[0] = sv[i];
                si[0] = si[i];
            }
    }
    __syncthreads();
    return si[0];
}

/* Log-softmax of the raw row x (n ids) at id tok into *lp, and its top
 * alternatives (top of them, most likely first; -1 / -inf past top) into
 * top_ids / top_lp (PL_CUDA_TOPN each). Every thread of the block calls. */
static __device__ void pl_logprobs(const float *x, int n, int tok, int top, float *lp,
                                   int32_t *top_ids, float *top_lp, float *sv, int *si)
{
    __shared__ int32_t chosen[PL_CUDA_TOPN];
    int am = block_argmax(x, n, NULL, 0, sv, si);
    if (am < 0) {                /* every logit NaN (or -inf) */
        if (threadIdx.x == 0) {
            *lp = NAN;
            for (int k = 0; k < PL_CUDA_TOPN; k++) {
                top_ids[k] = -1;
                top_lp[k] = -INFINITY;
            }
        }
        return;
    }
    float mx = x[am], s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        s += expf(x[i] - mx);
    float lse = mx + logf(pl_block_sum(s, sv));
    if (threadIdx.x == 0)
        *lp = x[tok] - lse;
    for (int k = 0; k < PL_CUDA_TOPN; k++) {
        int id = -1;
        if (k < top)
            id = block_argmax(x, n, chosen, k, sv, si);
        if (threadIdx.x == 0) {
            chosen[k] = id;
            top_ids[k] = id;
            top_lp[k] = id >= 0 ? x[id] - lse : -INFINITY;
        }
        __syncthreads();
    }
}

#endif
