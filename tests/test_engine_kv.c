/* test_engine_kv.c - the engine's KV view for admission
 * (backends/engine/engine_kv.c) with the model's dispatch in the loop:
 * a submit is counted at once and its blocks are free again in the view
 * its DONE reads; replies far longer than the estimate end in preemption
 * and recompute with every request complete and correct (the fake
 * model's reference), never a deadlock; and on the default model, a run
 * under KV pressure gives the tokens of an unpressured run (greedy, the
 * batch-invariant CPU runner). */
#include <criterion/criterion.h>
#include <event2/event.h>

#include <stdlib.h>
#include <string.h>

#include "backends/engine_open.h"
#include "schedulers/dispatch.h"
#include "tests/engine_harness.h"
#include "tests/fake_runner.h"
#include "tests/helpers/model_path.h"

/* ---- a request through the model's dispatch ---- */

typedef struct areq {
    pl_dispatch_req d;
    pl_dispatch *disp;
    pl_backend *b;
    pl_gen_request req;          /* what its submit sends */
    int32_t prompt[64];
    collect c;                   /* the harness's recorder */
} areq;

static void areq_delta(void *ud, const pl_delta *d)
{
    on_delta(&((areq *)ud)->c, d);
}

static void areq_done(void *ud, const pl_result *r)
{
    areq *a = ud;
    on_done(&a->c, r);
    pl_dispatch_done(a->disp, &a->d, r->completion_tokens);
    pl_dispatch_pump(a->disp);
}

static void areq_submit(void *ud, pl_dispatch_req *d)
{
    areq *a = ud;
    uint64_t id;
    pl_err err;
    pl_sink s = {areq_delta, areq_done, a};
    cr_assert_eq(pl_backend_submit(a->b, &a->req, s, &id, &err), 0, "%s", err.message);
}

static void areq_push(areq *a, pl_dispatch *disp, int client, pl_backend *b)
{
    a->disp = disp;
    a->b = b;
    a->d.submit = areq_submit;
    a->d.ud = a;
    a->d.max_tokens = a->req.sampling.max_tokens;
    cr_assert_eq(pl_dispatch_push(disp, client, &a->d), 0);
}

/* A greedy request of the fake model's ids. */
static void fake_req(areq *a, int plen, int seed, int max_tokens)
{
    memset(a, 0, sizeof *a);
    make_prompt(a->prompt, plen, seed);
    pl_sampling_defaults(&a->req.sampling);
    a->req.sampling.temperature = 0;
    a->req.sampling.max_tokens = max_tokens;
    a->req.prompt_tokens = a->prompt;
    a->req.n_prompt_tokens = plen;
}

static int join(pl_dispatch *d)
{
    int id = pl_dispatch_join(d, &(pl_dispatch_client_opts){.name = "job", .weight = 1});
    cr_assert_gt(id, 0);
    return id;
}

static pl_dispatch_kv view(pl_backend *b)
{
    pl_dispatch_kv kv;
    cr_assert(b->ops->kv(b, &kv));
    return kv;
}

/* A submit is in the view before the engine thread has seen it (held or
 * promised), and once its DONE has come, its blocks are free again and
 * nothing is promised: the view a completion's pump reads is current. */
Test(engine_kv, a_submit_counts_at_once_and_its_done_frees_it)
{
    struct event_base *base = event_base_new();
    eng_cfg c = base_cfg;
    c.num_blocks = 100;
    pl_backend *b = make_engine(base, c);
    pl_dispatch_kv kv = view(b);
    cr_assert_eq(kv.free, 100);
    cr_assert_eq(kv.reserved, 0);
    cr_assert_eq(kv.reply_tokens, 0, "no reply seen yet");
    int32_t p[40];
    make_prompt(p, 40, 1);
    collect col = {0};
    submit_ids_no_eos(b, p, 40, 10, &col);
    kv = view(b);
    cr_assert_geq(kv.total - kv.free + kv.reserved, 4, "(40 + 10) / 16 held or promised");
    run_until_done(base, &col, 1);
    kv = view(b);
    cr_assert_eq(kv.free, 100, "its blocks are free (or evictable)");
    cr_assert_eq(kv.reserved, 0);
    cr_assert_eq(kv.reply_tokens, 10, "the reply estimate learnt its length");
    pl_backend_free(b);
    event_base_free(base);
}

/* A conversation with a request in flight (hint 0) keeps its cached
 * blocks out of the free ones (kept: its next requests reuse them);
 * hinted for later, they are evictable and free again. The hint goes
 * before a request whose DONE reads the view published after it. */
Test(engine_kv, a_running_conversations_cached_prefix_is_kept)
{
    struct event_base *base = event_base_new();
    eng_cfg c = base_cfg;
    c.num_blocks = 100;
    pl_backend *b = make_engine(base, c);
    int32_t p[56];
    make_prompt(p, 56, 3);
    b->ops->retain(b, 9, 0);
    pl_gen_request req = {.prompt_tokens = p, .n_prompt_tokens = 40, .conversation_key = 9};
    pl_sampling_defaults(&req.sampling);
    req.sampling.temperature = 0;
    req.sampling.ignore_eos = true;
    req.sampling.max_tokens = 4;
    collect col = {0};
    uint64_t id;
    pl_err err;
    cr_assert_eq(pl_backend_submit(b, &req, (pl_sink){on_delta, on_done, &col}, &id, &err), 0);
    run_until_done(base, &col, 1);
    pl_dispatch_kv kv = view(b);
    cr_assert_eq(kv.kept, 3, "40 + 4 tokens, 43 computed: 2 full blocks and the tail (%d)",
                 kv.kept);
    cr_assert_eq(kv.free + kv.kept, 100);
    b->ops->retain(b, 9, 3);             /* needed later: evictable */
    req.conversation_key = 0;
    collect last = {0};
    cr_assert_eq(pl_backend_submit(b, &req, (pl_sink){on_delta, on_done, &last}, &id, &err), 0);
    run_until_done(base, &last, 1);
    kv = view(b);
    cr_assert_eq(kv.kept, 0);
    cr_assert_eq(kv.free, 100);
    pl_backend_free(b);
    event_base_free(base);
}

/* Replies much longer than the estimate (learnt from one-token replies):
 * dispatch admits by the estimate, the sequences outgrow it, the engine
 * preempts and recomputes, and every request ends with the reference's
 * tokens. The seed's rule would have run them one at a time (24 blocks
 * hold one 256-token context). */
Test(engine_kv, replies_longer_than_estimated_end_in_preemption_not_deadlock, .timeout = 120)
{
    struct event_base *base = event_base_new();
    eng_cfg c = base_cfg;
    c.num_blocks = 24;
    pl_backend *b = make_engine(base, c);
    pl_dispatch *d = pl_backend_dispatch_new(b, 0);
    cr_assert_not_null(d);
    int job = join(d);
    static areq warm[4], adv[8];
    for (int i = 0; i < 4; i++) {
        fake_req(&warm[i], 20, 100 + i, 1);
        areq_push(&warm[i], d, job, b);
    }
    pl_dispatch_pump(d);
    for (int i = 0; i < 4; i++)
        run_until_done(base, &warm[i].c, 1);
    cr_assert_eq(view(b).reply_tokens, 1, "replies so far: one token");
    for (int i = 0, seed = 0; i < 8; seed++) {
        int32_t p[20], ref[MAXLEN];
        bool eos;
        make_prompt(p, 20, seed);
        if (reference(p, 20, 200, ref, &eos) < 150)
            continue;            /* the fake model's long replies only */
        fake_req(&adv[i], 20, seed, 200);
        areq_push(&adv[i++], d, job, b);
    }
    pl_dispatch_pump(d);
    pl_dispatch_counts k;
    pl_dispatch_counts_get(d, &k);
    cr_assert_geq(k.jobs_inflight, 4, "admitted by the estimate: %d", k.jobs_inflight);
    for (int i = 0; i < 8; i++)
        run_until_done(base, &adv[i].c, 1);
    for (int i = 0; i < 8; i++)
        check_against_reference(adv[i].prompt, 20, 200, &adv[i].c);
    json_t *st = stats(b);
    cr_assert_gt(stat_int(st, "preemptions", NULL), 0, "the safety net ran");
    json_decref(st);
    pl_dispatch_counts_get(d, &k);
    cr_assert_eq(k.jobs_inflight, 0);
    cr_assert_eq(view(b).free, 24, "no block lost");
    cr_assert_eq(view(b).reserved, 0);
    pl_dispatch_free(d);
    pl_backend_free(b);
    event_base_free(base);
}

/* ---- the default model: pressure does not change the tokens ---- */

#define EQ_PROMPTS 6
#define EQ_TOKENS 48

static const char *questions[] = {
    "What is the capital of France?", "Name three primes.", "Why is the sky blue?",
    "Write a haiku about the sea.", "What is 12 times 12?", "Who wrote Hamlet?",
    "Explain photosynthesis in one sentence.", "List two uses of copper.",
};

static void chat_req(areq *a, const char *q, int max_tokens, pl_chat_message *m)
{
    memset(a, 0, sizeof *a);
    m[0] = (pl_chat_message){"system", "You are a helpful assistant. Answer briefly."};
    m[1] = (pl_chat_message){"user", q};
    a->req = (pl_gen_request){.messages = m, .n_messages = 2, .add_generation_prompt = true};
    pl_sampling_defaults(&a->req.sampling);
    a->req.sampling.temperature = 0;
    a->req.sampling.max_tokens = max_tokens;
    a->req.sampling.ignore_eos = true;
}

/* Two short replies teach the engine a 2-token reply estimate, then n
 * prompts run through the model's dispatch. Returns the preemptions. */
static json_int_t run_model(int kv_mb, int n, collect *out, int *peak)
{
    struct event_base *base = event_base_new();
    pl_engine_config ec = {
        .kv_cache_mb = kv_mb, .max_model_len = 128,
        .core = {.max_num_seqs = 16, .max_num_batched_tokens = 2048, .block_size = 16,
                 .async = true, .prefix_caching = true},
        .cpu = {.threads = 2, .batch_invariant = true, .kv_f16 = true},
    };
    pl_engine_open_opts o = {.model_path = pl_test_model_path(), .device = "cpu", .cfg = &ec};
    char err[512];
    pl_backend *b = pl_engine_open(base, &o, err, sizeof err);
    cr_assert_not_null(b, "%s", err);
    pl_dispatch *d = pl_backend_dispatch_new(b, 0);
    int job = join(d);
    static areq warm[2], r[EQ_PROMPTS];
    static pl_chat_message wm[2][2], rm[EQ_PROMPTS][2];
    for (int i = 0; i < 2; i++) {
        chat_req(&warm[i], "Hi", 2, wm[i]);
        areq_push(&warm[i], d, job, b);
    }
    pl_dispatch_pump(d);
    for (int i = 0; i < 2; i++)
        while (!warm[i].c.done)
            event_base_loop(base, EVLOOP_ONCE);
    for (int i = 0; i < n; i++) {
        chat_req(&r[i], questions[i], EQ_TOKENS, rm[i]);
        areq_push(&r[i], d, job, b);
    }
    pl_dispatch_pump(d);
    for (int i = 0; i < n; i++) {
        while (!r[i].c.done)     /* no deadline but the test's: a slow machine is slow */
            event_base_loop(base, EVLOOP_ONCE);
        out[i] = r[i].c;
    }
    json_t *st = stats(b);
    json_int_t pre = stat_int(st, "preemptions", NULL);
    json_decref(st);
    pl_dispatch_counts k;
    pl_dispatch_counts_get(d, &k);
    *peak = k.inflight_peak;
    pl_dispatch_free(d);
    pl_backend_free(b);
    event_base_free(base);
    return pre;
}

/* 3 MiB hold 8 blocks of 16 tokens: two ~80-token sequences do not fit
 * side by side, yet the 2-token estimate admits both; 64 MiB hold all. */
Test(engine_kv, pressured_run_gives_the_unpressured_tokens, .timeout = 600)
{
    PL_TEST_MODEL_OR_SKIP();
    static collect calm[EQ_PROMPTS], tight[EQ_PROMPTS];
    int peak_calm, peak_tight, n = getenv("PARLEY_SANITIZED") ? 2 : EQ_PROMPTS;
    json_int_t pre_calm = run_model(64, n, calm, &peak_calm);
    json_int_t pre_tight = run_model(3, n, tight, &peak_tight);
    cr_assert_eq(pre_calm, 0, "no pressure: no preemption");
    cr_assert_gt(pre_tight, 0, "pressure: preempted and recomputed (peak %d, %d unpressured)",
                 peak_tight, peak_calm);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(calm[i].n, EQ_TOKENS);
        cr_assert_eq(tight[i].n, EQ_TOKENS, "prompt %d", i);
        cr_assert_arr_eq(calm[i].toks, tight[i].toks, EQ_TOKENS * sizeof(int32_t),
                         "prompt %d: the same tokens under pressure", i);
    }
}
