/* head_norm.cu - per-head RMSNorm: one warp per (row, head), the sum of
 * squares in fp32 by warp reduction, then the head rewritten in place. */
#include "backends/engine/cuda/head_norm.cuh"

#define HN_WARPS 4

static __global__ void head_rmsnorm_kernel(float *x, int row_stride, int n_rows, int n_heads,
                                           int head_dim, const float *w, float eps)
{
    int lane = threadIdx.x & 31;
    long unit = (long)blockIdx.x * HN_WARPS + (threadIdx.x >> 5);
    if (unit >= (long)n_rows * n_heads)
        return;
    int r = (int)(unit / n_heads), h = (int)(unit % n_heads);
    float *v = x + (size_t)r * row_stride + (size_t)h * head_dim;
    float ss = 0.0f;
    for (int i = lane; i < head_dim; i += 32)
        ss += v[i] * v[i];
    float inv = rsqrtf(pl_warp_sum(ss) / (float)head_dim + eps);
    for (int i = lane; i < head_dim; i += 32)
        v[i] = v[i] * inv * (w ? w[i] : 1.0f);
}

extern "C" int pl_cuda_head_rmsnorm(float *x, int row_stride, int n_rows, int n_heads,
                                    int head_dim, const float *w, float eps, cudaStream_t st)
{
    PL_CUDA_ARG(x && n_rows >= 0 && n_heads > 0 && eps >= 0.0f);
    PL_CUDA_ARG(head_dim > 0 && head_dim <= 512 && row_stride >= n_heads * head_dim);
    long units = (long)n_rows * n_heads;
    if (units == 0)
        return 0;
    head_rmsnorm_kernel<<<(unsigned)((units + HN_WARPS - 1) / HN_WARPS), 32 * HN_WARPS, 0,
                          st>>>(x, row_stride, n_rows, n_heads, head_dim, w, eps);
    PL_CUDA_LAUNCHED();
    return 0;
}
