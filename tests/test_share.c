/* test_share.c - a served model's slots across jobs (schedulers/share.c):
 * the capacity bound, the interactive reserve and precedence, weighted
 * least attained service, no credit banked while idle. */
#include <criterion/criterion.h>

#include "schedulers/share.h"

static bool all_ready(void *ud, int id)
{
    const bool *r = ud;
    return r[id];
}

Test(share, default_reserve)
{
    cr_assert_eq(pl_share_default_reserve(1), 0);
    cr_assert_eq(pl_share_default_reserve(8), 1);
    cr_assert_eq(pl_share_default_reserve(10), 1);
    cr_assert_eq(pl_share_default_reserve(11), 2);
    cr_assert_eq(pl_share_default_reserve(256), 26);
}

Test(share, jobs_leave_the_reserve_and_back_off_for_interactive)
{
    pl_share *s = pl_share_new(8, -1);
    int a = pl_share_join(s, 1, 0);
    bool ready[1] = {true};
    int n = 0;
    while (pl_share_pick(s, all_ready, ready) == a) {
        pl_share_dispatched(s, a);
        n++;
    }
    cr_assert_eq(n, 7, "jobs get capacity - reserve = 7 slots");
    /* Two interactive requests: one in the reserve, one over it. */
    pl_share_interactive(s, 2);
    pl_share_completed(s, a, 10, 1);
    cr_assert_eq(pl_share_pick(s, all_ready, ready), -1,
                 "6 jobs + 2 interactive fill 8: the freed slot is not taken");
    pl_share_interactive(s, -1);
    cr_assert_eq(pl_share_pick(s, all_ready, ready), a);
    pl_share_counts c;
    pl_share_counts_get(s, &c);
    cr_assert_eq(c.capacity, 8);
    cr_assert_eq(c.reserve, 1);
    cr_assert_eq(c.jobs_inflight, 6);
    cr_assert_eq(c.interactive_inflight, 1);
    pl_share_free(s);
}

/* Simulate a saturated model: each completion frees a slot that pick
 * gives away; every request costs 10 tokens. */
static void simulate(pl_share *s, int rounds, uint64_t *served)
{
    bool ready[8] = {true, true, true, true, true, true, true, true};
    int queue[64], head = 0, tail = 0, id;
    double charged[64];
    while ((id = pl_share_pick(s, all_ready, ready)) >= 0) {
        charged[tail % 64] = pl_share_dispatched(s, id);
        queue[tail++ % 64] = id;
    }
    for (int r = 0; r < rounds; r++) {
        int done = queue[head % 64];
        pl_share_completed(s, done, 10, charged[head % 64]);
        head++;
        served[done]++;
        while ((id = pl_share_pick(s, all_ready, ready)) >= 0) {
            charged[tail % 64] = pl_share_dispatched(s, id);
            queue[tail++ % 64] = id;
        }
    }
}

Test(share, weighted_least_attained_service)
{
    pl_share *s = pl_share_new(8, 0);
    int ids[3] = {pl_share_join(s, 1, 0), pl_share_join(s, 2, 0), pl_share_join(s, 1, 4)};
    uint64_t served[8] = {0};
    simulate(s, 4000, served);
    double r1 = (double)served[ids[1]] / (double)served[ids[0]];
    cr_assert(r1 > 1.9 && r1 < 2.1, "weight 2 vs 1: %.3f", r1);
    double r2 = (double)served[ids[2]] / (double)served[ids[0]];
    cr_assert(r2 > 0.9 && r2 < 1.1, "equal weights: %.3f", r2);
    pl_share_client k;
    cr_assert(pl_share_client_get(s, ids[2], &k));
    cr_assert_leq(k.inflight, 4, "a client's own cap holds");
    pl_share_free(s);
}

Test(share, no_credit_banked_while_idle)
{
    pl_share *s = pl_share_new(4, 0);
    int a = pl_share_join(s, 1, 0), b = pl_share_join(s, 1, 0);
    bool ready[2] = {true, false};
    /* a alone for a long time */
    for (int i = 0; i < 100; i++) {
        int id = pl_share_pick(s, all_ready, ready);
        cr_assert_eq(id, a);
        double ch = pl_share_dispatched(s, id);
        pl_share_completed(s, id, 10, ch);
    }
    /* b wakes up: it must not monopolise the model to catch up 1000 tokens */
    ready[1] = true;
    int got_a = 0;
    for (int i = 0; i < 20; i++) {
        int id = pl_share_pick(s, all_ready, ready);
        double ch = pl_share_dispatched(s, id);
        got_a += id == a;
        pl_share_completed(s, id, 10, ch);
    }
    cr_assert_geq(got_a, 8, "a keeps about half the slots: %d of 20", got_a);
    pl_share_leave(s, b);
    pl_share_leave(s, a);
    pl_share_counts c;
    pl_share_counts_get(s, &c);
    cr_assert_eq(c.clients, 0);
    pl_share_free(s);
}
