/* engine.h - the in-process engine as a pl_backend: one engine thread per
 * model running the step loop (DESIGN.md, "The engine step pipeline")
 * over the batch scheduler, the paged KV cache and a runner.
 *
 * The engine thread owns the scheduler, the KV blocks and the runner. The
 * main (libevent) thread talks to it through an inbox (submit, abort,
 * pause) and receives deltas and results through an outbox; the engine
 * thread wakes the main loop by writing an eventfd watched by a read event
 * on the main event_base, so the main loop never blocks on the engine and
 * the event_base needs no locking.
 *
 * Step loop (async = true): at most PL_RUNNER_MAX_INFLIGHT (2) steps in
 * flight; step k is written into input buffer k % 2, never touched while
 * step k is in flight; while step N runs, the loop processes step N-1's
 * sampled ids (append, stop checks, deltas, freeing finished sequences'
 * blocks) and schedules N+1 with placeholders. async = false runs the
 * plain schedule -> execute -> process loop; greedy outputs are the same.
 */
#ifndef PL_ENGINE_H
#define PL_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "backends/engine_config.h"
#include "backends/engine/runner.h"

/**
 * Text hooks: how the engine turns requests into ids and ids into text.
 * Function pointers so a test can plug a fake tokenizer and the server the
 * real tokenizer + chat template. token_bytes and is_eog are called on the
 * engine thread, encode on the main thread: the hooks must be thread-safe
 * for that (an immutable tokenizer is).
 */
typedef struct pl_engine_text {
    void *ud;
    /** Ids of a request's prompt (req->messages through the chat template,
     *  or req->prompt). Returns 0 and a malloc'd *ids (the caller frees),
     *  or -1 with *err set. Not called for req->prompt_tokens. */
    int (*encode)(void *ud, const pl_gen_request *req, bool add_special,
                  int32_t **ids, int *n, pl_err *err);
    /** Bytes a token adds to the output text (borrowed, may be partial
     *  UTF-8; NULL or len 0 for none). */
    const char *(*token_bytes)(void *ud, int32_t id, size_t *len);
    /** Whether id ends generation (EOS, end of turn). */
    bool (*is_eog)(void *ud, int32_t id);
    /** The tokenizer's configuration (backend.h, tokenizer_info) but
     *  model_max_length, which the engine adds: a new object, or NULL when
     *  out of memory. May be NULL (the backend then answers 501). */
    json_t *(*tokenizer_info)(void *ud);
    /** The tool-call format of the chat template (backend.h,
     *  tool_format); may be NULL. */
    const struct pl_tool_format *(*tool_format)(void *ud);
    /** The reasoning format (backend.h, reasoning_format); may be NULL. */
    const struct pl_reasoning_format *(*reasoning_format)(void *ud);
    /** Frees ud when the backend is freed; may be NULL. */
    void (*free)(void *ud);
} pl_engine_text;

/** Defaults: geometry from the runner, async and prefix caching on. */
void pl_engine_options_defaults(pl_engine_options *o);

/**
 * Start an engine backend serving `model` on the main loop `base`.
 * Takes ownership of runner (freed with the backend, or here on failure)
 * and of text->ud (text->free is called likewise). Returns NULL with *err
 * set on bad options (bigger than the runner's geometry) or failure to
 * start the thread. Free with pl_backend_free: stops the thread; sinks are
 * not called after that.
 */
pl_backend *pl_engine_backend_new(struct event_base *base, const char *model,
                                  pl_runner *runner, const pl_engine_text *text,
                                  const pl_engine_options *opts, pl_err *err);

/* The backend's max_model_len() is min(the runner's max_model_len, the
 * whole KV cache in tokens): one sequence always fits. */

/** Seed 000's capacity formula (--capacity worst-case): min(max_num_seqs,
 *  num_blocks * block_size / max_model_len), at least 1. */
int pl_engine_capacity_for(int max_num_seqs, int num_blocks, int block_size,
                           int max_model_len);

#endif
