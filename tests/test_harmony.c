/* test_harmony.c - gpt-oss replies split by channel
 * (backends/text/harmony.c): the message forms the model writes and
 * that llama.cpp's and vLLM's harmony parsers read (analysis, final,
 * commentary preambles, calls with the recipient in the role or in the
 * channel, content types), replies that are not harmony, replies cut
 * short, every case alike however the reply is cut into deltas, and the
 * assistant turns of jinja2's renderings of gpt-oss's template
 * (tests/fixtures/harmony_templates.json) parsed back into their
 * messages. */
#include <criterion/criterion.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/text/harmony.h"

typedef struct split {
    char reasoning[512], content[512], calls[512];   /* calls: "name(args);" */
} split;

typedef struct hcase {
    const char *reply, *reasoning, *content, *calls;
} hcase;

static const hcase cases[] = {
    {"<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final"
     "<|message|>Hello!", "Think.", "Hello!", ""},
    {"<|channel|>final<|message|>Just this.", "", "Just this.", ""},
    {"<|channel|>analysis<|message|>a < b and <|x|> stays<|end|>", "a < b and <|x|> stays", "",
     ""},
    /* a call as the model writes it: recipient after the channel */
    {"<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary"
     " to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}",
     "Need weather.", "", "get_weather({\"city\":\"Oslo\"});"},
    /* and as the template renders history: recipient in the role */
    {" to=functions.lookup<|channel|>commentary json<|message|>{\"q\": 1}", "", "",
     "lookup({\"q\": 1});"},
    /* a preamble the user sees, then a call */
    {"<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant to=functions.f"
     "<|channel|>commentary json<|message|>{}", "", "Checking.", "f({});"},
    /* two analysis messages, then the answer without <|end|> before it */
    {"<|channel|>analysis<|message|>one<|end|><|start|>assistant<|channel|>analysis<|message|>"
     " two<|start|>assistant<|channel|>final<|message|>ok", "one two", "ok", ""},
    /* a built-in tool's recipient is not a function: its text is reasoning */
    {"<|channel|>analysis to=browser.search<|message|>{\"query\":\"x\"}", "{\"query\":\"x\"}",
     "", ""},
    /* not harmony at all */
    {"Hello there <|channel|> friend", "", "Hello there <|channel|> friend", ""},
    {"a", "", "a", ""},
    /* the first header is never completed: a cut header is no message */
    {"<|channel|>analysis<|mess", "", "", ""},
    {"<|channel|>analysis<|message|>abc<|en", "abc<|en", "", ""},
    {"<|channel|>final<|message|>ok<|end|><|start|>assistant<|chan", "", "ok", ""},
    /* text after <|end|> that is no header */
    {"<|channel|>final<|message|>ok<|end|>and more", "", "okand more", ""},
    /* a function name parley could not return is no call */
    {"<|channel|>commentary to=functions.bad!name<|message|>{}", "{}", "", ""},
    /* a newline cannot be in a header */
    {"<|channel|>fi\nnal", "", "<|channel|>fi\nnal", ""},
};

static void add(char *dst, const char *p, size_t n)
{
    size_t l = strlen(dst);
    cr_assert_lt(l + n, 512);
    memcpy(dst + l, p, n);
    dst[l + n] = '\0';
}

static void take(split *sp, const pl_harmony_stream *s, const pl_harmony_out *o, bool *in_call)
{
    if (o->part == PL_HARMONY_REASONING)
        add(sp->reasoning, o->buf, o->n);
    else if (o->part == PL_HARMONY_CONTENT)
        add(sp->content, o->buf, o->n);
    else if (o->part == PL_HARMONY_CALL)
        add(sp->calls, o->buf, o->n);
    else
        cr_assert_eq(o->n, 0, "bytes of no part");
    if (!o->began)
        return;
    if (*in_call)
        add(sp->calls, ");", 2);
    *in_call = s->part == PL_HARMONY_CALL;
    if (*in_call) {
        add(sp->calls, s->name, strlen(s->name));
        add(sp->calls, "(", 1);
    }
}

/* The reply fed in deltas cut at the given lengths (cycled). */
static void run(const char *reply, const size_t *cuts, size_t n_cuts, split *sp)
{
    memset(sp, 0, sizeof *sp);
    pl_harmony_stream s;
    pl_harmony_stream_init(&s);
    char buf[1024];
    pl_harmony_out o = {.buf = buf};
    size_t len = strlen(reply), at = 0;
    bool in_call = false;
    for (size_t k = 0; at < len; k++) {
        size_t n = cuts[k % n_cuts], used = 0;
        n = n > len - at ? len - at : n;
        while (used < n) {
            size_t u = pl_harmony_stream_feed(&s, reply + at + used, n - used, &o);
            cr_assert(u > 0 || o.n > 0, "no progress in '%s'", reply);
            used += u;
            take(sp, &s, &o, &in_call);
        }
        at += n;
    }
    pl_harmony_stream_finish(&s, &o);
    take(sp, &s, &o, &in_call);
    if (in_call)
        add(sp->calls, ");", 2);
}

Test(harmony, splits_each_form)
{
    static const size_t whole[] = {100000};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        split sp;
        run(cases[i].reply, whole, 1, &sp);
        cr_expect_str_eq(sp.reasoning, cases[i].reasoning, "reasoning of '%s'", cases[i].reply);
        cr_expect_str_eq(sp.content, cases[i].content, "content of '%s'", cases[i].reply);
        cr_expect_str_eq(sp.calls, cases[i].calls, "calls of '%s'", cases[i].reply);
    }
}

Test(harmony, streams_alike_however_cut)
{
    static const size_t cuts[][3] = {{1, 1, 1}, {2, 3, 5}, {7, 1, 2}, {11, 4, 13}, {3, 3, 3}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
            split sp;
            run(cases[i].reply, cuts[k], 3, &sp);
            cr_expect_str_eq(sp.reasoning, cases[i].reasoning, "'%s' cuts %zu", cases[i].reply, k);
            cr_expect_str_eq(sp.content, cases[i].content, "'%s' cuts %zu", cases[i].reply, k);
            cr_expect_str_eq(sp.calls, cases[i].calls, "'%s' cuts %zu", cases[i].reply, k);
        }
}

/* Bytes that are no marker come out at once, but for a possible marker's
 * beginning; the header's bytes never do. */
Test(harmony, holds_back_only_possible_markers)
{
    pl_harmony_stream s;
    pl_harmony_stream_init(&s);
    char buf[512];
    pl_harmony_out o = {.buf = buf};
    const char *h = "<|channel|>final<|message|>";
    cr_assert_eq(pl_harmony_stream_feed(&s, h, strlen(h), &o), strlen(h));
    cr_assert(o.began);
    cr_assert_eq(s.part, PL_HARMONY_CONTENT);
    cr_assert_eq(o.n, 0);
    pl_harmony_stream_feed(&s, "x <|e", 5, &o);
    cr_assert_eq(o.n, 2);
    cr_assert_eq(memcmp(buf, "x ", 2), 0);
    pl_harmony_stream_feed(&s, "nd", 2, &o);
    cr_assert_eq(o.n, 0);
    pl_harmony_stream_feed(&s, "s", 1, &o);   /* "<|ends": no marker */
    cr_assert_eq(o.n, 6);
    cr_assert_eq(memcmp(buf, "<|ends", 6), 0);
}

/* Random bytes never crash it, never give more than they hold, and a
 * header never grows past its bound. */
Test(harmony, survives_random_bytes)
{
    unsigned x = 12345;
    char text[300], buf[300 + PL_HARMONY_SLACK];
    static const char alphabet[] = "<|>channelmessagestartendcallfinal to=functions.x\n\x80";
    for (int round = 0; round < 2000; round++) {
        pl_harmony_stream s;
        pl_harmony_stream_init(&s);
        size_t len = 1 + (x = x * 1103515245 + 12345) % 299, total = 0;
        for (size_t i = 0; i < len; i++)
            text[i] = alphabet[(x = x * 1103515245 + 12345) % (sizeof alphabet - 1)];
        pl_harmony_out o = {.buf = buf};
        for (size_t at = 0; at < len;) {
            size_t n = 1 + (x = x * 1103515245 + 12345) % 17;
            n = n > len - at ? len - at : n;
            size_t u = pl_harmony_stream_feed(&s, text + at, n, &o);
            cr_assert(u > 0 || o.n > 0);
            cr_assert_leq(s.n_head, PL_HARMONY_HEADER_MAX);
            at += u;
            total += o.n;
        }
        pl_harmony_stream_finish(&s, &o);
        total += o.n;
        cr_assert_leq(total, len);
    }
}

/* ---- parsing what the template renders ---- */

/* tests/fixtures/harmony_templates.json: jinja2's renderings of gpt-oss's
 * template. An assistant turn as the template writes it (analysis, final,
 * a call with its recipient in the role) parses back into the message it
 * came from. */
static json_t *fixture(void)
{
    const char *src = getenv("PARLEY_SRC");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/harmony_templates.json", src ? src : ".");
    json_t *doc = json_load_file(path, 0, NULL);
    cr_assert_not_null(doc, "cannot load %s", path);
    return doc;
}

static const char *rendered(json_t *doc, const char *conv, bool agp, json_t **msgs)
{
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(doc, "conversations"), i, c)
        if (!strcmp(json_string_value(json_object_get(c, "name")), conv))
            *msgs = json_object_get(c, "messages");
    json_array_foreach(json_object_get(doc, "cases"), i, c)
        if (!strcmp(json_string_value(json_object_get(c, "conversation")), conv) &&
            json_is_true(json_object_get(c, "add_generation_prompt")) == agp &&
            !json_object_get(c, "tools") && !json_object_get(c, "reasoning_effort"))
            return json_string_value(json_object_get(c, "expected"));
    cr_assert_fail("no case %s", conv);
    return NULL;
}

/* The reply part: what follows "<|start|>assistant" after the last user
 * turn, up to a tool result's header. */
static void reply_of(const char *text, char *out, size_t cap)
{
    const char *u = text, *p;
    while ((p = strstr(u + 1, "<|start|>user")))
        u = p;
    const char *start = strstr(strstr(u, "<|end|>"), "<|start|>assistant");
    cr_assert_not_null(start);
    start += strlen("<|start|>assistant");
    const char *end = strstr(start, "<|start|>functions.");
    size_t n = end ? (size_t)(end - start) : strlen(start);
    cr_assert_lt(n, cap);
    memcpy(out, start, n);
    out[n] = '\0';
}

Test(harmony, parses_what_the_template_renders)
{
    json_t *doc = fixture(), *msgs = NULL;
    static const size_t whole[] = {100000}, small[] = {3, 1, 7};
    struct { const char *conv; bool agp; } turns[] = {
        {"last_assistant", false}, {"last_assistant_no_thinking", false},
        {"tool_round_trip", true}, {"content_as_analysis", true},
    };
    for (size_t t = 0; t < sizeof turns / sizeof turns[0]; t++) {
        char reply[1024];
        reply_of(rendered(doc, turns[t].conv, turns[t].agp, &msgs), reply, sizeof reply);
        json_t *m = NULL;
        for (size_t i = 0; i < json_array_size(msgs); i++)
            if (!strcmp(json_string_value(json_object_get(json_array_get(msgs, i), "role")),
                        "assistant"))
                m = json_array_get(msgs, i);
        json_t *calls = json_object_get(m, "tool_calls");
        const char *thinking = json_string_value(json_object_get(m, "thinking"));
        const char *content = json_string_value(json_object_get(m, "content"));
        for (int k = 0; k < 2; k++) {
            split sp;
            run(reply, k ? small : whole, k ? 3 : 1, &sp);
            if (!calls) {
                cr_expect_str_eq(sp.reasoning, thinking ? thinking : "", "%s", reply);
                cr_expect_str_eq(sp.content, content, "%s", reply);
                continue;
            }
            /* a call's turn: its reasoning (or content taken as such), the call */
            cr_expect_str_eq(sp.reasoning, *content ? content : thinking, "%s", reply);
            json_t *fn = json_object_get(json_array_get(calls, 0), "function");
            const char *name = json_string_value(json_object_get(fn, "name"));
            cr_assert_eq(strncmp(sp.calls, name, strlen(name)), 0, "%s", sp.calls);
            char *args = sp.calls + strlen(name) + 1;
            args[strlen(args) - 2] = '\0';            /* "name(args);" */
            json_t *got = json_loads(args, 0, NULL);
            json_t *want = json_loads(json_string_value(json_object_get(fn, "arguments")), 0,
                                      NULL);
            cr_expect(json_equal(got, want), "%s: arguments %s", turns[t].conv, args);
            json_decref(got);
            json_decref(want);
        }
    }
    json_decref(doc);
}
