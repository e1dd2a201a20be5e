/* runner_ref.h - the fixed schedule on which the CPU runner's reference
 * figures are written (bench/runner_ref.c, run by scripts/device_bundle.sh
 * on the random "ref" model) and on which the CUDA runner is compared with
 * them on a GPU (tests/test_cuda_ref.c): REF_NS prompts of deterministic
 * ids prefilled in one step, then REF_NGEN decode steps, one row per
 * sequence, teacher-forced with the reference's greedy ids. Sequence 2 has
 * penalties (its history: the ids generated so far), sequence 1 a logit
 * bias. Fixture lines: "STEP SEQ TOKEN id:logit x REF_TOPK" (raw logits,
 * the best REF_TOPK ids of the CPU). */
#ifndef PL_TESTS_RUNNER_REF_H
#define PL_TESTS_RUNNER_REF_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "backends/engine/runner.h"

#define REF_NS 4
#define REF_PMAX 40
#define REF_NGEN 32
#define REF_BS 16
#define REF_MAXLEN 128
#define REF_MB (REF_MAXLEN / REF_BS)
#define REF_TOPK 5

static const int ref_plen[REF_NS] = {40, 17, 33, 5};

typedef struct ref_step {
    int32_t tokens[REF_NS * REF_PMAX], positions[REF_NS * REF_PMAX], row_seq[REF_NS * REF_PMAX];
    int32_t slot[REF_NS], first[REF_NS], nrows[REF_NS], ctx[REF_NS], bt[REF_NS * REF_MB];
    bool sample[REF_NS];
    pl_seq_sampling smp[REF_NS];
    pl_logit_bias bias[2];
    const int32_t *hist[REF_NS];
    int32_t hist_len[REF_NS];
    pl_step_input in;
} ref_step;

static inline int32_t ref_prompt_id(int s, int i, int n_vocab)
{
    uint32_t h = (uint32_t)(s * 7919 + i * 104729 + 13) * 2654435761u;
    return (int32_t)((h >> 8) % (uint32_t)(n_vocab < 32000 ? n_vocab : 32000));
}

static inline pl_runner_info ref_want(void)
{
    return (pl_runner_info){.block_size = REF_BS, .num_blocks = REF_NS * REF_MB,
                            .max_seqs = REF_NS, .max_rows = REF_NS * REF_PMAX,
                            .max_model_len = REF_MAXLEN};
}

/* Step 0: every prompt; step k > 0: one row per sequence with gen[k-1][s].
 * gen: (REF_NGEN + 1, REF_NS) greedy ids of the reference, as far as known. */
static inline const pl_step_input *ref_build(ref_step *t, int step,
                                             int32_t gen[][REF_NS], int n_vocab)
{
    int r = 0;
    for (int s = 0; s < REF_NS; s++) {
        t->first[s] = r;
        if (step == 0) {
            for (int i = 0; i < ref_plen[s]; i++, r++) {
                t->tokens[r] = ref_prompt_id(s, i, n_vocab);
                t->positions[r] = i;
                t->row_seq[r] = s;
            }
        } else {
            t->tokens[r] = gen[step - 1][s];
            t->positions[r] = ref_plen[s] + step - 1;
            t->row_seq[r++] = s;
        }
        t->nrows[s] = r - t->first[s];
        t->ctx[s] = t->positions[r - 1] + 1;
        t->sample[s] = true;
        t->slot[s] = s;
        t->smp[s] = (pl_seq_sampling){.temperature = 0, .top_p = 1, .repetition_penalty = 1,
                                      .top_logprobs = 5, .step = (uint64_t)step};
        t->hist[s] = NULL;
        t->hist_len[s] = 0;
        for (int b = 0; b < REF_MB; b++)
            t->bt[s * REF_MB + b] = s * REF_MB + b;
    }
    /* Penalties on sequence 2: its history is the ids generated so far,
     * gen[0..step-1][2], gathered column-wise into a per-step copy. */
    static int32_t h2[REF_NGEN + 1];
    for (int k = 0; k < step; k++)
        h2[k] = gen[k][2];
    t->smp[2].repetition_penalty = 1.3f;
    t->smp[2].frequency_penalty = 0.4f;
    t->smp[2].presence_penalty = 0.2f;
    t->hist[2] = h2;
    t->hist_len[2] = step;
    t->bias[0] = (pl_logit_bias){.token = ref_prompt_id(1, 0, n_vocab), .bias = 3.0f};
    t->bias[1] = (pl_logit_bias){.token = ref_prompt_id(1, 1, n_vocab), .bias = -100.0f};
    t->smp[1].logit_bias = t->bias;
    t->smp[1].n_logit_bias = 2;
    t->in = (pl_step_input){.n_rows = r, .tokens = t->tokens, .positions = t->positions,
                            .row_seq = t->row_seq, .n_seqs = REF_NS, .seq_slot = t->slot,
                            .seq_first_row = t->first, .seq_n_rows = t->nrows,
                            .seq_ctx_len = t->ctx, .seq_sample = t->sample,
                            .block_table = t->bt, .max_blocks_per_seq = REF_MB,
                            .sampling = t->smp, .seq_hist = t->hist,
                            .seq_hist_len = t->hist_len};
    return &t->in;
}

/* The REF_TOPK best ids of x (n), best first. */
static inline void ref_topk(const float *x, int n, int top[REF_TOPK])
{
    for (int k = 0; k < REF_TOPK; k++)
        top[k] = -1;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < REF_TOPK; k++)
            if (top[k] < 0 || x[i] > x[top[k]]) {
                memmove(top + k + 1, top + k, sizeof(int) * (REF_TOPK - 1 - k));
                top[k] = i;
                break;
            }
}

#endif
