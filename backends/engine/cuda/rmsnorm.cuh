/* rmsnorm.cuh - RMSNorm, alone and fused with the residual add. */
#ifndef PL_CUDA_RMSNORM_CUH
#define PL_CUDA_RMSNORM_CUH

#include "backends/engine/cuda/common.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, written as bf16 (the GEMM
 * input). x: (n_rows, dim) fp32, read at row rows ? rows[r] : r;
 * w: (dim) fp32; out: (n_rows, dim) bf16. rows (device, may be NULL)
 * gathers a subset of rows, e.g. the last row of each sampled sequence.
 */
int pl_cuda_rmsnorm(const float *x, const int32_t *rows, const float *w,
                    pl_bf16 *out, int n_rows, int dim, float eps, cudaStream_t st);

/**
 * out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w in fp32 (the router's
 * input of a mixture-of-experts layer, which the CPU runner also routes on
 * fp32 rows). Shapes as pl_cuda_rmsnorm, no row list; out (n_rows, dim).
 */
int pl_cuda_rmsnorm_f32(const float *x, const float *w, float *out, int n_rows, int dim,
                        float eps, cudaStream_t st);

/**
 * Fused residual add + RMSNorm: x[r] += y[r] (in place, fp32), then
 * out[r] = rmsnorm(x[r]) * w as bf16. Shapes as pl_cuda_rmsnorm.
 */
int pl_cuda_add_rmsnorm(float *x, const float *y, const float *w, pl_bf16 *out,
                        int n_rows, int dim, float eps, cudaStream_t st);

/**
 * The residual add of a block with a post-norm (Gemma 2/3: the attention
 * and feed-forward outputs are normalised before they are added):
 * x[r] += rmsnorm(y[r]) * post, in place (post NULL: x[r] += y[r]); then,
 * when w is given, out[r] = rmsnorm(x[r]) * w as bf16 (out unused when w
 * is NULL). Shapes as pl_cuda_rmsnorm; post: (dim) fp32.
 */
int pl_cuda_add_post_rmsnorm(float *x, const float *y, const float *post, const float *w,
                             pl_bf16 *out, int n_rows, int dim, float eps, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
