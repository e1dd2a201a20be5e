/* test_engine_http.c - the default model on the CPU engine, over HTTP:
 * 64 concurrent chat completions, prefix-cache hits for a repeated system
 * prompt, tokenize/detokenize, and greedy determinism. Skips when the
 * default model is not in the cache. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/helpers/server_proc.h"

static pl_test_server srv;

static void start(void)
{
    PL_TEST_MODEL_OR_SKIP();
    const char *args[] = {"--backend", "cpu", "--model", pl_test_model_path(), "--log-level", "warn",
                          "--served-model-name", "smol", "--kv-cache-mb", "512", NULL};
    cr_assert_eq(pl_test_server_start(&srv, args), 0, "server did not start");
}

/* In the test body: Criterion ignores assertions in .fini, so the exit
 * status is checked here; .fini only cleans up after a failed test. */
static void stop_server(void)
{
    int rc = pl_test_server_stop(&srv);
    srv.pid = 0;
    cr_assert_eq(rc, 0, "the server exits 0 on SIGTERM (got %d)", rc);
}

static void stop(void)
{
    if (srv.pid > 0)
        pl_test_server_stop(&srv);
    srv.pid = 0;
}

TestSuite(engine_http, .init = start, .fini = stop, .timeout = 240);

static json_t *post(const char *path, const char *body, long *status)
{
    char url[256];
    snprintf(url, sizeof url, "%s%s", srv.url, path);
    pl_test_resp r;
    cr_assert_eq(pl_test_http("POST", url, body, strlen(body), &r), 0);
    *status = r.status;
    json_t *j = json_loads(r.body, 0, NULL);
    cr_assert_not_null(j, "not JSON: %s", r.body);
    pl_test_resp_free(&r);
    return j;
}

static json_t *kv_stats(void)
{
    char url[256];
    snprintf(url, sizeof url, "%s/status", srv.url);
    pl_test_resp r;
    cr_assert_eq(pl_test_http("GET", url, NULL, 0, &r), 0);
    json_t *j = json_loads(r.body, 0, NULL);
    pl_test_resp_free(&r);
    json_t *kv = json_incref(json_object_get(
        json_object_get(json_object_get(j, "models"), "smol"), "kv"));
    json_decref(j);
    cr_assert_not_null(kv);
    return kv;
}

/* Greedy tokens of one reply, with the top-2 logprobs at each step. */
typedef struct greedy_run {
    json_t *resp;
    json_t *content;             /* logprobs.content array */
} greedy_run;

static greedy_run greedy(const char *body)
{
    long st;
    greedy_run g;
    g.resp = post("/v1/chat/completions", body, &st);
    cr_assert_eq(st, 200);
    g.content = json_object_get(json_object_get(json_array_get(
        json_object_get(g.resp, "choices"), 0), "logprobs"), "content");
    cr_assert(json_array_size(g.content) > 0, "no logprobs");
    return g;
}

/* The second identical request is served partly from the prefix cache, so
 * its prefill takes another path (fewer rows): floating-point sums differ.
 * Greedy tokens must be identical, or diverge only where the first run's
 * top two candidates were within NEAR_TIE nats. */
#define NEAR_TIE 0.1

Test(engine_http, greedy_is_deterministic_and_usage_is_exact)
{
    const char *body = "{\"model\":\"smol\",\"temperature\":0,\"max_tokens\":16,"
                       "\"logprobs\":true,\"top_logprobs\":2,"
                       "\"messages\":[{\"role\":\"user\",\"content\":\"Name a colour.\"}]}";
    greedy_run a = greedy(body), b = greedy(body);
    size_t n = json_array_size(a.content);
    cr_expect_eq(n, json_array_size(b.content));
    for (size_t i = 0; i < n; i++) {
        json_t *ta = json_array_get(a.content, i), *tb = json_array_get(b.content, i);
        const char *sa = json_string_value(json_object_get(ta, "token"));
        const char *sb = json_string_value(json_object_get(tb, "token"));
        if (sb && !strcmp(sa, sb))
            continue;
        json_t *top = json_object_get(ta, "top_logprobs");
        double l0 = json_real_value(json_object_get(json_array_get(top, 0), "logprob"));
        double l1 = json_real_value(json_object_get(json_array_get(top, 1), "logprob"));
        cr_expect_lt(l0 - l1, NEAR_TIE, "token %zu: '%s' vs '%s' with top-2 gap %.4f", i, sa,
                     sb, l0 - l1);
        break;
    }
    /* usage.prompt_tokens equals /tokenize of the same messages. */
    long st;
    json_t *t = post("/tokenize", "{\"model\":\"smol\",\"add_generation_prompt\":true,"
                     "\"messages\":[{\"role\":\"user\",\"content\":\"Name a colour.\"}]}", &st);
    cr_expect_eq(st, 200);
    json_t *usage = json_object_get(a.resp, "usage");
    cr_expect_eq(json_integer_value(json_object_get(usage, "prompt_tokens")),
                 json_integer_value(json_object_get(t, "count")));
    cr_expect_eq(json_integer_value(json_object_get(usage, "completion_tokens")), (json_int_t)n);
    json_decref(a.resp);
    json_decref(b.resp);
    json_decref(t);
    stop_server();
}

/* Non-streamed completions logprobs are built from many deltas: the four
 * arrays stay parallel, one entry per completion token, text_offset runs
 * through the text, and the greedy token is the top of its top_logprobs. */
Test(engine_http, completions_logprobs_arrays_cover_every_token)
{
    long st;
    json_t *r = post("/v1/completions", "{\"model\":\"smol\",\"temperature\":0,"
                     "\"max_tokens\":12,\"logprobs\":2,\"prompt\":\"The sky is\"}", &st);
    cr_assert_eq(st, 200);
    json_t *ch = json_array_get(json_object_get(r, "choices"), 0);
    json_t *lp = json_object_get(ch, "logprobs");
    json_t *toks = json_object_get(lp, "tokens"), *tlp = json_object_get(lp, "token_logprobs");
    json_t *top = json_object_get(lp, "top_logprobs"), *off = json_object_get(lp, "text_offset");
    size_t n = json_array_size(toks);
    cr_assert_gt(n, 1);
    cr_expect_eq((json_int_t)n, json_integer_value(json_object_get(
                                    json_object_get(r, "usage"), "completion_tokens")));
    cr_assert(json_array_size(tlp) == n && json_array_size(top) == n && json_array_size(off) == n);
    char text[1024] = "";
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const char *t = json_string_value(json_array_get(toks, i));
        cr_assert_not_null(t);
        cr_expect_eq(json_integer_value(json_array_get(off, i)), (json_int_t)at, "offset %zu", i);
        at += strlen(t);
        cr_assert_lt(at, sizeof text);
        strcat(text, t);
        json_t *m = json_array_get(top, i);
        cr_expect_eq(json_object_size(m), 2, "top_logprobs[%zu] has %zu entries", i,
                     json_object_size(m));
        double best = -1e30;
        const char *k;
        json_t *v;
        json_object_foreach(m, k, v) if (json_number_value(v) > best) best = json_number_value(v);
        cr_expect_float_eq(json_number_value(json_object_get(m, t)), best, 1e-9, "token %zu", i);
        cr_expect_float_eq(json_number_value(json_array_get(tlp, i)), best, 1e-9, "token %zu", i);
    }
    cr_expect_str_eq(text, json_string_value(json_object_get(ch, "text")));
    json_decref(r);
    stop_server();
}

Test(engine_http, tokenize_round_trip)
{
    long st;
    json_t *t = post("/tokenize", "{\"model\":\"smol\",\"prompt\":\"Hello, world! \xC3\xA9\"}", &st);
    cr_assert_eq(st, 200);
    json_t *toks = json_object_get(t, "tokens");
    cr_assert(json_array_size(toks) > 2);
    char *dump = json_dumps(toks, 0);
    char body[1024];
    snprintf(body, sizeof body, "{\"model\":\"smol\",\"tokens\":%s}", dump);
    free(dump);
    json_t *d = post("/detokenize", body, &st);
    cr_expect_eq(st, 200);
    cr_expect_str_eq(json_string_value(json_object_get(d, "prompt")), "Hello, world! \xC3\xA9");
    json_decref(t);
    json_decref(d);
    stop_server();
}

/* vLLM answers 400 when prompt + max_tokens exceeds max_model_len: so does
 * parley, naming max_tokens, on both endpoints; a max_tokens that fits is
 * served. The context is what /v1/models reports. */
Test(engine_http, max_tokens_beyond_the_context_is_a_400)
{
    char url[256];
    snprintf(url, sizeof url, "%s/v1/models", srv.url);
    pl_test_resp r;
    cr_assert_eq(pl_test_http("GET", url, NULL, 0, &r), 0);
    json_t *models = json_loads(r.body, 0, NULL);
    pl_test_resp_free(&r);
    json_t *ml = json_object_get(json_array_get(json_object_get(models, "data"), 0),
                                 "max_model_len");
    cr_assert(json_is_integer(ml));
    int ctx = (int)json_integer_value(ml);
    json_decref(models);
    char body[512];
    const char *fmt[2] = {
        "{\"model\":\"smol\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
        "\"max_tokens\":%d}",
        "{\"model\":\"smol\",\"prompt\":\"Hi\",\"max_tokens\":%d}"};
    const char *path[2] = {"/v1/chat/completions", "/v1/completions"};
    for (int i = 0; i < 2; i++) {
        long st;
        snprintf(body, sizeof body, fmt[i], ctx);
        json_t *e = post(path[i], body, &st);
        cr_assert_eq(st, 400, "%s with max_tokens %d", path[i], ctx);
        json_t *err = json_object_get(e, "error");
        cr_expect_str_eq(json_string_value(json_object_get(err, "param")), "max_tokens");
        cr_expect_str_eq(json_string_value(json_object_get(err, "type")), "invalid_request_error");
        const char *msg = json_string_value(json_object_get(err, "message"));
        cr_expect(msg && strstr(msg, "context length"), "%s", msg ? msg : "(no message)");
        json_decref(e);
        snprintf(body, sizeof body, fmt[i], 2);
        e = post(path[i], body, &st);
        cr_expect_eq(st, 200, "%s with max_tokens 2", path[i]);
        json_decref(e);
    }
    stop_server();
}

Test(engine_http, sixty_four_concurrent_and_prefix_cache)
{
    enum { N_MAX = 64 };
    /* Under the sanitizers the forward pass is several times slower. */
    const int N = getenv("PARLEY_SANITIZED") ? 16 : N_MAX;
    static const char *sys =
        "You are a careful debate participant. Read the question, think about every option, "
        "weigh the arguments of the other agents, and answer with the letter of the best "
        "choice followed by one sentence of justification. Be brief and precise.";
    char url[256];
    snprintf(url, sizeof url, "%s/v1/chat/completions", srv.url);
    json_t *before = kv_stats();
    long hits0 = (long)json_integer_value(json_object_get(before, "prefix_hits"));
    json_decref(before);
    char *bodies[N_MAX];
    static pl_test_resp resp[N_MAX];
    for (int i = 0; i < N; i++) {
        bodies[i] = malloc(2048);
        snprintf(bodies[i], 2048,
                 "{\"model\":\"smol\",\"max_tokens\":8,\"temperature\":0,\"messages\":["
                 "{\"role\":\"system\",\"content\":\"%s\"},"
                 "{\"role\":\"user\",\"content\":\"Question %d: is %d even? A) yes B) no\"}]}",
                 sys, i, i);
    }
    cr_assert_eq(pl_test_post_many(url, bodies, N, resp), 0);
    for (int i = 0; i < N; i++) {
        cr_expect_eq(resp[i].status, 200, "request %d: %s", i, resp[i].body);
        json_t *j = json_loads(resp[i].body, 0, NULL);
        json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
        cr_expect(json_is_string(json_object_get(json_object_get(c0, "message"), "content")));
        json_t *u = json_object_get(j, "usage");
        cr_expect_gt(json_integer_value(json_object_get(u, "completion_tokens")), 0);
        json_decref(j);
        pl_test_resp_free(&resp[i]);
        free(bodies[i]);
    }
    json_t *kv = kv_stats();
    long hits = (long)json_integer_value(json_object_get(kv, "prefix_hits")) - hits0;
    /* The shared system prompt spans several full blocks: every request
     * after the first ones must find them cached. */
    cr_expect_gt(hits, 16 * (N / 2), "prefix hits %ld", hits);
    json_decref(kv);
    stop_server();
}

/* n > 1 on the real engine: n choices, indexed 0..n-1, each with its own
 * tokens; usage counts them all; greedy choices are identical. */
Test(engine_http, n_choices_on_the_engine)
{
    long st;
    json_t *r = post("/v1/completions", "{\"model\":\"smol\",\"temperature\":1.0,\"seed\":7,"
                     "\"n\":3,\"max_tokens\":8,\"logprobs\":1,\"ignore_eos\":true,"
                     "\"prompt\":\"Once upon a time\"}", &st);
    cr_assert_eq(st, 200);
    json_t *ch = json_object_get(r, "choices");
    cr_assert_eq(json_array_size(ch), 3);
    json_int_t total = 0;
    bool seen[3] = {false};
    const char *text[3];
    for (size_t i = 0; i < 3; i++) {
        json_t *c = json_array_get(ch, i);
        json_int_t idx = json_integer_value(json_object_get(c, "index"));
        cr_assert(idx >= 0 && idx < 3 && !seen[idx], "choice index %lld", (long long)idx);
        seen[idx] = true;
        text[idx] = json_string_value(json_object_get(c, "text"));
        cr_assert_not_null(text[idx]);
        size_t n = json_array_size(json_object_get(json_object_get(c, "logprobs"), "tokens"));
        cr_expect_eq(n, 8, "choice %lld made %zu tokens", (long long)idx, n);
        cr_expect_str_eq(json_string_value(json_object_get(c, "finish_reason")), "length");
        total += (json_int_t)n;
    }
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(r, "usage"),
                                                    "completion_tokens")), total);
    cr_expect(strcmp(text[0], text[1]) || strcmp(text[1], text[2]),
              "three samples at temperature 1 all equal: '%s'", text[0]);
    json_decref(r);
    r = post("/v1/chat/completions", "{\"model\":\"smol\",\"temperature\":0,\"n\":2,"
             "\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"Hi!\"}]}", &st);
    cr_assert_eq(st, 200);
    ch = json_object_get(r, "choices");
    cr_assert_eq(json_array_size(ch), 2);
    const char *a = json_string_value(json_object_get(json_object_get(json_array_get(ch, 0),
                                                                      "message"), "content"));
    const char *b = json_string_value(json_object_get(json_object_get(json_array_get(ch, 1),
                                                                      "message"), "content"));
    cr_assert(a && b);
    cr_expect_str_eq(a, b, "greedy choices are identical");
    json_decref(r);
    stop_server();
}

static json_t *model_status(void)
{
    char url[256];
    snprintf(url, sizeof url, "%s/status", srv.url);
    pl_test_resp r;
    cr_assert_eq(pl_test_http("GET", url, NULL, 0, &r), 0);
    json_t *j = json_loads(r.body, 0, NULL);
    pl_test_resp_free(&r);
    json_t *m = json_incref(json_object_get(json_object_get(j, "models"), "smol"));
    json_decref(j);
    cr_assert_not_null(m);
    return m;
}

/* Whether buf holds a chunk with a non-empty "content" delta. */
static bool has_text_delta(const char *buf)
{
    static const char key[] = "\"content\":\"";
    for (const char *p = buf; (p = strstr(p, key)); p++)
        if (p[sizeof key - 1] && p[sizeof key - 1] != '"')
            return true;
    return false;
}

/* A streaming client that goes away mid-reply: the engine aborts its
 * request, gives back every KV block, and /status counts the abort. */
Test(engine_http, client_disconnect_aborts_and_frees_blocks)
{
    int port = atoi(strrchr(srv.url, ':') + 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    const char *body = "{\"model\":\"smol\",\"stream\":true,\"max_tokens\":400,"
                       "\"ignore_eos\":true,\"messages\":[{\"role\":\"user\","
                       "\"content\":\"Count to a thousand.\"}]}";
    char req[1024], buf[8192] = "";
    int n = snprintf(req, sizeof req, "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    cr_assert_eq(write(fd, req, (size_t)n), n);
    /* Wait (deadline 120 s) for a content delta, then hang up. The role
     * chunk, sent before anything runs, carries "content":"" and does not
     * count: a token has been computed only once a non-empty one arrives. */
    size_t len = 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    for (int waited = 0; waited < 120000 && !has_text_delta(buf) &&
                         len + 1 < sizeof buf; waited += 100) {
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t k = read(fd, buf + len, sizeof buf - 1 - len);
        cr_assert_gt(k, 0, "the server closed the stream");
        len += (size_t)k;
        buf[len] = '\0';
    }
    cr_assert(has_text_delta(buf), "no content delta: %s", buf);
    json_t *m = model_status();
    cr_assert_gt(json_integer_value(json_object_get(json_object_get(m, "kv"), "used")), 0);
    json_int_t aborted0 = json_integer_value(json_object_get(m, "aborted"));
    json_decref(m);
    close(fd);
    json_int_t aborted = aborted0, used = -1, running = -1;
    for (int i = 0; i < 1200 && (aborted == aborted0 || used || running); i++) {
        usleep(100000);
        m = model_status();
        aborted = json_integer_value(json_object_get(m, "aborted"));
        used = json_integer_value(json_object_get(json_object_get(m, "kv"), "used"));
        running = json_integer_value(json_object_get(m, "running"));
        json_decref(m);
    }
    cr_expect_eq(aborted, aborted0 + 1, "/status counts the abort");
    cr_expect_eq(used, 0, "every KV block given back");
    cr_expect_eq(running, 0);
    stop_server();
}
