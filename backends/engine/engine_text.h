/* engine_text.h - what a step's outputs do to their requests
 * (engine_text.c): a sampled token's stop checks, text and delta, prompt
 * logprobs, the echoed prompt. Engine thread (asserted). Calls
 * engine_req.c and engine_chan.c. */
#ifndef PL_ENGINE_TEXT_H
#define PL_ENGINE_TEXT_H

#include "backends/engine/engine_internal.h"

/** The request failed for lack of memory on the engine thread: it ends
 *  with a 500 its client sees. */
void pl_engine_fail_oom_(pl_engine *e, eng_req *r, pl_batch_seq *s);
/** s sampled tok (row k of out): its delta, and its DONE when it ends
 *  the request (end of generation, length, a stop string, the grammar). */
void pl_engine_on_token_(pl_engine *e, pl_batch_seq *s, int32_t tok,
                         const pl_step_output *out, int k);
/** Prompt logprobs of a step's rows into their requests. */
void pl_engine_prompt_rows_(pl_engine *e, const pl_batch_step *st,
                            const pl_step_output *out);
/** Queue r's echoed prompt as one delta (once, before its first token).
 *  -1 on out of memory. */
int pl_engine_emit_prompt_(pl_engine *e, eng_req *r, const pl_batch_seq *s);

#endif
