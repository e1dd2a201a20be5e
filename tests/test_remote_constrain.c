/* test_remote_constrain.c - a constraint reaches each upstream kind in the
 * fields it enforces: fake vLLM upstreams (structured_outputs and guided_*,
 * by /version or by probing), SGLang, llama-server and Ollama record the
 * bodies they receive (tests/helpers/fake_upstream.c). The start-up probes
 * decide what is refused (an upstream that ignores a field, a kind with no
 * field for it), /status shows it, a replica that answers its probe late is
 * probed again on the loop, and a constrained job on an upstream that
 * cannot enforce it is refused before it starts (jobs API and parley run). */
#include <criterion/criterion.h>
#include <event2/event.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backends/constrain/regex.h"
#include "backends/remote/remote.h"
#include "tests/helpers/fake_upstream.h"
#include "tests/helpers/server_proc.h"

static struct event_base *base;
static pl_fake_upstream *fake;
static pl_backend *be;
static pl_test_server srv;       /* stopped by teardown, also after a failure */
static char tmp[64];             /* removed by teardown */

typedef struct outcome {
    int done;
    pl_finish finish;
} outcome;

static void on_delta(void *ud, const pl_delta *d)
{
}

static void on_done(void *ud, const pl_result *r)
{
    outcome *o = ud;
    o->done++;
    o->finish = r->finish;
}

static void setup(void)
{
    base = event_base_new();
}

static void teardown(void)
{
    if (srv.pid > 0)
        pl_test_server_stop(&srv);
    srv.pid = 0;
    if (tmp[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
        cr_assert_eq(system(cmd), 0);
        tmp[0] = '\0';
    }
    pl_backend_free(be);
    be = NULL;
    pl_fake_stop(fake);
    fake = NULL;
    event_base_free(base);
}

TestSuite(remote_constrain, .init = setup, .fini = teardown, .timeout = 60);

static void open_as(pl_fake_flavour fl, pl_remote_kind kind, int probe_ms)
{
    fake = pl_fake_start("m");
    cr_assert_not_null(fake);
    pl_fake_set_flavour(fake, fl);
    const char *u[1] = {pl_fake_url(fake)};
    pl_remote_opts o = {.model = "m", .kind = kind, .urls = u, .n_urls = 1, .upper_bound = 4,
                        .connect_timeout_ms = 1000, .first_token_timeout_ms = 5000,
                        .token_timeout_ms = 5000, .max_attempts = 1, .health_interval_ms = 100,
                        .affinity = true, .probe_timeout_ms = probe_ms};
    char err[256];
    be = pl_remote_new(base, &o, err, sizeof err);
    cr_assert_not_null(be, "%s", err);
}

static void run_until_done(outcome *o)
{
    for (int i = 0; i < 500 && !o->done; i++) {
        struct timeval tv = {0, 10000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    }
    cr_assert_eq(o->done, 1);
}

static const pl_chat_message msgs[] = {{"user", "hello"}};

/* Submit a chat request with a constraint (and a client body, or NULL for
 * a job's request); the body the fake received (caller decrefs), or NULL
 * when submit refused it (then *err says why). */
static json_t *send_req(pl_constraint_kind k, const char *text, json_t *client, pl_err *err)
{
    pl_gen_request r = {.messages = msgs, .n_messages = 1, .add_generation_prompt = true,
                        .oai_body = client};
    pl_sampling_defaults(&r.sampling);
    r.sampling.max_tokens = 8;
    r.sampling.constraint = k;
    r.sampling.constraint_text = (char *)text;
    outcome o = {0};
    uint64_t id;
    if (pl_backend_submit(be, &r, (pl_sink){on_delta, on_done, &o}, &id, err) < 0)
        return NULL;
    run_until_done(&o);
    char *b = pl_fake_last_body(fake);
    json_t *j = json_loads(b, 0, NULL);
    free(b);
    cr_assert_not_null(j);
    return j;
}

static json_t *send_job(pl_constraint_kind k, const char *text)
{
    pl_err e = {0};
    json_t *j = send_req(k, text, NULL, &e);
    cr_assert_not_null(j, "refused: %s", e.message);
    return j;
}

/* A field of a body as compact JSON text ("" when absent). */
static const char *field(json_t *b, const char *path)
{
    static char buf[4096];
    char p[256];
    snprintf(p, sizeof p, "%s", path);
    json_t *v = b;
    for (char *k = strtok(p, "."); k && v; k = strtok(NULL, "."))
        v = json_object_get(v, k);
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    snprintf(buf, sizeof buf, "%s", s ? s : "");
    free(s);
    return buf;
}

/* replicas[0].constraints.<key> from the backend's stats. */
static const char *support(const char *key)
{
    static char buf[256];
    json_t *s = be->ops->stats(be);
    json_t *c = json_object_get(json_array_get(json_object_get(s, "replicas"), 0), "constraints");
    snprintf(buf, sizeof buf, "%s", json_string_value(json_object_get(c, key)) ?: "");
    json_decref(s);
    return buf;
}

#define SCHEMA "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}"

Test(remote_constrain, vllm_takes_structured_outputs_from_0_10_2)
{
    open_as(PL_FAKE_VLLM, PL_REMOTE_AUTO, 5000);
    cr_assert_str_eq(support("regex"), "enforced");
    cr_assert_str_eq(support("json_schema"), "enforced");
    cr_assert_str_eq(support("fields"), "structured_outputs");
    cr_assert_eq(pl_fake_probes(fake), 2);
    cr_assert_eq(pl_fake_requests(fake), 0, "probes are not requests");
    json_t *b = send_job(PL_CONSTRAINT_REGEX, "[AB]");
    cr_assert_str_eq(field(b, "structured_outputs.regex"), "\"[AB]\"");
    cr_assert_str_eq(field(b, "guided_regex"), "");
    json_decref(b);
    b = send_job(PL_CONSTRAINT_CHOICE, "[\"x\",\"y\"]");
    cr_assert_str_eq(field(b, "structured_outputs.choice"), "[\"x\",\"y\"]");
    json_decref(b);
    b = send_job(PL_CONSTRAINT_JSON_SCHEMA, SCHEMA);
    cr_assert_str_eq(field(b, "structured_outputs.json.properties.a.type"), "\"integer\"");
    json_decref(b);
    b = send_job(PL_CONSTRAINT_JSON_OBJECT, NULL);
    cr_assert_str_eq(field(b, "response_format.type"), "\"json_object\"");
    json_decref(b);
    /* 0.11 still reads guided_*: the client's body goes as written. */
    pl_err e;
    json_t *client = json_pack("{s:s, s:[{s:s, s:s}], s:s}", "model", "m", "messages", "role",
                               "user", "content", "hi", "guided_regex", "[AB]");
    b = send_req(PL_CONSTRAINT_REGEX, "[AB]", client, &e);
    cr_assert_str_eq(field(b, "guided_regex"), "\"[AB]\"");
    cr_assert_str_eq(field(b, "structured_outputs"), "");
    json_decref(b);
    json_decref(client);
}

Test(remote_constrain, vllm_before_0_10_2_takes_guided)
{
    open_as(PL_FAKE_VLLM_OLD, PL_REMOTE_VLLM, 5000);
    cr_assert_str_eq(support("regex"), "enforced");
    json_t *b = send_job(PL_CONSTRAINT_REGEX, "[AB]");
    cr_assert_str_eq(field(b, "guided_regex"), "\"[AB]\"");
    cr_assert_str_eq(field(b, "structured_outputs"), "");
    json_decref(b);
    b = send_job(PL_CONSTRAINT_CHOICE, "[\"x\"]");
    cr_assert_str_eq(field(b, "guided_choice"), "[\"x\"]");
    json_decref(b);
    b = send_job(PL_CONSTRAINT_JSON_SCHEMA, SCHEMA);
    cr_assert_str_eq(field(b, "guided_json.type"), "\"object\"");
    json_decref(b);
    /* A client's structured_outputs is kept, and guided_regex added. */
    pl_err e;
    json_t *client = json_pack("{s:s, s:{s:s}}", "model", "m", "structured_outputs", "regex",
                               "[AB]");
    b = send_req(PL_CONSTRAINT_REGEX, "[AB]", client, &e);
    cr_assert_str_eq(field(b, "structured_outputs.regex"), "\"[AB]\"");
    cr_assert_str_eq(field(b, "guided_regex"), "\"[AB]\"");
    json_decref(b);
    json_decref(client);
}

Test(remote_constrain, vllm_0_12_gets_structured_outputs_beside_a_clients_guided)
{
    open_as(PL_FAKE_VLLM_NEW, PL_REMOTE_VLLM, 5000);
    pl_err e;
    json_t *client = json_pack("{s:s, s:[s,s]}", "model", "m", "guided_choice", "a", "b");
    json_t *b = send_req(PL_CONSTRAINT_CHOICE, "[\"a\",\"b\"]", client, &e);
    cr_assert_str_eq(field(b, "guided_choice"), "[\"a\",\"b\"]", "the client's field stays");
    cr_assert_str_eq(field(b, "structured_outputs.choice"), "[\"a\",\"b\"]");
    json_decref(b);
    json_decref(client);
}

Test(remote_constrain, vllm_without_a_version_is_probed_in_both_styles)
{
    open_as(PL_FAKE_VLLM_NOVERSION, PL_REMOTE_VLLM, 5000);
    cr_assert_eq(pl_fake_probes(fake), 4, "structured_outputs, then guided_*");
    cr_assert_str_eq(support("regex"), "enforced");
    cr_assert_str_eq(support("json_schema"), "enforced");
    json_t *b = send_job(PL_CONSTRAINT_REGEX, "[AB]");
    cr_assert_str_eq(field(b, "guided_regex"), "\"[AB]\"");
    json_decref(b);
}

Test(remote_constrain, sglang_takes_regex_and_response_format)
{
    open_as(PL_FAKE_SGLANG, PL_REMOTE_AUTO, 5000);
    cr_assert_str_eq(support("regex"), "enforced");
    json_t *b = send_job(PL_CONSTRAINT_REGEX, "[AB]");
    cr_assert_str_eq(field(b, "regex"), "\"[AB]\"");
    json_decref(b);
    b = send_job(PL_CONSTRAINT_CHOICE, "[\"x.y\",\"z\"]");
    cr_assert_str_eq(field(b, "regex"), "\"(?:x\\\\.y|z)\"", "%s", field(b, "regex"));
    json_decref(b);
    b = send_job(PL_CONSTRAINT_JSON_SCHEMA, SCHEMA);
    cr_assert_str_eq(field(b, "response_format.json_schema.schema.type"), "\"object\"");
    json_decref(b);
    pl_err e;
    json_t *client = json_pack("{s:s, s:s}", "model", "m", "guided_regex", "[AB]");
    b = send_req(PL_CONSTRAINT_REGEX, "[AB]", client, &e);
    cr_assert_str_eq(field(b, "regex"), "\"[AB]\"", "added beside the client's guided_regex");
    json_decref(b);
    json_decref(client);
}

Test(remote_constrain, llamacpp_takes_a_grammar_and_json_schema)
{
    open_as(PL_FAKE_LLAMACPP, PL_REMOTE_AUTO, 5000);
    cr_assert_str_eq(support("regex"), "enforced");
    cr_assert_str_eq(support("json_schema"), "enforced");
    const char *rx = "(?:[ -~]{1,40}\\n)?Answer: [A-D]";
    char msg[200], *want = pl_regex_gbnf(rx, strlen(rx), msg, sizeof msg);
    cr_assert_not_null(want, "%s", msg);
    json_t *b = send_job(PL_CONSTRAINT_REGEX, rx);
    cr_assert_str_eq(json_string_value(json_object_get(b, "grammar")), want);
    free(want);
    json_decref(b);
    b = send_job(PL_CONSTRAINT_CHOICE, "[\"red\",\"blue\"]");
    cr_assert_str_eq(json_string_value(json_object_get(b, "grammar")),
                     "root ::= (\"red\" | \"blue\")\n");
    json_decref(b);
    b = send_job(PL_CONSTRAINT_JSON_SCHEMA, SCHEMA);
    cr_assert_str_eq(field(b, "json_schema.properties.a.type"), "\"integer\"");
    json_decref(b);
    b = send_job(PL_CONSTRAINT_JSON_OBJECT, NULL);
    cr_assert_str_eq(field(b, "json_schema"), "{\"type\":\"object\"}");
    json_decref(b);
}

Test(remote_constrain, llamacpp_client_bodies)
{
    open_as(PL_FAKE_LLAMACPP, PL_REMOTE_LLAMACPP, 5000);
    pl_err e;
    /* json_object: llama-server reads the schema from response_format. */
    json_t *client = json_pack("{s:s, s:{s:s}}", "model", "m", "response_format", "type",
                               "json_object");
    json_t *b = send_req(PL_CONSTRAINT_JSON_OBJECT, NULL, client, &e);
    cr_assert_str_eq(field(b, "response_format.schema"), "{\"type\":\"object\"}");
    cr_assert_str_eq(field(client, "response_format"), "{\"type\":\"json_object\"}",
                     "the client's own object is not changed");
    json_decref(b);
    json_decref(client);
    /* guided_regex: a grammar is added. */
    client = json_pack("{s:s, s:s}", "model", "m", "guided_regex", "a|b");
    b = send_req(PL_CONSTRAINT_REGEX, "a|b", client, &e);
    cr_assert_str_eq(json_string_value(json_object_get(b, "grammar")),
                     "root ::= \"a\" | \"b\"\n");
    json_decref(b);
    json_decref(client);
    /* A named tool: "required" over that one tool. */
    client = json_pack("{s:s, s:[{s:s, s:{s:s}}, {s:s, s:{s:s}}], s:{s:s, s:{s:s}}}", "model",
                       "m", "tools", "type", "function", "function", "name", "f1", "type",
                       "function", "function", "name", "f2", "tool_choice", "type", "function",
                       "function", "name", "f2");
    b = send_req(PL_CONSTRAINT_NONE, NULL, client, &e);
    cr_assert_str_eq(field(b, "tool_choice"), "\"required\"");
    cr_assert_eq(json_array_size(json_object_get(b, "tools")), 1);
    cr_assert_str_eq(field(b, "tools"), "[{\"type\":\"function\",\"function\":{\"name\":\"f2\"}}]");
    json_decref(b);
    json_decref(client);
}

Test(remote_constrain, ollama_gets_a_schema_and_refuses_a_regex)
{
    open_as(PL_FAKE_OLLAMA, PL_REMOTE_AUTO, 5000);
    cr_assert_eq(pl_fake_probes(fake), 1, "only the JSON probe: a regex has no field");
    cr_assert_str_eq(support("regex"), "unsupported");
    cr_assert_str_eq(support("choice"), "unsupported");
    cr_assert_str_eq(support("json_schema"), "enforced");
    cr_assert_str_eq(support("tool_choice"), "unsupported");
    json_t *b = send_job(PL_CONSTRAINT_JSON_SCHEMA, SCHEMA);
    cr_assert_str_eq(field(b, "response_format.json_schema.schema.type"), "\"object\"");
    json_decref(b);
    b = send_job(PL_CONSTRAINT_JSON_OBJECT, NULL);
    cr_assert_str_eq(field(b, "response_format.type"), "\"json_object\"");
    json_decref(b);
    pl_err e = {0};
    int before = pl_fake_requests(fake);
    cr_assert_null(send_req(PL_CONSTRAINT_REGEX, "[AB]", NULL, &e));
    cr_assert_eq(e.status, 400);
    cr_assert(strstr(e.message, pl_fake_url(fake)) && strstr(e.message, "(ollama)") &&
              strstr(e.message, "regex"), "%s", e.message);
    cr_assert_eq(pl_fake_requests(fake), before, "nothing was sent");
    cr_assert_eq(pl_backend_check_constraint(be, PL_CONSTRAINT_CHOICE, &e), -1);
    cr_assert_eq(pl_backend_check_constraint(be, PL_CONSTRAINT_JSON_SCHEMA, &e), 0);
    json_t *client = json_pack("{s:s, s:[{s:s, s:{s:s}}], s:s}", "model", "m", "tools", "type",
                               "function", "function", "name", "f", "tool_choice", "required");
    cr_assert_null(send_req(PL_CONSTRAINT_NONE, NULL, client, &e));
    cr_assert(strstr(e.message, "tool_choice") && !strcmp(e.param, "tool_choice"), "%s",
              e.message);
    json_decref(client);
}

Test(remote_constrain, an_upstream_that_ignores_the_fields_is_refused)
{
    open_as(PL_FAKE_PLAIN, PL_REMOTE_OPENAI, 5000);
    cr_assert_str_eq(support("regex"), "ignored");
    cr_assert_str_eq(support("json_object"), "ignored");
    pl_err e = {0};
    cr_assert_null(send_req(PL_CONSTRAINT_REGEX, "[AB]", NULL, &e));
    cr_assert(strstr(e.message, "ignores guided_regex") && strstr(e.message, "Hello there"),
              "%s", e.message);
    json_t *client = json_pack("{s:s, s:{s:s}}", "model", "m", "response_format", "type",
                               "json_object");
    cr_assert_null(send_req(PL_CONSTRAINT_JSON_OBJECT, NULL, client, &e));
    cr_assert_str_eq(e.param, "response_format");
    json_decref(client);
    /* Without constraints it serves as before. */
    json_t *b = send_job(PL_CONSTRAINT_NONE, NULL);
    json_decref(b);
}

/* A probe's reply: what it says about the upstream. */
static void probe_says(const char *text, const char *finish, const char *regex, const char *json)
{
    fake = pl_fake_start("m");
    pl_fake_set_probe_reply(fake, text, finish);
    const char *u[1] = {pl_fake_url(fake)};
    pl_remote_opts o = {.model = "m", .kind = PL_REMOTE_LLAMACPP, .urls = u, .n_urls = 1,
                        .upper_bound = 4, .max_attempts = 1, .health_interval_ms = 60000,
                        .probe_timeout_ms = 5000};
    char err[256];
    be = pl_remote_new(base, &o, err, sizeof err);
    cr_assert_not_null(be, "%s", err);
    cr_assert_str_eq(support("regex"), regex, "%s", text);
    cr_assert_str_eq(support("json_schema"), json, "%s", text);
    pl_backend_free(be);
    be = NULL;
    pl_fake_stop(fake);
    fake = NULL;
}

Test(remote_constrain, probe_replies_are_judged)
{
    probe_says("12", "length", "unknown", "ignored");      /* cut: tells nothing */
    probe_says("12", "stop", "ignored", "ignored");
    probe_says("Hello! How can", "length", "ignored", "ignored");
    probe_says("{ \"ok\" :\n  false }", "stop", "ignored", "enforced");
    probe_says("{\n \"ok\": tr", "length", "ignored", "unknown");
    probe_says("{\"ok\": true, \"x\": 1}", "stop", "ignored", "ignored");
}

Test(remote_constrain, no_probe_sends_unverified)
{
    open_as(PL_FAKE_PLAIN, PL_REMOTE_OPENAI, 0);
    cr_assert_eq(pl_fake_probes(fake), 0);
    cr_assert_str_eq(support("regex"), "unknown");
    json_t *b = send_job(PL_CONSTRAINT_REGEX, "[AB]");
    cr_assert_str_eq(field(b, "guided_regex"), "\"[AB]\"");
    json_decref(b);
}

static bool enforced_now(void)
{
    return !strcmp(support("regex"), "enforced") && !strcmp(support("json_schema"), "enforced");
}

Test(remote_constrain, a_late_replica_is_probed_on_the_loop)
{
    fake = pl_fake_start("m");
    pl_fake_set_flavour(fake, PL_FAKE_LLAMACPP);
    pl_fake_delay_probes(fake, 2, 1500);     /* the start-up probes time out */
    const char *u[1] = {pl_fake_url(fake)};
    pl_remote_opts o = {.model = "m", .kind = PL_REMOTE_LLAMACPP, .urls = u, .n_urls = 1,
                        .upper_bound = 4, .connect_timeout_ms = 1000, .max_attempts = 1,
                        .health_interval_ms = 50, .probe_timeout_ms = 300};
    char err[256];
    be = pl_remote_new(base, &o, err, sizeof err);
    cr_assert_not_null(be, "%s", err);
    cr_assert_str_eq(support("regex"), "unknown");
    for (int i = 0; i < 300 && !enforced_now(); i++) {
        struct timeval tv = {0, 20000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    }
    cr_assert(enforced_now(), "regex %s", support("regex"));
    cr_assert_geq(pl_fake_probes(fake), 4);
}

/* ---- through the HTTP API ---- */

static void serve_ollama(void)
{
    fake = pl_fake_start("m");
    pl_fake_set_flavour(fake, PL_FAKE_OLLAMA);
    const char *a[] = {"--backend", "ollama", "--base-url", pl_fake_url(fake),
                       "--served-model-name", "m", "--log-level", "error", NULL};
    cr_assert_eq(pl_test_server_start(&srv, a), 0);
}

static long chat(const char *extra, bool stream, pl_test_resp *r)
{
    char url[256], body[1024];
    snprintf(url, sizeof url, "%s/v1/chat/completions", srv.url);
    snprintf(body, sizeof body, "{\"model\":\"m\",\"stream\":%s,\"max_tokens\":4,"
             "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],%s}",
             stream ? "true" : "false", extra);
    cr_assert_eq(pl_test_http("POST", url, body, strlen(body), r), 0);
    return r->status;
}

Test(remote_constrain, the_api_refuses_what_the_upstream_cannot_enforce, .timeout = 120)
{
    serve_ollama();
    pl_test_resp r;
    for (int stream = 0; stream < 2; stream++) {
        cr_assert_eq(chat("\"guided_regex\":\"[AB]\"", stream, &r), 400, "%s", r.body);
        cr_assert(strstr(r.body, "constraint_not_enforced") && strstr(r.body, "(ollama)") &&
                  strstr(r.body, "\"param\":\"guided_regex\""), "%s", r.body);
        pl_test_resp_free(&r);
    }
    cr_assert_eq(pl_fake_requests(fake), 0);
    cr_assert_eq(chat("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                      "{\"name\":\"n\",\"schema\":{\"type\":\"object\"}}}", false, &r), 200,
                 "%s", r.body);
    pl_test_resp_free(&r);
    char *b = pl_fake_last_body(fake);
    cr_assert(strstr(b, "\"response_format\""), "%s", b);
    free(b);
}

/* ---- jobs ---- */

static const char *job_json(const char *mode)
{
    static char j[1024];
    snprintf(j, sizeof j, "{\"experiment\":\"c_%s\",\"models\":{\"m\":{}},\"agents\":[{\"id\":"
             "\"a\",\"model\":\"m\"}],\"num_rounds\":1,\"validation\":{\"mode\":\"%s\"},"
             "\"questions\":[{\"id\":\"q1\",\"text\":\"?\",\"choices\":[\"x\",\"y\"]}]}",
             mode, mode);
    return j;
}

Test(remote_constrain, a_constrained_job_on_ollama_is_refused_at_start, .timeout = 120)
{
    snprintf(tmp, sizeof tmp, "/tmp/parley-rc-XXXXXX");
    cr_assert_not_null(mkdtemp(tmp));
    setenv("PARLEY_JOBS_DIR", tmp, 1);
    serve_ollama();
    char url[256];
    snprintf(url, sizeof url, "%s/v1/jobs", srv.url);
    pl_test_resp r;
    const char *j = job_json("constrained");
    cr_assert_eq(pl_test_http("POST", url, j, strlen(j), &r), 0);
    cr_assert_eq(r.status, 400, "%s", r.body);
    cr_assert(strstr(r.body, "validation.mode") && strstr(r.body, "(ollama)") &&
              strstr(r.body, pl_fake_url(fake)) && strstr(r.body, "reprompt"), "%s", r.body);
    pl_test_resp_free(&r);
    j = job_json("reprompt");
    cr_assert_eq(pl_test_http("POST", url, j, strlen(j), &r), 0);
    cr_assert_eq(r.status, 201, "reprompt runs unconstrained: %s", r.body);
    pl_test_resp_free(&r);
    cr_assert_eq(pl_test_server_stop(&srv), 0);
    srv.pid = 0;
}

Test(remote_constrain, parley_run_refuses_the_debate_example_on_ollama, .timeout = 120)
{
    fake = pl_fake_start("m");
    pl_fake_set_flavour(fake, PL_FAKE_OLLAMA);
    char path[512], errf[600];
    snprintf(tmp, sizeof tmp, "/tmp/parley-rc-XXXXXX");
    cr_assert_not_null(mkdtemp(tmp));
    const char *out = tmp;
    const char *src = getenv("PARLEY_SRC");
    snprintf(path, sizeof path, "%s/examples/debate.yaml", src ? src : ".");
    snprintf(errf, sizeof errf, "%s/stderr", out);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(errf, O_CREAT | O_TRUNC | O_WRONLY, 0644);
        dup2(fd, 2);
        execl(pl_test_bin(), pl_test_bin(), "run", path, "--backend", "ollama", "--base-url",
              pl_fake_url(fake), "--output", out, (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    char err[4096] = "";
    FILE *f = fopen(errf, "r");
    size_t n = f ? fread(err, 1, sizeof err - 1, f) : 0;
    err[n] = '\0';
    if (f)
        fclose(f);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "status %d: %s", st, err);
    cr_assert(strstr(err, "debate.yaml:") && strstr(err, "validation.mode") &&
              strstr(err, "does not enforce a regex constraint"), "%s", err);
    cr_assert_eq(pl_fake_requests(fake), 0, "nothing generated");
}
