/* model_gate.h - one conversation scheduler per served model, shared by
 * every job that uses it (HTTP jobs and `parley run` alike).
 *
 * Each job keeps its own pools and seed 000's 4-tuple order; the gate owns
 * the model's slots (schedulers/share.h): in-flight counted against the
 * backend's real capacity, jobs served by weighted least attained service,
 * `reserve` slots left to interactive OpenAI requests, which also count
 * while in flight. When a slot frees, the gate gives it to the job whose
 * turn it is, and that job dispatches its best ready request for the model.
 * Main thread only.
 */
#ifndef PL_MODEL_GATE_H
#define PL_MODEL_GATE_H

#include <jansson.h>

#include "backends/backend.h"

typedef struct pl_model_gate pl_model_gate;

/** A gate for backend b (borrowed; it must outlive the gate). reserve:
 *  slots jobs leave free for interactive requests; < 0: 10% of capacity
 *  (rounded up; 0 at capacity 1). NULL on OOM. */
pl_model_gate *pl_model_gate_new(pl_backend *b, int reserve);
/** Free; every job using it must be freed first. NULL is ignored. */
void pl_model_gate_free(pl_model_gate *g);

pl_backend *pl_model_gate_backend(const pl_model_gate *g);

/** An interactive request on the model started (+1) or ended (-1). When
 *  it ends, jobs may take the slot. */
void pl_model_gate_interactive(pl_model_gate *g, int delta);

/** The model's slots and each job's share (new ref): capacity, reserve,
 *  in-flight of jobs and of interactive requests, and per job its weight,
 *  in-flight, requests dispatched and completed, attained service (tokens)
 *  and share of the jobs' dispatched requests. */
json_t *pl_model_gate_json(const pl_model_gate *g);

#endif
