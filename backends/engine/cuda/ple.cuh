/* ple.cuh - Gemma 4's per-layer embeddings (E2B/E4B; model.h's formula,
 * the CPU's cpu/forward_ple.c) and the other element-wise ends of its
 * layers: the two feed-forward branches' norms summed (26B-A4B's dense
 * and expert outputs) and the layer output scale. */
#ifndef PL_CUDA_PLE_CUH
#define PL_CUDA_PLE_CUH

#include "backends/engine/cuda/common.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Each row's per-layer inputs, in place in e (n_rows, n_layer * n_ple):
 * e holds the projection x0 @ ple_model_proj^T on entry (the GEMM's
 * output), tok the token's row of the per-layer table (n_rows, n_layer *
 * n_ple, gathered); per layer l
 *   e_l = (rmsnorm(e_l * proj_scale, norm) + tok_l * tok_scale) / sqrt(2)
 * (proj_scale 1/sqrt(n_embd), tok_scale sqrt(n_ple)). n_ple <= 1024.
 */
int pl_cuda_ple_inputs(float *e, const float *tok, const float *norm, float proj_scale,
                       float tok_scale, float eps, int n_rows, int n_layer, int n_ple,
                       cudaStream_t st);

/**
 * Layer l's gate: out (n_rows, n_ple) bf16 = gelu_tanh(g) * e_l, g
 * (n_rows, n_ple) = x @ inp_gate^T, e the per-layer inputs above.
 */
int pl_cuda_ple_gate(const float *g, const float *e, int l, int n_layer, pl_bf16 *out,
                     int n_rows, int n_ple, cudaStream_t st);

/** t = rmsnorm(t, w1) + rmsnorm(t2, w2) per row of n (fp32). */
int pl_cuda_rmsnorm2_sum(float *t, const float *t2, const float *w1, const float *w2,
                         int n_rows, int n, float eps, cudaStream_t st);

/** x (n_rows, n) *= *scale (a device scalar: layer_output_scale). */
int pl_cuda_scale_rows(float *x, const float *scale, int n_rows, int n, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
