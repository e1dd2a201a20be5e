/* geglu.cuh - GeGLU activation (Gemma): out = gelu_tanh(gate) * up. */
#ifndef PL_CUDA_GEGLU_CUH
#define PL_CUDA_GEGLU_CUH

#include "backends/engine/cuda/common.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * gu: (n_rows, 2*ff) fp32, each row [gate(ff) | up(ff)] as the fused
 * gate/up GEMM writes it; out: (n_rows, ff) bf16 (the down GEMM input).
 * out = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) * up, in fp32 (the
 * tanh approximation of GELU that Gemma and ggml's GELU use).
 */
int pl_cuda_geglu(const float *gu, pl_bf16 *out, int n_rows, int ff, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
