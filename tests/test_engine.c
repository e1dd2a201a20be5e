/* test_engine.c - the engine backend with the fake runner on a real
 * event_base: outputs against the fake model's reference, async vs sync,
 * 1 vs 32 concurrent, chunked vs unchunked, preemption, prefix cache hits
 * (full and partial blocks), stop strings, the tokenizer_info op. */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "tests/engine_harness.h"
#include "tests/fake_runner.h"

Test(engine, single_request_matches_reference)
{
    json_t *s;
    run_batch(base_cfg, 1, 20, 40, &s);
    cr_assert_gt(stat_int(s, "steps", NULL), 1);
    json_decref(s);
}

/* Every generated token comes with its logprobs, the EOS too (its own
 * delta, no text), async and sync: as many entries as completion_tokens. */
static void eos_logprobs_case(bool async)
{
    struct event_base *base = event_base_new();
    eng_cfg cfg = base_cfg;
    cfg.async = async;
    pl_backend *b = make_engine(base, cfg);
    int32_t p[12], ref[MAXLEN];
    bool eos = false;
    int m = 0;
    for (int seed = 1; !eos; seed++) {         /* a prompt whose reply ends with EOS */
        make_prompt(p, 12, seed);
        m = reference(p, 12, 40, ref, &eos);
        cr_assert_lt(seed, 500);
    }
    collect c = {0};
    submit_ids_lp(b, p, 12, 40, 1, &c);
    run_until_done(base, &c, 1);
    check_against_reference(p, 12, 40, &c);
    cr_assert_eq(c.n_lp, m + 1, "logprobs %d for %d tokens and the EOS", c.n_lp, m);
    cr_assert_eq(c.n_lp, c.res.completion_tokens);
    cr_assert_eq(c.lp_len[m], 0, "the EOS entry has no text");
    cr_assert_float_eq(c.lp[m], -0.25f, 1e-6);
    pl_backend_free(b);
    event_base_free(base);
}

Test(engine, eos_has_its_logprobs_async)
{
    eos_logprobs_case(true);
}

Test(engine, eos_has_its_logprobs_sync)
{
    eos_logprobs_case(false);
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

/* A finished reply's partial last block serves the next prompt that
 * continues it (the next round quoting a moderator's reply): every position
 * the reply computed is reused, not only its full blocks. */
Test(engine, finished_reply_tail_reused)
{
    struct event_base *base = event_base_new();
    for (int partial = 1; partial >= 0; partial--) {
        eng_cfg cfg = base_cfg;
        cfg.no_partial = !partial;
        pl_backend *b = make_engine(base, cfg);
        int32_t a[36], c[72];
        make_prompt(a, 36, 7);
        collect col[2] = {0};
        submit_ids(b, a, 36, 10, &col[0]);
        run_until_done(base, col, 1);
        int n = col[0].n;
        cr_assert(n >= 1 && n <= 10);
        memcpy(c, a, sizeof a);
        memcpy(c + 36, col[0].toks, (size_t)n * sizeof *c);
        make_prompt(c + 36 + n, 72 - 36 - n, 8);
        submit_ids(b, c, 72, 5, &col[1]);
        run_until_done(base, col + 1, 1);
        int computed = 36 + n - 1, got = col[1].res.cached_tokens;
        if (partial)    /* + the last token when a step computed it before the stop */
            cr_assert(got == computed || got == computed + 1, "cached %d, reply computed %d", got,
                      computed);
        else
            cr_assert_eq(got, computed / 16 * 16, "full blocks only");
        check_against_reference(c, 72, 5, &col[1]);
        pl_backend_free(b);
    }
    event_base_free(base);
}

/* Three prompts sharing 50 ids (3 full blocks + 2 ids) that arrive
 * together: the 2nd and 3rd wait a step for the 1st's fourth block, then
 * reuse its first 2 ids as well (50 cached, not 48); outputs unchanged. A
 * slow step in flight makes them arrive in one scheduling pass. */
Test(engine, same_step_shared_prefix_deferred)
{
    eng_cfg cfg = base_cfg;
    cfg.sleep_us = 20000;
    struct event_base *base = event_base_new();
    pl_backend *b = make_engine(base, cfg);
    int32_t p[4][80];
    for (int k = 0; k < 4; k++) {
        make_prompt(p[k], 80, 20);
        for (int i = 50; i < 80; i++)
            p[k][i] = 3 + (p[k][i] + 7 * (k + 1)) % (VOCAB - 3);
    }
    make_prompt(p[0], 80, 21);   /* a blocker: keeps a step in flight */
    collect col[4] = {0};
    submit_ids_no_eos(b, p[0], 80, 6, &col[0]);
    for (int k = 1; k < 4; k++)
        submit_ids(b, p[k], 80, 6, &col[k]);
    run_until_done(base, col, 4);
    for (int k = 1; k < 4; k++)
        check_against_reference(p[k], 80, 6, &col[k]);
    int c1 = col[1].res.cached_tokens, c2 = col[2].res.cached_tokens,
        c3 = col[3].res.cached_tokens;
    cr_assert(c1 == 0 && c2 == 50 && c3 == 50, "cached %d %d %d", c1, c2, c3);
    json_t *s = stats(b);
    cr_assert_eq(stat_int(s, "kv", "share_deferrals"), 2);
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
            text[tl++] = (char)('a' + ref[i] % 26);
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

static json_t *fake_tokenizer_info(void *ud)
{
    (void)ud;
    return json_pack("{s:s, s:s}", "tokenizer_class", "fake", "eos_token", "c");
}

/* GET /tokenizer_info's op: the text hook's object plus the engine's own
 * model_max_length (min(runner max_model_len, the KV cache)); without the
 * hook a 501, never a crash. */
Test(engine, tokenizer_info_through_the_text_hook)
{
    struct event_base *base = event_base_new();
    pl_backend *b = make_engine(base, base_cfg);
    pl_err err = {0};
    cr_assert_null(b->ops->tokenizer_info(b, &err));
    cr_expect_eq(err.status, 501);
    cr_expect_str_eq(err.code, "not_implemented");
    pl_backend_free(b);

    pl_fake_runner_opts ro = {
        .info = {.n_vocab = VOCAB, .max_model_len = MAXLEN, .block_size = BS,
                 .num_blocks = 4, .max_seqs = 4, .max_rows = 64, .eos_id = EOS},
    };
    pl_engine_text text = fake_text;
    text.tokenizer_info = fake_tokenizer_info;
    pl_engine_options o;
    pl_engine_options_defaults(&o);
    b = pl_engine_backend_new(base, "fake-model", pl_fake_runner_new(&ro), &text, &o, &err);
    cr_assert_not_null(b, "%s", err.message);
    json_t *j = b->ops->tokenizer_info(b, &err);
    cr_assert_not_null(j, "%s", err.message);
    cr_expect_str_eq(json_string_value(json_object_get(j, "eos_token")), "c");
    /* 4 blocks of 16 tokens hold fewer than the runner's 256. */
    cr_expect_eq(json_integer_value(json_object_get(j, "model_max_length")), 4 * BS);
    cr_expect_eq(json_integer_value(json_object_get(j, "model_max_length")),
                 b->ops->max_model_len(b));
    json_decref(j);
    pl_backend_free(b);
    event_base_free(base);
}
