/* sample.cu - one block per sequence: argmax, logprobs and top-N, and
 * stochastic sampling with thresholds found by binary search over the
 * order-preserving integer image of the logits (no sort of the vocab). */
#include <math.h>

#include "backends/engine/cuda/logprobs.cuh"
#include "backends/engine/cuda/philox.cuh"
#include "backends/engine/cuda/sample.cuh"


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
        pl_logprobs(logits + (size_t)b * n, n, tok, p.top_logprobs, out.logprob + b,
                    out.top_ids + (size_t)b * PL_CUDA_TOPN,
                    out.top_lp + (size_t)b * PL_CUDA_TOPN, sv, si);
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
