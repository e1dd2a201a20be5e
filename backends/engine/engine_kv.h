/* engine_kv.h - the engine's KV cache as admission counts it (engine_kv.c):
 * the main thread counts what it submits, the engine thread publishes the
 * figures, dispatch reads the view. Calls no other file of the engine. */
#ifndef PL_ENGINE_KV_H
#define PL_ENGINE_KV_H

#include "backends/engine/engine_internal.h"

/** Main thread, at submit: count r's blocks until the engine sees it. */
void pl_engine_kv_submit_(pl_engine *e, eng_req *r);
/** Main thread: a request handed to a prepare worker (its prompt not
 *  tokenised yet) is counted until it lands (pl_engine_kv_submit_) or
 *  fails, for prompt_bound tokens (an upper bound of a text prompt's, from
 *  its bytes) or, with 0, the running prompt estimate; returns the blocks
 *  counted, to give back to pl_engine_kv_unhold_ either way. */
int pl_engine_kv_hold_(pl_engine *e, int prompt_bound, int max_tokens);
/** Main thread. */
void pl_engine_kv_unhold_(pl_engine *e, int blocks);
/** Engine thread, as r leaves the inbox (before anything may free it). */
void pl_engine_kv_seen_(pl_engine *e, const eng_req *r);
/** Engine thread: a reply of n tokens ended (stop or length). */
void pl_engine_kv_reply_(pl_engine *e, int n);
/** Engine thread (or the main thread before it starts): publish the
 *  figures (before posting DONEs, so that a completion's blocks are free
 *  in the view its DONE pumps). */
void pl_engine_kv_publish_(pl_engine *e);
/** ops->kv. Main thread. */
bool pl_engine_kv_view_(pl_backend *b, pl_dispatch_kv *out);

#endif
