/* sample.cu - one block per sequence: argmax, logprobs and top-N, and
 * stochastic sampling with thresholds found by binary search over the
 * order-preserving integer image of the logits (no sort of the vocab). */
#include <math.h>

#include "backends/engine/cuda/philox.cuh"
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

/* Number of ids with key >= k (as float, for the block sum). */
static __device__ float count_ge(const float *x, int n, uint32_t k, float *sh)
{
    float c = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        c += fkey(x[i]) >= k ? 1.0f : 0.0f;
    return pl_block_sum(c, sh);
}

/* Unnormalised probability mass of ids with key >= k at temperature 1/inv_t. */
static __device__ float mass_ge(const float *x, int n, uint32_t k, float mx, float inv_t,
                                float *sh)
{
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        if (fkey(x[i]) >= k)
            s += expf((x[i] - mx) * inv_t);
    return pl_block_sum(s, sh);
}

/* Largest key in [lo, hi] with f(key) >= target (f non-increasing). */
#define BSEARCH(lo, hi, fexpr, target) do {                        \
        while ((lo) < (hi)) {                                        \
            uint32_t mid_ = (lo) + (uint32_t)(((uint64_t)(hi) - (lo) + 1) / 2); \
            uint32_t K_ = mid_;                                      \
            if ((fexpr) >= (target)) (lo) = mid_; else (hi) = mid_ - 1; \
        }                                                            \
    } while (0)

/* Draw from candidates (key >= kt) by inverse CDF in id order. */
static __device__ int draw(const float *x, int n, uint32_t kt, float mx, float inv_t,
                           float u, float *sh, int amax)
{
    __shared__ float part[SAMPLE_THREADS];
    __shared__ int pick;
    int per = (n + blockDim.x - 1) / blockDim.x;
    int c0 = threadIdx.x * per, c1 = min(n, c0 + per);
    float s = 0.0f;
    for (int i = c0; i < c1; i++)
        if (fkey(x[i]) >= kt)
            s += expf((x[i] - mx) * inv_t);
    part[threadIdx.x] = s;
    if (threadIdx.x == 0)
        pick = amax;
    __syncthreads();
    if (threadIdx.x == 0) {  /* serial prefix over 1024 partial sums */
        float total = 0.0f;
        for (int i = 0; i < (int)blockDim.x; i++)
            total += part[i];
        float target = u * total, acc = 0.0f;
        for (int i = 0; i < (int)blockDim.x; i++) {
            if (acc + part[i] > target && part[i] > 0.0f) {
                int b0 = i * per, b1 = min(n, b0 + per);
                for (int j = b0; j < b1; j++) {
                    if (fkey(x[j]) < kt)
                        continue;
                    pick = j;
                    acc += expf((x[j] - mx) * inv_t);
                    if (acc > target)
                        break;
                }
                break;
            }
            acc += part[i];
        }
    }
    __syncthreads();
    return pick;
}

/* Log-softmax of the raw row x for the chosen id and the top-N. */
static __device__ void logprobs(const float *x, int n, const pl_cuda_samp &p, int tok,
                                const pl_cuda_samp_out &out, float *sv, int *si)
{
    __shared__ int32_t chosen[PL_CUDA_TOPN];
    int top = block_argmax(x, n, NULL, 0, sv, si);
    float mx = x[top], s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        s += expf(x[i] - mx);
    float lse = mx + logf(pl_block_sum(s, sv));
    int b = blockIdx.x;
    if (threadIdx.x == 0)
        out.logprob[b] = x[tok] - lse;
    for (int k = 0; k < PL_CUDA_TOPN; k++) {
        int id = -1;
        if (k < p.top_logprobs)
            id = block_argmax(x, n, chosen, k, sv, si);
        if (threadIdx.x == 0) {
            chosen[k] = id;
            out.top_ids[b * PL_CUDA_TOPN + k] = id;
            out.top_lp[b * PL_CUDA_TOPN + k] = id >= 0 ? x[id] - lse : -INFINITY;
        }
        __syncthreads();
    }
}

static __global__ void sample_kernel(const float *logits, const float *pen,
                                     const pl_cuda_samp *ps, pl_cuda_samp_out out, int n)
{
    __shared__ float sv[32];
    __shared__ int si[32];
    const pl_cuda_samp p = ps[blockIdx.x];
    int b = blockIdx.x;
    if (!p.sample) {
        if (threadIdx.x == 0) out.sampled[b] = -1;
        return;
    }
    const float *x = pen + (size_t)b * n;
    int amax = block_argmax(x, n, NULL, 0, sv, si);
    if (amax < 0) {  /* every logit NaN (or -inf): no token; the host fails the request */
        if (threadIdx.x == 0) {
            out.sampled[b] = PL_CUDA_NO_TOKEN;
            out.logprob[b] = NAN;
            for (int k = 0; k < PL_CUDA_TOPN; k++) {
                out.top_ids[b * PL_CUDA_TOPN + k] = -1;
                out.top_lp[b * PL_CUDA_TOPN + k] = -INFINITY;
            }
        }  /* slot_tok keeps the last good id: never -1 fed back */
        return;
    }
    float mx = x[amax];
    int tok = amax;
    if (p.temperature > 0.0f && p.top_k != 1) {
        float inv_t = 1.0f / p.temperature;
        uint32_t kt = 0, hi = fkey(mx);
        if (p.top_k > 0 && p.top_k < n) {
            uint32_t lo = 0, h2 = hi;
            BSEARCH(lo, h2, count_ge(x, n, K_, sv), (float)p.top_k);
            kt = lo;
        }
        if (p.top_p > 0.0f && p.top_p < 1.0f) {
            float want = p.top_p * mass_ge(x, n, kt, mx, inv_t, sv);
            uint32_t lo = kt, h2 = hi;
            BSEARCH(lo, h2, mass_ge(x, n, K_, mx, inv_t, sv), want);
            kt = lo;
        }
        if (p.min_p > 0.0f && p.min_p <= 1.0f) {
            uint32_t km = fkey(mx + p.temperature * logf(p.min_p));
            kt = km > kt ? km : kt;
        }
        float u = pl_philox_uniform(((uint64_t)p.seed_hi << 32) | p.seed_lo,
                                    ((uint64_t)p.step_hi << 32) | p.step_lo);
        tok = draw(x, n, kt, mx, inv_t, u, sv, amax);
    }
    if (threadIdx.x == 0) {
        out.sampled[b] = tok;
        if (p.slot >= 0 && p.slot < out.max_slots)
            out.slot_tok[p.slot] = tok;
    }
    if (p.top_logprobs >= 0)
        logprobs(logits + (size_t)b * n, n, p, tok, out, sv, si);
}

extern "C" int pl_cuda_sample(const float *logits, const float *pen, const pl_cuda_samp *p,
                              pl_cuda_samp_out out, int n_seqs, int n_vocab,
                              cudaStream_t st)
{
    PL_CUDA_ARG(logits && pen && p && out.sampled && out.logprob && out.top_ids && out.top_lp);
    PL_CUDA_ARG(out.slot_tok && n_vocab > 0 && n_seqs >= 0);
    if (n_seqs == 0)
        return 0;
    sample_kernel<<<n_seqs, SAMPLE_THREADS, 0, st>>>(logits, pen, p, out, n_vocab);
    PL_CUDA_LAUNCHED();
    return 0;
}
