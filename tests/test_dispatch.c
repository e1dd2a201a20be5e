/* test_dispatch.c - a served model's admission point (schedulers/dispatch.c):
 * seed 000's tuple order, the capacity bound, the interactive reserve and
 * precedence, weighted least attained service between jobs, no credit
 * banked while idle, re-entrant pumping. (The share tests were
 * tests/test_share.c, with the same assertions.) */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "schedulers/dispatch.h"

/* A test request: which client, and a serial; submit records it. */
typedef struct treq {
    pl_dispatch_req d;
    int client, serial;
} treq;

#define MAXR 8192

typedef struct sim {
    pl_dispatch *d;
    treq reqs[MAXR];
    int n_reqs;
    treq *admitted[MAXR];        /* admission order */
    int n_admitted;
    int topup[8];                /* keep this many queued per client */
    int queued[8];
    bool fail_submit;            /* end each admitted request at once */
} sim;

static void on_submit(void *ud, pl_dispatch_req *r);

static treq *sim_push(sim *s, int client)
{
    cr_assert_lt(s->n_reqs, MAXR);
    treq *t = &s->reqs[s->n_reqs];
    memset(t, 0, sizeof *t);
    t->client = client;
    t->serial = s->n_reqs++;
    t->d.seq = (uint64_t)t->serial;
    t->d.ready_seq = (uint64_t)t->serial;
    t->d.submit = on_submit;
    t->d.ud = s;
    cr_assert_eq(pl_dispatch_push(s->d, client, &t->d), 0);
    s->queued[client]++;
    return t;
}

static void on_submit(void *ud, pl_dispatch_req *r)
{
    sim *s = ud;
    treq *t = (treq *)r;
    s->admitted[s->n_admitted++] = t;
    s->queued[t->client]--;
    while (s->topup[t->client] > 0 && s->queued[t->client] < s->topup[t->client])
        sim_push(s, t->client);
    if (s->fail_submit) {            /* a backend refusal: ended at once */
        pl_dispatch_done(s->d, r, 0);
        pl_dispatch_pump(s->d);
    }
}

static sim *sim_new(int capacity, int reserve)
{
    sim *s = calloc(1, sizeof *s);
    cr_assert_not_null(s);
    s->d = pl_dispatch_new(&(pl_dispatch_opts){.capacity = capacity, .reserve = reserve});
    cr_assert_not_null(s->d);
    return s;
}

static void sim_free(sim *s)
{
    pl_dispatch_free(s->d);
    free(s);
}

static int join(sim *s, double weight, int cap)
{
    pl_dispatch_client_opts o = {.name = "job", .weight = weight, .cap = cap};
    int id = pl_dispatch_join(s->d, &o);
    cr_assert_gt(id, 0);
    return id;
}

Test(dispatch, default_reserve)
{
    cr_assert_eq(pl_dispatch_default_reserve(1), 0);
    cr_assert_eq(pl_dispatch_default_reserve(8), 1);
    cr_assert_eq(pl_dispatch_default_reserve(10), 1);
    cr_assert_eq(pl_dispatch_default_reserve(11), 2);
    cr_assert_eq(pl_dispatch_default_reserve(256), 26);
}

Test(dispatch, jobs_leave_the_reserve_and_back_off_for_interactive)
{
    sim *s = sim_new(8, -1);
    int a = join(s, 1, 0);
    s->topup[a] = 1;
    sim_push(s, a);
    pl_dispatch_pump(s->d);
    cr_assert_eq(s->n_admitted, 7, "jobs get capacity - reserve = 7 slots");
    /* Two interactive requests: one in the reserve, one over it; both go
     * at once. */
    sim_push(s, PL_DISPATCH_INTERACTIVE);
    sim_push(s, PL_DISPATCH_INTERACTIVE);
    pl_dispatch_pump(s->d);
    cr_assert_eq(s->n_admitted, 9, "interactive requests never wait");
    pl_dispatch_done(s->d, &s->admitted[0]->d, 10);
    pl_dispatch_pump(s->d);
    cr_assert_eq(s->n_admitted, 9, "6 jobs + 2 interactive fill 8: the freed slot is not taken");
    pl_dispatch_done(s->d, &s->admitted[7]->d, 0);
    pl_dispatch_req *next = pl_dispatch_peek(s->d);
    cr_assert_not_null(next);
    cr_assert_eq(((treq *)next)->client, a);
    pl_dispatch_counts c;
    pl_dispatch_counts_get(s->d, &c);
    cr_assert_eq(c.capacity, 8);
    cr_assert_eq(c.reserve, 1);
    cr_assert_eq(c.jobs_inflight, 6);
    cr_assert_eq(c.interactive_inflight, 1);
    sim_free(s);
}

/* A saturated model: each completion frees a slot that the pump gives
 * away; every request costs 10 tokens; completions in admission order. */
static void simulate(sim *s, int rounds, uint64_t *served)
{
    int head = 0;
    pl_dispatch_pump(s->d);
    for (int r = 0; r < rounds; r++) {
        cr_assert_lt(head, s->n_admitted);
        treq *t = s->admitted[head++];
        pl_dispatch_done(s->d, &t->d, 10);
        served[t->client]++;
        pl_dispatch_pump(s->d);
    }
}

Test(dispatch, weighted_least_attained_service)
{
    sim *s = sim_new(8, 0);
    int ids[3] = {join(s, 1, 0), join(s, 2, 0), join(s, 1, 4)};
    for (int i = 0; i < 3; i++) {
        s->topup[ids[i]] = 1;
        sim_push(s, ids[i]);
    }
    uint64_t served[8] = {0};
    simulate(s, 4000, served);
    double r1 = (double)served[ids[1]] / (double)served[ids[0]];
    cr_assert(r1 > 1.9 && r1 < 2.1, "weight 2 vs 1: %.3f", r1);
    double r2 = (double)served[ids[2]] / (double)served[ids[0]];
    cr_assert(r2 > 0.9 && r2 < 1.1, "equal weights: %.3f", r2);
    pl_dispatch_client k;
    cr_assert(pl_dispatch_client_get(s->d, ids[2], &k));
    cr_assert_leq(k.inflight, 4, "a client's own cap holds");
    sim_free(s);
}

/* A job waiting for room on a full model is not idle: it is not reset to
 * the others' service when the slot frees, so equal jobs alternate. */
Test(dispatch, waiting_for_a_slot_is_not_idling)
{
    sim *s = sim_new(1, 0);
    int a = join(s, 1, 0), b = join(s, 1, 0);
    s->topup[a] = s->topup[b] = 1;
    sim_push(s, a);
    sim_push(s, b);
    uint64_t served[8] = {0};
    simulate(s, 40, served);
    cr_assert(served[a] == 20 && served[b] == 20, "served %d and %d of 40", (int)served[a],
              (int)served[b]);
    sim_free(s);
}

Test(dispatch, no_credit_banked_while_idle)
{
    sim *s = sim_new(4, 0);
    int a = join(s, 1, 0), b = join(s, 1, 0);
    s->topup[a] = 1;
    sim_push(s, a);
    /* a alone for a long time */
    for (int i = 0; i < 100; i++) {
        pl_dispatch_req *r = pl_dispatch_step(s->d);
        cr_assert_not_null(r);
        cr_assert_eq(((treq *)r)->client, a);
        pl_dispatch_done(s->d, r, 10);
    }
    /* b wakes up: it must not monopolise the model to catch up 1000 tokens */
    s->topup[b] = 1;
    sim_push(s, b);
    int got_a = 0;
    for (int i = 0; i < 20; i++) {
        pl_dispatch_req *r = pl_dispatch_step(s->d);
        cr_assert_not_null(r);
        got_a += ((treq *)r)->client == a;
        pl_dispatch_done(s->d, r, 10);
    }
    cr_assert_geq(got_a, 8, "a keeps about half the slots: %d of 20", got_a);
    pl_dispatch_leave(s->d, b);
    pl_dispatch_leave(s->d, a);
    pl_dispatch_counts c;
    pl_dispatch_counts_get(s->d, &c);
    cr_assert_eq(c.clients, 0);
    cr_assert_eq(c.jobs_ready, 0);
    sim_free(s);
}

/* The seed's tuple written out independently: (0 if reprompt else 1,
 * -rounds_completed, conversation, round), then creation order. */
static int tuple_cmp(const void *x, const void *y)
{
    const treq *a = *(treq *const *)x, *b = *(treq *const *)y;
    long ta[5] = {a->d.key.reprompt ? 0 : 1, -a->d.key.rounds_completed,
                  a->d.key.conversation, a->d.key.round, (long)a->d.seq};
    long tb[5] = {b->d.key.reprompt ? 0 : 1, -b->d.key.rounds_completed,
                  b->d.key.conversation, b->d.key.round, (long)b->d.seq};
    for (int i = 0; i < 5; i++)
        if (ta[i] != tb[i])
            return ta[i] < tb[i] ? -1 : 1;
    return 0;
}

Test(dispatch, admits_in_the_seeds_tuple_order)
{
    enum { N = 400 };
    sim *s = sim_new(1, 0);
    int a = join(s, 1, 0);
    treq *want[N];
    unsigned seed = 3;
    for (int i = 0; i < N; i++) {
        cr_assert_lt(s->n_reqs, MAXR);
        treq *t = &s->reqs[s->n_reqs];
        memset(t, 0, sizeof *t);
        t->client = a;
        t->serial = s->n_reqs++;
        /* Small ranges so every field decides some comparisons. */
        t->d.key = (pl_dispatch_key){rand_r(&seed) % 4 == 0, (int)(rand_r(&seed) % 3),
                                     (int)(rand_r(&seed) % 5), (int)(rand_r(&seed) % 3)};
        t->d.seq = (uint64_t)(N - i);        /* not the push order */
        t->d.submit = on_submit;
        t->d.ud = s;
        cr_assert_eq(pl_dispatch_push(s->d, a, &t->d), 0);
        want[i] = t;
    }
    /* Take a few out again: removal keeps the heap in order. */
    for (int i = 0; i < N; i += 7)
        pl_dispatch_remove(s->d, &want[i]->d);
    int n = 0;
    for (int i = 0; i < N; i++)
        if (i % 7)
            want[n++] = want[i];
    qsort(want, (size_t)n, sizeof *want, tuple_cmp);
    pl_dispatch_req *first[8];
    cr_assert_eq(pl_dispatch_ready_first(s->d, a, first, 8), 8);
    for (int i = 0; i < 8; i++)
        cr_assert_eq((treq *)first[i], want[i], "ordered walk, position %d", i);
    for (int i = 0; i < n; i++) {
        pl_dispatch_req *r = pl_dispatch_step(s->d);
        cr_assert_eq((treq *)r, want[i], "admission %d out of the tuple's order", i);
        cr_assert_null(pl_dispatch_step(s->d), "capacity 1");
        pl_dispatch_done(s->d, r, 1);
    }
    cr_assert_null(pl_dispatch_step(s->d));
    sim_free(s);
}

Test(dispatch, engine_priority_keeps_the_first_two_fields)
{
    pl_dispatch_key k[4] = {{true, 0, 9, 9}, {false, 5, 0, 0}, {false, 2, 0, 0},
                            {false, 0, 0, 0}};
    for (int i = 0; i + 1 < 4; i++) {
        cr_assert_lt(pl_dispatch_key_cmp(&k[i], &k[i + 1]), 0);
        cr_assert_lt(pl_dispatch_engine_priority(PL_DISPATCH_PRIORITY, &k[i]),
                     pl_dispatch_engine_priority(PL_DISPATCH_PRIORITY, &k[i + 1]));
        cr_assert_eq(pl_dispatch_engine_priority(PL_DISPATCH_FCFS, &k[i]), 0);
    }
    cr_assert_eq(pl_dispatch_policy_parse("parley"), PL_DISPATCH_PRIORITY);
    cr_assert_eq(pl_dispatch_policy_parse("naive"), PL_DISPATCH_NAIVE);
    cr_assert_eq(pl_dispatch_policy_parse("lifo"), -1);
}

/* A submit that fails at once ends its request and pumps inside the pump:
 * the outer pump goes on, and every request is admitted once. */
Test(dispatch, a_failing_submit_pumps_again_inside_the_pump)
{
    sim *s = sim_new(2, 0);
    int a = join(s, 1, 0);
    for (int i = 0; i < 50; i++)
        sim_push(s, a);
    s->fail_submit = true;
    pl_dispatch_pump(s->d);
    cr_assert_eq(s->n_admitted, 50);
    for (int i = 0; i < 50; i++)
        cr_assert_eq(s->admitted[i]->serial, i, "creation order kept");
    pl_dispatch_counts c;
    pl_dispatch_counts_get(s->d, &c);
    cr_assert_eq(c.jobs_inflight, 0);
    cr_assert_eq(c.jobs_ready, 0);
    sim_free(s);
}

static int moving_capacity;

static int capacity_now(void *ud)
{
    (void)ud;
    return moving_capacity;
}

Test(dispatch, capacity_is_read_at_each_pump)
{
    sim *s = calloc(1, sizeof *s);
    moving_capacity = 1;
    s->d = pl_dispatch_new(&(pl_dispatch_opts){.capacity = 1, .reserve = -1,
                                               .capacity_fn = capacity_now});
    int a = join(s, 1, 0);
    s->topup[a] = 1;
    sim_push(s, a);
    pl_dispatch_pump(s->d);
    cr_assert_eq(s->n_admitted, 1);
    moving_capacity = 20;                 /* the upstream reported more */
    pl_dispatch_pump(s->d);
    pl_dispatch_counts c;
    pl_dispatch_counts_get(s->d, &c);
    cr_assert_eq(c.capacity, 20);
    cr_assert_eq(c.reserve, 2, "the default reserve follows the capacity");
    cr_assert_eq(s->n_admitted, 18);
    sim_free(s);
}

/* A job that leaves with requests in flight: they stop counting, and
 * their late completion does not touch the job that takes its id. */
Test(dispatch, leave_with_requests_in_flight)
{
    sim *s = sim_new(4, 0);
    int a = join(s, 1, 0);
    sim_push(s, a);
    sim_push(s, a);
    pl_dispatch_pump(s->d);
    cr_assert_eq(s->n_admitted, 2);
    pl_dispatch_leave(s->d, a);
    int b = join(s, 1, 0);
    cr_assert_eq(b, a, "the id is reused");
    sim_push(s, b);
    pl_dispatch_pump(s->d);
    pl_dispatch_done(s->d, &s->admitted[0]->d, 10);   /* a's, late */
    pl_dispatch_client k;
    cr_assert(pl_dispatch_client_get(s->d, b, &k));
    cr_assert_eq(k.inflight, 1);
    cr_assert_eq(k.completed, 0);
    pl_dispatch_counts c;
    pl_dispatch_counts_get(s->d, &c);
    cr_assert_eq(c.jobs_inflight, 1);
    sim_free(s);
}
