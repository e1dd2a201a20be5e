/* backend_sink.h - a sink that records what a backend delivers (text,
 * deltas, the result and its error), and a loop runner that waits for a
 * condition, for tests that drive a backend on their own event base. */
#ifndef PL_TEST_BACKEND_SINK_H
#define PL_TEST_BACKEND_SINK_H

#include <event2/event.h>

#include "backends/backend.h"

typedef struct pl_test_got {
    char text[16384];            /**< the deltas' text, NUL-terminated (may hold NULs) */
    size_t len;
    int deltas, done, n_lp;
    pl_result res;               /**< res.error points at err */
    pl_err err;
} pl_test_got;

/** A sink recording into g (Criterion-asserts on_done is called once). */
pl_sink pl_test_got_sink(pl_test_got *g);
/** For pl_test_run_until: has g's on_done run? */
int pl_test_got_done(void *g);
/** CLOCK_MONOTONIC in milliseconds. */
double pl_test_now_ms(void);
/** Run base's loop until cond(arg) holds or ms pass (checked every 20 ms). */
void pl_test_run_until(struct event_base *base, int (*cond)(void *), void *arg, int ms);
/** A remote backend's stats: field key of replicas[i] (a new reference). */
json_t *pl_test_replica_stat(pl_backend *b, int i, const char *key);

#endif
