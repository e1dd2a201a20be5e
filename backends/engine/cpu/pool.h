/* pool.h - a small persistent thread pool for the CPU runner's operations.
 *
 * pl_pool_run() runs fn(arg, ith, nth) on the caller (ith 0) and on each
 * worker (ith 1..nth-1) that wakes before the caller has finished its own
 * call, and returns when all of those are done. Work must therefore be
 * handed out with pl_pool_take(), never split statically by ith: a worker
 * that wakes late runs nothing, and the caller has done its share. Workers spin briefly
 * between jobs (decode issues hundreds of short jobs per token), then sleep;
 * the caller yields while it waits, so a machine shared with other
 * processes does not stall on a descheduled worker.
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

/** Hand-off statistics since the pool was made (read by the caller's
 *  thread, or after its last run): runs (pl_pool_run calls that used the
 *  workers) and the nanoseconds the caller spent waiting, after its own
 *  share of a run, for workers to finish theirs: time outside arithmetic. */
void pl_pool_stats(const pl_pool *p, unsigned long long *runs, unsigned long long *wait_ns);

/** Split [0, n) into nth chunks aligned to `align`; chunk ith -> [*b, *e). */
void pl_pool_split(int n, int align, int ith, int nth, int *b, int *e);

#endif
