/* engine_req.h - what the engine's channels carry (engine_req.c): messages
 * (eng_msg) and the requests they hand over (eng_req), from the request's
 * creation to its free; and the engine's clock. A request is made on the
 * main thread or a prepare worker and owned by the engine thread once it is
 * in the inbox; what is marked "engine thread" below is asserted there.
 * Calls engine_kv.c only. */
#ifndef PL_ENGINE_REQ_H
#define PL_ENGINE_REQ_H

#include "backends/engine/engine_internal.h"

/** Milliseconds on the monotonic clock. Any thread. */
double pl_engine_now_ms_(void);

/** Append m to q (an unlocked queue: the caller owns q). Any thread. */
void pl_engine_queue_push_(eng_queue *q, eng_msg *m);
/** Clear a recycled message for reuse (its buffers stay). Any thread. */
void pl_engine_msg_clear_(eng_msg *m);
/** Free m and its buffers (not the request it carries). Any thread. */
void pl_engine_msg_free_(eng_msg *m);
/** Free q's messages and the requests SUBMIT messages carry; q is left
 *  empty. Whoever owns q. */
void pl_engine_queue_free_(eng_queue *q);

/** The engine's request from req, the prompt's ids (taken) and the
 *  automaton (a reference, taken): the length checks, the sampling copy,
 *  echo. NULL with *err (ids freed, fsm released). Any thread. */
eng_req *pl_engine_req_new_(pl_engine *e, const pl_gen_request *req, int32_t *ids, int n,
                            const pl_token_fsm *fsm, pl_err *err);
/** Free r and all it owns (NULL is ignored). Whoever owns r. */
void pl_engine_req_free_(eng_req *r);
/** A finished or aborted request may still be referenced by steps in
 *  flight (its sampling state, logit bias): r is freed by
 *  pl_engine_req_sweep_ once every step launched so far has retired.
 *  Engine thread. */
void pl_engine_req_defer_free_(pl_engine *e, eng_req *r);
/** Free the deferred requests no step in flight refers to. Engine thread. */
void pl_engine_req_sweep_(pl_engine *e);
/** Queue r's DONE on e->pending_out: the message reserved when r arrived,
 *  so it cannot fail; a second DONE of one request (a broken invariant) is
 *  dropped. Engine thread. */
void pl_engine_emit_done_(pl_engine *e, eng_req *r, pl_finish f, const pl_err *err);

#endif
