/* test_dispatch_kv.c - admission by the KV blocks a request needs (issue
 * 41; schedulers/dispatch.c dispatch_admits, schedulers/dispatch_kv.c):
 * the need formula and the reply estimate, admission that never takes
 * more blocks than are free, the bound as min(upper bound, what fits
 * now), one request at a time when nothing fits, the interactive reserve
 * as room, and the capacity rule without a KV view. The backend here is a
 * ledger that counts an admitted request's need at once, as the engine's
 * view does (backends/engine/engine_kv.c). */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "schedulers/dispatch.h"

#define MAXQ 4096

typedef struct kreq {
    pl_dispatch_req d;
    int need;                    /* blocks the backend counted for it */
    bool inflight;
} kreq;

/* The backend: a cache of `total` blocks; every request in flight holds
 * (or has promised to it) the need dispatch computed for it. */
typedef struct kv_sim {
    pl_dispatch *d;
    pl_dispatch_kv view;         /* block_size, total and the estimates */
    bool no_view;
    int held;                    /* blocks of the requests in flight */
    int interactive_need;        /* what an interactive request takes */
    kreq q[MAXQ];
    int n_q;
    kreq *admitted[MAXQ];
    int n_admitted;
    int max_held;                /* most blocks ever held */
    int overcommits;             /* admissions past the free blocks */
    int in_flight, max_in_flight;
} kv_sim;

static bool kv_now(void *ud, pl_dispatch_kv *out)
{
    kv_sim *s = ud;
    if (s->no_view)
        return false;
    *out = s->view;
    out->free = s->view.total;
    out->reserved = s->held;
    return true;
}

static void kv_submit(void *ud, pl_dispatch_req *r)
{
    kv_sim *s = ud;
    kreq *k = (kreq *)r;
    pl_dispatch_kv v = {0};     /* no view: kv_now leaves it as it is */
    kv_now(s, &v);
    k->need = r->client_ == PL_DISPATCH_INTERACTIVE ? s->interactive_need
                                                    : pl_dispatch_kv_need(&v, r->prompt_tokens,
                                                                          r->max_tokens);
    /* Admitted past the free blocks: allowed only to a job request when
     * nothing else is in flight (it then runs alone), or to an
     * interactive request (they always go). */
    if (s->held + k->need > s->view.total && s->in_flight > 0 &&
        r->client_ != PL_DISPATCH_INTERACTIVE)
        s->overcommits++;
    s->held += k->need;
    if (s->held > s->max_held)
        s->max_held = s->held;
    k->inflight = true;
    s->admitted[s->n_admitted++] = k;
    if (++s->in_flight > s->max_in_flight)
        s->max_in_flight = s->in_flight;
}

static kv_sim *sim_new(int total, int upper, int reserve)
{
    kv_sim *s = calloc(1, sizeof *s);
    cr_assert_not_null(s);
    s->view = (pl_dispatch_kv){.block_size = 16, .total = total};
    s->d = pl_dispatch_new(&(pl_dispatch_opts){.capacity = upper, .reserve = reserve,
                                               .kv_fn = kv_now, .kv_ud = s});
    cr_assert_not_null(s->d);
    return s;
}

static void sim_free(kv_sim *s)
{
    pl_dispatch_free(s->d);
    free(s);
}

static int join(kv_sim *s)
{
    int id = pl_dispatch_join(s->d, &(pl_dispatch_client_opts){.name = "job", .weight = 1});
    cr_assert_gt(id, 0);
    return id;
}

static kreq *push(kv_sim *s, int client, int prompt_tokens, int max_tokens)
{
    cr_assert_lt(s->n_q, MAXQ);
    kreq *k = &s->q[s->n_q];
    memset(k, 0, sizeof *k);
    k->d.seq = k->d.ready_seq = (uint64_t)s->n_q++;
    k->d.prompt_tokens = prompt_tokens;
    k->d.max_tokens = max_tokens;
    k->d.submit = kv_submit;
    k->d.ud = s;
    cr_assert_eq(pl_dispatch_push(s->d, client, &k->d), 0);
    return k;
}

static void finish(kv_sim *s, kreq *k)
{
    cr_assert(k->inflight);
    k->inflight = false;
    s->held -= k->need;
    s->in_flight--;
    pl_dispatch_done(s->d, &k->d, 10);
}

/* The oldest request still in flight. */
static kreq *oldest(kv_sim *s)
{
    for (int i = 0; i < s->n_admitted; i++)
        if (s->admitted[i]->inflight)
            return s->admitted[i];
    return NULL;
}

Test(dispatch_kv, reply_budget_and_need)
{
    cr_assert_eq(pl_dispatch_reply_budget(24, 0), 24, "max_tokens when nothing is known");
    cr_assert_eq(pl_dispatch_reply_budget(0, 0), PL_DISPATCH_REPLY_PRIOR);
    cr_assert_eq(pl_dispatch_reply_budget(0, 90), 90, "no limit: the estimate");
    cr_assert_eq(pl_dispatch_reply_budget(24, 90), 24, "a small limit is the budget");
    cr_assert_eq(pl_dispatch_reply_budget(8192, 90), 90, "a large limit: the estimate");
    pl_dispatch_kv kv = {.block_size = 16, .prompt_tokens = 300, .reply_tokens = 40};
    cr_assert_eq(pl_dispatch_kv_need(&kv, 100, 28), 8, "(100 + 28) / 16");
    cr_assert_eq(pl_dispatch_kv_need(&kv, 100, 29), 9, "rounded up");
    cr_assert_eq(pl_dispatch_kv_need(&kv, 0, 0), 22, "the estimates: (300 + 40) / 16");
    cr_assert_eq(pl_dispatch_kv_need(&kv, 0, 4096), 22, "not max_model_len or max_tokens");
    pl_dispatch_kv none = {0};
    cr_assert_eq(pl_dispatch_kv_need(&none, 100, 10), 1, "no view: one");
    kv.block_size = 16;
    cr_assert_eq(pl_dispatch_kv_bound(&kv, 3, 4, 100), 3, "free 0, nothing more fits");
    kv.free = 50;
    kv.reserved = 10;
    cr_assert_eq(pl_dispatch_kv_bound(&kv, 3, 4, 100), 13, "3 + 40 / 4");
    cr_assert_eq(pl_dispatch_kv_bound(&kv, 3, 4, 8), 8, "the upper bound");
    cr_assert_eq(pl_dispatch_kv_bound(&kv, 0, 400, 8), 1, "at least one");
}

Test(dispatch_kv, reply_estimate_follows_the_replies)
{
    pl_dispatch_est e = {0};
    cr_assert_eq(pl_dispatch_est_value(&e), 0, "nothing seen");
    for (int i = 0; i < 10; i++)
        pl_dispatch_est_observe(&e, 20);
    cr_assert_eq(pl_dispatch_est_value(&e), 20, "constant replies: their length");
    for (int i = 0; i < 200; i++)
        pl_dispatch_est_observe(&e, i % 2 ? 10 : 30);
    int v = pl_dispatch_est_value(&e);
    cr_assert(v >= 38 && v <= 42, "mean 20 + 2 sd (10): %d", v);
    for (int i = 0; i < 400; i++)
        pl_dispatch_est_observe(&e, 100);
    v = pl_dispatch_est_value(&e);
    cr_assert(v >= 100 && v <= 110, "it forgets: the last ~64 count (%d)", v);
}

/* Requests of mixed sizes against a 100-block cache: every admission fits
 * the blocks left (or runs alone), and the cache is packed, not bounded by
 * the largest possible request. */
Test(dispatch_kv, admission_never_exceeds_free_blocks)
{
    kv_sim *s = sim_new(100, 256, 0);
    int a = join(s);
    for (int i = 0; i < 600; i++)
        push(s, a, 17 + (i * 131) % 700, 8 + (i * 17) % 120);
    pl_dispatch_pump(s->d);
    cr_assert_gt(s->in_flight, 1, "several requests share the cache");
    while (oldest(s)) {
        finish(s, oldest(s));
        pl_dispatch_pump(s->d);
        cr_assert_leq(s->held, 100, "held %d of 100 blocks", s->held);
    }
    cr_assert_eq(s->n_admitted, 600, "every request ran");
    cr_assert_eq(s->overcommits, 0);
    cr_assert_leq(s->max_held, 100);
    cr_assert_gt(s->max_held, 80, "the cache was packed: %d of 100 blocks", s->max_held);
    cr_assert_gt(s->max_in_flight, 3, "the worst case (717 + 127 tokens) would allow one");
    sim_free(s);
}

/* The bound is min(upper bound, what fits now): a large cache stops at
 * the upper bound, a small one at what it holds. */
Test(dispatch_kv, bound_is_min_of_upper_bound_and_what_fits)
{
    kv_sim *s = sim_new(100000, 8, 0);
    int a = join(s);
    for (int i = 0; i < 20; i++)
        push(s, a, 160, 16);                 /* 11 blocks each */
    pl_dispatch_pump(s->d);
    cr_assert_eq(s->in_flight, 8, "the upper bound");
    sim_free(s);
    s = sim_new(50, 8, 0);
    a = join(s);
    for (int i = 0; i < 20; i++)
        push(s, a, 160, 16);
    pl_dispatch_pump(s->d);
    cr_assert_eq(s->in_flight, 4, "50 blocks hold four of 11");
    pl_dispatch_counts c;
    pl_dispatch_counts_get(s->d, &c);
    cr_assert(c.has_kv);
    cr_assert_eq(c.upper_bound, 8);
    cr_assert_eq(c.kv.reserved, 44);
    finish(s, oldest(s));
    pl_dispatch_pump(s->d);
    cr_assert_eq(s->in_flight, 4, "a finished request's blocks take the next");
    sim_free(s);
}

/* A request larger than the free blocks goes when nothing is in flight
 * (it runs alone), never beside another: no deadlock, no overcommit. */
Test(dispatch_kv, a_request_that_never_fits_runs_alone)
{
    kv_sim *s = sim_new(10, 64, 0);
    int a = join(s);
    kreq *big = push(s, a, 400, 100);        /* 32 blocks > 10 */
    push(s, a, 16, 16);
    pl_dispatch_pump(s->d);
    cr_assert_eq(s->n_admitted, 1);
    cr_assert_eq(s->admitted[0], big);
    finish(s, big);
    pl_dispatch_pump(s->d);
    cr_assert_eq(s->n_admitted, 2);
    cr_assert_eq(s->overcommits, 0);
    sim_free(s);
}

/* Without a client's figures the view's estimates count: the prompt
 * footprint and the reply estimate (max_tokens when smaller). */
Test(dispatch_kv, unknown_prompts_take_the_estimates)
{
    kv_sim *s = sim_new(100, 256, 0);
    s->view.prompt_tokens = 300;
    s->view.reply_tokens = 20;
    int a = join(s);
    for (int i = 0; i < 20; i++)
        push(s, a, 0, 4096);                 /* (300 + 20) / 16 = 20 blocks */
    pl_dispatch_pump(s->d);
    cr_assert_eq(s->in_flight, 5);
    cr_assert_eq(s->admitted[0]->need, 20);
    pl_dispatch_counts c;
    pl_dispatch_counts_get(s->d, &c);
    cr_assert_eq(c.need_blocks, 20);
    cr_assert_eq(c.capacity, 5, "in flight 5, nothing more fits");
    sim_free(s);
}

/* Jobs leave the room of `reserve` requests to interactive ones, which go
 * at once whatever the room; jobs then wait for room again. */
Test(dispatch_kv, jobs_leave_room_for_interactive_requests)
{
    kv_sim *s = sim_new(100, 256, 2);
    s->interactive_need = 10;
    int a = join(s);
    for (int i = 0; i < 30; i++)
        push(s, a, 150, 10);                 /* 10 blocks each */
    pl_dispatch_pump(s->d);
    cr_assert_eq(s->in_flight, 8, "100 blocks hold 10; jobs leave two");
    push(s, PL_DISPATCH_INTERACTIVE, 0, 0);
    push(s, PL_DISPATCH_INTERACTIVE, 0, 0);
    push(s, PL_DISPATCH_INTERACTIVE, 0, 0);
    pl_dispatch_pump(s->d);
    cr_assert_eq(s->in_flight, 11, "interactive requests never wait");
    finish(s, oldest(s));
    finish(s, oldest(s));
    pl_dispatch_pump(s->d);
    cr_assert_eq(s->in_flight, 10, "one job takes the room freed: 7 jobs + 3 interactive "
                 "fill the 100 blocks, as slots fill a capacity");
    cr_assert_eq(s->held, 100);
    sim_free(s);
}

/* A backend without a KV view (a mock, a remote upstream, --capacity
 * worst-case): its capacity alone bounds admission. */
Test(dispatch_kv, no_view_is_the_capacity_rule)
{
    kv_sim *s = sim_new(10, 6, 0);
    s->no_view = true;
    int a = join(s);
    for (int i = 0; i < 10; i++)
        push(s, a, 400, 100);
    pl_dispatch_pump(s->d);
    cr_assert_eq(s->in_flight, 6);
    pl_dispatch_counts c;
    pl_dispatch_counts_get(s->d, &c);
    cr_assert_not(c.has_kv);
    cr_assert_eq(c.capacity, 6);
    sim_free(s);
}

/* The job whose turn it is waits for the room its request needs; the room
 * freed meanwhile is not given to another job's smaller requests (they
 * would take it for ever: the large request would starve). */
Test(dispatch_kv, a_large_request_is_not_overtaken_by_another_jobs_small_ones)
{
    kv_sim *s = sim_new(100, 256, 0);
    int large = join(s);                     /* idle at first */
    int small = join(s);
    for (int i = 0; i < 30; i++)
        push(s, small, 150, 10);             /* 10 blocks each */
    pl_dispatch_pump(s->d);
    cr_assert_eq(s->in_flight, 10, "the small job fills the cache");
    /* Back from idle, the large job starts at the small one's service;
     * the tie goes to the lower id: its turn. */
    kreq *big = push(s, large, 944, 16);     /* 60 blocks */
    for (int freed = 1; freed <= 5; freed++) {
        finish(s, oldest(s));
        pl_dispatch_pump(s->d);
        cr_assert_eq(s->in_flight, 10 - freed, "room for %d blocks held for the large request",
                     10 * freed);
        cr_assert_not(big->inflight);
    }
    finish(s, oldest(s));
    pl_dispatch_pump(s->d);
    cr_assert(big->inflight, "60 blocks free: its turn");
    cr_assert_eq(s->held, 100);
    cr_assert_eq(s->overcommits, 0);
    sim_free(s);
}
