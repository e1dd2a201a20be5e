/* gemm.h - bf16 GEMMs through cuBLAS, loaded with dlopen so that a binary
 * built with CUDA starts on machines without the CUDA libraries. */
#ifndef PL_CUDA_GEMM_H
#define PL_CUDA_GEMM_H

#include "backends/engine/cuda/common.cuh"

typedef struct pl_cuda_gemm pl_cuda_gemm;

/**
 * Load cuBLAS, create a handle bound to stream st with a fixed workspace
 * (so GEMMs can be captured in CUDA graphs). NULL with a message in err.
 * Free with pl_cuda_gemm_free.
 */
pl_cuda_gemm *pl_cuda_gemm_new(cudaStream_t st, char *err, size_t errlen);
void pl_cuda_gemm_free(pl_cuda_gemm *g);

/**
 * y = x . w^T: x (rows, in) bf16 row-major, w (out, in) bf16 row-major (the
 * GGUF layout), y (rows, out) fp32; fp32 accumulation. Returns 0 or -1
 * (pl_cuda_last_error()).
 */
int pl_cuda_gemm_bf16(pl_cuda_gemm *g, const pl_bf16 *x, const pl_bf16 *w, float *y,
                      int rows, int out, int in);

#endif
