/* prompt_lp.cuh - prompt logprobs (completions with echo and logprobs):
 * the log-softmax of prompt rows' logits at the prompt's next ids, with the
 * top alternatives. */
#ifndef PL_CUDA_PROMPT_LP_CUH
#define PL_CUDA_PROMPT_LP_CUH

#include "backends/engine/cuda/sample.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * For k < n: lp[k] = log_softmax(logits[k])[next[k]] over the raw logits
 * (n, n_vocab) fp32, as the sampler reports logprobs; top_ids[k] /
 * top_lp[k] (PL_CUDA_TOPN each) the top[k] (0..PL_CUDA_TOPN) most likely
 * ids and their logprobs, most likely first, -1 / -inf after. A row whose
 * logits are all NaN gets NaN. next, top: (n) device; next in [0, n_vocab).
 */
int pl_cuda_row_logprobs(const float *logits, int n, int n_vocab, const int32_t *next,
                         const int32_t *top, float *lp, int32_t *top_ids, float *top_lp,
                         cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
