/* engine_loop.h - the engine thread (engine_loop.c). Calls engine_text.c,
 * engine_stats.c, engine_chan.c, engine_req.c and engine_kv.c. */
#ifndef PL_ENGINE_LOOP_H
#define PL_ENGINE_LOOP_H

#include "backends/engine/engine_internal.h"

/** The engine thread's body (pthread_create's start routine, arg: the
 *  pl_engine): takes e->engine_role, runs the step loop until
 *  pl_engine_inbox_stop_, waits for the steps in flight, frees every
 *  request it holds, and gives the role up. */
void *pl_engine_thread_main_(void *arg);

#endif
