/* engine_chan.h - the channels between the main thread and the engine
 * thread (engine_chan.c): the inbox (main -> engine), the outbox
 * (engine -> main, woken by an eventfd), the main thread's registry of
 * live requests, and delivery of deltas and results to their sinks. Each
 * function says its thread; the thread is asserted. Calls engine_req.c. */
#ifndef PL_ENGINE_CHAN_H
#define PL_ENGINE_CHAN_H

#include "backends/engine/engine_internal.h"

/* ---- inbox: main -> engine ---- */

/** Queue m for the engine thread and wake it. Main thread. */
void pl_engine_inbox_push_(pl_engine *e, eng_msg *m);
/** m, then (may be NULL) right after it: the engine thread takes both in
 *  one drain, before it schedules anything. Main thread. */
void pl_engine_inbox_push2_(pl_engine *e, eng_msg *m, eng_msg *then);
/** A control message (abort, pause, resume) for request id; dropped when
 *  out of memory. Main thread. */
void pl_engine_control_(pl_engine *e, uint64_t id, eng_msg_type type);
/** Tell the engine thread to stop and wake it. Main thread. */
void pl_engine_inbox_stop_(pl_engine *e);
/** Everything in the inbox, in order (NULL when empty); when block, waits
 *  until there is something or the engine stops. *stop: whether it is
 *  stopping. Engine thread. */
eng_msg *pl_engine_inbox_take_(pl_engine *e, bool block, bool *stop);

/* ---- outbox: engine -> main ---- */

/** A cleared message: from the engine thread's cache, refilled in one go
 *  from the messages the main thread recycled. NULL on OOM. Engine
 *  thread. */
eng_msg *pl_engine_msg_get_(pl_engine *e);
/** Hand e->pending_out (this step's messages) to the main thread and wake
 *  it once. Engine thread. */
void pl_engine_post_(pl_engine *e);
/** The eventfd and its read event on the main loop, which delivers the
 *  outbox. 0, or -1. Main thread. */
int pl_engine_wake_init_(pl_engine *e);
/** The eventfd, its event, the outbox and the recycled messages; after
 *  the engine thread ended. Main thread. */
void pl_engine_wake_free_(pl_engine *e);

/* ---- registry of live requests (main thread) ---- */

/** Register id's sink. 0, or -1 on OOM. */
int pl_engine_sub_add_(pl_engine *e, uint64_t id, pl_sink sink);
/** id's record, or NULL (finished, aborted, never was). */
eng_sub *pl_engine_sub_find_(pl_engine *e, uint64_t id);
/** Forget id: its sink is never called again. */
void pl_engine_sub_remove_(pl_engine *e, uint64_t id);
/** Free the registry (the engine is freed). */
void pl_engine_subs_free_(pl_engine *e);

#endif
