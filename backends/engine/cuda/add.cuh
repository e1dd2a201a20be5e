/* add.cuh - residual add x += y over fp32 rows. */
#ifndef PL_CUDA_ADD_CUH
#define PL_CUDA_ADD_CUH

#include "backends/engine/cuda/common.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/** x[i] += y[i] for i < n (fp32, device). Returns 0 or -1. */
int pl_cuda_add(float *x, const float *y, size_t n, cudaStream_t st);

/** y[r, c] += b[c] for an (n_rows, n_cols) fp32 matrix (qwen2 q/k/v bias). */
int pl_cuda_add_bias(float *y, const float *b, int n_rows, int n_cols, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
