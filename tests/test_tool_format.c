/* test_tool_format.c - the tool-call format vtables
 * (backends/text/tool_format.h), each against itself: a call rendered
 * into a history turn parses back into the same call, matches the
 * format's own call grammar (the constraint under tool_choice required),
 * and no prefix of it is ever let out of a stream as text. gpt-oss's
 * native format: its forced grammar takes the model's call form after an
 * optional analysis message, and the reasoning split reads that call. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/constrain/json_schema.h"
#include "backends/constrain/regex.h"
#include "backends/text/reasoning_format.h"
#include "backends/text/tool_format.h"
#include "src/base/evbuf.h"

static const pl_tool_format *const prompted[] = {
    &pl_tool_hermes, &pl_tool_generic, &pl_tool_llama3, &pl_tool_mistral, &pl_tool_qwen3_coder,
};
#define N_PROMPTED (sizeof prompted / sizeof prompted[0])

static json_t *tools_(void)
{
    json_t *t = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_w\","
                           "\"parameters\":{\"type\":\"object\",\"properties\":{\"c\":"
                           "{\"type\":\"integer\"}},\"required\":[\"c\"]}}},"
                           "{\"type\":\"function\",\"function\":{\"name\":\"set-x\"}}]",
                           0, NULL);
    cr_assert_not_null(t);
    return t;
}

/* OpenAI tool_calls: get_w({"c": i}) for i < n, set-x({}) last when n > 1. */
static json_t *calls_(int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++) {
        char args[32];
        snprintf(args, sizeof args, "{\"c\": %d}", i + 1);
        bool last = n > 1 && i == n - 1;
        json_array_append_new(a, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", "call_1", "type",
                                           "function", "function", "name",
                                           last ? "set-x" : "get_w", "arguments",
                                           last ? "{}" : args));
    }
    return a;
}

static char *render_(const pl_tool_format *f, json_t *calls)
{
    struct evbuffer *b = evbuffer_new();
    cr_assert_not_null(b);
    cr_assert_eq(f->render_calls(b, calls), 0, "%s", f->name);
    return pl_evbuffer_take(b);
}

/* The format's forced-reply grammar over tools (each with its schema). */
static pl_dfa *grammar_(const pl_tool_format *f, json_t *tools, bool many)
{
    struct evbuffer *b = evbuffer_new();
    evbuffer_add(b, "(?:", 3);
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function"), *params = json_object_get(fn, "parameters");
        char msg[200], *esc = NULL, *ns = json_dumps(json_object_get(fn, "name"), JSON_ENCODE_ANY);
        size_t len = 0, cap = 0;
        char *args = params ? pl_json_schema_regex(params, PL_JSON_WS_COMPACT, msg, sizeof msg)
                            : pl_json_object_regex(PL_JSON_WS_COMPACT);
        cr_assert(args && ns && pl_regex_escape_append(&esc, &len, &cap, ns, strlen(ns)) == 0);
        if (i)
            evbuffer_add(b, "|", 1);
        if (f->call_regex_params) {        /* the bare name, its own argument form */
            char *bare = NULL;
            size_t bl = 0, bc = 0;
            const char *nm = json_string_value(json_object_get(fn, "name"));
            cr_assert(pl_regex_escape_append(&bare, &bl, &bc, nm, strlen(nm)) == 0);
            cr_assert_eq(f->call_regex_params(b, bare, params, PL_JSON_WS_COMPACT, msg,
                                              sizeof msg), 0, "%s", msg);
            free(bare);
        } else {
            f->call_regex(b, esc, args);
        }
        free(ns), free(args), free(esc);
    }
    evbuffer_add(b, ")", 1);
    char *one = pl_evbuffer_take(b), *re = f->reply_regex(one, many, 4);
    char err[256];
    pl_dfa *d = pl_regex_compile(re, strlen(re), 0, 1 << 16, err, sizeof err);
    cr_assert_not_null(d, "%s: %s: %s", f->name, re, err);
    free(one), free(re);
    return d;
}

Test(tool_format, each_parses_its_own_rendered_calls)
{
    json_t *tools = tools_();
    for (size_t k = 0; k < N_PROMPTED; k++) {
        const pl_tool_format *f = prompted[k];
        int most = f == &pl_tool_llama3 ? 1 : 3;     /* llama3: one call a reply */
        for (int n = 1; n <= most; n++) {
            json_t *in = calls_(n);
            char *text = render_(f, in), *content = NULL;
            json_t *out = pl_tool_format_parse(f, tools, text, strlen(text), false, &content);
            cr_assert_not_null(out, "%s: %s", f->name, text);
            cr_expect_null(content, "%s: content '%s'", f->name, content);
            cr_assert_eq(json_array_size(out), (size_t)n, "%s: %s", f->name, text);
            for (int i = 0; i < n; i++) {
                json_t *want = json_object_get(json_array_get(in, (size_t)i), "function");
                json_t *got = json_array_get(out, (size_t)i);
                cr_expect_str_eq(json_string_value(json_object_get(got, "name")),
                                 json_string_value(json_object_get(want, "name")));
                json_t *wa = json_loads(json_string_value(json_object_get(want, "arguments")),
                                        0, NULL);
                json_t *ga = json_loads(json_string_value(json_object_get(got, "arguments")),
                                        0, NULL);
                cr_expect(ga && json_equal(wa, ga), "%s: arguments of call %d", f->name, i);
                json_decref(wa), json_decref(ga);
            }
            json_decref(out), json_decref(in);
            free(text);
        }
    }
    json_decref(tools);
}

Test(tool_format, rendered_calls_match_the_call_grammar)
{
    json_t *tools = tools_();
    for (size_t k = 0; k < N_PROMPTED; k++) {
        const pl_tool_format *f = prompted[k];
        pl_dfa *one = grammar_(f, tools, false), *many = grammar_(f, tools, true);
        for (int n = 1; n <= 3; n++) {
            json_t *in = calls_(n);
            char *text = render_(f, in);
            cr_expect_eq(pl_dfa_match(one, text, strlen(text)), n == 1, "%s: %s", f->name, text);
            bool parallel = f != &pl_tool_llama3;
            cr_expect_eq(pl_dfa_match(many, text, strlen(text)), n == 1 || parallel, "%s: %s",
                         f->name, text);
            free(text);
            json_decref(in);
        }
        /* a call of an unknown function or outside its schema is refused */
        static const char *const bad[] = {"{\"name\": \"nope\", \"arguments\": {}}",
                                          "{\"name\": \"get_w\", \"arguments\": {\"c\": \"x\"}}"};
        for (size_t i = 0; i < 2; i++) {
            json_t *o = json_loads(bad[i], 0, NULL);
            json_t *c = json_pack("[{s:s, s:O}]", "type", "function", "function", o);
            char *as = json_dumps(json_object_get(o, "arguments"), 0);
            json_object_set_new(json_object_get(json_array_get(c, 0), "function"), "arguments",
                                json_string(as));
            free(as);
            char *text = render_(f, c);
            cr_expect(!pl_dfa_match(one, text, strlen(text)), "%s: %s", f->name, text);
            free(text);
            json_decref(c), json_decref(o);
        }
        pl_dfa_free(one), pl_dfa_free(many);
    }
    json_decref(tools);
}

Test(tool_format, a_stream_never_lets_a_call_out_as_text)
{
    json_t *in = calls_(2);
    for (size_t k = 0; k < N_PROMPTED; k++) {
        const pl_tool_format *f = prompted[k];
        char *text = render_(f, in);
        size_t n = strlen(text), on = strlen(f->opener);
        char *spaced = malloc(n + 3);
        snprintf(spaced, n + 3, "\n %s", text);
        for (size_t i = 0; i <= n + 2; i++) {
            int c = pl_tool_format_classify(f, false, spaced, i);
            cr_expect_neq(c, PL_TOOL_FORMAT_TEXT, "%s: prefix %zu", f->name, i);
            if (i >= on + 2)
                cr_expect_eq(c, PL_TOOL_FORMAT_HOLD, "%s: prefix %zu", f->name, i);
        }
        cr_expect_eq(pl_tool_format_classify(f, false, "Sunny.", 6), PL_TOOL_FORMAT_TEXT);
        cr_expect_eq(pl_tool_format_classify(f, true, "Sunny.", 6), PL_TOOL_FORMAT_HOLD);
        free(spaced), free(text);
    }
    json_decref(in);
}

/* Reasoning pieces as "R[..]B[name]A[..]C[..]", merged by kind. */
typedef struct seen {
    char s[512];
    char last;
} seen;

static bool collect_(void *ud, const pl_reply_piece *p)
{
    seen *g = ud;
    static const char kinds[] = "RCBA";
    size_t l = strlen(g->s);
    char k = kinds[p->kind];
    if (k == 'B')
        snprintf(g->s + l, sizeof g->s - l, "B[%s]", p->name);
    else if (k == g->last && l)
        snprintf(g->s + l - 1, sizeof g->s - l + 1, "%.*s]", (int)p->len, p->text);
    else
        snprintf(g->s + l, sizeof g->s - l, "%c[%.*s]", k, (int)p->len, p->text);
    g->last = k;
    return true;
}

Test(tool_format, harmony_forced_call_is_the_models_form)
{
    json_t *tools = tools_();
    pl_dfa *d = grammar_(&pl_tool_harmony, tools, true);
    static const char call[] = "<|channel|>commentary to=functions.get_w <|constrain|>json"
                               "<|message|>{\"c\": 7}";
    static const char analysed[] = "<|channel|>analysis<|message|>weather?<|end|>"
                                   "<|start|>assistant<|channel|>commentary to=functions.get_w "
                                   "<|constrain|>json<|message|>{\"c\": 7}";
    cr_expect(pl_dfa_match(d, call, strlen(call)));
    cr_expect(pl_dfa_match(d, analysed, strlen(analysed)));
    cr_expect(!pl_dfa_match(d, "{\"c\": 7}", 8));
    static const char twice[] = "<|channel|>commentary to=functions.get_w <|constrain|>json"
                                "<|message|>{\"c\": 7}<|channel|>commentary to=functions.get_w "
                                "<|constrain|>json<|message|>{\"c\": 7}";
    cr_expect(!pl_dfa_match(d, twice, strlen(twice)), "one call a reply");
    pl_dfa_free(d);
    /* the reasoning split reads the call the grammar allows */
    pl_reply_split s;
    pl_reply_split_init(&s, &pl_reasoning_harmony, true, PL_THINKING_DEFAULT);
    seen g = {0};
    cr_assert(pl_reply_split_feed(&s, analysed, strlen(analysed), 1, collect_, &g));
    cr_assert(pl_reply_split_finish(&s, collect_, &g));
    cr_expect_str_eq(g.s, "R[weather?]B[get_w]A[{\"c\": 7}]");
    cr_expect(s.in_call);
    cr_expect(pl_tool_harmony.native && !pl_tool_harmony.parse && !pl_tool_harmony.render_tools);
    json_decref(tools);
}

Test(tool_format, table_finds_each_by_name)
{
    const pl_tool_format *all[] = {&pl_tool_hermes, &pl_tool_generic, &pl_tool_llama3,
                                   &pl_tool_mistral, &pl_tool_harmony};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        cr_expect_eq(pl_tool_format_find(all[i]->name), all[i], "%s", all[i]->name);
    cr_expect_null(pl_tool_format_find("qwen3"));
    cr_expect_null(pl_tool_format_find(NULL));
    cr_expect_eq(pl_reasoning_format_find("qwen3"), &pl_reasoning_qwen3);
    cr_expect_eq(pl_reasoning_format_find("harmony"), &pl_reasoning_harmony);
    cr_expect_null(pl_reasoning_format_find("none"));
}

/* qwen3_coder: a parameter's text is read by its schema type, as vLLM's
 * qwen3_coder parser reads it (the template prints Python's True). */
Test(tool_format, qwen3_coder_reads_values_by_schema_type)
{
    json_t *tools = json_loads(
        "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":"
        "\"object\",\"properties\":{\"n\":{\"type\":\"integer\"},\"s\":{\"type\":\"string\"},"
        "\"b\":{\"type\":\"boolean\"},\"o\":{\"type\":\"object\"},\"x\":{\"type\":\"number\"}}}}}]",
        0, NULL);
    static const char reply[] =
        "Let me look.\n\n<tool_call>\n<function=f>\n<parameter=n>\n12\n</parameter>\n"
        "<parameter=s>\n12\n</parameter>\n<parameter=b>\nTrue\n</parameter>\n"
        "<parameter=o>\n{\"k\": [1, 2]}\n</parameter>\n<parameter=x>\nnot a number\n"
        "</parameter>\n</function>\n</tool_call>";
    char *content = NULL;
    json_t *calls = pl_tool_format_parse(&pl_tool_qwen3_coder, tools, reply, strlen(reply),
                                         false, &content);
    cr_assert_not_null(calls);
    cr_expect_str_eq(content, "Let me look.");
    free(content);
    json_t *a = json_loads(json_string_value(json_object_get(json_array_get(calls, 0),
                                                             "arguments")), 0, NULL);
    json_t *want = json_loads("{\"n\": 12, \"s\": \"12\", \"b\": true, \"o\": {\"k\": [1, 2]},"
                              " \"x\": \"not a number\"}", 0, NULL);
    cr_expect(a && json_equal(a, want), "%s",
              json_string_value(json_object_get(json_array_get(calls, 0), "arguments")));
    /* cut inside the call: nothing of it is returned */
    json_t *cut = pl_tool_format_parse(&pl_tool_qwen3_coder, tools, reply, 60, true, &content);
    cr_assert_not_null(cut);
    cr_expect_eq(json_array_size(cut), 0);
    free(content);
    content = NULL;
    /* an unknown function is no call */
    static const char unknown[] = "<tool_call>\n<function=g>\n</function>\n</tool_call>";
    cr_expect_null(pl_tool_format_parse(&pl_tool_qwen3_coder, tools, unknown, strlen(unknown),
                                        false, &content));
    json_decref(a), json_decref(want), json_decref(calls), json_decref(cut), json_decref(tools);
    free(content);
}
