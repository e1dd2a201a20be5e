/* engine_prep.h - a request's way in (engine_prep.c): submit, the checks
 * of what a client sent, and the prepare workers that take the heavy part
 * off the event loop. Calls engine_req.c, engine_chan.c and engine_kv.c. */
#ifndef PL_ENGINE_PREP_H
#define PL_ENGINE_PREP_H

#include "backends/engine/engine_internal.h"

/** ops->submit. Main thread. */
int pl_engine_submit_(pl_backend *b, const pl_gen_request *req, pl_sink sink, uint64_t *id,
                      pl_err *err);
/** Token ids from a client: 0, or a 400 naming param when one is outside
 *  the vocabulary. Any thread. */
int pl_engine_check_ids_(pl_engine *e, const int32_t *ids, int n, const char *param,
                         pl_err *err);
/** The prompt's ids: copied from prompt_tokens or encoded. Any thread. */
int pl_engine_prompt_ids_(pl_engine *e, const pl_gen_request *req, int32_t **ids, int *n,
                          pl_err *err);
/** threads <= 0: none. Sets ops.late_errors when there are workers. Main
 *  thread. */
int pl_engine_prep_init_(pl_engine *e, int threads);
/** Waits for the workers; what they prepared is dropped (no sink called).
 *  Main thread. */
void pl_engine_prep_free_(pl_engine *e);

#endif
