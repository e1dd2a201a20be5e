/* runner.h - the runner interface: what the engine's step loop asks of a
 * device (CPU or CUDA) to run one forward step over a batch of token rows.
 *
 * Contract (seeds 002/004): launch() is non-blocking and returns a ticket;
 * wait() blocks until that step's sampled ids are ready. At most
 * PL_RUNNER_MAX_INFLIGHT steps are in flight. The caller fills one of two
 * input buffers (pl_step_input) per step, alternating; a buffer handed to
 * launch() is not written again until its step has been waited for.
 *
 * Tokens not yet sampled are placeholders: a row whose token is
 * PL_TOKEN_PLACEHOLDER takes, on the device, the id sampled for the same
 * sequence slot in the previous in-flight step (on-device token feedback).
 */
#ifndef PL_RUNNER_H
#define PL_RUNNER_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"
#include "schedulers/batch_step.h"
#include "schedulers/kv_layout.h"

#define PL_RUNNER_MAX_INFLIGHT 2
/** One step's output. */
typedef struct pl_step_output {
    int n_seqs;
    int32_t *sampled;            /**< (n_seqs) sampled id, -1 when not sampled */
    float *logprob;              /**< (n_seqs) logprob of the sampled id */
    int32_t *top_ids;            /**< (n_seqs, PL_MAX_TOP_LOGPROBS) */
    float *top_logprobs;         /**< (n_seqs, PL_MAX_TOP_LOGPROBS) */
    /** Prompt logprobs, for rows with pl_step_input.row_next >= 0 (other
     *  rows untouched): the raw log-softmax of the row's logits at the
     *  next id, and the top alternatives (the sequence's
     *  sampling.top_logprobs of them, most likely first). */
    float *row_lp;               /**< (max_rows) */
    int32_t *row_top_ids;        /**< (max_rows, PL_MAX_TOP_LOGPROBS) */
    float *row_top_lp;           /**< (max_rows, PL_MAX_TOP_LOGPROBS) */
    float *logits;               /**< (n_seqs, n_vocab) when the runner was
                                      asked to keep logits (tests), else NULL */
    double exec_ms;              /**< device time of the step */
} pl_step_output;

typedef struct pl_runner pl_runner;

typedef struct pl_runner_ops {
    const char *name;            /**< "cpu", "cuda" */
    /** Start executing a step. Never blocks on the previous step beyond
     *  queueing. Returns a ticket >= 0, or -1 on error. */
    int (*launch)(pl_runner *r, const pl_step_input *in);
    /** Block until the step with this ticket is done; *out points into
     *  runner-owned memory valid until the next wait(). 0 or -1. */
    int (*wait)(pl_runner *r, int ticket, const pl_step_output **out);
    /** Copy KV rows of block src to block dst (copy-on-write), all the
     *  layers the block holds. */
    void (*copy_block)(pl_runner *r, int32_t src, int32_t dst);
    void (*free)(pl_runner *r);
} pl_runner_ops;

/** Geometry shared by the engine and its runner. */
typedef struct pl_runner_info {
    int n_vocab;
    int max_model_len;
    int block_size;              /**< tokens per KV block */
    int num_blocks;              /**< KV blocks the runner allocated */
    /** Recurrent-state checkpoint slots (schedulers/kv_ckpt.h) the runner
     *  allocated, as asked (models with recurrent layers on a runner that
     *  takes pl_step_input.ck_*; 0: none, and such a model is served
     *  without prefix caching). */
    int num_ckpts;
    size_t ckpt_bytes;           /**< bytes of one checkpoint */
    int max_seqs;                /**< slots for token feedback */
    int max_rows;                /**< most token rows in one step */
    int32_t eos_id;
    /** How the K/V cache is laid out in cache groups (kv_layout.h): the
     *  block tables a step carries (pl_step_input.n_groups) and the layers
     *  a block holds. Asked for with n_groups 0: a runner that supports
     *  groups (pl_runner.kv_groups) takes the model's grouped layout,
     *  another one full group of every paged layer. */
    pl_kv_layout kv_layout;
} pl_runner_info;

struct pl_model;

/** The cache groups of m's layers (a layer's window, or none when it
 *  takes no paged K/V: pl_layer.no_kv); grouped false: one full group.
 *  0, or -1 when the layout cannot describe the model. */
int pl_runner_kv_layout(pl_kv_layout *lo, const struct pl_model *m, bool grouped);

/**
 * A runner's geometry from the geometry asked for and the model: n_vocab
 * and eos_id from the model, max_model_len 0 -> the model's context,
 * block_size 0 -> 16; num_blocks is left as asked (each runner sizes its
 * own cache); kv_layout as asked, or one full group when n_groups is 0.
 * Returns 0, or -1 when max_seqs, max_rows or max_model_len is not
 * positive or the model's layers do not fit a layout.
 */
int pl_runner_info_init(pl_runner_info *inf, const struct pl_model *m,
                        const pl_runner_info *want);

struct pl_runner {
    const pl_runner_ops *ops;
    pl_runner_info info;
    bool keep_logits;            /**< tests: return full logits */
    bool can_constrain;          /**< applies pl_seq_sampling.fsm */
    bool can_prompt_logprobs;    /**< fills row_lp for pl_step_input.row_next */
    bool kv_groups;              /**< reads one block table per cache group
                                      (info.kv_layout may have several);
                                      without, the engine keeps one */
    char kernels[96];            /**< CPU: the kernel path, for the log and /status */
};

#endif
