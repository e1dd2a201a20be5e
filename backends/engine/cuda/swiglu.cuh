/* swiglu.cuh - SwiGLU activation: out = silu(gate) * up. */
#ifndef PL_CUDA_SWIGLU_CUH
#define PL_CUDA_SWIGLU_CUH

#include "backends/engine/cuda/common.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * gu: (n_rows, 2*ff) fp32, each row [gate(ff) | up(ff)] as the fused
 * gate/up GEMM writes it; out: (n_rows, ff) bf16 (the down GEMM input).
 * out = gate * sigmoid(gate) * up, computed in fp32.
 */
int pl_cuda_swiglu(const float *gu, pl_bf16 *out, int n_rows, int ff, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
