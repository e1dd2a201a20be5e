/* sample.cuh - sampling on the GPU: penalties and logit bias, then greedy
 * or temperature/top-k/top-p/min-p with a Philox draw, logprobs and top-N. */
#ifndef PL_CUDA_SAMPLE_CUH
#define PL_CUDA_SAMPLE_CUH

#include "backends/constrain/fsm_flat.h"
#include "backends/engine/cuda/common.cuh"

#ifdef __cplusplus
extern "C" {
#endif

#define PL_CUDA_TOPN 20  /**< = PL_MAX_TOP_LOGPROBS */
#define PL_CUDA_NO_TOKEN (-2) /**< sampled: every logit was NaN or -inf */

/** Per-sequence sampling parameters as the kernels read them (device). */
typedef struct pl_cuda_samp {
    float temperature;          /**< <= 0: greedy */
    float top_p;                /**< >= 1: off */
    float min_p;                /**< <= 0: off */
    float presence, frequency;  /**< OpenAI penalties, 0: off */
    float repetition;           /**< 1: off */
    int32_t top_k;              /**< <= 0: off */
    int32_t top_logprobs;       /**< -1: no logprobs, else 0..PL_CUDA_TOPN */
    int32_t sample;             /**< 0: do not sample this sequence */
    int32_t slot;               /**< feedback slot, -1: none */
    int32_t ignore_eos;
    int32_t bias_off, n_bias;   /**< into the bias arrays */
    int32_t hist_off, n_hist;   /**< into the history array */
    int32_t ph_row1;            /**< 1 + the row whose (device-resolved) token
                                     also counts as history; 0: none */
    uint32_t seed_lo, seed_hi;
    uint32_t step_lo, step_hi;  /**< Philox counter: tokens sampled so far */
    /** Constrained decoding (constrain.cuh): the constraint's device
     *  tables (fsm.mask NULL: none), the vocabulary's, the state after the
     *  host-known history, and 1 + the placeholder row whose device id
     *  advances it first (0: none). */
    pl_fsm_tables fsm;
    pl_fsm_vocab vocab;
    int32_t fsm_state;
    int32_t fsm_ph_row1;
} pl_cuda_samp;

/** Where sampling writes (device arrays, n_seqs rows). */
typedef struct pl_cuda_samp_out {
    int32_t *sampled;           /**< (n_seqs); -1 when not sampled */
    float *logprob;             /**< (n_seqs) */
    int32_t *top_ids;           /**< (n_seqs, PL_CUDA_TOPN); -1 past top_logprobs */
    float *top_lp;              /**< (n_seqs, PL_CUDA_TOPN) */
    int32_t *slot_tok;          /**< (max_seqs) last id per slot (feedback) */
    int max_slots;
} pl_cuda_samp_out;

/**
 * pen = logits (both (n_seqs, n_vocab) fp32), then on pen: add logit_bias (bias_tok /
 * bias_val at [bias_off, +n_bias)), mask eos when ignore_eos, then for each
 * distinct id of the history (hist at [hist_off, +n_hist), plus tokens[ph_row1 - 1]
 * when ph_row1 > 0 and tokens is not NULL: the id a placeholder row stood for) with count c:
 * repetition (x>0 ? x/rep : x*rep), then x -= frequency*c + presence.
 * Sequences with sample == 0 are untouched.
 */
int pl_cuda_penalties(const float *logits, float *pen, const pl_cuda_samp *p, const int32_t *bias_tok,
                      const float *bias_val, const int32_t *hist, const int32_t *tokens,
                      int n_seqs, int n_vocab, int32_t eos_id, cudaStream_t st);

/**
 * Sample one id per sequence from pen (n_seqs, n_vocab), the logits after
 * pl_cuda_penalties. Greedy takes
 * the lowest index of the maximum. Otherwise candidates are the ids that
 * pass top-k, then top-p (over the top-k mass), then min-p (p >= min_p *
 * p_max), and the id is drawn by inverse CDF in id order with
 * u = pl_philox_uniform(seed, step). Logprobs (when top_logprobs >= 0) are
 * log-softmax of the raw logits (before penalties and temperature), as
 * the CPU sampler and OpenAI/vLLM report them.
 * Also stores the id into slot_tok[slot] for on-device token feedback.
 * When no logit is a number (all NaN / -inf) the id is PL_CUDA_NO_TOKEN,
 * the logprobs are NaN / -1, and slot_tok is left as it was.
 */
int pl_cuda_sample(const float *logits, const float *pen, const pl_cuda_samp *p, pl_cuda_samp_out out,
                   int n_seqs, int n_vocab, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
