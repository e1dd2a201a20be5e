/* test_cpu_pool.c - backends/engine/cpu/pool.c's phases inside one run, its
 * wake-ups and shutdown, and the forward pass's use of it (forward.c): one
 * pool run per step, whatever the batch, with the same logits on any
 * number of threads.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/engine/cpu/forward.h"
#include "backends/engine/cpu/pool.h"
#include "backends/formats/gguf.h"
#include "backends/engine/model/model.h"
#include "tests/helpers/model_path.h"

TestSuite(cpu_pool, .timeout = 120);

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A chain of phases, each item of phase k reading every value of phase k-1:
 * a barrier that let one item start early would read a stale value. */
#define N_PH 300
#define MAX_ITEMS 7

typedef struct chain {
    pl_pool *p;
    int n[N_PH];                 /* items of each phase (0 allowed) */
    long v[N_PH][MAX_ITEMS];
    atomic_int taken[N_PH];      /* items of each phase handed out */
    long run;                    /* differs per run, so stale values show */
} chain;

static long chain_in(const chain *c, int k)
{
    long s = c->run;
    for (int j = k - 1; j >= 0; j--)
        if (c->n[j] > 0) {
            for (int i = 0; i < c->n[j]; i++)
                s += c->v[j][i];
            break;
        }
    return s;
}

/* The walk forward.c's plan_worker does: wait for the earlier phases, take
 * this phase's items, publish them. */
static void chain_fn(void *arg, int ith, int nth)
{
    (void)nth;
    chain *c = arg;
    for (int k = 0, base = 0; k < N_PH; base += c->n[k++]) {
        pl_pool_wait_done(c->p, ith, base);
        int mine = 0;
        for (int i = atomic_fetch_add(&c->taken[k], 1); i < c->n[k];
             i = atomic_fetch_add(&c->taken[k], 1), mine++) {
            long v = (chain_in(c, k) * 31 + i + 1) % 1000003;
            for (volatile int spin = 0; spin < 300; spin++) /* a window for early readers */
                ;
            c->v[k][i] = v;
        }
        if (mine)
            pl_pool_done(c->p, mine);
    }
}

Test(cpu_pool, phases_see_every_earlier_item)
{
    static chain c, want;
    unsigned seed = 7;
    for (int k = 0; k < N_PH; k++)
        c.n[k] = (int)(rand_r(&seed) % (MAX_ITEMS + 1));
    for (int threads = 1; threads <= 4; threads++) {
        c.p = pl_pool_new(threads);
        cr_assert(c.p);
        for (int rep = 0; rep < 100; rep++) {
            c.run = want.run = rep * 1000 + threads;
            memcpy(want.n, c.n, sizeof(c.n));
            for (int k = 0; k < N_PH; k++)
                for (int i = 0; i < want.n[k]; i++)
                    want.v[k][i] = (chain_in(&want, k) * 31 + i + 1) % 1000003;
            memset(c.v, 0xff, sizeof(c.v));
            for (int k = 0; k < N_PH; k++)
                atomic_store(&c.taken[k], 0);
            pl_pool_run(c.p, chain_fn, &c);
            for (int k = 0; k < N_PH; k++)
                for (int i = 0; i < c.n[k]; i++)
                    cr_assert_eq(c.v[k][i], want.v[k][i], "threads %d run %d phase %d item %d",
                                 threads, rep, k, i);
        }
        pl_pool_counters pc;
        pl_pool_stats(c.p, &pc);
        cr_assert_eq(pc.runs, threads > 1 ? 100u : 0u, "one hand-off per run, not per phase");
        pl_pool_free(c.p);
    }
}

/* The caller's share blocks until a worker has joined: a worker asleep
 * that missed its wake-up fails the run (after 10 s), where a lost wake-up
 * would otherwise only cost speed. */
typedef struct meet { atomic_int workers, timed_out; } meet;

static void meet_fn(void *arg, int ith, int nth)
{
    (void)nth;
    meet *m = arg;
    if (ith > 0) {
        atomic_fetch_add(&m->workers, 1);
        return;
    }
    double t0 = clock_s(CLOCK_MONOTONIC);
    while (atomic_load(&m->workers) == 0)
        if (clock_s(CLOCK_MONOTONIC) - t0 > 10.0) {
            atomic_store(&m->timed_out, 1);
            return;
        }
}

Test(cpu_pool, sleeping_workers_wake_for_every_run)
{
    pl_pool *p = pl_pool_new(2);
    cr_assert(p);
    for (int i = 0; i < 30; i++) {
        sleep_ms(i % 3 == 0 ? 40 : i % 3); /* past the spin (asleep), and within it */
        meet m = {0};
        pl_pool_run(p, meet_fn, &m);
        cr_assert_eq(atomic_load(&m.timed_out), 0, "run %d: the worker never woke", i);
        cr_assert_eq(atomic_load(&m.workers), 1);
    }
    pl_pool_free(p);
}

static void nop_fn(void *arg, int ith, int nth)
{
    (void)arg;
    (void)ith;
    (void)nth;
}

/* CPU ticks (utime + stime) of this process's threads; with `skip`, only
 * those not in skip[0..n_skip) (threads that existed before). */
static long thread_ticks(const int *skip, int n_skip, int *tids, int *n_tids)
{
    DIR *d = opendir("/proc/self/task");
    cr_assert(d);
    long sum = 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        int tid = atoi(e->d_name), old = 0;
        for (int i = 0; i < n_skip; i++)
            old |= skip[i] == tid;
        if (tid <= 0 || old)
            continue;
        if (tids && n < 64)
            tids[n++] = tid;
        char path[128], buf[1024];
        snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        char *q = fgets(buf, sizeof buf, f) ? strrchr(buf, ')') : NULL;
        unsigned long ut = 0, st = 0;
        if (q)
            sscanf(q + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st);
        fclose(f);
        sum += (long)(ut + st);
    }
    closedir(d);
    if (n_tids)
        *n_tids = n;
    return sum;
}

/* Spinning is bounded: once runs stop, the workers sleep and use no CPU, as
 * an idle engine's must. Counted on the pool's own threads (the test
 * framework has a thread of its own). A worker that never slept would
 * show ~50 ticks in the 0.5 s. */
Test(cpu_pool, idle_pool_uses_no_cpu)
{
    int before[64], n_before;
    thread_ticks(NULL, 0, before, &n_before);
    pl_pool *p = pl_pool_new(4);
    cr_assert(p);
    for (int i = 0; i < 2000; i++)
        pl_pool_run(p, nop_fn, NULL);
    sleep_ms(20);
    long t0 = thread_ticks(before, n_before, NULL, NULL);
    sleep_ms(500);
    long used = thread_ticks(before, n_before, NULL, NULL) - t0;
    cr_assert_leq(used, 2, "idle pool of 4: its workers used %ld ticks in 0.5 s", used);
    pl_pool_free(p);
}

Test(cpu_pool, free_while_spinning_or_asleep_returns)
{
    for (int i = 0; i < 200; i++) {
        pl_pool *p = pl_pool_new(1 + i % 4);
        cr_assert(p);
        for (int r = 0; r < i % 5; r++)
            pl_pool_run(p, nop_fn, NULL);
        if (i % 50 == 0)
            sleep_ms(30);
        pl_pool_free(p);
    }
}

/* The forward pass on a model: rows tokens at positions 0.., then `steps`
 * decode steps; returns all logits (caller frees) and the pool runs used.
 * split_ctx: pl_fwd_opts.attn_split_ctx. */
static float *forward_steps(const pl_model *m, int threads, int rows, int steps,
                            int gemm_min_rows, int split_ctx, unsigned long long *runs)
{
    enum { BS = 16 };
    int ctx = rows + steps, mb = (ctx + BS - 1) / BS, nv = m->n_vocab;
    char err[256];
    pl_pool *pool = pl_pool_new(threads);
    pl_fwd_opts o = {.max_rows = rows, .max_out = rows, .max_ctx = mb * BS,
                     .num_blocks = mb, .block_size = BS, .gemm_min_rows = gemm_min_rows,
                     .attn_split_ctx = split_ctx};
    pl_cpu_fwd *f = pl_cpu_fwd_new(m, pool, &o, err, sizeof(err));
    cr_assert(f, "%s", err);
    int32_t tok[64], pos[64], rs[64] = {0}, outr[64], bt[64];
    cr_assert(rows <= 64 && mb <= 64);
    float *logits = malloc(sizeof(float) * (size_t)nv * (rows + steps + 1));
    for (int i = 0; i < mb; i++)
        bt[i] = i;
    for (int i = 0; i < rows; i++) {
        tok[i] = (i * 7919 + 11) % nv;
        pos[i] = i;
        outr[i] = i;
    }
    pl_fwd_batch b = {.n_rows = rows, .tokens = tok, .positions = pos, .row_seq = rs,
                      .block_table = bt, .max_blocks_per_seq = mb, .n_out = rows,
                      .out_rows = outr};
    pl_pool_counters c0, c1;
    pl_pool_stats(pool, &c0);
    cr_assert_eq(pl_cpu_forward(f, &b, logits), 0);
    for (int s = 0; s < steps; s++) {
        tok[0] = (s * 104729 + 5) % nv;
        pos[0] = rows + s;
        outr[0] = 0;
        b.n_rows = b.n_out = 1;
        cr_assert_eq(pl_cpu_forward(f, &b, logits + (size_t)nv * (rows + s)), 0);
    }
    cr_assert_eq(pl_cpu_fwd_row_logits(f, outr, 1, logits + (size_t)nv * (rows + steps)), 0);
    pl_pool_stats(pool, &c1);
    *runs = c1.runs - c0.runs;
    pl_cpu_fwd_free(f);
    pl_pool_free(pool);
    return logits;
}

/* One pool run per forward call (and per row_logits call), and the same
 * logits on 1, 2, 3 and 7 threads: work items may go to any thread, and
 * matmul units to a thread other than their slice's (7 threads on this
 * 2-core machine are descheduled mid-slice, so the others take their
 * units). Bit for bit on the quantised kernels; within tol on f32 BLAS,
 * whose column slices are sized by the thread count (different sgemm edge
 * kernels). Each thread count runs twice: decode steps with the default
 * attention plan (one item per (row, kv head) at these short contexts),
 * and split over the threads by positions, heads and dims (forced from
 * context 1), which must not change a bit either. */
static void check_model(const pl_model *m, int rows, int steps, int gemm_min_rows, float tol)
{
    size_t n = (size_t)m->n_vocab * (rows + steps + 1);
    unsigned long long runs;
    float *one = forward_steps(m, 1, rows, steps, gemm_min_rows, 0, &runs);
    const int counts[6] = {2, 3, 7, 2, 3, 7};
    for (int ci = 0; ci < 6; ci++) {
        int threads = counts[ci];
        float *many = forward_steps(m, threads, rows, steps, gemm_min_rows, ci < 3 ? -1 : 1,
                                    &runs);
        cr_assert_eq(runs, (unsigned long long)steps + 2, "%d threads: %llu pool runs for %d "
                     "forward calls", threads, runs, steps + 2);
        if (tol == 0.0f)
            cr_assert(memcmp(one, many, n * sizeof(float)) == 0,
                      "%d threads: logits differ from 1 thread", threads);
        for (size_t i = 0; i < n; i++)
            cr_assert(fabsf(one[i] - many[i]) <= tol, "%d threads: logit %zu: %g vs %g",
                      threads, i, one[i], many[i]);
        free(many);
    }
    free(one);
}

Test(cpu_pool, forward_is_one_run_per_step_tiny_qwen2)
{
    const char *src = getenv("PARLEY_SRC");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/tiny_qwen2.gguf", src ? src : ".");
    char err[256];
    pl_gguf *g = pl_gguf_open(path, err, sizeof(err));
    cr_assert(g, "%s", err);
    pl_model *m = pl_model_load(g, NULL, err, sizeof(err));
    cr_assert(m, "%s", err);
    check_model(m, 20, 6, 1000000, 1e-4f); /* f32 weights: BLAS at every row count */
    pl_model_free(m);
    pl_gguf_free(g);
}

Test(cpu_pool, forward_is_one_run_per_step_default_model)
{
    PL_TEST_MODEL_OR_SKIP();
    char err[256];
    pl_gguf *g = pl_gguf_open(pl_test_model_path(), err, sizeof(err));
    cr_assert(g, "%s", err);
    pl_model *m = pl_model_load(g, NULL, err, sizeof(err));
    cr_assert(m, "%s", err);
    check_model(m, 9, 4, 1000000, 0.0f); /* quantised kernels: q8 rows in the plan */
    pl_model_free(m);
    pl_gguf_free(g);
}
