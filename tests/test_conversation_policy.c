/* test_conversation_policy.c - the conversation scheduler's dispatch
 * policies: the naive baseline (one conversation, one request at a time)
 * and first-come-first-served by readiness, checked against a model of the
 * order kept by the test itself. */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "schedulers/conversation.h"
#include "tests/helpers/conv_harness.h"

static conv_harness H;

/* Participants 0..np-1 on model 0, a moderator speaking after them on
 * model `mod_model`. */
static pl_convs *make_debate(pl_dispatch_policy p, int np, int n_models, int mod_model,
                             int rounds, int retries, int n_conv)
{
    int model[PL_CONV_MAX_AGENTS] = {0};
    uint64_t deps[PL_CONV_MAX_AGENTS] = {0};
    model[np] = mod_model;
    deps[np] = (1ull << np) - 1;
    pl_convs_config cfg = {
        .n_agents = np + 1, .n_models = n_models, .num_rounds = rounds,
        .max_retries = retries, .n_conversations = n_conv,
        .agent_model = model, .agent_deps = deps, .policy = p,
    };
    return conv_harness_new(&H, &cfg);
}

static void start_all(pl_convs *s, int n)
{
    for (int q = 0; q < n; q++)
        cr_assert_eq(pl_convs_start(s, q), 0);
}

/* A random outcome: mostly valid, sometimes a validation failure. */
static pl_conv_outcome random_outcome(void)
{
    return rand() % 4 == 0 ? PL_CONV_INVALID : PL_CONV_OK;
}

Test(conversation_policy, names_round_trip)
{
    for (int p = 0; p <= PL_DISPATCH_NAIVE; p++)
        cr_assert_eq(pl_dispatch_policy_parse(pl_dispatch_policy_name((pl_dispatch_policy)p)), p);
    cr_assert_eq(pl_dispatch_policy_parse("parley"), PL_DISPATCH_PRIORITY);
    cr_assert_eq(pl_dispatch_policy_parse("lifo"), -1);
    cr_assert_eq(pl_dispatch_policy_parse(NULL), -1);
}

Test(conversation_policy, naive_one_conversation_one_request_in_order)
{
    srand(7);
    enum { NQ = 6, NP = 3, ROUNDS = 3 };
    pl_convs *s = make_debate(PL_DISPATCH_NAIVE, NP, 2, 1, ROUNDS, 1, NQ);
    cr_assert_not_null(s);
    conv_harness_capacity(&H, 0, 64);
    conv_harness_capacity(&H, 1, 64);
    start_all(s, NQ);
    int cur = -1, last_round = -1, last_agent = -1, dispatched = 0;
    bool finished[NQ] = {false};
    pl_conv_req *r;
    while ((r = conv_harness_dispatch(&H))) {
        dispatched++;
        cr_assert_null(conv_harness_dispatch(&H), "a second request in flight");
        pl_conv_counts c;
        pl_convs_counts(s, &c);
        cr_assert_eq(c.inflight, 1);
        if (r->conversation != cur) {
            /* A new conversation only once the previous one is terminal. */
            cr_assert_gt(r->conversation, cur, "went back to an earlier conversation");
            if (cur >= 0)
                cr_assert(finished[cur], "switched before conversation %d ended", cur);
            cur = r->conversation;
            last_round = -1;
        }
        /* Agents in index order within a round; a re-prompt repeats its agent. */
        if (r->round != last_round) {
            cr_assert_gt(r->round, last_round);
            cr_assert_eq(r->agent, 0);
        } else {
            cr_assert(r->agent == last_agent + 1 || (r->is_reprompt && r->agent == last_agent),
                      "agent %d after %d in round %d", r->agent, last_agent, r->round);
        }
        last_round = r->round;
        last_agent = r->agent;
        unsigned ev = pl_convs_complete(s, r, random_outcome(), 0);
        if (ev & (PL_CONV_EV_SUCCEEDED | PL_CONV_EV_FAILED))
            finished[cur] = true;
    }
    pl_conv_counts c;
    pl_convs_counts(s, &c);
    cr_assert_eq(c.succeeded + c.failed, NQ, "every conversation ran to its end");
    cr_assert_gt(c.succeeded, 0);
    cr_assert_geq(dispatched, NQ * (NP + 1));
    conv_harness_free(&H);
}

/* The test's own model of readiness order: every request seen in the
 * ready pool is appended once, when it first appears there. */
typedef struct seen {
    int conv, round, agent, attempt, model;
} seen;

typedef struct fifo {
    seen v[4096];
    int n;
} fifo;

static bool same(const seen *a, const pl_conv_entry *e)
{
    return a->conv == e->conversation && a->round == e->round && a->agent == e->agent &&
           a->attempt == e->attempt;
}

/* Append the ready entries not yet in the FIFO (they became ready during
 * the last operation; the test makes one operation at a time, and entries
 * that became ready together are in creation order). Drop the entries that
 * left the pool without a dispatch (their conversation failed). */
static void observe(pl_convs *s, fifo *f, bool *taken)
{
    static pl_conv_entry e[4096];
    int n = pl_convs_peek(s, PL_CONV_POOL_READY, e, 4096);
    for (int k = 0; k < f->n; k++) {
        bool there = false;
        for (int i = 0; i < n && !there; i++)
            there = same(&f->v[k], &e[i]);
        if (!there)
            taken[k] = true;
    }
    for (int i = 0; i < n; i++) {
        bool known = false;
        for (int k = 0; k < f->n && !known; k++)
            known = !taken[k] && same(&f->v[k], &e[i]);
        if (!known) {
            cr_assert_lt(f->n, 4096);
            f->v[f->n++] = (seen){e[i].conversation, e[i].round, e[i].agent,
                                  e[i].attempt, e[i].model};
        }
    }
}

Test(conversation_policy, fcfs_dispatches_in_readiness_order)
{
    srand(11);
    enum { NQ = 8, NP = 3, ROUNDS = 3 };
    int cap[2] = {3, 1};
    pl_convs *s = make_debate(PL_DISPATCH_FCFS, NP, 2, 1, ROUNDS, 1, NQ);
    cr_assert_not_null(s);
    conv_harness_capacity(&H, 0, cap[0]);
    conv_harness_capacity(&H, 1, cap[1]);
    static fifo f;
    static bool taken[4096];
    f.n = 0;
    memset(taken, 0, sizeof taken);
    int inflight[2] = {0, 0}, n_in = 0, dispatched = 0;
    pl_conv_req *in[64];
    start_all(s, NQ);
    observe(s, &f, taken);
    bool progress = true;
    while (progress) {
        progress = false;
        pl_conv_req *r = conv_harness_dispatch(&H);
        if (r) {
            /* It must be the earliest-ready request whose model has room. */
            int k = 0;
            while (k < f.n && (taken[k] || inflight[f.v[k].model] >= cap[f.v[k].model]))
                k++;
            cr_assert_lt(k, f.n, "dispatched a request never seen ready");
            cr_assert(f.v[k].conv == r->conversation && f.v[k].round == r->round &&
                      f.v[k].agent == r->agent && f.v[k].attempt == r->attempt,
                      "dispatch %d: got q%d r%d a%d, first ready was q%d r%d a%d", dispatched,
                      r->conversation, r->round, r->agent, f.v[k].conv, f.v[k].round,
                      f.v[k].agent);
            taken[k] = true;
            inflight[r->model]++;
            in[n_in++] = r;
            dispatched++;
            progress = true;
            continue;
        }
        if (n_in > 0) {
            /* Complete a random in-flight request. */
            int i = rand() % n_in;
            r = in[i];
            in[i] = in[--n_in];
            inflight[r->model]--;
            pl_convs_complete(s, r, random_outcome(), 0);
            observe(s, &f, taken);
            progress = true;
        }
    }
    pl_conv_counts c;
    pl_convs_counts(s, &c);
    cr_assert_eq(c.succeeded + c.failed, NQ);
    cr_assert_eq(c.ready + c.pending + c.inflight, 0);
    cr_assert_geq(dispatched, NQ * (NP + 1) * ROUNDS - 1);
    conv_harness_free(&H);
}

Test(conversation_policy, fcfs_differs_from_priority_on_progress)
{
    /* One agent, 2 conversations, capacity 1. Conversation 1's round 1
     * becomes ready after conversation 0's round 0 is queued... under FCFS
     * the older request goes first; parley's key prefers progress. */
    for (int p = PL_DISPATCH_PRIORITY; p <= PL_DISPATCH_FCFS; p++) {
        pl_convs *s = make_debate((pl_dispatch_policy)p, 0, 1, 0, 2, 0, 3);
        start_all(s, 3);
        pl_conv_req *a = conv_harness_dispatch(&H);    /* q0 r0 */
        cr_assert_eq(a->conversation, 0);
        pl_convs_complete(s, a, PL_CONV_OK, 0);       /* q0 r1 ready last */
        pl_conv_req *b = conv_harness_dispatch(&H);
        if (p == PL_DISPATCH_FCFS)
            cr_assert(b->conversation == 1 && b->round == 0, "fcfs: q1 r0 was ready first");
        else
            cr_assert(b->conversation == 0 && b->round == 1, "parley: progress first");
        pl_convs_complete(s, b, PL_CONV_OK, 0);
        conv_harness_free(&H);
    }
}
