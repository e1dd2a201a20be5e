/* io_pool.h - a few threads for blocking file I/O (transcripts, manifest,
 * index), so the main loop never waits on fsync or flock.
 *
 * Work is posted from the main thread; work() runs on a worker thread, then
 * done() runs back on the main loop (woken through an eventfd). Seed 000:
 * state changes happen on the main thread first; only the write is handed
 * off, and its completion comes back as an event.
 */
#ifndef PL_IO_POOL_H
#define PL_IO_POOL_H

struct event_base;

typedef struct pl_io_pool pl_io_pool;

typedef void (*pl_io_work_fn)(void *ud);
typedef void (*pl_io_done_fn)(void *ud);

/** Start n_threads workers (>= 1) delivering completions on base.
 *  Returns NULL on failure. */
pl_io_pool *pl_io_pool_new(struct event_base *base, int n_threads);

/** Queue work. work runs on a worker, then done (may be NULL) on the main
 *  loop. Returns 0, -1 on OOM or after shutdown began. Main thread only. */
int pl_io_pool_post(pl_io_pool *p, pl_io_work_fn work, pl_io_done_fn done,
                    void *ud);

/** Items posted whose done() has not run yet. */
int pl_io_pool_outstanding(const pl_io_pool *p);

/** Block until every posted item has run, running their done() callbacks
 *  here. Main thread only (used at shutdown and by tests). */
void pl_io_pool_drain(pl_io_pool *p);

/** Drain, stop and join the workers, free. NULL is ignored. */
void pl_io_pool_free(pl_io_pool *p);

#endif
