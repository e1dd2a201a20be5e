/* test_api_http.c - parley serve on the mock backend, driven over HTTP. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/helpers/server_proc.h"

static pl_test_server srv;

static void start_default(void)
{
    const char *args[] = {"--backend", "mock", "--log-level", "warn", NULL};
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

static json_t *post_json(const char *path, const char *body, long *status)
{
    char url[256];
    snprintf(url, sizeof url, "%s%s", srv.url, path);
    pl_test_resp r;
    cr_assert_eq(pl_test_http("POST", url, body, strlen(body), &r), 0);
    *status = r.status;
    json_t *j = json_loads(r.body, 0, NULL);
    cr_assert_not_null(j, "response is not JSON: %s", r.body);
    pl_test_resp_free(&r);
    return j;
}

static json_t *get_json(const char *path, long *status)
{
    char url[256];
    snprintf(url, sizeof url, "%s%s", srv.url, path);
    pl_test_resp r;
    cr_assert_eq(pl_test_http("GET", url, NULL, 0, &r), 0);
    *status = r.status;
    json_t *j = json_loads(r.body, 0, NULL);
    cr_assert_not_null(j, "response is not JSON: %s", r.body);
    pl_test_resp_free(&r);
    return j;
}

/* Assert an OpenAI error object with the given status and param. */
static void expect_error(const char *path, const char *body, size_t len, long status,
                         const char *param, const char *code)
{
    char url[256];
    snprintf(url, sizeof url, "%s%s", srv.url, path);
    pl_test_resp r;
    cr_assert_eq(pl_test_http("POST", url, body, len, &r), 0);
    cr_expect_eq(r.status, status, "%s: status %ld, want %ld (%s)", body, r.status, status,
                 r.body);
    json_t *j = json_loads(r.body, 0, NULL);
    cr_assert_not_null(j, "error body is not JSON: %s", r.body);
    json_t *e = json_object_get(j, "error");
    cr_assert(json_is_object(e), "no error object: %s", r.body);
    cr_expect(json_is_string(json_object_get(e, "message")));
    cr_expect(json_is_string(json_object_get(e, "type")));
    json_t *p = json_object_get(e, "param");
    if (param)
        cr_expect_str_eq(json_string_value(p) ? json_string_value(p) : "(null)", param,
                         "%s", r.body);
    if (code)
        cr_expect_str_eq(json_string_value(json_object_get(e, "code")), code);
    json_decref(j);
    pl_test_resp_free(&r);
}

TestSuite(api, .init = start_default, .fini = stop, .timeout = 60);

Test(api, health_and_models)
{
    long st;
    json_t *h = get_json("/health", &st);
    cr_expect_eq(st, 200);
    cr_expect_str_eq(json_string_value(json_object_get(h, "status")), "ok");
    json_decref(h);
    json_t *m = get_json("/v1/models", &st);
    cr_expect_eq(st, 200);
    cr_expect_str_eq(json_string_value(json_object_get(m, "object")), "list");
    json_t *d0 = json_array_get(json_object_get(m, "data"), 0);
    cr_expect_str_eq(json_string_value(json_object_get(d0, "id")), "mock");
    cr_expect_str_eq(json_string_value(json_object_get(d0, "object")), "model");
    json_decref(m);
    stop_server();
}

Test(api, chat_non_stream_shape)
{
    long st;
    json_t *j = post_json("/v1/chat/completions",
                          "{\"model\":\"mock\",\"max_tokens\":7,\"messages\":"
                          "[{\"role\":\"user\",\"content\":\"hello there\"}]}", &st);
    cr_assert_eq(st, 200);
    cr_expect(!strncmp(json_string_value(json_object_get(j, "id")), "chatcmpl-", 9));
    cr_expect_str_eq(json_string_value(json_object_get(j, "object")), "chat.completion");
    cr_expect(json_is_integer(json_object_get(j, "created")));
    cr_expect_str_eq(json_string_value(json_object_get(j, "model")), "mock");
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    cr_expect_eq(json_integer_value(json_object_get(c0, "index")), 0);
    json_t *msg = json_object_get(c0, "message");
    cr_expect_str_eq(json_string_value(json_object_get(msg, "role")), "assistant");
    const char *text = json_string_value(json_object_get(msg, "content"));
    int words = 1;
    for (const char *p = text; *p; p++)
        words += *p == ' ';
    cr_expect_eq(words, 7, "max_tokens 7 gives 7 mock words: '%s'", text);
    cr_expect_str_eq(json_string_value(json_object_get(c0, "finish_reason")), "length");
    json_t *u = json_object_get(j, "usage");
    cr_expect_eq(json_integer_value(json_object_get(u, "completion_tokens")), 7);
    cr_expect_eq(json_integer_value(json_object_get(u, "total_tokens")),
                 json_integer_value(json_object_get(u, "prompt_tokens")) + 7);
    json_decref(j);
    stop_server();
}

Test(api, completions_non_stream_and_stop)
{
    long st;
    json_t *j = post_json("/v1/completions",
                          "{\"model\":\"mock\",\"prompt\":\"say\",\"max_tokens\":12,\"seed\":3}", &st);
    cr_assert_eq(st, 200);
    cr_expect_str_eq(json_string_value(json_object_get(j, "object")), "text_completion");
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    const char *full = json_string_value(json_object_get(c0, "text"));
    cr_assert(strlen(full) > 10);
    /* Use the 4th word, with its leading space, as a stop string. */
    const char *w = full;
    for (int k = 0; k < 3; k++)
        w = strchr(w + 1, ' ');
    char stopw[64];
    snprintf(stopw, sizeof stopw, "%.*s", (int)strcspn(w + 1, " ") + 1, w);
    char body[256];
    snprintf(body, sizeof body,
             "{\"model\":\"mock\",\"prompt\":\"say\",\"max_tokens\":12,\"seed\":3,\"stop\":[\"%s\"]}",
             stopw);
    json_t *k = post_json("/v1/completions", body, &st);
    json_t *k0 = json_array_get(json_object_get(k, "choices"), 0);
    const char *cut = json_string_value(json_object_get(k0, "text"));
    cr_expect_str_eq(json_string_value(json_object_get(k0, "finish_reason")), "stop");
    cr_expect_eq(strlen(cut), (size_t)(strstr(full, stopw) - full), "cut='%s' full='%s'", cut, full);
    cr_expect(!strncmp(cut, full, strlen(cut)));
    json_decref(j);
    json_decref(k);
    stop_server();
}

static void check_stream(const char *body, int n_choices, int include_usage, int chat)
{
    char url[256];
    snprintf(url, sizeof url, "%s%s", srv.url, chat ? "/v1/chat/completions" : "/v1/completions");
    pl_test_resp r;
    cr_assert_eq(pl_test_http("POST", url, body, strlen(body), &r), 0);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect(strstr(r.content_type, "text/event-stream"), "%s", r.content_type);
    char **ev;
    int n;
    cr_assert_eq(pl_test_sse_split(r.body, &ev, &n), 0, "bad SSE framing: %s", r.body);
    cr_assert(n >= 3);
    cr_expect_str_eq(ev[n - 1], "[DONE]");
    int finishes = 0, roles = 0, usage = 0, content = 0;
    for (int i = 0; i < n - 1; i++) {
        json_t *j = json_loads(ev[i], 0, NULL);
        cr_assert_not_null(j, "event %d not JSON: %s", i, ev[i]);
        json_t *ch = json_object_get(j, "choices");
        cr_assert(json_is_array(ch));
        if (json_object_get(j, "usage") && json_array_size(ch) == 0) {
            usage++;
            cr_expect_eq(i, n - 2, "usage chunk is last before [DONE]");
        }
        json_t *c0 = json_array_get(ch, 0);
        json_t *d = json_object_get(c0, "delta");
        if (json_object_get(d, "role"))
            roles++;
        if (json_is_string(json_object_get(d, "content")) &&
            json_string_length(json_object_get(d, "content")))
            content++;
        if (json_is_string(json_object_get(c0, "text")) &&
            json_string_length(json_object_get(c0, "text")))
            content++;
        if (json_is_string(json_object_get(c0, "finish_reason")))
            finishes++;
        json_decref(j);
    }
    cr_expect_eq(finishes, n_choices);
    cr_expect_eq(roles, chat ? n_choices : 0);
    cr_expect_eq(usage, include_usage);
    cr_expect(content > 0);
    if (chat) {
        json_t *first = json_loads(ev[0], 0, NULL);
        json_t *d = json_object_get(json_array_get(json_object_get(first, "choices"), 0), "delta");
        cr_expect_str_eq(json_string_value(json_object_get(d, "role")), "assistant");
        json_decref(first);
    }
    pl_test_sse_free(ev, n);
    pl_test_resp_free(&r);
}

Test(api, chat_stream_framing)
{
    check_stream("{\"model\":\"mock\",\"stream\":true,\"max_tokens\":5,\"messages\":"
                 "[{\"role\":\"user\",\"content\":\"hi\"}]}", 1, 0, 1);
    check_stream("{\"model\":\"mock\",\"stream\":true,\"max_tokens\":5,\"stream_options\":"
                 "{\"include_usage\":true},\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                 1, 1, 1);
    check_stream("{\"model\":\"mock\",\"stream\":true,\"n\":3,\"max_tokens\":4,\"messages\":"
                 "[{\"role\":\"user\",\"content\":\"hi\"}]}", 3, 0, 1);
    check_stream("{\"model\":\"mock\",\"stream\":true,\"max_tokens\":4,\"prompt\":\"go\","
                 "\"stream_options\":{\"include_usage\":true}}", 1, 1, 0);
    stop_server();
}

Test(api, error_cases)
{
    const char *chat = "/v1/chat/completions";
    const char *msgs = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    char b[512];
    expect_error(chat, "{\"model\":", 9, 400, NULL, NULL);
    expect_error(chat, "{\"model\":\"mock\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}",
                 58, 400, NULL, NULL);
    expect_error(chat, "[1,2]", 5, 400, NULL, NULL);
    snprintf(b, sizeof b, "{%s}", msgs);
    expect_error(chat, b, strlen(b), 400, "model", NULL);
    snprintf(b, sizeof b, "{\"model\":5,%s}", msgs);
    expect_error(chat, b, strlen(b), 400, "model", NULL);
    expect_error(chat, "{\"model\":\"mock\"}", 16, 400, "messages", NULL);
    expect_error(chat, "{\"model\":\"mock\",\"messages\":\"hi\"}", 32, 400, "messages", NULL);
    expect_error("/v1/completions", "{\"model\":\"mock\",\"prompt\":7}", 27, 400, "prompt", NULL);
    static const struct { const char *kv, *param; } bad[] = {
        {"\"temperature\":2.5", "temperature"}, {"\"temperature\":-1", "temperature"},
        {"\"temperature\":\"hot\"", "temperature"}, {"\"top_p\":0", "top_p"},
        {"\"top_p\":1.5", "top_p"}, {"\"max_tokens\":0", "max_tokens"},
        {"\"max_tokens\":-3", "max_tokens"}, {"\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]", "stop"},
        {"\"stop\":5", "stop"}, {"\"tools\":[{\"type\":\"function\"}]", "tools[0]"},
        {"\"n\":0", "n"}, {"\"logit_bias\":{\"x\":1}", "logit_bias"},
        {"\"stream_options\":{\"include_usage\":true}", "stream_options"},
        {"\"top_logprobs\":3", "top_logprobs"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(b, sizeof b, "{\"model\":\"mock\",%s,%s}", msgs, bad[i].kv);
        expect_error(chat, b, strlen(b), 400, bad[i].param, NULL);
    }
    snprintf(b, sizeof b, "{\"model\":\"gpt-9\",%s}", msgs);
    expect_error(chat, b, strlen(b), 404, "model", "model_not_found");
    /* 413: a body over the 4 MiB default. */
    size_t big = 5u << 20;
    char *huge = malloc(big);
    memset(huge, ' ', big);
    memcpy(huge, "{\"model\":\"mock\",", 16);
    huge[big - 1] = '}';
    expect_error(chat, huge, big, 413, NULL, NULL);
    free(huge);
    /* Unknown path and wrong method. */
    expect_error("/v2/nothing", "{}", 2, 404, NULL, NULL);
    char url[256];
    snprintf(url, sizeof url, "%s/v1/chat/completions", srv.url);
    pl_test_resp r;
    cr_assert_eq(pl_test_http("GET", url, NULL, 0, &r), 0);
    cr_expect_eq(r.status, 405);
    cr_expect(strstr(r.body, "\"error\""));
    pl_test_resp_free(&r);
    /* Still serving. */
    long st;
    json_t *h = get_json("/health", &st);
    cr_expect_eq(st, 200);
    json_decref(h);
    stop_server();
}

Test(api, unknown_fields_are_ignored)
{
    long st;
    json_t *j = post_json("/v1/chat/completions",
                          "{\"model\":\"mock\",\"max_tokens\":2,\"frobnicate\":{\"a\":1},"
                          "\"messages\":[{\"role\":\"user\",\"content\":\"hi\",\"x\":1}]}", &st);
    cr_expect_eq(st, 200);
    /* A whole completion, as if the unknown fields were not there. */
    cr_expect_str_eq(json_string_value(json_object_get(j, "object")), "chat.completion");
    cr_expect_str_eq(json_string_value(json_object_get(j, "model")), "mock");
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    cr_expect_str_eq(json_string_value(json_object_get(c0, "finish_reason")), "length");
    json_t *msg = json_object_get(c0, "message");
    cr_expect_str_eq(json_string_value(json_object_get(msg, "role")), "assistant");
    const char *text = json_string_value(json_object_get(msg, "content"));
    cr_assert_not_null(text);
    cr_expect_gt(strlen(text), 0);
    json_t *u = json_object_get(j, "usage");
    cr_expect_eq(json_integer_value(json_object_get(u, "completion_tokens")), 2, "max_tokens 2");
    cr_expect_eq(json_integer_value(json_object_get(u, "total_tokens")),
                 json_integer_value(json_object_get(u, "prompt_tokens")) + 2);
    json_decref(j);
    stop_server();
}

Test(api, tokenize_detokenize)
{
    long st;
    json_t *j = post_json("/tokenize", "{\"model\":\"mock\",\"prompt\":\"a b a d\"}", &st);
    cr_expect_eq(st, 200);
    cr_expect_eq(json_integer_value(json_object_get(j, "count")), 4);
    json_t *t = json_object_get(j, "tokens");
    cr_assert_eq(json_array_size(t), 4);
    /* The mock's tokens are one per word, an id per distinct word. */
    json_int_t id[4];
    for (int i = 0; i < 4; i++) {
        cr_assert(json_is_integer(json_array_get(t, (size_t)i)));
        id[i] = json_integer_value(json_array_get(t, (size_t)i));
        cr_expect(id[i] >= 0 && id[i] < 32768, "token %d: %lld", i, (long long)id[i]);
    }
    cr_expect_eq(id[0], id[2], "the same word, the same id");
    cr_expect_neq(id[0], id[1]);
    cr_expect_neq(id[1], id[3]);
    json_decref(j);
    j = post_json("/detokenize", "{\"model\":\"mock\",\"tokens\":[1,2]}", &st);
    cr_expect_eq(st, 200);
    cr_expect_str_eq(json_string_value(json_object_get(j, "prompt")), "<1> <2>");
    json_decref(j);
    j = post_json("/detokenize", "{\"model\":\"mock\",\"tokens\":[\"x\"]}", &st);
    cr_expect_eq(st, 400);
    json_decref(j);
    stop_server();
}

Test(api, tokenizer_info)
{
    long st;
    /* The mock's word tokenizer: no special tokens, no template, the
     * context length /v1/models gives. */
    json_t *j = get_json("/tokenizer_info", &st);
    cr_expect_eq(st, 200);
    cr_expect_str_eq(json_string_value(json_object_get(j, "tokenizer_class")), "mock");
    const char *nulls[] = {"bos_token", "eos_token", "pad_token", "unk_token", "chat_template"};
    for (size_t i = 0; i < sizeof nulls / sizeof *nulls; i++) {
        json_t *v = json_object_get(j, nulls[i]);
        cr_expect(v && json_is_null(v), "%s must be present and null", nulls[i]);
    }
    cr_expect(json_is_false(json_object_get(j, "add_bos_token")));
    json_t *m = get_json("/v1/models/mock", &st);
    cr_expect_eq(json_integer_value(json_object_get(j, "model_max_length")),
                 json_integer_value(json_object_get(m, "max_model_len")));
    json_decref(m);
    json_decref(j);
    j = get_json("/tokenizer_info?model=mock", &st);
    cr_expect_eq(st, 200);
    json_decref(j);
    j = get_json("/tokenizer_info?model=nope", &st);
    cr_expect_eq(st, 404);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
                     "model_not_found");
    json_decref(j);
    j = post_json("/tokenizer_info", "{}", &st);
    cr_expect_eq(st, 405);
    json_decref(j);
    stop_server();
}
