/* fake_runner.h - a deterministic runner for engine tests.
 *
 * It keeps a real paged "KV cache": one int32 per (block, offset) holding
 * the token id fed at that position. A sampled token is
 * pl_fake_runner_next(ids of positions 0..ctx_len-1) read back through the
 * step's block table, so a wrong block table, a bad prefix reuse or a
 * stale placeholder changes the output. Placeholder rows take the id this
 * runner sampled for the same slot in the previous step. Steps run in
 * launch order on the runner's own thread, with an optional sleep.
 */
#ifndef PL_FAKE_RUNNER_H
#define PL_FAKE_RUNNER_H

#include <stdint.h>

#include "backends/engine/runner.h"

typedef struct pl_fake_runner_opts {
    pl_runner_info info;
    int step_sleep_us;           /**< per step, on the runner thread */
    int no_token_at_ctx;         /**< > 0: a sequence sampled at this context
                                      length gets no token (-2), as a GPU runner
                                      reports all-NaN logits */
} pl_fake_runner_opts;

/** NULL on OOM. Free through r->ops->free. */
pl_runner *pl_fake_runner_new(const pl_fake_runner_opts *o);

/** The model: next token after ids[0..n). */
int32_t pl_fake_runner_next(const int32_t *ids, int n, int n_vocab);

/** Steps executed so far, and errors seen (bad block ids, placeholder
 *  without a previous sample). */
uint64_t pl_fake_runner_steps(pl_runner *r);
uint64_t pl_fake_runner_errors(pl_runner *r);
/** Placeholder rows seen (filled from the previous step's sample). */
uint64_t pl_fake_runner_placeholders(pl_runner *r);
/** Most steps ever launched and not yet waited for at once. */
int pl_fake_runner_max_inflight(pl_runner *r);

#endif
