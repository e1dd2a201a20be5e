/* test_remote_http.c - parley in front of parley: a gateway with
 * --upstream URLs before two `parley serve --backend mock` processes (and a
 * CPU engine): routing, affinity by prompt_cache_key, failover when an
 * upstream is SIGKILLed, a client disconnect reaching the upstream as an
 * abort, a debate job through the gateway, the same text as the engine
 * gives directly. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/helpers/fake_upstream.h"
#include "tests/helpers/server_proc.h"

static pl_test_server up[2], gw;

static void start_upstreams_mode(const char *delay_ms, const char *mode)
{
    for (int i = 0; i < 2; i++) {
        const char *a[] = {"--backend", "mock", "--served-model-name", "mock", "--mock-mode",
                           mode, "--mock-token-delay-ms", delay_ms, "--log-level", "warn",
                           NULL};
        cr_assert_eq(pl_test_server_start(&up[i], a), 0);
    }
}

static void start_upstreams(const char *delay_ms)
{
    start_upstreams_mode(delay_ms, "echo");
}

static void start_gateway(const char *extra)
{
    char u0[160], u1[160];
    snprintf(u0, sizeof u0, "%s/v1", up[0].url);
    snprintf(u1, sizeof u1, "%s/v1", up[1].url);
    const char *a[] = {"--upstream", u0, "--upstream", u1, "--upstream-health-interval-ms",
                       "200", "--log-level", "warn", extra, NULL};
    cr_assert_eq(pl_test_server_start(&gw, a), 0);
}

static void stop_all(void)
{
    if (gw.pid > 0)
        pl_test_server_stop(&gw);
    for (int i = 0; i < 2; i++)
        if (up[i].pid > 0)
            pl_test_server_stop(&up[i]);
}

static long upstream_stat(int i, const char *key)
{
    char url[256];
    snprintf(url, sizeof url, "%s/status", up[i].url);
    pl_test_resp r;
    cr_assert_eq(pl_test_http("GET", url, NULL, 0, &r), 0);
    json_t *j = json_loads(r.body, 0, NULL);
    pl_test_resp_free(&r);
    long v = (long)json_integer_value(
        json_object_get(json_object_get(json_object_get(j, "models"), "mock"), key));
    json_decref(j);
    return v;
}

static long chat(const char *extra, char *content, size_t cap)
{
    char url[256], body[512];
    snprintf(url, sizeof url, "%s/v1/chat/completions", gw.url);
    snprintf(body, sizeof body, "{\"model\":\"mock\",\"messages\":[{\"role\":\"user\","
             "\"content\":\"one two three four\"}],\"max_tokens\":3%s}", extra);
    pl_test_resp r;
    cr_assert_eq(pl_test_http("POST", url, body, strlen(body), &r), 0);
    long st = r.status;
    if (content) {
        json_t *j = json_loads(r.body, 0, NULL);
        const char *c = json_string_value(json_object_get(json_object_get(
            json_array_get(json_object_get(j, "choices"), 0), "message"), "content"));
        snprintf(content, cap, "%s", c ? c : r.body);
        json_decref(j);
    }
    pl_test_resp_free(&r);
    return st;
}

TestSuite(gateway, .fini = stop_all, .timeout = 120);

Test(gateway, lists_the_upstream_model_and_answers)
{
    start_upstreams("0");
    start_gateway(NULL);
    char url[256], text[256];
    snprintf(url, sizeof url, "%s/v1/models", gw.url);
    pl_test_resp r;
    cr_assert_eq(pl_test_http("GET", url, NULL, 0, &r), 0);
    cr_assert(strstr(r.body, "\"id\":\"mock\""), "%s", r.body);
    cr_assert(strstr(r.body, "\"capacity\":512"), "2 x 256: %s", r.body);
    pl_test_resp_free(&r);
    cr_assert_eq(chat("", text, sizeof text), 200);
    cr_assert_str_eq(text, "one two three");
}

Test(gateway, spreads_requests_and_keeps_prompt_cache_key_affinity)
{
    start_upstreams("20");
    start_gateway(NULL);
    char url[256];
    snprintf(url, sizeof url, "%s/v1/chat/completions", gw.url);
    char *bodies[8];
    pl_test_resp resp[8];
    long b0 = upstream_stat(0, "submitted"), b1 = upstream_stat(1, "submitted"); /* probes */
    for (int i = 0; i < 8; i++)
        bodies[i] = "{\"model\":\"mock\",\"messages\":[{\"role\":\"user\",\"content\":"
                    "\"a b c d e f\"}],\"max_tokens\":5}";
    cr_assert_eq(pl_test_post_many(url, bodies, 8, resp), 0);
    for (int i = 0; i < 8; i++) {
        cr_assert_eq(resp[i].status, 200);
        pl_test_resp_free(&resp[i]);
    }
    long s0 = upstream_stat(0, "submitted") - b0, s1 = upstream_stat(1, "submitted") - b1;
    cr_assert_eq(s0 + s1, 8);
    cr_assert(s0 >= 3 && s1 >= 3, "least outstanding spreads 8 concurrent: %ld/%ld", s0, s1);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(chat(",\"prompt_cache_key\":\"conversation-42\"", NULL, 0), 200);
    long d0 = upstream_stat(0, "submitted") - b0 - s0, d1 = upstream_stat(1, "submitted") - b1 - s1;
    cr_assert((d0 == 6 && d1 == 0) || (d0 == 0 && d1 == 6), "affinity: %ld/%ld", d0, d1);
}

Test(gateway, fails_over_when_an_upstream_is_killed)
{
    start_upstreams("0");
    start_gateway(NULL);
    cr_assert_eq(chat("", NULL, 0), 200);
    kill(up[0].pid, SIGKILL);
    waitpid(up[0].pid, NULL, 0);
    up[0].pid = -1;
    for (int i = 0; i < 8; i++)
        cr_assert_eq(chat("", NULL, 0), 200, "request %d after the kill", i);
    char url[256];
    snprintf(url, sizeof url, "%s/status", gw.url);
    pl_test_resp r;
    cr_assert_eq(pl_test_http("GET", url, NULL, 0, &r), 0);
    json_t *j = json_loads(r.body, 0, NULL);
    json_t *reps = json_object_get(json_object_get(json_object_get(j, "models"), "mock"),
                                   "replicas");
    cr_assert(json_is_false(json_object_get(json_array_get(reps, 0), "healthy")), "%s", r.body);
    cr_assert(json_is_true(json_object_get(json_array_get(reps, 1), "healthy")));
    json_decref(j);
    pl_test_resp_free(&r);
}

Test(gateway, client_disconnect_aborts_the_upstream_request)
{
    start_upstreams_mode("30", "random");
    start_gateway(NULL);
    int port = atoi(strrchr(gw.url, ':') + 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    const char *body = "{\"model\":\"mock\",\"messages\":[{\"role\":\"user\",\"content\":"
                       "\"go\"}],\"max_tokens\":1000,\"stream\":true}";
    char req[512];
    int n = snprintf(req, sizeof req, "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    cr_assert_eq(write(fd, req, (size_t)n), n);
    char buf[4096];
    cr_assert_gt(read(fd, buf, sizeof buf), 0);
    usleep(200000);
    long aborted = upstream_stat(0, "aborted") + upstream_stat(1, "aborted");
    cr_assert_eq(aborted, 0);
    close(fd);
    for (int i = 0; i < 40 && aborted == 0; i++) {
        usleep(50000);
        aborted = upstream_stat(0, "aborted") + upstream_stat(1, "aborted");
    }
    cr_assert_eq(aborted, 1, "the upstream counted the abort");
    /* within the abort's time, not by a gateway that died with the client */
    cr_assert_eq(chat("", NULL, 0), 200, "the gateway still serves");
}

Test(gateway, debate_job_runs_through_the_gateway)
{
    start_upstreams("0");
    start_gateway(NULL);
    char dir[] = "/tmp/pl_gw_run_XXXXXX", job[512], cmd[2048];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(job, sizeof job, "%s/examples/debate.yaml", getenv("PARLEY_SRC"));
    snprintf(cmd, sizeof cmd, "%s run %s --upstream %s/v1 --output %s --log-level warn "
             "2>%s/err >/dev/null", pl_test_bin(), job, gw.url, dir, dir);
    int st = system(cmd);
    snprintf(cmd, sizeof cmd, "wc -l < %s/debate_demo/debate_demo_index.jsonl", dir);
    FILE *p = popen(cmd, "r");
    int lines = 0;
    cr_assert_eq(fscanf(p, "%d", &lines), 1);
    pclose(p);
    cr_assert_eq(WEXITSTATUS(st), 0);
    cr_assert_eq(lines, 20, "every question finished");
    long sub = upstream_stat(0, "submitted") + upstream_stat(1, "submitted");
    cr_assert_geq(sub, 20 * 4 * 3, "3 rounds x 4 agents per question reached the upstreams");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

Test(gateway, in_front_of_a_cpu_engine_gives_the_engine_text)
{
    const char *model = pl_test_model_path();
    if (access(model, R_OK) != 0)
        cr_skip_test("no model at %s", model);
    const char *a[] = {"--backend", "cpu", "--model", model, "--served-model-name", "mock",
                       "--threads", "1", "--log-level", "warn", NULL};
    cr_assert_eq(pl_test_server_start(&up[0], a), 0);
    char u0[160];
    snprintf(u0, sizeof u0, "%s/v1", up[0].url);
    const char *g[] = {"--upstream", u0, "--log-level", "warn", NULL};
    cr_assert_eq(pl_test_server_start(&gw, g), 0);
    const char *body = "{\"model\":\"mock\",\"messages\":[{\"role\":\"user\",\"content\":"
                       "\"Name a colour.\"}],\"max_tokens\":12,\"temperature\":0}";
    char url[256];
    pl_test_resp direct, via;
    snprintf(url, sizeof url, "%s/v1/chat/completions", up[0].url);
    cr_assert_eq(pl_test_http("POST", url, body, strlen(body), &direct), 0);
    snprintf(url, sizeof url, "%s/v1/chat/completions", gw.url);
    cr_assert_eq(pl_test_http("POST", url, body, strlen(body), &via), 0);
    cr_assert_eq(via.status, 200, "%s", via.body);
    json_t *d = json_loads(direct.body, 0, NULL), *v = json_loads(via.body, 0, NULL);
    json_t *dc = json_object_get(json_object_get(json_array_get(json_object_get(d, "choices"), 0),
                                                 "message"), "content");
    json_t *vc = json_object_get(json_object_get(json_array_get(json_object_get(v, "choices"), 0),
                                                 "message"), "content");
    cr_assert_str_eq(json_string_value(vc), json_string_value(dc));
    cr_assert(json_equal(json_object_get(d, "usage"), json_object_get(v, "usage")) ||
              json_integer_value(json_object_get(json_object_get(v, "usage"), "completion_tokens")) ==
              json_integer_value(json_object_get(json_object_get(d, "usage"), "completion_tokens")));
    json_decref(d);
    json_decref(v);
    pl_test_resp_free(&direct);
    pl_test_resp_free(&via);
}

/* A job on a remote model: a stream that breaks mid-way is resubmitted
 * (counted as a transport retry, not a re-prompt) and the job succeeds. */
Test(gateway, job_resubmits_after_a_broken_stream)
{
    pl_fake_upstream *f = pl_fake_start("m");
    pl_fake_push(f, &(pl_fake_step){.n_tokens = 5, .drop_after = 2});
    pl_fake_push(f, &(pl_fake_step){.status = 503, .body = "{\"error\":{\"message\":\"busy\"}}"});
    char dir[] = "/tmp/pl_gw_tr_XXXXXX", path[256], cmd[2048];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/job.yaml", dir);
    FILE *jf = fopen(path, "w");
    fprintf(jf, "experiment: tr\nnum_rounds: 1\nmax_retries: 0\nvalidation: false\n"
                "model_definitions: {m: {backend: openai, base_url: \"%s\", "
                "upstream_attempts: 1}}\n"
                "agent_definitions: [{agent_id: a1, role: participant, model: m}]\n"
                "questions: [{id: q1, text: \"Which?\", choices: [x, y], answer: A}]\n",
            pl_fake_url(f));
    fclose(jf);
    snprintf(cmd, sizeof cmd, "%s run %s --output %s --stats %s/stats.json --log-level warn "
             "2>%s/err >/dev/null", pl_test_bin(), path, dir, dir, dir);
    int st = system(cmd);
    char tpath[256];
    snprintf(tpath, sizeof tpath, "%s/tr/transcripts/q1.json", dir);
    json_t *t = json_load_file(tpath, 0, NULL);
    snprintf(cmd, sizeof cmd, "cat %s/err", dir);
    cr_assert_eq(WEXITSTATUS(st), 0, "exit %d", WEXITSTATUS(st));
    cr_assert_not_null(t, "no transcript at %s", tpath);
    char *s = json_dumps(t, 0);
    cr_assert(strstr(s, "\"transport_retries\": 2"), "%s", s);
    cr_assert(strstr(s, "tok1 tok2 tok3"), "%s", s);
    free(s);
    json_decref(t);
    cr_assert_eq(pl_fake_requests(f), 3);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
    pl_fake_stop(f);
}

/* Through the gateway: an upstream 400 keeps its status even when streaming
 * (the stream is not committed before the first token); a drop mid-stream
 * becomes an SSE error event, then [DONE]. */
Test(gateway, upstream_errors_reach_the_client)
{
    pl_fake_upstream *f = pl_fake_start("m");
    pl_fake_push(f, &(pl_fake_step){.status = 400, .body =
        "{\"error\":{\"message\":\"This model's maximum context length is 2048\","
        "\"type\":\"BadRequestError\",\"code\":400}}"});
    pl_fake_push(f, &(pl_fake_step){.n_tokens = 6, .drop_after = 3});
    const char *a[] = {"--upstream", pl_fake_url(f), "--log-level", "error", NULL};
    cr_assert_eq(pl_test_server_start(&gw, a), 0);
    char url[256];
    snprintf(url, sizeof url, "%s/v1/chat/completions", gw.url);
    const char *body = "{\"model\":\"m\",\"stream\":true,\"messages\":[{\"role\":\"user\","
                       "\"content\":\"hi\"}]}";
    pl_test_resp r;
    cr_assert_eq(pl_test_http("POST", url, body, strlen(body), &r), 0);
    cr_assert_eq(r.status, 400, "%ld %s", r.status, r.body);
    cr_assert(strstr(r.body, "maximum context length is 2048"), "%s", r.body);
    cr_assert(strstr(r.content_type, "application/json"), "%s", r.content_type);
    pl_test_resp_free(&r);
    cr_assert_eq(pl_test_http("POST", url, body, strlen(body), &r), 0);
    cr_assert_eq(r.status, 200);
    char **ev;
    int n;
    cr_assert_eq(pl_test_sse_split(r.body, &ev, &n), 0, "%s", r.body);
    cr_assert_geq(n, 3);
    cr_assert_str_eq(ev[n - 1], "[DONE]");
    cr_assert(strstr(ev[n - 2], "\"error\"") && strstr(ev[n - 2], "mid-stream"), "%s", ev[n - 2]);
    cr_assert(strstr(r.body, "tok3"), "the tokens before the drop went out: %s", r.body);
    pl_test_sse_free(ev, n);
    pl_test_resp_free(&r);
    pl_fake_stop(f);
}

/* Tools go to the upstream as the client wrote them, and the upstream's
 * tool calls come back: non-streamed as message.tool_calls (content null,
 * finish_reason "tool_calls"), streamed as delta.tool_calls fragments that
 * add up to the same calls. */
Test(gateway, upstream_tool_calls_reach_the_client)
{
    pl_fake_upstream *f = pl_fake_start("m");
    pl_fake_push(f, &(pl_fake_step){.tool_calls = true});
    pl_fake_push(f, &(pl_fake_step){.tool_calls = true});
    const char *a[] = {"--upstream", pl_fake_url(f), "--log-level", "error", NULL};
    cr_assert_eq(pl_test_server_start(&gw, a), 0);
    char url[256];
    snprintf(url, sizeof url, "%s/v1/chat/completions", gw.url);
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                        "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":"
                        "{\"type\":\"string\"}}}}},{\"type\":\"function\",\"function\":"
                        "{\"name\":\"get_time\",\"parameters\":{\"type\":\"object\"}}}]";
    char body[1024];
    snprintf(body, sizeof body, "{\"model\":\"m\",\"tools\":%s,\"tool_choice\":\"auto\","
             "\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"}]}", tools);
    json_t *want = json_loads(PL_FAKE_TOOL_CALLS, 0, NULL), *want_tools = json_loads(tools, 0, NULL);
    cr_assert_not_null(want);
    pl_test_resp r;
    cr_assert_eq(pl_test_http("POST", url, body, strlen(body), &r), 0);
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    json_t *o = json_loads(r.body, 0, NULL), *ch = json_array_get(json_object_get(o, "choices"), 0);
    json_t *msg = json_object_get(ch, "message");
    cr_assert(json_equal(json_object_get(msg, "tool_calls"), want), "%s", r.body);
    cr_assert(json_is_null(json_object_get(msg, "content")), "%s", r.body);
    cr_assert_str_eq(json_string_value(json_object_get(ch, "finish_reason")), "tool_calls");
    json_decref(o);
    pl_test_resp_free(&r);
    char *up = pl_fake_last_body(f);
    json_t *ub = json_loads(up, 0, NULL);
    cr_assert(json_equal(json_object_get(ub, "tools"), want_tools), "forwarded: %s", up);
    cr_assert_str_eq(json_string_value(json_object_get(ub, "tool_choice")), "auto");
    json_decref(ub);
    free(up);
    /* streamed: fragments in order, merged by index */
    snprintf(body, sizeof body, "{\"model\":\"m\",\"stream\":true,\"tools\":%s,\"messages\":"
             "[{\"role\":\"user\",\"content\":\"weather?\"}]}", tools);
    cr_assert_eq(pl_test_http("POST", url, body, strlen(body), &r), 0);
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    char **ev;
    int n;
    cr_assert_eq(pl_test_sse_split(r.body, &ev, &n), 0, "%s", r.body);
    json_t *got = json_array();
    const char *finish = NULL;
    json_t *fin = NULL;
    for (int i = 0; i < n - 1; i++) {
        json_t *c = json_loads(ev[i], 0, NULL);
        json_t *c0 = json_array_get(json_object_get(c, "choices"), 0), *tc;
        size_t k;
        json_t *t;
        json_array_foreach(json_object_get(json_object_get(c0, "delta"), "tool_calls"), k, t) {
            size_t ix = (size_t)json_integer_value(json_object_get(t, "index"));
            if (ix == json_array_size(got)) {
                tc = json_deep_copy(t);
                json_object_del(tc, "index");
                json_array_append_new(got, tc);
                continue;
            }
            json_t *fa = json_object_get(json_object_get(json_array_get(got, ix), "function"),
                                         "arguments");
            const char *more = json_string_value(
                json_object_get(json_object_get(t, "function"), "arguments"));
            char cat[256];
            snprintf(cat, sizeof cat, "%s%s", json_string_value(fa), more ? more : "");
            json_string_set(fa, cat);
        }
        if (json_is_string(json_object_get(c0, "finish_reason"))) {
            json_decref(fin);
            fin = json_incref(c);
            finish = json_string_value(json_object_get(c0, "finish_reason"));
        }
        json_decref(c);
    }
    cr_assert(json_equal(got, want), "%s", r.body);
    cr_assert_str_eq(finish, "tool_calls", "%s", r.body);
    cr_assert_str_eq(ev[n - 1], "[DONE]");
    json_decref(fin);
    json_decref(got);
    json_decref(want);
    json_decref(want_tools);
    pl_test_sse_free(ev, n);
    pl_test_resp_free(&r);
    pl_fake_stop(f);
}
