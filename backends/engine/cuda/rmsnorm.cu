/* rmsnorm.cu - RMSNorm kernels (plain and fused with the residual add).
 * Sums are in fp32; only the output is rounded to bf16. */
#include "backends/engine/cuda/rmsnorm.cuh"

#define NORM_THREADS 256

/* One block per row (output bf16 for the GEMMs, or fp32). With y != NULL the row is first updated in place
 * (x += y, or x += rmsnorm(y) * post), which saves a separate pass over
 * the residual stream; with w == NULL nothing more is written. */
static __device__ __forceinline__ void store(__nv_bfloat16 *o, float v) { *o = __float2bfloat16(v); }
static __device__ __forceinline__ void store(float *o, float v) { *o = v; }

template <typename T>
static __global__ void rmsnorm_kernel(float *x, const float *y, const float *post,
                                      const int32_t *rows, const float *w, T *out, int dim,
                                      float eps)
{
    __shared__ float sh[32];
    int r = blockIdx.x;
    float *xr = x + (size_t)(rows ? rows[r] : r) * dim;
    const float *yr = y ? y + (size_t)r * dim : NULL;
    float inv_y = 1.0f;
    if (yr && post) {
        float sy = 0.0f;
        for (int i = threadIdx.x; i < dim; i += blockDim.x)
            sy += yr[i] * yr[i];
        inv_y = rsqrtf(pl_block_sum(sy, sh) / (float)dim + eps);
    }
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = xr[i];
        if (yr) {
            v += post ? yr[i] * inv_y * post[i] : yr[i];
            xr[i] = v;
        }
        ss += v * v;
    }
    if (!w)
        return;
    ss = pl_block_sum(ss, sh);
    float inv = rsqrtf(ss / (float)dim + eps);
    T *o = out + (size_t)r * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        store(o + i, xr[i] * inv * w[i]);
}

extern "C" int pl_cuda_rmsnorm(const float *x, const int32_t *rows, const float *w,
                               pl_bf16 *out, int n_rows, int dim, float eps,
                               cudaStream_t st)
{
    PL_CUDA_ARG(x && w && out && dim > 0 && n_rows >= 0 && eps >= 0.0f);
    if (n_rows == 0)
        return 0;
    rmsnorm_kernel<<<n_rows, NORM_THREADS, 0, st>>>((float *)x, NULL, NULL, rows, w,
                                                    (__nv_bfloat16 *)out, dim, eps);
    PL_CUDA_LAUNCHED();
    return 0;
}

extern "C" int pl_cuda_add_rmsnorm(float *x, const float *y, const float *w,
                                   pl_bf16 *out, int n_rows, int dim, float eps,
                                   cudaStream_t st)
{
    PL_CUDA_ARG(x && y && w && out && dim > 0 && n_rows >= 0 && eps >= 0.0f);
    if (n_rows == 0)
        return 0;
    rmsnorm_kernel<<<n_rows, NORM_THREADS, 0, st>>>(x, y, NULL, NULL, w,
                                                    (__nv_bfloat16 *)out, dim, eps);
    PL_CUDA_LAUNCHED();
    return 0;
}

extern "C" int pl_cuda_add_post_rmsnorm(float *x, const float *y, const float *post,
                                        const float *w, pl_bf16 *out, int n_rows, int dim,
                                        float eps, cudaStream_t st)
{
    PL_CUDA_ARG(x && y && (!w || out) && dim > 0 && n_rows >= 0 && eps >= 0.0f);
    if (n_rows == 0)
        return 0;
    rmsnorm_kernel<<<n_rows, NORM_THREADS, 0, st>>>(x, y, post, NULL, w,
                                                    (__nv_bfloat16 *)out, dim, eps);
    PL_CUDA_LAUNCHED();
    return 0;
}

extern "C" int pl_cuda_rmsnorm_f32(const float *x, const float *w, float *out, int n_rows,
                                   int dim, float eps, cudaStream_t st)
{
    PL_CUDA_ARG(x && w && out && dim > 0 && n_rows >= 0 && eps >= 0.0f);
    if (n_rows == 0)
        return 0;
    rmsnorm_kernel<<<n_rows, NORM_THREADS, 0, st>>>((float *)x, (const float *)NULL,
                                                    (const float *)NULL, (const int32_t *)NULL,
                                                    w, out, dim, eps);
    PL_CUDA_LAUNCHED();
    return 0;
}
