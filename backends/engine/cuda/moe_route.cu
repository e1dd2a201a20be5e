/* moe_route.cu - the router's logits and each row's top-k (moe_route.cuh).
 * One warp per row holds the row's logits in registers (16 per lane at
 * most); the top k are k warp-wide arg-max reductions, ties to the lower
 * index as pl_op_moe_route. */
#include "backends/engine/cuda/moe_route.cuh"

#include <math.h>

#define PER_LANE (PL_CUDA_MOE_MAX_EXPERTS / 32)

static __global__ void logits_kernel(const float *x, const float *w, const float *b,
                                     float *out, int n, int dim, int n_expert)
{
    int warp = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (warp >= n * n_expert)
        return;
    int r = warp / n_expert, e = warp % n_expert;
    const float *xr = x + (size_t)r * dim, *we = w + (size_t)e * dim;
    float s = 0.0f;
    for (int i = lane; i < dim; i += 32)
        s += xr[i] * we[i];
    s = pl_warp_sum(s);
    if (lane == 0)
        out[warp] = s + (b ? b[e] : 0.0f);
}

extern "C" int pl_cuda_moe_logits(const float *x, const float *w, const float *b,
                                  float *logits, int n, int dim, int n_expert,
                                  cudaStream_t st)
{
    PL_CUDA_ARG(x && w && logits && n >= 0 && dim > 0 && n_expert > 0);
    size_t threads = (size_t)n * n_expert * 32;
    if (threads == 0)
        return 0;
    logits_kernel<<<(unsigned)((threads + 255) / 256), 256, 0, st>>>(x, w, b, logits, n, dim,
                                                                       n_expert);
    PL_CUDA_LAUNCHED();
    return 0;
}

/* The warp's best (value, index): the larger value, then the lower index. */
static __device__ void warp_argmax(float *v, int *idx)
{
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, *v, o);
        int oi = __shfl_xor_sync(0xffffffffu, *idx, o);
        if (ov > *v || (ov == *v && oi < *idx)) {
            *v = ov;
            *idx = oi;
        }
    }
}

static __global__ void route_kernel(const float *logits, int n, int n_expert, int k,
                                    int topk_softmax, int norm_w, const float *escale,
                                    int32_t *sel, float *wt)
{
    int r = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (r >= n)
        return;
    float v[PER_LANE];
    float mx = -INFINITY;
    for (int i = 0; i < PER_LANE; i++) {
        int e = lane + 32 * i;
        v[i] = e < n_expert ? logits[(size_t)r * n_expert + e] : -INFINITY;
        mx = fmaxf(mx, v[i]);
    }
    mx = pl_warp_max(mx);
    if (!topk_softmax) {
        float z = 0.0f;
        for (int i = 0; i < PER_LANE; i++)
            z += lane + 32 * i < n_expert ? expf(v[i] - mx) : 0.0f;
        z = pl_warp_sum(z);
        for (int i = 0; i < PER_LANE; i++)
            v[i] = lane + 32 * i < n_expert ? expf(v[i] - mx) / z : -INFINITY;
    }
    unsigned taken = 0;
    int picked = 0;
    float pick = 0.0f, sum = 0.0f, top = 0.0f;   /* lane j keeps rank j's value */
    for (int j = 0; j < k; j++) {
        float bv = -INFINITY;
        int bi = 0x7fffffff;
        for (int i = 0; i < PER_LANE; i++)
            if (!(taken >> i & 1) && lane + 32 * i < n_expert &&
                (v[i] > bv || bi == 0x7fffffff)) {
                bv = v[i];
                bi = lane + 32 * i;
            }
        warp_argmax(&bv, &bi);
        if ((bi & 31) == lane)
            taken |= 1u << (bi >> 5);
        if (lane == j) {
            pick = bv;
            picked = bi;
        }
        if (j == 0)
            top = bv;
        sum += bv;
        if (lane == 0)
            sel[(size_t)r * k + j] = bi;
    }
    float z = pl_warp_sum(lane < k ? expf(pick - top) : 0.0f);
    if (lane >= k)
        return;
    float w = topk_softmax ? expf(pick - top) / z : norm_w ? pick / sum : pick;
    wt[(size_t)r * k + lane] = escale ? w * escale[picked] : w;
}

extern "C" int pl_cuda_moe_route(const float *logits, int n, int n_expert, int k,
                                 int topk_softmax, int norm_w, const float *escale,
                                 int32_t *sel, float *wt, cudaStream_t st)
{
    PL_CUDA_ARG(logits && sel && wt && n >= 0 && n_expert > 0 &&
                n_expert <= PL_CUDA_MOE_MAX_EXPERTS && k > 0 && k <= n_expert &&
                k <= PL_CUDA_MOE_MAX_USED);
    if (n == 0)
        return 0;
    size_t threads = (size_t)n * 32;
    route_kernel<<<(unsigned)((threads + 127) / 128), 128, 0, st>>>(
        logits, n, n_expert, k, topk_softmax, norm_w, escale, sel, wt);
    PL_CUDA_LAUNCHED();
    return 0;
}
