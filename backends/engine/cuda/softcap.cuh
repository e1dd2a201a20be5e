/* softcap.cuh - final logit soft-capping (Gemma 2): x = cap * tanh(x / cap). */
#ifndef PL_CUDA_SOFTCAP_CUH
#define PL_CUDA_SOFTCAP_CUH

#include "backends/engine/cuda/common.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/** x[i] = cap * tanh(x[i] / cap) for i < n (fp32, device, in place; tanhf,
 *  not the fast approximation: the logits feed sampling and logprobs).
 *  cap > 0. */
int pl_cuda_softcap(float *x, size_t n, float cap, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
