/* test_remote.c - the remote backend against a scriptable libmicrohttpd
 * upstream: streaming, passthrough, usage, upstream errors, retries (500,
 * 429 with Retry-After, refused connections), drops mid-stream, malformed
 * SSE, slow headers, stalls, aborts, failover and capacity. */
#include <criterion/criterion.h>
#include <event2/event.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/remote/remote.h"
#include "tests/helpers/backend_sink.h"
#include "tests/helpers/fake_upstream.h"

typedef pl_test_got got;

static struct event_base *base;

static void run_until(int (*cond)(void *), void *arg, int ms)
{
    pl_test_run_until(base, cond, arg, ms);
}

static pl_remote_opts opts(const char **urls, int n)
{
    return (pl_remote_opts){.model = "fake", .kind = PL_REMOTE_OPENAI, .urls = urls,
                            .n_urls = n, .upper_bound = 8, .connect_timeout_ms = 1000,
                            .first_token_timeout_ms = 5000, .token_timeout_ms = 5000,
                            .max_attempts = 3, .health_interval_ms = 200, .affinity = true};
}

static pl_backend *open_one(pl_fake_upstream *f, int attempts)
{
    const char *u[1] = {pl_fake_url(f)};
    pl_remote_opts o = opts(u, 1);
    o.max_attempts = attempts;
    char err[256];
    pl_backend *b = pl_remote_new(base, &o, err, sizeof err);
    cr_assert_not_null(b, "%s", err);
    return b;
}

static const pl_chat_message msgs[] = {{"user", "hello"}};

static uint64_t submit(pl_backend *b, got *g, json_t *body)
{
    pl_gen_request r = {.messages = msgs, .n_messages = 1, .add_generation_prompt = true,
                        .oai_body = body};
    pl_sampling_defaults(&r.sampling);
    r.sampling.max_tokens = 16;
    uint64_t id;
    pl_err e;
    cr_assert_eq(pl_backend_submit(b, &r, pl_test_got_sink(g), &id, &e), 0);
    return id;
}

static void setup(void)
{
    base = event_base_new();
}

static void teardown(void)
{
    event_base_free(base);
}

TestSuite(remote, .init = setup, .fini = teardown, .timeout = 60);

Test(remote, streams_text_usage_and_passes_fields_through)
{
    pl_fake_upstream *f = pl_fake_start("up-model");
    pl_fake_push(f, &(pl_fake_step){.n_tokens = 4});
    const char *u[1] = {pl_fake_url(f)};
    pl_remote_opts o = opts(u, 1);
    char err[256];
    pl_backend *b = pl_remote_new(base, &o, err, sizeof err);
    cr_assert_not_null(b, "%s", err);
    json_t *body = json_pack("{s:s, s:[{s:s, s:s}], s:i, s:i, s:{s:s}, s:f, s:s}", "model",
                             "fake", "messages", "role", "user", "content", "hello", "n", 2,
                             "max_tokens", 16, "vendor_ext", "k", "v", "top_p", 0.5,
                             "prompt_cache_key", "conv-1");
    got g = {0};
    submit(b, &g, body);
    run_until(pl_test_got_done, &g, 10000);
    cr_assert_eq(g.done, 1);
    cr_assert_str_eq(g.text, "tok1 tok2 tok3 tok4 ");
    cr_assert_eq(g.res.finish, PL_FINISH_LENGTH);
    cr_assert_eq(g.res.prompt_tokens, 7);
    cr_assert_eq(g.res.completion_tokens, 4);
    cr_assert_eq(g.res.cached_tokens, 5);
    /* what went upstream: the only listed model, streaming, n left to the API */
    char *sent = pl_fake_last_body(f);
    json_t *j = json_loads(sent, 0, NULL);
    cr_assert_str_eq(json_string_value(json_object_get(j, "model")), "up-model");
    cr_assert(json_is_true(json_object_get(j, "stream")));
    cr_assert(json_is_true(json_object_get(json_object_get(j, "stream_options"), "include_usage")));
    cr_assert_null(json_object_get(j, "n"));
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "vendor_ext"), "k")), "v");
    cr_assert_float_eq(json_real_value(json_object_get(j, "top_p")), 0.5, 1e-9);
    cr_assert_str_eq(json_string_value(json_object_get(j, "prompt_cache_key")), "conv-1");
    json_decref(j);
    free(sent);
    json_decref(body);
    pl_backend_free(b);
    pl_fake_stop(f);
}

Test(remote, job_request_is_built_from_sampling)
{
    pl_fake_upstream *f = pl_fake_start("fake");
    pl_backend *b = open_one(f, 1);
    pl_gen_request r = {.messages = msgs, .n_messages = 1};
    pl_sampling_defaults(&r.sampling);
    r.sampling.temperature = 0.25;
    r.sampling.max_tokens = 9;
    r.sampling.has_seed = true;
    r.sampling.seed = 42;
    r.sampling.top_k = 5;          /* not sent to kind openai */
    char *stop = "END";
    r.sampling.stop[0] = stop;
    r.sampling.n_stop = 1;
    got g = {0};
    uint64_t id;
    pl_err e;
    cr_assert_eq(pl_backend_submit(b, &r, pl_test_got_sink(&g), &id, &e), 0);
    run_until(pl_test_got_done, &g, 10000);
    cr_assert_eq(g.res.finish, PL_FINISH_LENGTH);
    char *sent = pl_fake_last_body(f);
    json_t *j = json_loads(sent, 0, NULL);
    cr_assert_float_eq(json_real_value(json_object_get(j, "temperature")), 0.25, 1e-9);
    cr_assert_eq(json_integer_value(json_object_get(j, "max_tokens")), 9);
    cr_assert_eq(json_integer_value(json_object_get(j, "seed")), 42);
    cr_assert_str_eq(json_string_value(json_array_get(json_object_get(j, "stop"), 0)), "END");
    cr_assert_null(json_object_get(j, "top_k"));
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(
        json_object_get(j, "messages"), 0), "content")), "hello");
    json_decref(j);
    free(sent);
    pl_backend_free(b);
    pl_fake_stop(f);
}

Test(remote, upstream_4xx_comes_back_with_its_status_and_message)
{
    pl_fake_upstream *f = pl_fake_start("fake");
    pl_fake_push(f, &(pl_fake_step){.status = 400, .body =
        "{\"error\":{\"message\":\"max_tokens is too large\",\"type\":\"BadRequestError\","
        "\"param\":\"max_tokens\",\"code\":400}}"});
    pl_backend *b = open_one(f, 3);
    got g = {0};
    submit(b, &g, NULL);
    run_until(pl_test_got_done, &g, 10000);
    cr_assert_eq(g.res.finish, PL_FINISH_ERROR);
    cr_assert_eq(g.err.status, 400);
    cr_assert(strstr(g.err.message, "max_tokens is too large"), "%s", g.err.message);
    cr_assert_str_eq(g.err.param, "max_tokens");
    cr_assert_eq(pl_fake_requests(f), 1, "a 400 is not retried");
    pl_backend_free(b);
    pl_fake_stop(f);
}

Test(remote, retries_a_500_then_succeeds)
{
    pl_fake_upstream *f = pl_fake_start("fake");
    pl_fake_push(f, &(pl_fake_step){.status = 500, .body = "{\"detail\":\"boom\"}"});
    pl_backend *b = open_one(f, 3);
    got g = {0};
    submit(b, &g, NULL);
    run_until(pl_test_got_done, &g, 10000);
    cr_assert_eq(g.res.finish, PL_FINISH_LENGTH, "%s", g.err.message);
    cr_assert_eq(pl_fake_requests(f), 2);
    json_t *r = pl_test_replica_stat(b, 0, "retries");
    cr_assert_eq(json_integer_value(r), 1);
    json_decref(r);
    pl_backend_free(b);
    pl_fake_stop(f);
}

Test(remote, gives_up_after_max_attempts_with_the_upstream_error)
{
    pl_fake_upstream *f = pl_fake_start("fake");
    for (int i = 0; i < 3; i++)
        pl_fake_push(f, &(pl_fake_step){.status = 503, .body = "{\"error\":{\"message\":\"overloaded\"}}"});
    pl_backend *b = open_one(f, 3);
    got g = {0};
    submit(b, &g, NULL);
    run_until(pl_test_got_done, &g, 15000);
    cr_assert_eq(g.res.finish, PL_FINISH_ERROR);
    cr_assert_eq(g.err.status, 503);
    cr_assert(strstr(g.err.message, "overloaded"));
    cr_assert_eq(pl_fake_requests(f), 3);
    pl_backend_free(b);
    pl_fake_stop(f);
}

Test(remote, honours_retry_after_on_429)
{
    pl_fake_upstream *f = pl_fake_start("fake");
    pl_fake_push(f, &(pl_fake_step){.status = 429, .retry_after_s = 1,
                                    .body = "{\"error\":{\"message\":\"slow down\"}}"});
    pl_backend *b = open_one(f, 2);
    got g = {0};
    double t0 = pl_test_now_ms();
    submit(b, &g, NULL);
    run_until(pl_test_got_done, &g, 10000);
    double dt = pl_test_now_ms() - t0;
    cr_assert_eq(g.res.finish, PL_FINISH_LENGTH);
    cr_assert_geq(dt, 950, "retried after %.0f ms, before Retry-After", dt);
    cr_assert_eq(pl_fake_requests(f), 2);
    json_t *h = pl_test_replica_stat(b, 0, "healthy");
    cr_assert(json_is_true(h), "a 429 does not eject");
    json_decref(h);
    pl_backend_free(b);
    pl_fake_stop(f);
}

Test(remote, drop_mid_stream_is_a_clean_error)
{
    pl_fake_upstream *f = pl_fake_start("fake");
    pl_fake_push(f, &(pl_fake_step){.n_tokens = 10, .drop_after = 2});
    pl_backend *b = open_one(f, 3);
    got g = {0};
    submit(b, &g, NULL);
    run_until(pl_test_got_done, &g, 10000);
    cr_assert_eq(g.res.finish, PL_FINISH_ERROR);
    cr_assert_eq(g.err.status, 502);
    cr_assert_str_eq(g.err.code, "upstream_stream_broken");
    cr_assert_str_eq(g.text, "tok1 tok2 ");
    cr_assert_eq(pl_fake_requests(f), 1, "no retry after tokens went out");
    pl_backend_free(b);
    pl_fake_stop(f);
}

Test(remote, in_stream_error_event_is_passed_on)
{
    pl_fake_upstream *f = pl_fake_start("fake");
    pl_fake_push(f, &(pl_fake_step){.n_tokens = 2, .error_event = true});
    pl_backend *b = open_one(f, 3);
    got g = {0};
    submit(b, &g, NULL);
    run_until(pl_test_got_done, &g, 10000);
    cr_assert_eq(g.res.finish, PL_FINISH_ERROR);
    cr_assert_eq(g.err.status, 500);
    cr_assert(strstr(g.err.message, "engine died"), "%s", g.err.message);
    pl_backend_free(b);
    pl_fake_stop(f);
}

Test(remote, malformed_sse_is_retried_then_fails_cleanly)
{
    pl_fake_upstream *f = pl_fake_start("fake");
    pl_fake_push(f, &(pl_fake_step){.malformed = true});
    pl_fake_push(f, &(pl_fake_step){.malformed = true});
    pl_backend *b = open_one(f, 2);
    got g = {0};
    submit(b, &g, NULL);
    run_until(pl_test_got_done, &g, 10000);
    cr_assert_eq(g.res.finish, PL_FINISH_ERROR);
    cr_assert_eq(g.err.status, 502);
    cr_assert_str_eq(g.err.code, "upstream_bad_response");
    cr_assert_eq(pl_fake_requests(f), 2);
    pl_backend_free(b);
    pl_fake_stop(f);
}

Test(remote, stream_without_end_is_an_error)
{
    pl_fake_upstream *f = pl_fake_start("fake");
    pl_fake_push(f, &(pl_fake_step){.n_tokens = 2, .end_early = true});
    pl_backend *b = open_one(f, 1);
    got g = {0};
    submit(b, &g, NULL);
    run_until(pl_test_got_done, &g, 10000);
    cr_assert_eq(g.res.finish, PL_FINISH_ERROR);
    cr_assert_str_eq(g.err.code, "upstream_stream_broken");
    cr_assert_str_eq(g.text, "tok1 tok2 ");
    pl_backend_free(b);
    pl_fake_stop(f);
}

Test(remote, slow_headers_hit_the_first_token_timeout_then_retry)
{
    pl_fake_upstream *f = pl_fake_start("fake");
    pl_fake_push(f, &(pl_fake_step){.header_delay_ms = 1500});
    const char *u[1] = {pl_fake_url(f)};
    pl_remote_opts o = opts(u, 1);
    o.first_token_timeout_ms = 300;
    char err[256];
    pl_backend *b = pl_remote_new(base, &o, err, sizeof err);
    got g = {0};
    submit(b, &g, NULL);
    run_until(pl_test_got_done, &g, 10000);
    cr_assert_eq(g.res.finish, PL_FINISH_LENGTH, "%s", g.err.message);
    cr_assert_eq(pl_fake_requests(f), 2);
    pl_backend_free(b);
    pl_fake_stop(f);
}

Test(remote, stalled_stream_hits_the_inter_token_timeout)
{
    pl_fake_upstream *f = pl_fake_start("fake");
    pl_fake_push(f, &(pl_fake_step){.n_tokens = 3, .token_delay_ms = 1500});
    const char *u[1] = {pl_fake_url(f)};
    pl_remote_opts o = opts(u, 1);
    o.first_token_timeout_ms = 5000;
    o.token_timeout_ms = 400;
    char err[256];
    pl_backend *b = pl_remote_new(base, &o, err, sizeof err);
    got g = {0};
    submit(b, &g, NULL);
    run_until(pl_test_got_done, &g, 10000);
    cr_assert_eq(g.res.finish, PL_FINISH_ERROR);
    cr_assert_eq(g.err.status, 504);
    cr_assert_str_eq(g.text, "tok1 ");
    pl_backend_free(b);
    pl_fake_stop(f);
}

static int closed_once(void *f)
{
    return pl_fake_client_closed(f) >= 1;
}

Test(remote, abort_closes_a_never_ending_stream)
{
    pl_fake_upstream *f = pl_fake_start("fake");
    pl_fake_push(f, &(pl_fake_step){.never_end = true, .token_delay_ms = 10});
    pl_backend *b = open_one(f, 1);
    got g = {0};
    uint64_t id = submit(b, &g, NULL);
    double t0 = pl_test_now_ms();
    while (g.deltas < 3 && pl_test_now_ms() - t0 < 10000) {
        struct timeval tv = {0, 10000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    }
    cr_assert_geq(g.deltas, 3);
    pl_backend_abort(b, id);
    int deltas = g.deltas;
    run_until(closed_once, f, 5000);
    cr_assert_eq(pl_fake_client_closed(f), 1, "the upstream saw the client leave");
    cr_assert_eq(g.deltas, deltas, "no delta after abort");
    cr_assert_eq(g.done, 0, "no on_done after abort");
    json_t *s = b->ops->stats(b);
    cr_assert_eq(json_integer_value(json_object_get(s, "aborted")), 1);
    cr_assert_eq(json_integer_value(json_object_get(s, "in_flight")), 0);
    json_decref(s);
    pl_backend_free(b);
    pl_fake_stop(f);
}

static void abort_in_delta(void *ud, const pl_delta *d)
{
    got *g = ud;
    g->deltas++;
    pl_backend **bp = (pl_backend **)g->text;   /* the backend and id stashed here */
    pl_backend_abort(bp[0], ((uint64_t *)g->text)[1]);
}

Test(remote, abort_from_inside_a_delta_is_safe)
{
    pl_fake_upstream *f = pl_fake_start("fake");
    pl_fake_push(f, &(pl_fake_step){.never_end = true, .token_delay_ms = 5});
    pl_backend *b = open_one(f, 1);
    got g = {0};
    pl_gen_request r = {.messages = msgs, .n_messages = 1};
    pl_sampling_defaults(&r.sampling);
    uint64_t id;
    pl_err e;
    pl_sink sink = pl_test_got_sink(&g);
    sink.on_delta = abort_in_delta;
    cr_assert_eq(pl_backend_submit(b, &r, sink, &id, &e), 0);
    ((pl_backend **)g.text)[0] = b;
    ((uint64_t *)g.text)[1] = id;
    run_until(closed_once, f, 5000);
    cr_assert_eq(g.deltas, 1);
    cr_assert_eq(g.done, 0);
    pl_backend_free(b);
    pl_fake_stop(f);
}

Test(remote, down_upstream_fails_and_is_ejected)
{
    pl_fake_upstream *f = pl_fake_start("fake");
    char url[64];
    snprintf(url, sizeof url, "%s", pl_fake_url(f));
    pl_fake_stop(f);             /* nothing listens there now */
    const char *u[1] = {url};
    pl_remote_opts o = opts(u, 1);
    o.max_attempts = 2;
    char err[256];
    pl_backend *b = pl_remote_new(base, &o, err, sizeof err);
    cr_assert_not_null(b, "a down replica is not a start-up error: %s", err);
    json_t *h = pl_test_replica_stat(b, 0, "healthy");
    cr_assert(json_is_false(h));
    json_decref(h);
    got g = {0};
    submit(b, &g, NULL);
    run_until(pl_test_got_done, &g, 10000);
    cr_assert_eq(g.res.finish, PL_FINISH_ERROR);
    cr_assert_eq(g.err.status, 502);
    cr_assert_str_eq(g.err.code, "upstream_unavailable");
    pl_backend_free(b);
}

Test(remote, fails_over_to_the_healthy_replica_and_readmits)
{
    pl_fake_upstream *up = pl_fake_start("fake"), *gone = pl_fake_start("fake");
    char gone_url[64];
    snprintf(gone_url, sizeof gone_url, "%s", pl_fake_url(gone));
    const char *u[2] = {gone_url, pl_fake_url(up)};
    pl_remote_opts o = opts(u, 2);
    char err[256];
    pl_backend *b = pl_remote_new(base, &o, err, sizeof err);
    cr_assert_not_null(b, "%s", err);
    pl_fake_stop(gone);          /* dies after start-up: still marked healthy */
    for (int i = 0; i < 6; i++) {
        got g = {0};
        submit(b, &g, NULL);
        run_until(pl_test_got_done, &g, 10000);
        cr_assert_eq(g.res.finish, PL_FINISH_LENGTH, "request %d: %s", i, g.err.message);
    }
    json_t *h = pl_test_replica_stat(b, 0, "healthy");
    cr_assert(json_is_false(h), "the dead replica was ejected");
    json_decref(h);
    cr_assert_eq(pl_fake_requests(up), 6);
    pl_backend_free(b);
    pl_fake_stop(up);
}

Test(remote, routes_by_least_outstanding_and_keeps_affinity)
{
    pl_fake_upstream *a = pl_fake_start("fake"), *c = pl_fake_start("fake");
    for (int i = 0; i < 8; i++) {
        pl_fake_push(a, &(pl_fake_step){.n_tokens = 3, .token_delay_ms = 50});
        pl_fake_push(c, &(pl_fake_step){.n_tokens = 3, .token_delay_ms = 50});
    }
    const char *u[2] = {pl_fake_url(a), pl_fake_url(c)};
    pl_remote_opts o = opts(u, 2);
    char err[256];
    pl_backend *b = pl_remote_new(base, &o, err, sizeof err);
    cr_assert_eq(pl_backend_capacity(b), 16, "the sum over healthy replicas");
    got g[4] = {0};
    for (int i = 0; i < 4; i++)
        submit(b, &g[i], NULL);  /* no key: spread by outstanding */
    for (int i = 0; i < 4; i++)
        run_until(pl_test_got_done, &g[i], 10000);
    cr_assert_eq(pl_fake_requests(a), 2);
    cr_assert_eq(pl_fake_requests(c), 2);
    /* one conversation key, one after the other: always the same replica */
    int ra = pl_fake_requests(a);
    for (int i = 0; i < 4; i++) {
        got k = {0};
        pl_gen_request r = {.messages = msgs, .n_messages = 1, .conversation_key = 12345};
        pl_sampling_defaults(&r.sampling);
        uint64_t id;
        pl_err e;
        cr_assert_eq(pl_backend_submit(b, &r, pl_test_got_sink(&k), &id, &e), 0);
        run_until(pl_test_got_done, &k, 10000);
    }
    int da = pl_fake_requests(a) - ra, dc = pl_fake_requests(c) - 2;
    cr_assert((da == 4 && dc == 0) || (da == 0 && dc == 4), "a=%d c=%d", da, dc);
    pl_backend_free(b);
    pl_fake_stop(a);
    pl_fake_stop(c);
}

static uint64_t submit_key(pl_backend *b, got *g, uint64_t key)
{
    pl_gen_request r = {.messages = msgs, .n_messages = 1, .conversation_key = key};
    pl_sampling_defaults(&r.sampling);
    uint64_t id;
    pl_err e;
    cr_assert_eq(pl_backend_submit(b, &r, pl_test_got_sink(g), &id, &e), 0);
    return id;
}

static json_int_t backend_stat(pl_backend *b, const char *key)
{
    json_t *s = b->ops->stats(b);
    json_int_t v = json_integer_value(json_object_get(s, key));
    json_decref(s);
    return v;
}

/* Capacity 1 per replica, both busy: a key's requests wait at its home
 * replica (its prefix cache) instead of moving to another full one. */
Test(remote, keeps_a_key_home_when_every_replica_is_full)
{
    pl_fake_upstream *f[2] = {pl_fake_start("fake"), pl_fake_start("fake")};
    for (int i = 0; i < 6; i++)
        for (int k = 0; k < 2; k++)
            pl_fake_push(f[k], &(pl_fake_step){.n_tokens = 4, .token_delay_ms = 100});
    const char *u[2] = {pl_fake_url(f[0]), pl_fake_url(f[1])};
    pl_remote_opts o = opts(u, 2);
    o.upper_bound = 1;
    char err[256];
    pl_backend *b = pl_remote_new(base, &o, err, sizeof err);
    cr_assert_not_null(b, "%s", err);
    got g[5] = {0};
    submit_key(b, &g[0], 777);       /* the key's home: free, so it goes there */
    submit(b, &g[1], NULL);          /* no key: the other replica; both full now */
    for (int i = 2; i < 5; i++)
        submit_key(b, &g[i], 777);
    for (int i = 0; i < 5; i++)
        run_until(pl_test_got_done, &g[i], 10000);
    int n0 = pl_fake_requests(f[0]), n1 = pl_fake_requests(f[1]);
    cr_assert((n0 == 4 && n1 == 1) || (n0 == 1 && n1 == 4), "%d/%d", n0, n1);
    cr_assert_eq(backend_stat(b, "affinity_hits"), 3);
    cr_assert_eq(backend_stat(b, "affinity_moves"), 0);
    /* with room elsewhere, a full home gives the request away */
    got h[2] = {0};
    submit_key(b, &h[0], 777);
    submit_key(b, &h[1], 777);
    for (int i = 0; i < 2; i++)
        run_until(pl_test_got_done, &h[i], 10000);
    cr_assert_eq(pl_fake_requests(f[0]) + pl_fake_requests(f[1]), 7);
    cr_assert_eq(pl_fake_requests(n0 == 4 ? f[1] : f[0]), 2, "the second one moved");
    cr_assert_eq(backend_stat(b, "affinity_moves"), 1);
    pl_backend_free(b);
    pl_fake_stop(f[0]);
    pl_fake_stop(f[1]);
}

Test(remote, unknown_model_with_several_listed_is_a_start_up_error)
{
    pl_fake_upstream *f = pl_fake_start("other");
    const char *u[1] = {pl_fake_url(f)};
    pl_remote_opts o = opts(u, 1);
    o.upstream_model = "missing";
    char err[256] = "";
    pl_backend *b = pl_remote_new(base, &o, err, sizeof err);
    cr_assert_not_null(b, "an explicit upstream_model is trusted");
    pl_backend_free(b);
    const char *bad[1] = {"ftp://x"};
    o = opts(bad, 1);
    cr_assert_null(pl_remote_new(base, &o, err, sizeof err));
    cr_assert(strstr(err, "http://"), "%s", err);
    pl_fake_stop(f);
}
