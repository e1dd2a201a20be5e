/* batch_step.h - the step description the batch scheduler fills and the
 * runners (backends/engine/runner.h) consume: token rows grouped by
 * sequence, block tables, per-sequence sampling state. Plain data: this
 * header depends on nothing outside the C library.
 */
#ifndef PL_BATCH_STEP_H
#define PL_BATCH_STEP_H

#include <stdbool.h>
#include <stdint.h>

struct pl_logit_bias;
struct pl_token_fsm;

#define PL_TOKEN_PLACEHOLDER (-1)

/** Per-sequence sampling state the runner needs to sample on device. */
typedef struct pl_seq_sampling {
    float temperature;           /**< 0 = greedy */
    float top_p;
    int top_k;
    float min_p;
    float presence_penalty, frequency_penalty, repetition_penalty;
    uint64_t seed;               /**< per request; the step index is mixed in */
    uint64_t step;               /**< number of tokens sampled so far */
    int top_logprobs;            /**< -1: no logprobs; 0..20 */
    const struct pl_logit_bias *logit_bias; /**< backends/backend.h */
    int n_logit_bias;
    bool ignore_eos;
    /** Constrained decoding (backends/constrain/token_fsm.h): the
     *  automaton, or NULL, and its state after the known history. A runner
     *  advances the state by the id a placeholder row stands for, masks
     *  the tokens the state refuses and samples (so the mask of step N+1
     *  never waits for step N's id on the host). */
    const struct pl_token_fsm *fsm;
    int32_t fsm_state;
} pl_seq_sampling;

/**
 * One step's input: a batch of token rows grouped by sequence.
 * Rows of one sequence are contiguous and in position order.
 * Buffers are owned by the engine and reused across steps.
 */
typedef struct pl_step_input {
    int n_rows;                  /**< token rows this step */
    int32_t *tokens;             /**< (n_rows) ids or PL_TOKEN_PLACEHOLDER */
    int32_t *positions;          /**< (n_rows) position of each row */
    int32_t *row_seq;            /**< (n_rows) index into the seq arrays */
    /** Prompt logprobs (completions echo): (n_rows) the prompt id at the
     *  row's next position, whose logprob (and top alternatives, as many
     *  as the sequence's sampling.top_logprobs) the runner returns for the
     *  row; -1 for rows without. n_row_next counts the rows with one. */
    int32_t *row_next;
    int n_row_next;

    int n_seqs;                  /**< sequences in this step */
    int32_t *seq_slot;           /**< (n_seqs) stable slot id of the sequence
                                      (0..max_seqs-1), for token feedback */
    int32_t *seq_first_row;      /**< (n_seqs) first row of the sequence */
    int32_t *seq_n_rows;         /**< (n_seqs) rows of the sequence */
    int32_t *seq_ctx_len;        /**< (n_seqs) tokens in KV after this step */
    bool *seq_sample;            /**< (n_seqs) sample after the last row? */
    /** (n_seqs, n_groups, max_blocks_per_seq) block ids of each cache
     *  group (schedulers/kv_layout.h; a layer reads its group's table);
     *  -1 for blocks a sliding group no longer holds, which its layers
     *  never read. With one group: (n_seqs, max_blocks_per_seq). */
    int32_t *block_table;
    int max_blocks_per_seq;
    int n_groups;                /**< >= 1; a runner without cache groups
                                      is only ever given 1 */
    pl_seq_sampling *sampling;   /**< (n_seqs) */
    /** History for penalties: (n_seqs) pointers to the generated ids so far
     *  (borrowed; valid until the step is waited for) and their counts.
     *  Known ids only: when a sequence's last row is a placeholder, the id
     *  it stands for is not in the history yet; a runner applying
     *  penalties counts that resolved id too (so async == sync). */
    const int32_t **seq_hist;
    int32_t *seq_hist_len;
    /** Recurrent-state checkpoints (schedulers/kv_ckpt.h), hybrid models
     *  only. Before the step: checkpoint ck_load_id[i] is restored into
     *  sequence slot ck_load_slot[i], which then stands at position
     *  ck_load_pos[i]. While it runs: once slot ck_save_slot[i] has
     *  consumed ck_save_pos[i] positions (a block boundary among its rows
     *  of this step), its state is saved into checkpoint ck_save_id[i]. */
    int n_ck_load;
    int32_t *ck_load_slot, *ck_load_id, *ck_load_pos; /**< (max_seqs) */
    int n_ck_save;
    int32_t *ck_save_slot, *ck_save_id, *ck_save_pos; /**< (max_ck_save) */
    int max_ck_save;             /**< rows / block_size + max_seqs */
} pl_step_input;

#endif
