/* head_norm.cuh - RMSNorm of each attention head (Qwen3 and Gemma 3 norm
 * q and k per head before RoPE: attn_q_norm, attn_k_norm). */
#ifndef PL_CUDA_HEAD_NORM_CUH
#define PL_CUDA_HEAD_NORM_CUH

#include "backends/engine/cuda/common.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * In place, for each row r < n_rows and head h < n_heads: the head_dim
 * values at x + r * row_stride + h * head_dim become
 * v / sqrt(mean(v^2) + eps) * w (w: (head_dim) fp32, shared by the heads;
 * NULL: unweighted, Gemma 4's norm of V).
 * x: fp32 (e.g. the q or the k part of the fused QKV output). head_dim a
 * up to 512.
 */
int pl_cuda_head_rmsnorm(float *x, int row_stride, int n_rows, int n_heads, int head_dim,
                         const float *w, float eps, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
