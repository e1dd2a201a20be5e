/* pool.c - persistent spin-then-sleep thread pool (see pool.h). */
#include "backends/engine/cpu/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sched.h>
#include <time.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define SPIN_ITERS 20000
#define CLOSED 0x80000000ULL
#define CALLER_SPINS 2000

struct pl_pool {
    int n;
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;             /* bumped per job */
    /* (job gen << 32) | CLOSED | workers that joined: a worker joins only
     * while the job is open, so the caller never waits on one that was not
     * scheduled in time (a busy shared machine); it did the work itself. */
    _Atomic uint64_t entry;
    atomic_int n_exited;
    atomic_int n_sleeping;
    atomic_int quit;
    atomic_int next_chunk;
    atomic_int items_done;       /* pl_pool_done() count of the current run */
    pl_pool_fn fn;
    void *arg;
    unsigned long long runs, wait_ns; /* the caller's only */
    /* A worker writes its counters before it signs off a run (n_exited),
     * so the caller reads them safely once that run has returned. */
    struct worker { pl_pool *p; int ith; unsigned long long busy_ns, wait_ns; } *w;
};

static unsigned long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000000000ULL + (unsigned long long)t.tv_nsec;
}

static unsigned wait_job(pl_pool *p, unsigned seen)
{
    for (int i = 0; i < SPIN_ITERS; i++) {
        unsigned g = atomic_load(&p->gen);
        if (g != seen || atomic_load(&p->quit))
            return g;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->n_sleeping, 1);
    while (atomic_load(&p->gen) == seen && !atomic_load(&p->quit))
        pthread_cond_wait(&p->cv, &p->mu);
    atomic_fetch_sub(&p->n_sleeping, 1);
    pthread_mutex_unlock(&p->mu);
    return atomic_load(&p->gen);
}

static int join_job(pl_pool *p, unsigned g)
{
    uint64_t e = atomic_load(&p->entry);
    while ((e >> 32) == g && !(e & CLOSED))
        if (atomic_compare_exchange_weak(&p->entry, &e, e + 1))
            return 1;
    return 0;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    pl_pool *p = w->p;
    unsigned seen = 0;
    for (;;) {
        seen = wait_job(p, seen);
        if (atomic_load(&p->quit))
            return NULL;
        if (!join_job(p, seen))
            continue;
        unsigned long long t0 = now_ns(), waited = w->wait_ns;
        p->fn(p->arg, w->ith, p->n);
        w->busy_ns += now_ns() - t0 - (w->wait_ns - waited);
        atomic_fetch_add(&p->n_exited, 1);
    }
}

pl_pool *pl_pool_new(int n_threads)
{
    pl_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->n = n_threads < 1 ? 1 : n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->th = calloc((size_t)p->n, sizeof(*p->th));
    p->w = calloc((size_t)p->n, sizeof(*p->w));
    if (!p->th || !p->w)
        goto fail;
    for (int i = 1; i < p->n; i++) {
        p->w[i] = (struct worker){p, i};
        if (pthread_create(&p->th[i], NULL, worker_main, &p->w[i]) != 0) {
            p->n = i;
            goto fail;
        }
    }
    return p;
fail:
    pl_pool_free(p);
    return NULL;
}

void pl_pool_free(pl_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; p->th && i < p->n; i++)
        pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->th);
    free(p->w);
    free(p);
}

int pl_pool_size(const pl_pool *p) { return p->n; }

void pl_pool_run(pl_pool *p, pl_pool_fn fn, void *arg)
{
    atomic_store(&p->next_chunk, 0);
    atomic_store(&p->items_done, 0);
    if (p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->n_exited, 0);
    unsigned g = atomic_load(&p->gen) + 1;
    atomic_store(&p->entry, (uint64_t)g << 32);
    atomic_store(&p->gen, g);
    if (atomic_load(&p->n_sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    fn(arg, 0, p->n);
    unsigned long long t0 = now_ns();
    int joined = (int)(atomic_fetch_or(&p->entry, CLOSED) & (CLOSED - 1));
    for (int i = 0; atomic_load(&p->n_exited) < joined; i++) {
        if (i < CALLER_SPINS)
            cpu_relax();
        else
            sched_yield();
    }
    p->runs++;
    p->wait_ns += now_ns() - t0;
}

void pl_pool_done(pl_pool *p, int n) { atomic_fetch_add(&p->items_done, n); }

void pl_pool_wait_done(pl_pool *p, int ith, int n)
{
    if (atomic_load(&p->items_done) >= n)
        return;
    unsigned long long t0 = now_ns();
    for (int i = 0; atomic_load(&p->items_done) < n; i++) {
        if (i < CALLER_SPINS)
            cpu_relax();
        else
            sched_yield();
    }
    unsigned long long dt = now_ns() - t0;
    if (ith == 0)
        p->wait_ns += dt;
    else
        p->w[ith].wait_ns += dt;
}

void pl_pool_stats(const pl_pool *p, pl_pool_counters *c)
{
    *c = (pl_pool_counters){.runs = p->runs, .wait_ns = p->wait_ns};
    for (int i = 1; i < p->n; i++) {
        c->worker_busy_ns += p->w[i].busy_ns;
        c->worker_wait_ns += p->w[i].wait_ns;
    }
}

int pl_pool_take(pl_pool *p) { return atomic_fetch_add(&p->next_chunk, 1); }

void pl_pool_split(int n, int align, int ith, int nth, int *b, int *e)
{
    int units = (n + align - 1) / align;
    int per = units / nth, extra = units % nth;
    int ub = ith * per + (ith < extra ? ith : extra);
    int ue = ub + per + (ith < extra ? 1 : 0);
    *b = ub * align < n ? ub * align : n;
    *e = ue * align < n ? ue * align : n;
}
