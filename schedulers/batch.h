/* batch.h - the continuous-batching scheduler: which token rows run in the
 * next engine step.
 *
 * Sequences wait, run, and finish. Each step the scheduler fills a
 * pl_step_input (schedulers/batch_step.h) under two limits:
 * max_num_seqs running sequences and max_num_batched_tokens rows. Running
 * decodes go first, then running prefill chunks, then waiting sequences are
 * admitted in (priority, arrival) order; prompts longer than the remaining
 * budget are prefilled in chunks over several steps (chunked prefill).
 *
 * Async scheduling (seeds 002/004): a step is scheduled before the previous
 * one's sampled ids are known. A sequence's logical length is n_tokens
 * (known ids) + num_placeholders (sampled on the device, not yet seen);
 * num_computed counts positions already fed to a scheduled step. A decode
 * row whose input is a placeholder carries PL_TOKEN_PLACEHOLDER and the
 * runner fills it from the sequence slot's previous sample.
 *
 * KV blocks come from pl_kv_blocks. A new (or preempted) sequence first
 * reuses its longest cached prefix (never its whole prompt: the last token
 * is always computed, so there are logits to sample from). When a running
 * sequence needs a block and none is left, the scheduler preempts by
 * recompute: the victim (largest priority value, then youngest) releases
 * its blocks and goes back to the waiting queue at its original place in
 * (priority, arrival) order, ahead of every younger request. Committed
 * blocks stay in the prefix cache, so the recompute is often cheap.
 *
 * The waiting head is never overtaken: when it cannot be admitted (no
 * blocks), nothing younger is admitted that step. Paused sequences
 * (backpressure) are skipped but keep their blocks. So is, for at most
 * defer_steps steps, one whose next prompt positions a sequence already in
 * the step computes (same ids from the start): it starts a step later and
 * reads them from the cache (partial reuse of that block) instead of
 * computing them again beside it.
 *
 * Steps must execute in launch order on the device: blocks released while
 * a step is in flight may be handed to a sequence of a later step.
 * Full prompt blocks are committed to the prefix cache when scheduled, so a
 * sequence later in the same step may already read them: a runner must
 * write a row's K/V before a later sequence of the step attends to it
 * (true of a layer-major batched forward, and of one that runs sequences
 * in step order).
 *
 * Pure data structure: no threads, no I/O. Not thread-safe.
 */
#ifndef PL_BATCH_H
#define PL_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "schedulers/batch_step.h"
#include "schedulers/kv_blocks.h"
#include "schedulers/kv_layout.h"
#include "schedulers/kv_ckpt.h"

typedef enum pl_seq_state {
    PL_SEQ_WAITING = 0,
    PL_SEQ_RUNNING,
    PL_SEQ_FINISHED,          /**< out of the queues; freed once no step
                                   in flight refers to it */
} pl_seq_state;

typedef struct pl_batch_seq {
    uint64_t id;
    int priority;             /**< lower runs sooner */
    uint64_t arrival;         /**< order of pl_batch_add calls */
    int32_t *tokens;          /**< (cap) prompt ids then generated ids */
    int n_prompt;
    int n_tokens;             /**< known ids (prompt + generated) */
    int cap;                  /**< n_prompt + max_new */
    int max_new;              /**< most tokens to generate */
    int num_computed;         /**< positions fed to a scheduled step */
    int num_placeholders;     /**< sampled in flight, not yet appended */
    int32_t *blocks;          /**< (n_groups, max_blocks_per_seq) KV block
                                   ids of each cache group; a sliding group's
                                   entries before live_from are -1 */
    int n_blocks;             /**< blocks its table covers (positions
                                   [0, n_blocks * block_size)), every group */
    int32_t *live_from;       /**< (n_groups) first block still held: 0 for
                                   a full group, the window's first block
                                   for a sliding one */
    int n_committed;          /**< leading blocks committed to the cache */
    uint64_t last_hash;       /**< hash of block n_committed-1 */
    int slot;                 /**< 0..max_num_seqs-1 while running, else -1 */
    pl_seq_state state;
    bool paused;
    int n_inflight;           /**< launched steps not yet retired */
    int n_cached;             /**< prompt tokens from the cache at first
                                   admission, -1 before it */
    int32_t cow_dst;          /**< block copied into at this admission, -1 */
    int n_preempted;
    int n_deferred;           /**< steps deferred before this admission
                                   (pl_batch_config.defer_steps) */
    uint64_t last_step;       /**< last step number it was scheduled in */
    pl_seq_sampling sampling; /**< copied into each step (step updated) */
    uint64_t conv_key;        /**< conversation key (0: none): tags the
                                   blocks it releases (kv_blocks.h) */
    bool reply_private;       /**< no later sequence reuses its reply: when
                                   it finishes, its blocks from the one
                                   holding its last prompt position on go
                                   to the front of eviction */
    int32_t ck_load;          /**< checkpoint its admission restores
                                   (kv_ckpt.h) in its first step, -1 */
    int ck_share;             /**< hybrids: a position to checkpoint at,
                                   where its prompt parts from another
                                   queued one of its conversation (the end
                                   of the round's shared prefix); 0 none */
    bool ck_scanned;          /**< ck_share looked for since it was queued */
    bool prompt_logprobs;     /**< each prompt row asks for the next prompt
                                   id's logprob (pl_step_input.row_next);
                                   such a sequence never reuses cached
                                   blocks (their rows would be skipped), it
                                   recomputes them. Set before scheduling. */
    void *ud;                 /**< owner's data (borrowed) */
} pl_batch_seq;

typedef struct pl_batch_config {
    int max_num_seqs;             /**< running sequences, at most */
    int max_num_batched_tokens;   /**< token rows per step, at most */
    int max_model_len;            /**< context length */
    /** Partial-block prefix reuse: after the cached full blocks, the
     *  longest run of a cached block's leading ids is copied into a fresh
     *  block (copy on write, pl_batch_step.copy_*). */
    bool partial_prefix;
    /** Shared-prefix deferral: a waiting sequence whose next prompt
     *  positions a sequence of the step being scheduled computes (same ids
     *  from the start) waits for that step, then reads them from the cache
     *  instead of computing them a second time; at most this many steps
     *  per admission (0: off). Tokens are unchanged; only when it starts. */
    int defer_steps;
    /** Cache groups (borrowed while pl_batch_new runs: it copies them);
     *  NULL: one full group. The pool must have as many groups
     *  (pl_kv_blocks_new_grouped). */
    const pl_kv_layout *layout;
    /** Recurrent-state checkpoints (borrowed; NULL: the model has no
     *  recurrent layers, or its prefix is never reused). With them, a
     *  prefix hit resumes only where a checkpoint is (the longest
     *  checkpointed prefix of the hit; none: from 0), no partial-block
     *  reuse, and checkpoints are saved at the block boundaries a step's
     *  prompt rows reach: every ckpt_every blocks (0: none such), at the
     *  last block boundary of every prompt, and, for a hinted
     *  conversation (kv_blocks.h), at pl_batch_seq.ck_share. */
    struct pl_kv_ckpt *ckpt;
    int ckpt_every;
} pl_batch_config;

/**
 * One scheduled step: the runner input (buffers owned here, reused) and the
 * sequences in it, in the same order as the input's seq arrays.
 */
typedef struct pl_batch_step {
    uint64_t no;              /**< step number, from 1 */
    pl_step_input in;
    pl_batch_seq **seqs;      /**< (in.n_seqs) */
    int n_decode_rows;        /**< rows of sequences in decode */
    int n_prefill_rows;       /**< rows of prompt (or recompute) chunks */
    int n_preempted;          /**< sequences preempted while scheduling */
    int n_deferred;           /**< admissions deferred (defer_steps) */
    /** KV block copies (partial-block reuse) the runner must make before
     *  this step: copy_src[i] -> copy_dst[i], all layers of the block. */
    int n_copies;
    int32_t *copy_src, *copy_dst; /**< (max_num_seqs * n_groups) */
} pl_batch_step;

typedef struct pl_batch pl_batch;

/** Allocate a step's buffers for cfg. Returns 0, -1 on OOM (then free it
 *  with pl_batch_step_free, which accepts a partly built step). */
int pl_batch_step_init(pl_batch_step *st, const pl_batch_config *cfg,
                       int block_size);
void pl_batch_step_free(pl_batch_step *st);

/** A scheduler over kv (borrowed; must outlive it). NULL on bad config or
 *  OOM. Free with pl_batch_free, which frees queued sequences and
 *  releases their blocks (no step may be in flight). */
pl_batch *pl_batch_new(const pl_batch_config *cfg, pl_kv_blocks *kv);
void pl_batch_free(pl_batch *b);

/**
 * Queue a sequence: prompt ids (copied, 1 <= n < L where L = the smaller
 * of max_model_len and the whole KV cache in tokens), at most max_new
 * tokens to generate (clamped so that n + max_new <= L), priority,
 * sampling state and owner data. Returns the sequence (owned by b), or
 * NULL on bad arguments or OOM.
 */
pl_batch_seq *pl_batch_add(pl_batch *b, uint64_t id, const int32_t *prompt,
                           int n, int max_new, int priority,
                           const pl_seq_sampling *sampling, void *ud);

/** The running or waiting sequence with this id, or NULL. O(n). */
pl_batch_seq *pl_batch_find(pl_batch *b, uint64_t id);

/** Some queued sequence (running first, then waiting), or NULL: for
 *  draining at shutdown. */
pl_batch_seq *pl_batch_first(pl_batch *b);

/** Pause or resume a sequence (it keeps its blocks while paused). */
void pl_batch_set_paused(pl_batch *b, pl_batch_seq *s, bool paused);

/**
 * Finish (or abort) a sequence: it leaves the queues and releases its
 * blocks and slot at once. Its memory is freed now when no step in flight
 * holds it, else when the last such step is retired; outputs of those
 * steps for it must be discarded (pl_batch_append does).
 */
void pl_batch_finish(pl_batch *b, pl_batch_seq *s);

/** Running + waiting sequences. */
int pl_batch_num_running(const pl_batch *b);
int pl_batch_num_waiting(const pl_batch *b);

/** Whether some sequence is queued (running or waiting) at all. */
bool pl_batch_has_seqs(const pl_batch *b);

/** What the queued sequences may still take of the KV cache: the figures
 *  behind the view dispatch admits by (schedulers/dispatch.h). */
typedef struct pl_batch_kv_acct {
    /** Blocks each sequence lacks to hold its prompt and its reply budget
     *  (pl_dispatch_reply_budget of its max_new and reply_estimate; one
     *  token past what it generated once it outgrew that): a running
     *  sequence's growth, a waiting one's whole need less the cached
     *  prefix it will share without taking free blocks (blocks in use or
     *  kept for its conversation: pl_kv_blocks_held_prefix). */
    int reserved;
    int running;                 /**< running sequences */
    long generated;              /**< tokens they generated (placeholders
                                      included) */
} pl_batch_kv_acct;

/** Count them, O(running + waiting's prompt blocks). */
void pl_batch_kv_account(const pl_batch *b, int reply_estimate, pl_batch_kv_acct *out);

/**
 * Schedule the next step into st (its buffers must not be in flight).
 * Returns the number of rows (0: nothing can run now, e.g. all paused or
 * waiting for outputs in flight). Every scheduled sequence's n_inflight is
 * incremented; call pl_batch_step_retire once the step's output has been
 * processed.
 */
int pl_batch_schedule(pl_batch *b, pl_batch_step *st);

/**
 * Resolve one placeholder of s with the sampled id. Appends it and commits
 * newly full blocks to the prefix cache. Returns true when appended; false
 * when s is finished and the token is the discarded extra one.
 */
bool pl_batch_append(pl_batch *b, pl_batch_seq *s, int32_t token);

/** Generated ids so far (known, excluding placeholders). */
static inline int pl_batch_seq_generated(const pl_batch_seq *s)
{
    return s->n_tokens - s->n_prompt;
}

/** The step's output has been processed: drop its hold on its sequences
 *  (freeing finished ones no other step holds). */
void pl_batch_step_retire(pl_batch *b, pl_batch_step *st);

#endif
