/* pool.h - a small persistent thread pool for the CPU runner's operations.
 *
 * pl_pool_run() runs fn(arg, ith, nth) on nth = n_threads threads (the
 * caller is thread 0) and returns when all are done. Workers spin briefly
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

/** Split [0, n) into nth chunks aligned to `align`; chunk ith -> [*b, *e). */
void pl_pool_split(int n, int align, int ith, int nth, int *b, int *e);

#endif
