/* pool.h - a small persistent thread pool for the CPU runner's operations.
 *
 * pl_pool_run() runs fn(arg, ith, nth) on the caller (ith 0) and on each
 * worker (ith 1..nth-1) that wakes before the caller has finished its own
 * call, and returns when all of those are done. Work must therefore be
 * handed out dynamically (pl_pool_take(), or counters of the caller's own),
 * never split statically by ith: a worker that wakes late runs nothing, and
 * the caller has done its share. A forward step is one run of phases
 * (pl_pool_wait_done below); workers spin briefly after a run (the next
 * step usually follows at once), then sleep, so an idle engine uses no CPU;
 * waiting threads yield, so a machine shared with other processes does not
 * stall on a descheduled worker.
 * One caller at a time.
 */
#ifndef PL_CPU_POOL_H
#define PL_CPU_POOL_H

typedef struct pl_pool pl_pool;
typedef void (*pl_pool_fn)(void *arg, int ith, int nth);

/** n_threads >= 1. NULL on failure. Free with pl_pool_free. */
pl_pool *pl_pool_new(int n_threads);
void pl_pool_free(pl_pool *p);
int pl_pool_size(const pl_pool *p);
void pl_pool_run(pl_pool *p, pl_pool_fn fn, void *arg);

/** Dynamic scheduling inside a job: returns 0, 1, 2, ... across all threads
 *  of the current pl_pool_run() (each index once). Threads that take chunks
 *  until they run out balance the load when a core is busy elsewhere. */
int pl_pool_take(pl_pool *p);

/** Phases inside one run: every thread calls pl_pool_done(p, k) for the k
 *  work items it finished; pl_pool_wait_done(p, ith, n) returns once n
 *  items of the current run are done (spin, then yield). A thread that
 *  waits for the b items of the phases before its next one, holding no item
 *  of that phase, cannot hold the others up even when it is descheduled
 *  (see forward.c's plan_worker). */
void pl_pool_done(pl_pool *p, int n);
void pl_pool_wait_done(pl_pool *p, int ith, int n);

/** Hand-off statistics since the pool was made. */
typedef struct pl_pool_counters {
    unsigned long long runs;           /**< pl_pool_run calls that used the workers */
    unsigned long long wait_ns;        /**< the caller's waits: for workers after its
                                            share of a run, and in pl_pool_wait_done */
    unsigned long long worker_busy_ns; /**< workers' time inside runs, less their waits */
    unsigned long long worker_wait_ns; /**< workers' time in pl_pool_wait_done */
} pl_pool_counters;

/** Read by the caller's thread between runs. Time outside arithmetic over an
 *  interval of wall time T on n threads: wait_ns + (n - 1) * T - worker_busy_ns
 *  (a worker's time outside its work: waking, waiting, idle between runs). */
void pl_pool_stats(const pl_pool *p, pl_pool_counters *c);

/** Split [0, n) into nth chunks aligned to `align`; chunk ith -> [*b, *e). */
void pl_pool_split(int n, int align, int ith, int nth, int *b, int *e);

#endif
