/* test_engine.c - the engine backend with the fake runner on a real
 * event_base: outputs against the fake model's reference, async vs sync,
 * 1 vs 32 concurrent, chunked vs unchunked, preemption, abort, prefix
 * cache hits, stop strings, capacity. */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "backends/engine/engine.h"
#include "tests/fake_runner.h"

#define VOCAB 64
#define EOS 2
#define MAXLEN 256
#define BS 16

/* ---- fake text hooks: id i is the letter 'a' + i % 26 ---- */

static const char letters[] = "abcdefghijklmnopqrstuvwxyz";

static const char *fake_bytes(void *ud, int32_t id, size_t *len)
{
    (void)ud;
    if (id < 3 || id >= VOCAB) {
        *len = 0;
        return NULL;
    }
    *len = 1;
    return &letters[id % 26];
}

static bool fake_eog(void *ud, int32_t id)
{
    (void)ud;
    return id == EOS;
}

/* Prompt text -> ids: letter c -> 3 + (c - 'a'). */
static int fake_encode(void *ud, const pl_gen_request *req, bool add_special,
                       int32_t **ids, int *n, pl_err *err)
{
    const char *t = req->prompt ? req->prompt
                    : req->n_messages ? req->messages[req->n_messages - 1].content : "";
    int len = (int)strlen(t);
    *ids = malloc((size_t)(len + 1) * sizeof **ids);
    *n = 0;
    if (add_special)
        (*ids)[(*n)++] = 1;                        /* a BOS */
    for (int i = 0; i < len; i++)
        (*ids)[(*n)++] = 3 + (t[i] - 'a') % 26;
    return 0;
}

static const pl_engine_text fake_text = {NULL, fake_encode, fake_bytes, fake_eog, NULL};

/* ---- harness ---- */

typedef struct collect {
    int32_t toks[MAXLEN];
    int n;
    char text[MAXLEN * 2];
    size_t len;
    int n_deltas;
    bool done;
    pl_result res;
} collect;

static void on_delta(void *ud, const pl_delta *d)
{
    collect *c = ud;
    cr_assert(!c->done, "delta after done");
    for (int i = 0; i < d->n_tokens && c->n < MAXLEN; i++)
        c->toks[c->n++] = d->tokens[i];
    memcpy(c->text + c->len, d->text, d->len);
    c->len += d->len;
    c->text[c->len] = '\0';
    c->n_deltas++;
}

static void on_done(void *ud, const pl_result *r)
{
    collect *c = ud;
    cr_assert(!c->done, "two results");
    c->done = true;
    c->res = *r;
}

typedef struct eng_cfg {
    bool async, prefix;
    int max_seqs, budget, num_blocks, sleep_us;
    int no_token_at_ctx;
    bool no_partial;             /* full-block prefix reuse only */
} eng_cfg;

static const eng_cfg base_cfg = {true, true, 32, 512, 256, 0, 0};

static pl_runner *g_runner;
static uint64_t g_placeholders;
static int g_max_inflight;

static pl_backend *make_engine(struct event_base *base, eng_cfg c)
{
    pl_fake_runner_opts ro = {
        .info = {.n_vocab = VOCAB, .max_model_len = MAXLEN, .block_size = BS,
                 .num_blocks = c.num_blocks, .max_seqs = c.max_seqs,
                 .max_rows = c.budget, .eos_id = EOS},
        .step_sleep_us = c.sleep_us,
        .no_token_at_ctx = c.no_token_at_ctx,
    };
    g_runner = pl_fake_runner_new(&ro);
    cr_assert_not_null(g_runner);
    pl_engine_options o;
    pl_engine_options_defaults(&o);
    o.async = c.async;
    o.prefix_caching = c.prefix;
    o.no_partial_prefix = c.no_partial;
    pl_err err;
    pl_backend *b = pl_engine_backend_new(base, "fake-model", g_runner, &fake_text,
                                          &o, &err);
    cr_assert_not_null(b, "%s", err.message);
    return b;
}

static void tick_cb(evutil_socket_t fd, short w, void *arg)
{
    (void)fd; (void)w; (void)arg;
}

/* Run the loop until all n collectors are done (or 30 s pass). */
static void run_until_done(struct event_base *base, collect *c, int n)
{
    struct event *tick = event_new(base, -1, EV_PERSIST, tick_cb, NULL);
    struct timeval tv = {0, 20000};
    event_add(tick, &tv);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (t1.tv_sec - t0.tv_sec > 30)
            break;
        int left = 0;
        for (int i = 0; i < n; i++)
            left += !c[i].done;
        if (!left)
            break;
        event_base_loop(base, EVLOOP_ONCE);
    }
    event_free(tick);
    for (int i = 0; i < n; i++)
        cr_assert(c[i].done, "request %d finished", i);
}

static uint64_t submit_ids(pl_backend *b, const int32_t *ids, int n,
                           int max_tokens, collect *c)
{
    pl_gen_request req = {0};
    pl_sampling_defaults(&req.sampling);
    req.sampling.temperature = 0;
    req.sampling.max_tokens = max_tokens;
    req.prompt_tokens = ids;
    req.n_prompt_tokens = n;
    pl_sink sink = {on_delta, on_done, c};
    uint64_t id = 0;
    pl_err err;
    cr_assert_eq(pl_backend_submit(b, &req, sink, &id, &err), 0, "%s", err.message);
    return id;
}

/* The fake model's greedy continuation (EOS ends it, not included). */
static int reference(const int32_t *prompt, int n, int max_tokens, int32_t *out,
                     bool *eos)
{
    int32_t ctx[MAXLEN];
    memcpy(ctx, prompt, (size_t)n * sizeof *ctx);
    int m = 0;
    *eos = false;
    while (m < max_tokens && n + m < MAXLEN) {
        int32_t t = pl_fake_runner_next(ctx, n + m, VOCAB);
        if (t == EOS) {
            *eos = true;
            break;
        }
        ctx[n + m] = t;
        out[m++] = t;
    }
    return m;
}

static void make_prompt(int32_t *p, int n, int seed)
{
    for (int i = 0; i < n; i++)
        p[i] = 3 + (int32_t)((seed * 7 + i * 13 + (i * seed) % 5) % (VOCAB - 3));
}

static void check_against_reference(const int32_t *p, int n, int max_tokens,
                                    const collect *c)
{
    int32_t ref[MAXLEN];
    bool eos;
    int m = reference(p, n, max_tokens, ref, &eos);
    cr_assert_eq(c->n, m, "token count %d vs reference %d", c->n, m);
    for (int i = 0; i < m; i++)
        cr_assert_eq(c->toks[i], ref[i], "token %d", i);
    cr_assert_eq(c->res.finish, eos ? PL_FINISH_STOP : PL_FINISH_LENGTH);
    cr_assert_eq(c->res.prompt_tokens, n);
    cr_assert_eq(c->res.completion_tokens, m + (eos ? 1 : 0));
    size_t letters_n = 0;
    for (int i = 0; i < m; i++)
        letters_n += ref[i] >= 3;
    cr_assert_eq(c->len, letters_n, "one letter per token from id 3");
}

static double wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Deadlines for waiting on the engine thread: generous, so that a loaded
 * machine only makes a test slower, never makes it fail. */
#define DEADLINE_MS 20000.0

static json_t *stats(pl_backend *b)
{
    json_t *s = b->ops->stats(b);
    cr_assert_not_null(s);
    return s;
}

static json_int_t stat_int(json_t *s, const char *k1, const char *k2)
{
    json_t *v = json_object_get(s, k1);
    if (k2)
        v = json_object_get(v, k2);
    cr_assert(json_is_integer(v), "stat %s.%s", k1, k2 ? k2 : "");
    return json_integer_value(v);
}

/* Run n requests (prompt length plen, seeds 0..n-1) concurrently through
 * an engine with config c and compare each with the reference. */
static void run_batch(eng_cfg c, int n, int plen, int max_tokens, json_t **st_out)
{
    struct event_base *base = event_base_new();
    pl_backend *b = make_engine(base, c);
    collect *col = calloc((size_t)n, sizeof *col);
    int32_t (*p)[MAXLEN] = calloc((size_t)n, sizeof *p);
    for (int i = 0; i < n; i++) {
        make_prompt(p[i], plen, i);
        submit_ids(b, p[i], plen, max_tokens, &col[i]);
    }
    run_until_done(base, col, n);
    for (int i = 0; i < n; i++)
        check_against_reference(p[i], plen, max_tokens, &col[i]);
    cr_assert_eq(pl_fake_runner_errors(g_runner), 0);
    g_placeholders = pl_fake_runner_placeholders(g_runner);
    g_max_inflight = pl_fake_runner_max_inflight(g_runner);
    if (st_out)
        *st_out = stats(b);
    pl_backend_free(b);
    event_base_free(base);
    free(col);
    free(p);
}

Test(engine, single_request_matches_reference)
{
    json_t *s;
    run_batch(base_cfg, 1, 20, 40, &s);
    cr_assert_gt(stat_int(s, "steps", NULL), 1);
    json_decref(s);
}

/* A runner reporting no token (all-NaN logits on a GPU) ends that request
 * with a clean error; the others, and later requests, are unaffected. */
static void no_token_case(bool async)
{
    struct event_base *base = event_base_new();
    eng_cfg c = base_cfg;
    c.async = async;
    c.no_token_at_ctx = 13;          /* request 0: prompt 10, its 4th token */
    pl_backend *b = make_engine(base, c);
    static int32_t p[3][24];
    static collect col[3];
    memset(col, 0, sizeof col);
    int plen[3] = {10, 20, 15}, seed = 1;
    for (int i = 0; i < 3; i++) {
        int32_t ref[MAXLEN];
        bool eos = true;
        for (; eos; seed++) {        /* a prompt whose 8 tokens end without EOS */
            make_prompt(p[i], plen[i], seed);
            eos = reference(p[i], plen[i], 8, ref, &eos) < 8 || eos;
        }
        submit_ids(b, p[i], plen[i], 8, &col[i]);
    }
    run_until_done(base, col, 3);
    cr_assert_eq(col[0].res.finish, PL_FINISH_ERROR, "finish %d after %d tokens",
                 (int)col[0].res.finish, col[0].n);
    cr_assert_not_null(col[0].res.error);
    cr_assert(strstr(col[0].res.error->message, "non-finite"), "%s",
              col[0].res.error->message);
    cr_assert_leq(col[0].n, 3, "no token past the bad one (%d)", col[0].n);
    check_against_reference(p[1], plen[1], 8, &col[1]);
    check_against_reference(p[2], plen[2], 8, &col[2]);
    memset(&col[0], 0, sizeof col[0]);  /* the engine goes on serving */
    submit_ids(b, p[1], plen[1], 8, &col[0]);
    run_until_done(base, col, 1);
    check_against_reference(p[1], plen[1], 8, &col[0]);
    cr_assert_eq(pl_fake_runner_errors(g_runner), 0);
    pl_backend_free(b);
    event_base_free(base);
}

Test(engine, no_token_fails_only_that_request_async)
{
    no_token_case(true);
}

Test(engine, no_token_fails_only_that_request_sync)
{
    no_token_case(false);
}

Test(engine, async_and_sync_identical)
{
    eng_cfg async = base_cfg, sync = base_cfg;
    async.sleep_us = sync.sleep_us = 500;
    sync.async = false;
    json_t *sa, *ss;
    run_batch(async, 16, 30, 48, &sa);
    cr_assert_gt(g_placeholders, 0, "async decodes ran on placeholders");
    cr_assert_eq(g_max_inflight, 2, "two steps in flight");
    run_batch(sync, 16, 30, 48, &ss);
    cr_assert_eq(g_placeholders, 0, "sync mode never uses placeholders");
    cr_assert_eq(g_max_inflight, 1);
    json_t *ta = json_object_get(sa, "timing"), *ts = json_object_get(ss, "timing");
    cr_log_info("idle gap per step: async %.4f ms, sync %.4f ms; steps %d vs %d",
                json_real_value(json_object_get(ta, "idle_gap_ms_per_step")),
                json_real_value(json_object_get(ts, "idle_gap_ms_per_step")),
                (int)stat_int(sa, "steps", NULL), (int)stat_int(ss, "steps", NULL));
    json_decref(sa);
    json_decref(ss);
}

Test(engine, one_vs_32_concurrent_identical)
{
    for (int i = 0; i < 4; i++) {      /* prompts 0..3 alone, then all 32 */
        struct event_base *base = event_base_new();
        pl_backend *b = make_engine(base, base_cfg);
        int32_t p[MAXLEN];
        collect c = {0};
        make_prompt(p, 24, i);
        submit_ids(b, p, 24, 40, &c);
        run_until_done(base, &c, 1);
        check_against_reference(p, 24, 40, &c);
        pl_backend_free(b);
        event_base_free(base);
    }
    run_batch(base_cfg, 32, 24, 40, NULL);
}

Test(engine, chunked_and_unchunked_identical)
{
    eng_cfg chunked = base_cfg;
    chunked.budget = 40;                  /* < 8 prompts of 70 */
    json_t *s;
    run_batch(chunked, 8, 70, 30, &s);
    cr_assert_gt(stat_int(s, "prefill_rows", NULL), 0);
    json_decref(s);
    run_batch(base_cfg, 8, 70, 30, NULL);
}

Test(engine, preemption_with_tiny_kv_identical)
{
    eng_cfg tiny = base_cfg;
    tiny.num_blocks = 12;                 /* 192 positions for 8 x ~90 */
    json_t *s;
    run_batch(tiny, 8, 40, 50, &s);
    cr_assert_gt(stat_int(s, "preemptions", NULL), 0);
    json_decref(s);
    eng_cfg tiny_sync = tiny;
    tiny_sync.async = false;
    run_batch(tiny_sync, 8, 40, 50, NULL);
}

Test(engine, abort_frees_blocks_within_one_step)
{
    eng_cfg c = base_cfg;
    c.sleep_us = 2000;
    struct event_base *base = event_base_new();
    pl_backend *b = make_engine(base, c);
    int32_t p[40];
    make_prompt(p, 40, 3);
    pl_gen_request req = {0};
    pl_sampling_defaults(&req.sampling);
    req.sampling.temperature = 0;
    req.sampling.ignore_eos = true;
    req.sampling.max_tokens = 200;
    req.prompt_tokens = p;
    req.n_prompt_tokens = 40;
    collect col = {0};
    uint64_t id;
    pl_err err;
    cr_assert_eq(pl_backend_submit(b, &req, (pl_sink){on_delta, on_done, &col},
                                   &id, &err), 0);
    while (col.n < 5)
        event_base_loop(base, EVLOOP_ONCE);
    json_t *s = stats(b);
    cr_assert_gt(stat_int(s, "kv", "used"), 0);
    json_decref(s);
    pl_backend_abort(b, id);
    /* Steps launched by the time the abort was posted (the published
     * figure lags by at most the step being launched). */
    s = stats(b);
    json_int_t steps0 = stat_int(s, "steps", NULL);
    json_decref(s);
    /* Wait for the engine to apply the abort and give its blocks back. */
    json_int_t used = 1, steps1 = 0, checks = 0, aborted = 0;
    bool ok = false;
    for (double end = wall_ms() + DEADLINE_MS;
         (used || !checks || !aborted) && wall_ms() < end;) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        s = stats(b);
        used = stat_int(s, "kv", "used");
        steps1 = stat_int(s, "steps", NULL);
        aborted = stat_int(s, "aborted", NULL);
        checks = stat_int(s, "idle_check_step", NULL) == stat_int(s, "steps_done", NULL)
                 && stat_int(s, "idle_checks", NULL) > 1;
        ok = json_is_true(json_object_get(s, "kv_invariant_ok"));
        json_decref(s);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    cr_assert_eq(aborted, 1, "the engine counted the abort");
    cr_assert_eq(used, 0, "blocks freed");
    /* Counted in steps, not time: the step being launched when the abort
     * came, and the one whose figure had not been published yet. */
    cr_assert_leq(steps1 - steps0, 2, "freed within one step (%d steps)",
                  (int)(steps1 - steps0));
    cr_assert_gt(checks, 0);
    cr_assert(ok, "KV invariant after abort");
    int n_after = col.n;
    for (int i = 0; i < 5; i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
    cr_assert_not(col.done, "no result after abort");
    cr_assert_eq(col.n, n_after, "no delta after abort");
    pl_backend_free(b);
    event_base_free(base);
}

/* Full blocks only: prompts sharing 50 tokens share 3 blocks of 16. */
Test(engine, prefix_cache_hits_for_repeated_prefix)
{
    eng_cfg c = base_cfg;
    c.no_partial = true;
    struct event_base *base = event_base_new();
    pl_backend *b = make_engine(base, c);
    int32_t a[80], c2[80];
    make_prompt(a, 80, 5);
    memcpy(c2, a, sizeof c2);
    for (int i = 50; i < 80; i++)
        c2[i] = 3 + (a[i] + 11) % (VOCAB - 3);    /* same first 50 */
    collect col[3];
    memset(col, 0, sizeof col);
    submit_ids(b, a, 80, 10, &col[0]);
    run_until_done(base, col, 1);
    cr_assert_eq(col[0].res.cached_tokens, 0);
    submit_ids(b, c2, 80, 10, &col[1]);
    run_until_done(base, col + 1, 1);
    cr_assert_eq(col[1].res.cached_tokens, 48, "3 full blocks of 16 reused");
    submit_ids(b, a, 80, 10, &col[2]);
    run_until_done(base, col + 2, 1);
    cr_assert_eq(col[2].res.cached_tokens, 64, "(80-1)/16 = 4 blocks");
    check_against_reference(a, 80, 10, &col[0]);
    check_against_reference(c2, 80, 10, &col[1]);
    check_against_reference(a, 80, 10, &col[2]);
    json_t *s = stats(b);
    cr_assert_eq(stat_int(s, "kv", "prefix_queries"), 240);
    cr_assert_eq(stat_int(s, "kv", "prefix_hits"), 112);
    json_decref(s);
    pl_backend_free(b);
    event_base_free(base);
}

/* Partial-block reuse (copy on write): outputs still match the reference. */
Test(engine, partial_block_reuse_copies_on_write)
{
    struct event_base *base = event_base_new();
    pl_backend *b = make_engine(base, base_cfg);
    int32_t a[80], c2[80];
    make_prompt(a, 80, 5);
    memcpy(c2, a, sizeof c2);
    for (int i = 50; i < 80; i++)
        c2[i] = 3 + (a[i] + 11) % (VOCAB - 3);    /* same first 50 */
    collect col[3] = {0};
    submit_ids(b, a, 80, 10, &col[0]);
    run_until_done(base, col, 1);
    submit_ids(b, c2, 80, 10, &col[1]);
    run_until_done(base, col + 1, 1);
    cr_assert_eq(col[1].res.cached_tokens, 50, "3 full blocks + 2 tokens of the 4th");
    submit_ids(b, a, 80, 10, &col[2]);
    run_until_done(base, col + 2, 1);
    cr_assert_eq(col[2].res.cached_tokens, 79, "all but the last prompt token");
    check_against_reference(a, 80, 10, &col[0]);
    check_against_reference(c2, 80, 10, &col[1]);
    check_against_reference(a, 80, 10, &col[2]);
    json_t *s = stats(b);
    cr_assert_eq(stat_int(s, "kv", "prefix_hits"), 129);
    cr_assert(stat_int(s, "kv", "partial_hits") == 2 && stat_int(s, "kv", "partial_tokens") == 17);
    json_decref(s);
    pl_backend_free(b);
    event_base_free(base);
}

Test(engine, prefix_caching_off_no_hits)
{
    eng_cfg c = base_cfg;
    c.prefix = false;
    struct event_base *base = event_base_new();
    pl_backend *b = make_engine(base, c);
    int32_t a[40];
    make_prompt(a, 40, 9);
    collect col[2];
    memset(col, 0, sizeof col);
    submit_ids(b, a, 40, 5, &col[0]);
    run_until_done(base, col, 1);
    submit_ids(b, a, 40, 5, &col[1]);
    run_until_done(base, col + 1, 1);
    cr_assert_eq(col[1].res.cached_tokens, 0);
    check_against_reference(a, 40, 5, &col[1]);
    pl_backend_free(b);
    event_base_free(base);
}

Test(engine, stop_string_and_text_prompt)
{
    struct event_base *base = event_base_new();
    pl_backend *b = make_engine(base, base_cfg);
    const char *prompt = "thequickbrownfox";
    int32_t ids[64];
    int n = 0;
    ids[n++] = 1;
    for (const char *q = prompt; *q; q++)
        ids[n++] = 3 + (*q - 'a');
    int32_t ref[MAXLEN];
    bool eos;
    int m = reference(ids, n, 60, ref, &eos);
    cr_assert_geq(m, 8, "reference long enough for this test");
    char text[MAXLEN];
    size_t tl = 0;
    for (int i = 0; i < m; i++)
        if (ref[i] >= 3)
            text[tl++] = letters[ref[i] % 26];
    text[tl] = '\0';
    cr_assert_geq(tl, 7);
    char stop[3] = {text[5], text[6], 0};
    size_t cut = (size_t)(strstr(text, stop) - text);

    pl_gen_request req = {0};
    pl_sampling_defaults(&req.sampling);
    req.sampling.temperature = 0;
    req.sampling.max_tokens = 60;
    req.sampling.n_stop = 1;
    req.sampling.stop[0] = stop;
    req.prompt = prompt;
    collect col = {0};
    uint64_t id;
    pl_err err;
    cr_assert_eq(pl_backend_submit(b, &req, (pl_sink){on_delta, on_done, &col},
                                   &id, &err), 0, "%s", err.message);
    run_until_done(base, &col, 1);
    cr_assert_eq(col.res.finish, PL_FINISH_STOP);
    cr_assert_eq(col.len, cut, "text cut before the stop string");
    cr_assert_eq(strncmp(col.text, text, cut), 0);
    cr_assert_eq(col.res.prompt_tokens, n);
    pl_backend_free(b);
    event_base_free(base);
}

Test(engine, rejects_bad_prompts)
{
    struct event_base *base = event_base_new();
    pl_backend *b = make_engine(base, base_cfg);
    int32_t big[MAXLEN];
    make_prompt(big, MAXLEN, 1);
    pl_gen_request req = {0};
    pl_sampling_defaults(&req.sampling);
    req.prompt_tokens = big;
    req.n_prompt_tokens = MAXLEN;
    collect col = {0};
    uint64_t id;
    pl_err err;
    pl_sink sink = {on_delta, on_done, &col};
    cr_assert_eq(pl_backend_submit(b, &req, sink, &id, &err), -1);
    cr_assert_eq(err.status, 400);
    big[0] = VOCAB + 5;
    req.n_prompt_tokens = 10;
    cr_assert_eq(pl_backend_submit(b, &req, sink, &id, &err), -1);
    cr_assert_eq(err.status, 400);
    pl_backend_free(b);
    event_base_free(base);
}

/* vLLM's rule for API requests: prompt + max_tokens > the context is a 400
 * naming max_tokens; a job's request (max_tokens_must_fit false) is taken
 * and its reply stops where the context ends. */
Test(engine, max_tokens_beyond_the_context)
{
    struct event_base *base = event_base_new();
    pl_backend *b = make_engine(base, base_cfg);
    int32_t p[10];
    make_prompt(p, 10, 1);
    pl_gen_request req = {.prompt_tokens = p, .n_prompt_tokens = 10, .max_tokens_must_fit = true};
    pl_sampling_defaults(&req.sampling);
    req.sampling.max_tokens = MAXLEN - 10 + 1;
    req.sampling.ignore_eos = true;
    collect col = {0};
    uint64_t id;
    pl_err err = {0};
    pl_sink sink = {on_delta, on_done, &col};
    cr_assert_eq(pl_backend_submit(b, &req, sink, &id, &err), -1);
    cr_assert_eq(err.status, 400);
    cr_assert_str_eq(err.param, "max_tokens");
    cr_assert_str_eq(err.code, "context_length_exceeded");
    cr_assert(strstr(err.message, "maximum context length is"), "%s", err.message);
    req.sampling.max_tokens = MAXLEN - 10;        /* exactly fills the context */
    cr_assert_eq(pl_backend_submit(b, &req, sink, &id, &err), 0, "%s", err.message);
    run_until_done(base, &col, 1);
    cr_assert_eq(col.res.finish, PL_FINISH_LENGTH);
    cr_assert_eq(col.res.completion_tokens, MAXLEN - 10);
    collect col2 = {0};
    pl_sink sink2 = {on_delta, on_done, &col2};
    req.max_tokens_must_fit = false;              /* a job: cut at the context */
    req.sampling.max_tokens = 100000;
    cr_assert_eq(pl_backend_submit(b, &req, sink2, &id, &err), 0, "%s", err.message);
    run_until_done(base, &col2, 1);
    cr_assert_eq(col2.res.finish, PL_FINISH_LENGTH);
    cr_assert_eq(col2.res.completion_tokens, MAXLEN - 10);
    pl_backend_free(b);
    event_base_free(base);
}

Test(engine, capacity_formula)
{
    cr_assert_eq(pl_engine_capacity_for(32, 100, 16, 256), 6);
    cr_assert_eq(pl_engine_capacity_for(4, 100, 16, 256), 4);
    cr_assert_eq(pl_engine_capacity_for(32, 10, 16, 256), 1, "at least 1");
    struct event_base *base = event_base_new();
    eng_cfg c = base_cfg;
    c.num_blocks = 100;
    pl_backend *b = make_engine(base, c);
    cr_assert_eq(pl_backend_capacity(b), 6);
    cr_assert_eq(b->ops->max_model_len(b), MAXLEN);
    cr_assert_str_eq(b->ops->kind, "fake");
    pl_backend_free(b);
    c.num_blocks = 10;                  /* 160 tokens of KV < MAXLEN */
    b = make_engine(base, c);
    cr_assert_eq(pl_backend_capacity(b), 1);
    cr_assert_eq(b->ops->max_model_len(b), 160);
    pl_backend_free(b);
    event_base_free(base);
}

Test(engine, paused_request_stops_and_resumes)
{
    eng_cfg c = base_cfg;
    c.sleep_us = 1000;
    struct event_base *base = event_base_new();
    pl_backend *b = make_engine(base, c);
    int32_t p[20];
    make_prompt(p, 20, 4);
    pl_gen_request req = {0};
    pl_sampling_defaults(&req.sampling);
    req.sampling.temperature = 0;
    req.sampling.ignore_eos = true;
    req.sampling.max_tokens = 60;
    req.prompt_tokens = p;
    req.n_prompt_tokens = 20;
    collect col = {0};
    uint64_t id;
    pl_err err;
    cr_assert_eq(pl_backend_submit(b, &req, (pl_sink){on_delta, on_done, &col},
                                   &id, &err), 0);
    while (col.n < 3)
        event_base_loop(base, EVLOOP_ONCE);
    b->ops->set_paused(b, id, true);
    /* Wait until the engine has applied the pause and has no step in
     * flight, then take the deltas already on their way. */
    bool applied = false;
    for (double end = wall_ms() + DEADLINE_MS; !applied && wall_ms() < end;) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        json_t *s = stats(b);
        applied = stat_int(s, "pause_msgs", NULL) == 1 &&
                  stat_int(s, "steps", NULL) == stat_int(s, "steps_done", NULL);
        json_decref(s);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    cr_assert(applied, "the engine applied the pause");
    for (int i = 0; i < 5; i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
    int n_paused = col.n;
    cr_assert_lt(n_paused, 60);
    /* A window here can only miss a bug on a slow machine, never fail. */
    for (int i = 0; i < 30; i++) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    cr_assert_eq(col.n, n_paused, "no tokens while paused");
    cr_assert_not(col.done);
    b->ops->set_paused(b, id, false);
    run_until_done(base, &col, 1);
    cr_assert_eq(col.n, 60);
    pl_backend_free(b);
    event_base_free(base);
}

/* Many requests sharing prefixes through a small cache and few seats, a
 * third aborted at random moments: every finished one matches the
 * reference, aborted ones never complete, and the cache is whole after. */
Test(engine, stress_shared_prefixes_with_aborts)
{
    eng_cfg c = base_cfg;
    c.num_blocks = 40;
    c.max_seqs = 8;
    c.budget = 48;
    c.sleep_us = 100;
    struct event_base *base = event_base_new();
    pl_backend *b = make_engine(base, c);
    enum { N = 60 };
    static int32_t p[N][MAXLEN];
    static collect col[N];
    memset(col, 0, sizeof col);
    uint64_t ids[N];
    bool aborted[N] = {false};
    int n_at_abort[N] = {0}, n_aborted = 0;
    unsigned seed = 7;
    for (int i = 0; i < N; i++) {
        make_prompt(p[i], 64, i % 3);              /* 3 shared prefixes */
        for (int j = 32 + i % 20; j < 64; j++)
            p[i][j] = 3 + (int32_t)(rand_r(&seed) % (VOCAB - 3));
        ids[i] = submit_ids(b, p[i], 64, 20 + i % 17, &col[i]);
    }
    for (int round = 0; round < 20; round++) {
        event_base_loop(base, EVLOOP_ONCE);
        int i = (int)(rand_r(&seed) % N);
        if (i % 3 == 0 && !col[i].done && !aborted[i]) {
            pl_backend_abort(b, ids[i]);
            aborted[i] = true;
            n_at_abort[i] = col[i].n;
            n_aborted++;
        }
    }
    collect *live[N];
    int n_live = 0;
    for (int i = 0; i < N; i++)
        if (!aborted[i])
            live[n_live++] = &col[i];
    for (int k = 0; k < n_live; k++)
        run_until_done(base, live[k], 1);
    for (int i = 0; i < N; i++) {
        if (!aborted[i]) {
            check_against_reference(p[i], 64, 20 + i % 17, &col[i]);
        } else {
            cr_assert_not(col[i].done, "request %d: a result after its abort", i);
            cr_assert_eq(col[i].n, n_at_abort[i], "request %d: tokens after its abort", i);
        }
    }
    cr_assert_gt(n_aborted, 0, "the test aborted something");
    cr_assert_eq(pl_fake_runner_errors(g_runner), 0);
    json_t *s = NULL;
    for (int i = 0; i < 500; i++) {
        s = stats(b);
        if (stat_int(s, "kv", "used") == 0 && stat_int(s, "running", NULL) == 0 &&
            stat_int(s, "idle_check_step", NULL) == stat_int(s, "steps_done", NULL))
            break;
        json_decref(s);
        s = NULL;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    cr_assert_not_null(s, "engine went idle");
    cr_assert(json_is_true(json_object_get(s, "kv_invariant_ok")), "%s",
              json_string_value(json_object_get(s, "kv_invariant_why")));
    cr_assert_gt(stat_int(s, "kv", "prefix_hits"), 0);
    /* Aborts that reach the engine before the request ends are counted
     * there; one that crosses its result is not (the result is dropped). */
    cr_assert_gt(stat_int(s, "aborted", NULL), 0, "aborts reached the engine");
    cr_assert_leq(stat_int(s, "aborted", NULL), n_aborted);
    json_decref(s);
    pl_backend_free(b);
    event_base_free(base);
}

/* Figures, not a pass/fail criterion on a shared machine: the same
 * workload with the runner "device" sleeping 1 ms per step, sync vs
 * async. Logged with --verbose. */
Test(engine, timing_async_vs_sync)
{
    double ms[2];
    json_t *st[2];
    for (int mode = 0; mode < 2; mode++) {
        eng_cfg c = base_cfg;
        c.async = mode == 1;
        c.sleep_us = 1000;
        c.max_seqs = 64;
        c.budget = 512;
        double t0 = wall_ms();
        run_batch(c, 64, 24, 64, &st[mode]);
        ms[mode] = wall_ms() - t0;
    }
    for (int mode = 0; mode < 2; mode++) {
        json_t *t = json_object_get(st[mode], "timing");
        cr_log_info("%s: %.1f ms wall, %d steps, per step: schedule %.3f ms, "
                    "process %.3f ms, execute %.3f ms, idle gap %.3f ms",
                    mode ? "async" : "sync ", ms[mode],
                    (int)stat_int(st[mode], "steps", NULL),
                    json_real_value(json_object_get(t, "schedule_ms_per_step")),
                    json_real_value(json_object_get(t, "process_ms_per_step")),
                    json_real_value(json_object_get(t, "execute_ms_per_step")),
                    json_real_value(json_object_get(t, "idle_gap_ms_per_step")));
    }
    /* Load-independent checks (run_batch compared every output with the
     * reference): both modes did the work, and the execute time the engine
     * measures covers the runner's 1 ms sleep per step. */
    cr_assert_geq(stat_int(st[0], "tokens_out", NULL), 64 * 8);
    cr_assert_geq(stat_int(st[1], "tokens_out", NULL), 64 * 8);
    json_t *t0 = json_object_get(st[0], "timing");
    cr_assert_geq(json_real_value(json_object_get(t0, "execute_ms_per_step")), 0.9,
                  "sync: each step executes for at least the runner's 1 ms");
    for (int mode = 0; mode < 2; mode++)
        json_decref(st[mode]);
}
