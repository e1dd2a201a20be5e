/* moe_route.cuh - a mixture-of-experts router on the GPU: the logits of
 * every (row, expert), then each row's top-k experts and their weights
 * (pl_op_moe_route's rule, its C reference in cpu/ops_moe.c). */
#ifndef PL_CUDA_MOE_ROUTE_CUH
#define PL_CUDA_MOE_ROUTE_CUH

#include "backends/engine/cuda/common.cuh"

#ifdef __cplusplus
extern "C" {
#endif

#define PL_CUDA_MOE_MAX_EXPERTS 512  /**< per layer (model.h's PL_MOE_MAX_EXPERTS) */
#define PL_CUDA_MOE_MAX_USED 32      /**< per token (PL_MOE_MAX_USED) */

/**
 * logits[r, e] = x[r] . w[e] (+ b[e]) for r < n, e < n_expert, in fp32:
 * x (n, dim) the normed rows, w (n_expert, dim) the router as the file has
 * it (kept f32), b (n_expert) or NULL. One warp per (row, expert).
 */
int pl_cuda_moe_logits(const float *x, const float *w, const float *b, float *logits, int n,
                       int dim, int n_expert, cudaStream_t st);

/**
 * Each row's choice: sel (n, k) the experts in rank order (ties: the lower
 * index), wt (n, k) their weights; topk_softmax: softmax over the k
 * logits (gpt-oss), else softmax over all, renormalised over the k when
 * norm_w; then each weight times escale[its expert] when escale (device,
 * n_expert: Gemma 4's per-expert output scales, down_exps_s; the CPU's
 * pl_fwd_moe_route_ applies them after the rule) is not NULL. logits
 * (n, n_expert) are read only. One warp per row;
 * n_expert <= PL_CUDA_MOE_MAX_EXPERTS, k <= min(n_expert, 32).
 */
int pl_cuda_moe_route(const float *logits, int n, int n_expert, int k, int topk_softmax,
                      int norm_w, const float *escale, int32_t *sel, float *wt,
                      cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
