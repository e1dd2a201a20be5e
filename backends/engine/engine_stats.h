/* engine_stats.h - the engine's statistics (engine_stats.c): the engine
 * thread publishes a snapshot of its counters; ops->stats reads it as
 * JSON. Calls engine_kv.c and engine_req.c. */
#ifndef PL_ENGINE_STATS_H
#define PL_ENGINE_STATS_H

#include "backends/engine/engine_internal.h"

/** Copy e->st_local (with the queue lengths and the KV figures now) into
 *  the snapshot, and publish the KV view. Engine thread. */
void pl_engine_stats_publish_(pl_engine *e);
/** The snapshot and the engine's geometry as JSON (ops->stats; a new
 *  object, NULL on OOM). Any thread. */
json_t *pl_engine_stats_json_(pl_engine *e);

#endif
