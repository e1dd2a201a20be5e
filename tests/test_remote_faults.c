/* test_remote_faults.c - the remote backend's fault handling (issue 36):
 * a replica that stops answering is ejected by its first-token or token
 * timeout and not chosen again until a health check passes; a Retry-After
 * longer than the request's budget comes back to the client at once (or
 * moves the request to another replica) instead of holding it. */
#include <criterion/criterion.h>
#include <event2/event.h>
#include <jansson.h>
#include <string.h>

#include "backends/remote/remote.h"
#include "tests/helpers/backend_sink.h"
#include "tests/helpers/fake_upstream.h"

static struct event_base *base;

static void setup(void)
{
    base = event_base_new();
}

static void teardown(void)
{
    event_base_free(base);
}

TestSuite(remote_faults, .init = setup, .fini = teardown, .timeout = 60);

static pl_backend *open_replicas(pl_fake_upstream **f, int n, int first_token_ms,
                                 int token_ms, int health_ms)
{
    const char *u[4];
    for (int i = 0; i < n; i++)
        u[i] = pl_fake_url(f[i]);
    pl_remote_opts o = {.model = "fake", .kind = PL_REMOTE_OPENAI, .urls = u, .n_urls = n,
                        .upper_bound = 8, .connect_timeout_ms = 1000,
                        .first_token_timeout_ms = first_token_ms, .token_timeout_ms = token_ms,
                        .max_attempts = 3, .health_interval_ms = health_ms, .affinity = true};
    char err[256];
    pl_backend *b = pl_remote_new(base, &o, err, sizeof err);
    cr_assert_not_null(b, "%s", err);
    return b;
}

static const pl_chat_message msgs[] = {{"user", "hello"}};

/* Submit one request and run the loop until it ends (at most ms). */
static void run_one(pl_backend *b, pl_test_got *g, int ms)
{
    pl_gen_request r = {.messages = msgs, .n_messages = 1, .add_generation_prompt = true};
    pl_sampling_defaults(&r.sampling);
    r.sampling.max_tokens = 16;
    uint64_t id;
    pl_err e;
    cr_assert_eq(pl_backend_submit(b, &r, pl_test_got_sink(g), &id, &e), 0, "%s", e.message);
    pl_test_run_until(base, pl_test_got_done, g, ms);
    cr_assert_eq(g->done, 1, "the request ended within %d ms", ms);
}

static bool replica_healthy(pl_backend *b, int i)
{
    json_t *h = pl_test_replica_stat(b, i, "healthy");
    bool ok = json_is_true(h);
    json_decref(h);
    return ok;
}

static int healthy_again(void *b)
{
    return replica_healthy(b, 0);
}

/* Replica 0 accepts the request and says nothing: its first-token timeout
 * moves the request to replica 1 and ejects it, so the next requests go
 * straight to replica 1 (before, it stayed healthy and took every other
 * request, each waiting out the timeout), until a health check passes. */
Test(remote_faults, silent_replica_is_ejected_by_the_first_token_timeout)
{
    pl_fake_upstream *f[2] = {pl_fake_start("fake"), pl_fake_start("fake")};
    pl_fake_push(f[0], &(pl_fake_step){.header_delay_ms = 3000});
    pl_backend *b = open_replicas(f, 2, 300, 5000, 5000);
    for (int i = 0; i < 4; i++) {
        pl_test_got g = {0};
        run_one(b, &g, 15000);
        cr_assert_eq(g.res.finish, PL_FINISH_LENGTH, "request %d: %s", i, g.err.message);
        if (i == 0)
            cr_assert(!replica_healthy(b, 0), "the silent replica is ejected");
    }
    cr_assert_eq(pl_fake_requests(f[0]), 1, "the ejected replica got no more requests");
    cr_assert_eq(pl_fake_requests(f[1]), 4);
    json_t *why = pl_test_replica_stat(b, 0, "last_error");
    cr_assert(strstr(json_string_value(why), "first token"), "%s", json_string_value(why));
    json_decref(why);
    /* Its GET /models still answers: the next health check re-admits it. */
    pl_test_run_until(base, healthy_again, b, 15000);
    cr_assert(replica_healthy(b, 0), "re-admitted by a health check");
    pl_backend_free(b);
    pl_fake_stop(f[0]);
    pl_fake_stop(f[1]);
}

/* A stream that stops mid-way ends with 504 and ejects its replica. */
Test(remote_faults, token_timeout_ejects_the_replica)
{
    pl_fake_upstream *f[1] = {pl_fake_start("fake")};
    pl_fake_push(f[0], &(pl_fake_step){.n_tokens = 3, .token_delay_ms = 2000});
    pl_backend *b = open_replicas(f, 1, 5000, 300, 60000);
    pl_test_got g = {0};
    run_one(b, &g, 15000);
    cr_assert_eq(g.res.finish, PL_FINISH_ERROR);
    cr_assert_eq(g.err.status, 504);
    cr_assert_str_eq(g.err.code, "upstream_timeout");
    cr_assert(!replica_healthy(b, 0), "a replica that stopped mid-stream is ejected");
    pl_backend_free(b);
    pl_fake_stop(f[0]);
}

/* One request to n replicas, the first of which answers 429 with
 * Retry-After: 3600. Returns how long it took, in ms. */
static double after_a_long_retry_after(pl_fake_upstream **f, int n, pl_test_got *g)
{
    pl_fake_push(f[0], &(pl_fake_step){.status = 429, .retry_after_s = 3600,
                                       .body = "{\"error\":{\"message\":\"quota\"}}"});
    pl_backend *b = open_replicas(f, n, 300000, 60000, 60000);
    double t0 = pl_test_now_ms();
    run_one(b, g, 10000);
    double dt = pl_test_now_ms() - t0;
    pl_backend_free(b);
    return dt;
}

/* The only replica: the 429 and its wait go back to the client at once
 * (it used to be held 30 s per attempt). */
Test(remote_faults, long_retry_after_is_passed_back_at_once)
{
    pl_fake_upstream *f[1] = {pl_fake_start("fake")};
    pl_test_got g = {0};
    double dt = after_a_long_retry_after(f, 1, &g);
    cr_assert_eq(g.res.finish, PL_FINISH_ERROR);
    cr_assert_eq(g.err.status, 429);
    cr_assert_eq(g.err.retry_after_s, 3600, "the client learns the upstream's wait");
    cr_assert(strstr(g.err.message, "quota"), "%s", g.err.message);
    cr_assert_lt(dt, 2000, "answered in %.0f ms", dt);
    cr_assert_eq(pl_fake_requests(f[0]), 1);
    pl_fake_stop(f[0]);
}

/* With another replica, the request moves there without waiting. */
Test(remote_faults, long_retry_after_moves_to_another_replica)
{
    pl_fake_upstream *f[2] = {pl_fake_start("fake"), pl_fake_start("fake")};
    pl_test_got g = {0};
    double dt = after_a_long_retry_after(f, 2, &g);
    cr_assert_eq(g.res.finish, PL_FINISH_LENGTH, "%s", g.err.message);
    cr_assert_lt(dt, 2000, "answered in %.0f ms", dt);
    cr_assert_eq(pl_fake_requests(f[0]), 1);
    cr_assert_eq(pl_fake_requests(f[1]), 1);
    pl_fake_stop(f[0]);
    pl_fake_stop(f[1]);
}
