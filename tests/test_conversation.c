/* test_conversation.c - the conversation scheduler's pools and rules. */
#include <criterion/criterion.h>

#include <stdlib.h>

#include "schedulers/conversation.h"
#include "tests/helpers/conv_harness.h"

static conv_harness H;

/* Participants 0..np-1 on model 0, a moderator (last agent) speaking after
 * all of them, on model `mod_model`. */
static pl_convs *make_debate(int np, int n_models, int mod_model,
                             int rounds, int retries, int n_conv)
{
    int model[PL_CONV_MAX_AGENTS] = {0};
    uint64_t deps[PL_CONV_MAX_AGENTS] = {0};
    model[np] = mod_model;
    deps[np] = (1ull << np) - 1;
    pl_convs_config cfg = {
        .n_agents = np + 1, .n_models = n_models, .num_rounds = rounds,
        .max_retries = retries, .n_conversations = n_conv,
        .agent_model = model, .agent_deps = deps,
    };
    return conv_harness_new(&H, &cfg);
}

/* Dispatch everything that can go into out[]; returns the count. */
static int drain(pl_convs *s, pl_conv_req **out, int max)
{
    int n = 0;
    pl_conv_req *r;
    while (n < max && (r = conv_harness_dispatch(&H)))
        out[n++] = r;
    return n;
}

Test(conversation, rejects_cycles_and_bad_config)
{
    int model[3] = {0, 0, 0};
    uint64_t deps[3] = {1u << 1, 1u << 2, 1u << 0};
    pl_convs_config cfg = { 3, 1, 2, 1, 4, model, deps };
    cr_assert_null(conv_harness_new(&H, &cfg));
    conv_harness_free(&H);
    uint64_t self[3] = {1u << 0, 0, 0};
    cfg.agent_deps = self;
    cr_assert_null(conv_harness_new(&H, &cfg));
    conv_harness_free(&H);
    uint64_t ok[3] = {0, 1u << 0, 3};
    cfg.agent_deps = ok;
    cfg.num_rounds = 0;
    cr_assert_null(conv_harness_new(&H, &cfg));
    conv_harness_free(&H);
    cfg.num_rounds = 1;
    pl_convs *s = conv_harness_new(&H, &cfg);
    cr_assert_not_null(s);
    conv_harness_free(&H);
}

Test(conversation, dependency_release)
{
    pl_convs *s = make_debate(2, 1, 0, 1, 0, 1);
    conv_harness_capacity(&H, 0, 10);
    cr_assert_eq(pl_convs_start(s, 0), 0);
    cr_assert_eq(pl_convs_start(s, 0), -1, "start twice");
    pl_conv_counts c;
    pl_convs_counts(s, &c);
    cr_assert_eq(c.pending, 1);
    cr_assert_eq(c.ready, 2);
    pl_conv_req *r[8];
    cr_assert_eq(drain(s, r, 8), 2);
    cr_assert_eq(r[0]->agent, 0);
    cr_assert_eq(r[1]->agent, 1);
    cr_assert_eq(pl_convs_complete(s, r[0], PL_CONV_OK, 0), 0u);
    cr_assert_null(conv_harness_dispatch(&H), "moderator still blocked");
    pl_convs_counts(s, &c);
    cr_assert_eq(c.pending, 1);
    cr_assert_eq(pl_convs_complete(s, r[1], PL_CONV_OK, 0), 0u);
    pl_conv_req *m = conv_harness_dispatch(&H);
    cr_assert_not_null(m);
    cr_assert_eq(m->agent, 2);
    unsigned ev = pl_convs_complete(s, m, PL_CONV_OK, 0);
    cr_assert_eq(ev, PL_CONV_EV_ROUND_DONE | PL_CONV_EV_SUCCEEDED);
    cr_assert_eq(pl_convs_status(s, 0), PL_CONV_STATUS_SUCCEEDED);
    conv_harness_free(&H);
}

Test(conversation, next_round_created_when_round_completes)
{
    pl_convs *s = make_debate(2, 1, 0, 3, 0, 1);
    conv_harness_capacity(&H, 0, 10);
    pl_convs_start(s, 0);
    for (int round = 0; round < 3; round++) {
        pl_conv_req *r[8];
        cr_assert_eq(drain(s, r, 8), 2);
        cr_assert_eq(r[0]->round, round);
        cr_assert_eq(r[0]->rounds_completed, round);
        pl_convs_complete(s, r[0], PL_CONV_OK, 0);
        pl_convs_complete(s, r[1], PL_CONV_OK, 0);
        cr_assert_eq(drain(s, r, 8), 1);
        unsigned ev = pl_convs_complete(s, r[0], PL_CONV_OK, 0);
        cr_assert(ev & PL_CONV_EV_ROUND_DONE);
        cr_assert_eq(!!(ev & PL_CONV_EV_SUCCEEDED), round == 2);
        cr_assert_eq(pl_convs_rounds_completed(s, 0), round + 1);
    }
    conv_harness_free(&H);
}

Test(conversation, heap_order_progress_then_fifo)
{
    /* One agent, 3 rounds, 3 conversations, capacity 1: after conversation 1
     * finishes round 0, its round-1 request outranks conversation 0/2's
     * round-0 requests (more progress first). */
    pl_convs *s = make_debate(0, 1, 0, 3, 0, 3);
    cr_assert_not_null(s);
    for (int i = 0; i < 3; i++)
        pl_convs_start(s, i);
    pl_conv_entry e[8];
    int n = pl_convs_peek(s, PL_CONV_POOL_READY, e, 8);
    cr_assert_eq(n, 3);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(e[i].conversation, i, "FIFO by conversation id");
    pl_conv_req *r = conv_harness_dispatch(&H);
    cr_assert_eq(r->conversation, 0);
    cr_assert_null(conv_harness_dispatch(&H), "capacity 1");
    pl_convs_complete(s, r, PL_CONV_OK, 0);
    r = conv_harness_dispatch(&H);
    cr_assert_eq(r->conversation, 0, "conversation 0 progressed");
    cr_assert_eq(r->round, 1);
    pl_convs_complete(s, r, PL_CONV_OK, 0);
    r = conv_harness_dispatch(&H);
    cr_assert_eq(r->round, 2);
    pl_convs_complete(s, r, PL_CONV_OK, 0);
    r = conv_harness_dispatch(&H);
    cr_assert_eq(r->conversation, 1);
    conv_harness_free(&H);
}

Test(conversation, reprompt_goes_first)
{
    pl_convs *s = make_debate(0, 1, 0, 1, 2, 5);
    for (int i = 0; i < 5; i++)
        pl_convs_start(s, i);
    pl_conv_req *r = conv_harness_dispatch(&H);
    cr_assert_eq(r->conversation, 0);
    pl_convs_complete(s, r, PL_CONV_OK, 0);
    r = conv_harness_dispatch(&H);
    cr_assert_eq(r->conversation, 1);
    cr_assert_eq(pl_convs_complete(s, r, PL_CONV_INVALID, 0), PL_CONV_EV_REPROMPT);
    pl_conv_entry e[4];
    cr_assert_eq(pl_convs_peek(s, PL_CONV_POOL_READY, e, 4), 4);
    cr_assert(e[0].is_reprompt);
    cr_assert_eq(e[0].conversation, 1);
    r = conv_harness_dispatch(&H);
    cr_assert_eq(r->conversation, 1);
    cr_assert(r->is_reprompt);
    cr_assert_eq(r->attempt, 1);
    pl_convs_complete(s, r, PL_CONV_OK, 0);
    cr_assert_eq(pl_convs_status(s, 1), PL_CONV_STATUS_SUCCEEDED);
    conv_harness_free(&H);
}

Test(conversation, failure_isolation_after_max_retries)
{
    pl_convs *s = make_debate(2, 1, 0, 2, 1, 3);
    conv_harness_capacity(&H, 0, 100);
    for (int i = 0; i < 3; i++)
        pl_convs_start(s, i);
    pl_conv_req *r[16];
    int n = drain(s, r, 16);
    cr_assert_eq(n, 6);
    pl_conv_req *bad = NULL, *sibling = NULL;
    for (int i = 0; i < n; i++) {
        if (r[i]->conversation == 1 && r[i]->agent == 0)
            bad = r[i];
        else if (r[i]->conversation == 1)
            sibling = r[i];
    }
    cr_assert_eq(pl_convs_complete(s, bad, PL_CONV_INVALID, 0), PL_CONV_EV_REPROMPT);
    bad = conv_harness_dispatch(&H);
    cr_assert(bad->is_reprompt);
    cr_assert_eq(pl_convs_complete(s, bad, PL_CONV_INVALID, 0), PL_CONV_EV_FAILED);
    cr_assert_eq(pl_convs_status(s, 1), PL_CONV_STATUS_FAILED);
    pl_conv_counts c;
    pl_convs_counts(s, &c);
    cr_assert_eq(c.pending, 2, "moderators of conversations 0 and 2 only");
    pl_conv_entry e[8];
    int k = pl_convs_peek(s, PL_CONV_POOL_PENDING, e, 8);
    for (int i = 0; i < k; i++)
        cr_assert_neq(e[i].conversation, 1);
    cr_assert_eq(pl_convs_complete(s, sibling, PL_CONV_OK, 0), PL_CONV_EV_STALE);
    /* The others finish normally. */
    for (int i = 0; i < n; i++)
        if (r[i]->conversation != 1)
            pl_convs_complete(s, r[i], PL_CONV_OK, 0);
    for (int round = 0; round < 2; round++) {
        pl_conv_req *q[16];
        int m;
        while ((m = drain(s, q, 16)) > 0)
            for (int i = 0; i < m; i++)
                pl_convs_complete(s, q[i], PL_CONV_OK, 0);
    }
    cr_assert_eq(pl_convs_status(s, 0), PL_CONV_STATUS_SUCCEEDED);
    cr_assert_eq(pl_convs_status(s, 2), PL_CONV_STATUS_SUCCEEDED);
    pl_convs_counts(s, &c);
    cr_assert_eq(c.pending + c.ready + c.inflight, 0);
    cr_assert_eq(c.succeeded, 2);
    cr_assert_eq(c.failed, 1);
    conv_harness_free(&H);
}

Test(conversation, backend_error_fails_and_cancel)
{
    pl_convs *s = make_debate(1, 1, 0, 1, 5, 2);
    conv_harness_capacity(&H, 0, 4);
    pl_convs_start(s, 0);
    pl_convs_start(s, 1);
    pl_conv_req *r = conv_harness_dispatch(&H);
    cr_assert_eq(pl_convs_complete(s, r, PL_CONV_ERROR, 0), PL_CONV_EV_FAILED);
    cr_assert_eq(pl_convs_fail(s, 1), PL_CONV_EV_FAILED);
    cr_assert_eq(pl_convs_fail(s, 1), 0u);
    pl_conv_counts c;
    pl_convs_counts(s, &c);
    cr_assert_eq(c.pending + c.ready, 0);
    cr_assert_eq(c.failed, 2);
    conv_harness_free(&H);
}

Test(conversation, idempotent_finalisation)
{
    pl_convs *s = make_debate(0, 1, 0, 1, 0, 1);
    cr_assert_not(pl_convs_finalize(s, 0), "idle is not terminal");
    pl_convs_start(s, 0);
    cr_assert_not(pl_convs_finalize(s, 0), "active is not terminal");
    pl_convs_complete(s, conv_harness_dispatch(&H), PL_CONV_OK, 0);
    cr_assert(pl_convs_finalize(s, 0));
    cr_assert_not(pl_convs_finalize(s, 0));
    cr_assert_not(pl_convs_finalize(s, 0));
    conv_harness_free(&H);
}

Test(conversation, per_model_capacity_bounds)
{
    /* 3 participants on model 0 (cap 4), moderator on model 1 (cap 2). */
    pl_convs *s = make_debate(3, 2, 1, 2, 0, 20);
    conv_harness_capacity(&H, 0, 4);
    conv_harness_capacity(&H, 1, 2);
    for (int i = 0; i < 20; i++)
        pl_convs_start(s, i);
    pl_conv_req *fl[64];
    int n = 0;
    unsigned seed = 7;
    int done = 0;
    while (done < 20) {
        pl_conv_req *r;
        while ((r = conv_harness_dispatch(&H)))
            fl[n++] = r;
        int in0, cap0, in1, cap1;
        pl_convs_model_counts(s, 0, &in0, &cap0, NULL);
        pl_convs_model_counts(s, 1, &in1, &cap1, NULL);
        cr_assert_leq(in0, 4);
        cr_assert_leq(in1, 2);
        cr_assert_eq(in0 + in1, n);
        cr_assert_gt(n, 0, "no deadlock");
        int i = (int)(rand_r(&seed) % (unsigned)n);
        r = fl[i];
        fl[i] = fl[--n];
        if (pl_convs_complete(s, r, PL_CONV_OK, 0) & PL_CONV_EV_SUCCEEDED)
            done++;
    }
    conv_harness_free(&H);
}

Test(conversation, no_cross_model_head_of_line_blocking)
{
    /* Model 0 is full and its requests outrank model 1's; model 1 must
     * still get its slot. */
    int model[2] = {0, 1};
    uint64_t deps[2] = {0, 0};
    pl_convs_config cfg = { 2, 2, 1, 0, 50, model, deps };
    pl_convs *s = conv_harness_new(&H, &cfg);
    conv_harness_capacity(&H, 0, 1);
    conv_harness_capacity(&H, 1, 3);
    for (int i = 0; i < 50; i++)
        pl_convs_start(s, i);
    pl_conv_req *r[8];
    int n = drain(s, r, 8);
    cr_assert_eq(n, 4);
    int m1 = 0;
    for (int i = 0; i < n; i++)
        m1 += r[i]->model == 1;
    cr_assert_eq(m1, 3);
    /* Model 1 takes the best of ITS requests: conversations 0, 1, 2. */
    int seen = 0;
    for (int i = 0; i < n; i++)
        if (r[i]->model == 1)
            seen |= 1 << r[i]->conversation;
    cr_assert_eq(seen, 7);
    conv_harness_free(&H);
}

Test(conversation, peek_lists_pools)
{
    pl_convs *s = make_debate(2, 1, 0, 1, 0, 4);
    conv_harness_capacity(&H, 0, 3);
    for (int i = 0; i < 4; i++)
        pl_convs_start(s, i);
    pl_conv_req *r[8];
    cr_assert_eq(drain(s, r, 8), 3);
    pl_conv_entry e[16];
    cr_assert_eq(pl_convs_peek(s, PL_CONV_POOL_INFLIGHT, e, 16), 3);
    cr_assert_eq(e[2].conversation, 1);
    cr_assert_eq(pl_convs_peek(s, PL_CONV_POOL_PENDING, e, 2), 2);
    cr_assert_eq(e[0].agent, 2);
    int n = pl_convs_peek(s, PL_CONV_POOL_READY, e, 16);
    cr_assert_eq(n, 5);
    for (int i = 1; i < n; i++)
        cr_assert_leq(e[i - 1].conversation, e[i].conversation);
    conv_harness_free(&H);
}

Test(conversation, randomized_invariants)
{
    pl_convs *s = make_debate(3, 2, 1, 3, 2, 200);
    conv_harness_capacity(&H, 0, 16);
    conv_harness_capacity(&H, 1, 5);
    for (int i = 0; i < 200; i++)
        pl_convs_start(s, i);
    pl_conv_req *fl[64];
    int n = 0, terminal = 0;
    unsigned seed = 42;
    while (terminal < 200) {
        pl_conv_req *r;
        while ((r = conv_harness_dispatch(&H)))
            fl[n++] = r;
        cr_assert_gt(n, 0);
        int i = (int)(rand_r(&seed) % (unsigned)n);
        r = fl[i];
        fl[i] = fl[--n];
        int conv = r->conversation;
        pl_conv_outcome o = rand_r(&seed) % 5 == 0 ? PL_CONV_INVALID : PL_CONV_OK;
        unsigned ev = pl_convs_complete(s, r, o, 0);
        if (ev & (PL_CONV_EV_SUCCEEDED | PL_CONV_EV_FAILED)) {
            terminal++;
            cr_assert(pl_convs_finalize(s, conv));
        }
    }
    pl_conv_counts c;
    pl_convs_counts(s, &c);
    cr_assert_eq(c.pending + c.ready, 0);
    cr_assert_eq(c.succeeded + c.failed, 200);
    cr_assert_gt(c.succeeded, 0);
    /* Stale in-flight leftovers of failed conversations drain cleanly. */
    for (int i = 0; i < n; i++)
        cr_assert_eq(pl_convs_complete(s, fl[i], PL_CONV_OK, 0), PL_CONV_EV_STALE);
    conv_harness_free(&H);
}

Test(conversation, one_priority_order_across_models)
{
    /* Agent 0 on model 1, agent 1 on model 0; plenty of room: dispatch
     * follows the global key, not the model index. */
    int model[2] = {1, 0};
    uint64_t deps[2] = {0, 0};
    pl_convs_config cfg = { 2, 2, 2, 1, 3, model, deps };
    pl_convs *s = conv_harness_new(&H, &cfg);
    conv_harness_capacity(&H, 0, 100);
    conv_harness_capacity(&H, 1, 100);
    for (int i = 0; i < 3; i++)
        pl_convs_start(s, i);
    pl_conv_req *r[8];
    cr_assert_eq(drain(s, r, 2), 2);
    cr_assert_eq(r[0]->conversation, 0);
    cr_assert_eq(r[1]->conversation, 0);
    pl_convs_complete(s, r[0], PL_CONV_OK, 0);
    pl_convs_complete(s, r[1], PL_CONV_INVALID, 0);      /* re-prompt */
    pl_conv_entry e[8];
    int n = pl_convs_peek(s, PL_CONV_POOL_READY, e, 8);
    cr_assert_eq(n, 5);
    cr_assert(e[0].is_reprompt, "re-prompt first, whatever its model");
    for (int i = 2; i < n; i++)
        cr_assert(e[i - 1].conversation < e[i].conversation ||
                  (e[i - 1].conversation == e[i].conversation && e[i - 1].agent < e[i].agent));
    pl_conv_req *a = conv_harness_dispatch(&H);
    cr_assert(a->is_reprompt);
    cr_assert_eq(a->model, 0);
    pl_conv_req *b = conv_harness_dispatch(&H);
    cr_assert_eq(b->conversation, 1);
    cr_assert_eq(b->model, 1);
    conv_harness_free(&H);
}

/* Retention hints: in flight or blocked on this round = 0, ready = 1 + the
 * dispatch wave (rank / capacity), finished = DONE, not started = NONE. */
Test(conversation, next_need_by_dispatch_wave)
{
    pl_convs *s = make_debate(2, 1, 0, 1, 0, 5);
    conv_harness_capacity(&H, 0, 2);
    for (int c = 0; c < 4; c++)
        cr_assert_eq(pl_convs_start(s, c), 0);
    pl_conv_req *r[2];
    cr_assert_eq(drain(s, r, 2), 2);
    cr_assert_eq(r[0]->conversation, 0);
    cr_assert_eq(r[1]->conversation, 0);
    int need[5];
    cr_assert_eq(pl_convs_next_need(s, need), 0);
    cr_assert_eq(need[0], 0, "running");
    cr_assert_eq(need[1], 1, "ranks 0-1: the next wave");
    cr_assert_eq(need[2], 2, "ranks 2-3");
    cr_assert_eq(need[3], 3, "ranks 4-5");
    cr_assert_eq(need[4], PL_CONV_NEED_NONE, "not started");
    /* Conversation 0's participants finish: its moderator is ready and,
     * more progress first, heads the order. */
    pl_convs_complete(s, r[0], PL_CONV_OK, 0);
    pl_convs_complete(s, r[1], PL_CONV_OK, 0);
    cr_assert_eq(pl_convs_next_need(s, need), 0);
    cr_assert_eq(need[0], 1);
    pl_conv_req *m = conv_harness_dispatch(&H);
    cr_assert_eq(m->conversation, 0);
    pl_convs_complete(s, m, PL_CONV_OK, 0);
    cr_assert_eq(pl_convs_next_need(s, need), 0);
    cr_assert_eq(need[0], PL_CONV_NEED_DONE, "finished");
    cr_assert_eq(need[1], 1);
    pl_convs_fail(s, 3);
    cr_assert_eq(pl_convs_next_need(s, need), 0);
    cr_assert_eq(need[3], PL_CONV_NEED_DONE, "failed");
    pl_conv_req *rest[8];
    int n = drain(s, rest, 8);
    for (int i = 0; i < n; i++)
        pl_convs_complete(s, rest[i], PL_CONV_OK, 0);
    conv_harness_free(&H);
}
