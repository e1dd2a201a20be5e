/* sampler.h - per-sequence token sampling from one row of logits.
 *
 * Order: logit_bias, repetition penalty (positive logits divided, negative
 * multiplied), presence/frequency penalties over the generated history,
 * ignore_eos (EOS masked), then the constraint's mask (pl_seq_sampling.fsm
 * in state fsm_state; a state that allows nothing gives eos_id). Temperature 0 then picks the argmax (lowest id on
 * ties). Otherwise logits are divided by the temperature and filtered by
 * top_k, top_p, min_p (vLLM/HF order: temperature before the filters), and
 * one token is drawn with a counter-based RNG of (seed, step): the same seed
 * gives the same tokens however requests are batched.
 *
 * Logprobs follow OpenAI/vLLM: the log-softmax of the raw model logits
 * (before penalties, temperature and filters), for the chosen token and the
 * top-N alternatives.
 */
#ifndef PL_SAMPLER_H
#define PL_SAMPLER_H

#include <stdint.h>

#include "backends/engine/runner.h"

typedef struct pl_sampler pl_sampler;

/** One sampling result. */
typedef struct pl_sample {
    int32_t id;
    float logprob;               /**< raw log-softmax of id */
    int n_top;                   /**< min(top_logprobs, PL_MAX_TOP_LOGPROBS), 0 when off */
    int32_t top_ids[PL_MAX_TOP_LOGPROBS];   /**< descending */
    float top_logprobs[PL_MAX_TOP_LOGPROBS];
} pl_sample;

/** Scratch for a vocabulary of n_vocab; NULL on OOM. Not thread safe:
 *  one sampler per thread. */
pl_sampler *pl_sampler_new(int n_vocab);
void pl_sampler_free(pl_sampler *s);

/** Sample from logits (n_vocab, not modified). hist: the n_hist ids
 *  generated so far (may be NULL when 0). eos_id < 0: none. Allocates
 *  nothing. Returns the id (also in out->id). */
int32_t pl_sampler_sample(pl_sampler *s, const float *logits, const pl_seq_sampling *p,
                          const int32_t *hist, int n_hist, int32_t eos_id, pl_sample *out);

/** Raw log-softmax of logits (n entries): id's logprob (out->logprob) and
 *  the top alternatives (out->n_top = top clamped to 0..20, descending).
 *  top < 0 (no logprobs asked for): out->logprob is 0, out->n_top 0, and
 *  the row is not read. out->id is left alone. Allocates nothing. */
void pl_sampler_raw_logprobs(const float *logits, int n, int32_t id, int top, pl_sample *out);

/** The uniform [0,1) draw used for (seed, step). */
double pl_sampler_uniform(uint64_t seed, uint64_t step);

#endif
