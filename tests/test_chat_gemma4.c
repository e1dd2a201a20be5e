/* test_chat_gemma4.c - Gemma 4's text side: its chat template
 * (backends/text/chat_template_gemma4.c) against jinja2, and its replies'
 * split (reasoning_gemma4.c: the thought channel, calls read into JSON).
 *
 * tests/fixtures/gemma4_templates.json (gen_gemma4_fixtures.py) holds the
 * official template's source, tool sets, conversations and what jinja2
 * rendered for each (generation prompt on and off, enable_thinking absent,
 * false and true, with and without tools). Every rendering must match byte
 * for byte. The split is checked on replies written in the template's own
 * syntax (what it renders for history calls), fed whole and split at every
 * byte: the calls must come out as the JSON the template was given.
 */
#include <criterion/criterion.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/text/chat_template.h"
#include "backends/text/reasoning_format.h"
#include "backends/text/tool_format.h"
#include "backends/constrain/regex.h"
#include "src/base/evbuf.h"
#include "tests/helpers/chat_fixture.h"

static json_t *doc;

static void load(void)
{
    const char *src = getenv("PARLEY_SRC");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/gemma4_templates.json", src ? src : ".");
    json_error_t jerr;
    doc = json_load_file(path, 0, &jerr);
    cr_assert_not_null(doc, "cannot load %s: %s", path, jerr.text);
}

static void unload(void)
{
    json_decref(doc);
}

TestSuite(chat_gemma4, .init = load, .fini = unload);

static json_t *conversation(const char *name)
{
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(doc, "conversations"), i, c)
        if (!strcmp(json_string_value(json_object_get(c, "name")), name))
            return json_object_get(c, "messages");
    cr_assert_fail("no conversation %s", name);
    return NULL;
}

static const char *template_src(void)
{
    return json_string_value(json_object_get(doc, "template"));
}

Test(chat_gemma4, detected)
{
    pl_chat_style s;
    cr_assert_eq(pl_chat_style_init(&s, template_src()), 0);
    cr_assert_eq(s.tmpl, PL_CHAT_TMPL_GEMMA);
    cr_assert_eq(s.flags, PL_CHAT_F_GEMMA4);
    cr_assert_eq(pl_chat_style_tool_format(&s), &pl_tool_gemma4);
    cr_assert(pl_chat_style_tool_format(&s)->native);
    cr_assert_eq(pl_chat_style_reasoning_format(&s), &pl_reasoning_gemma4);
    pl_chat_style_free(&s);
    cr_assert_eq(pl_tool_format_find("gemma4"), &pl_tool_gemma4);
    cr_assert_eq(pl_reasoning_format_find("gemma4"), &pl_reasoning_gemma4);
}

static void render_all(const pl_chat_style *s, int *checked)
{
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(doc, "cases"), i, c) {
        int n;
        const char *conv = json_string_value(json_object_get(c, "conversation"));
        pl_chat_message *m = chat_fixture_messages(conversation(conv), "reasoning_content", &n);
        const char *tools = json_string_value(json_object_get(c, "tools"));
        json_t *think = json_object_get(json_object_get(c, "kwargs"), "enable_thinking");
        pl_chat_kwargs kw = {
            .enable_thinking = !think ? PL_THINKING_DEFAULT
                             : json_is_true(think) ? PL_THINKING_ON : PL_THINKING_OFF,
            .tools = tools ? json_object_get(json_object_get(doc, "tools"), tools) : NULL,
        };
        bool agp = json_is_true(json_object_get(c, "add_generation_prompt"));
        const char *want = json_string_value(json_object_get(c, "expected"));
        cr_assert_not_null(want, "case %zu: jinja2 raised", i);
        char *out = NULL;
        pl_err err = {0};
        int rc = pl_chat_style_render_kw(s, m, n, agp,
                                         json_string_value(json_object_get(doc, "bos_token")),
                                         json_string_value(json_object_get(doc, "eos_token")),
                                         &kw, &out, &err);
        cr_assert_eq(rc, 0, "case %zu (%s, tools %s): %s", i, conv, tools, err.message);
        size_t d = chat_fixture_first_diff(out, want);
        cr_expect_str_eq(out, want, "case %zu (%s, tools %s, agp %d, thinking %d) differs at "
                         "byte %zu:\nparley: %.120s\njinja2: %.120s", i, conv, tools, agp,
                         kw.enable_thinking, d, out + d, want + d);
        (*checked)++;
        free(out);
        free(m);
    }
}

Test(chat_gemma4, renders_as_jinja2)
{
    pl_chat_style s;
    cr_assert_eq(pl_chat_style_init(&s, template_src()), 0);
    int checked = 0;
    render_all(&s, &checked);
    cr_expect_gt(checked, 200);
    pl_chat_style_free(&s);
}

/* A file without a template names the style in its family row. */
Test(chat_gemma4, family_style_renders_the_same)
{
    pl_chat_style s = {.tmpl = PL_CHAT_TMPL_GEMMA, .flags = PL_CHAT_F_GEMMA4};
    int checked = 0;
    render_all(&s, &checked);
    cr_expect_gt(checked, 200);
}

/* A tool result with no call before it to answer. */
Test(chat_gemma4, result_without_call_rejected)
{
    pl_chat_style s = {.tmpl = PL_CHAT_TMPL_GEMMA, .flags = PL_CHAT_F_GEMMA4};
    json_t *calls = json_loads("[{\"id\":\"a\",\"type\":\"function\",\"function\":"
                               "{\"name\":\"f\",\"arguments\":\"{}\"}}]", 0, NULL);
    pl_chat_message m[] = {{"user", "x"}, {"assistant", NULL, NULL, calls},
                           {"tool", "1"}, {"tool", "2"}};
    char *out = NULL;
    pl_err err = {0};
    cr_assert_eq(pl_chat_style_render(&s, m, 4, true, "", "", &out, &err), -1);
    cr_expect_eq(err.status, 400);
    cr_expect_str_eq(err.param, "messages");
    cr_expect_null(out);
    cr_assert_eq(pl_chat_style_render(&s, m, 3, true, "", "", &out, &err), 0);
    free(out);
    json_decref(calls);
}

/* ---- the reply split ---- */

typedef struct got {
    char reasoning[4096], content[4096];
    size_t nr, nc;
    json_t *calls;               /* [{"name", "arguments": text}] */
    int last_kind;
} got;

static void add_(char *buf, size_t *n, const char *t, size_t len)
{
    cr_assert_lt(*n + len, 4096);
    memcpy(buf + *n, t, len);
    *n += len;
    buf[*n] = '\0';
}

static bool on_piece_(void *ud, const pl_reply_piece *p)
{
    got *g = ud;
    if (p->kind == PL_REPLY_PIECE_REASONING) {
        add_(g->reasoning, &g->nr, p->text, p->len);
    } else if (p->kind == PL_REPLY_PIECE_CONTENT) {
        add_(g->content, &g->nc, p->text, p->len);
    } else if (p->kind == PL_REPLY_PIECE_CALL_BEGIN) {
        cr_assert_eq((size_t)p->index, json_array_size(g->calls));
        json_array_append_new(g->calls, json_pack("{s:s, s:s}", "name", p->name,
                                                  "arguments", ""));
    } else {
        json_t *c = json_array_get(g->calls, (size_t)p->index);
        cr_assert_not_null(c, "arguments before their call");
        const char *a = json_string_value(json_object_get(c, "arguments"));
        size_t n = strlen(a);
        char *s = malloc(n + p->len + 1);
        memcpy(s, a, n);
        memcpy(s + n, p->text, p->len);
        s[n + p->len] = '\0';
        json_object_set_new(c, "arguments", json_string(s));
        free(s);
    }
    return true;
}

/* Split text fed in pieces of at most step bytes after a first piece of
 * first bytes (0: none). */
static void split_(const char *text, bool calls, size_t first, size_t step, got *g,
                   pl_reply_split *s)
{
    memset(g, 0, sizeof *g);
    g->calls = json_array();
    pl_reply_split_init(s, &pl_reasoning_gemma4, calls, PL_THINKING_ON);
    size_t n = strlen(text), at = 0;
    if (first) {
        cr_assert(pl_reply_split_feed(s, text, first, 1, on_piece_, g));
        at = first;
    }
    while (at < n) {
        size_t k = n - at < step ? n - at : step;
        cr_assert(pl_reply_split_feed(s, text + at, k, 1, on_piece_, g));
        at += k;
    }
    cr_assert(pl_reply_split_finish(s, on_piece_, g));
}

/* The same split whole, byte by byte, and cut in two at every byte. */
static void check_split_(const char *text, bool calls, const char *reasoning,
                         const char *content, json_t *want_calls)
{
    size_t n = strlen(text);
    for (size_t mode = 0; mode <= n + 1; mode++) {
        got g;
        pl_reply_split s;
        if (mode == 0)
            split_(text, calls, 0, n ? n : 1, &g, &s);
        else if (mode == 1)
            split_(text, calls, 0, 1, &g, &s);
        else
            split_(text, calls, mode - 1, n, &g, &s);
        cr_expect_str_eq(g.reasoning, reasoning, "mode %zu: %s", mode, text);
        cr_expect_str_eq(g.content, content, "mode %zu: %s", mode, text);
        cr_assert_eq(json_array_size(g.calls), json_array_size(want_calls), "mode %zu: %s",
                     mode, text);
        size_t i;
        json_t *w;
        json_array_foreach(want_calls, i, w) {
            json_t *c = json_array_get(g.calls, i);
            json_t *wf = json_object_get(w, "function");
            cr_expect_str_eq(json_string_value(json_object_get(c, "name")),
                             json_string_value(json_object_get(wf, "name")));
            const char *ga = json_string_value(json_object_get(c, "arguments"));
            json_t *gj = json_loads(ga, 0, NULL);
            json_t *wj = json_loads(json_string_value(json_object_get(wf, "arguments")), 0, NULL);
            cr_expect(gj && json_equal(gj, wj), "mode %zu: arguments %s of %s", mode, ga, text);
            json_decref(gj), json_decref(wj);
        }
        cr_expect_not(s.in_call);
        json_decref(g.calls);
    }
}

Test(chat_gemma4, splits_thought_from_content)
{
    json_t *none = json_array();
    check_split_("<|channel>thought\nLet me think: 2+2.<channel|>It is 4.", true,
                 "Let me think: 2+2.", "It is 4.", none);
    check_split_("Plain <b>answer</b> with < and <| and <channel", true, "",
                 "Plain <b>answer</b> with < and <| and <channel", none);
    /* the empty channel the prompt closes when thinking is off, a stray
     * close and the end-of-turn markers a detokeniser shows are dropped */
    check_split_("<|channel>thought\n<channel|>Hi.<channel|><turn|>", true, "", "Hi.", none);
    check_split_("<|channel>thought\na<|channel>b<channel|>c", true, "a<|channel>b", "c", none);
    json_decref(none);
}

Test(chat_gemma4, whole_reply_settles_reasoning)
{
    got g;
    pl_reply_split s;
    split_("<|channel>thought\nhmm<channel|>ok", false, 0, 64, &g, &s);
    cr_expect(pl_reply_split_settle(&s).has_reasoning);
    json_decref(g.calls);
    split_("<|channel>thought\n<channel|>ok", false, 0, 64, &g, &s);
    cr_expect_not(pl_reply_split_settle(&s).has_reasoning);
    json_decref(g.calls);
    char *text = strdup("<|channel>thought\nplan<channel|>answer"), *r = NULL;
    size_t len = strlen(text);
    cr_assert_eq(pl_reasoning_gemma4.split_whole(&text, &len, &r), 0);
    cr_expect_str_eq(text, "answer");
    cr_expect_eq(len, 6);
    cr_expect_str_eq(r, "plan");
    free(text), free(r);
}

/* The calls of a conversation's assistant turns as the template writes
 * them (jinja2's rendering, without the generation prompt), read back
 * into the JSON the conversation gave. */
static void check_conversation_calls_(const char *conv, const char *tools)
{
    json_t *msgs = conversation(conv), *want = json_array();
    size_t i;
    json_t *m, *c;
    json_array_foreach(msgs, i, m) {
        size_t k;
        json_array_foreach(json_object_get(m, "tool_calls"), k, c)
            json_array_append(want, c);
    }
    const char *text = NULL;
    json_array_foreach(json_object_get(doc, "cases"), i, c) {
        if (!strcmp(json_string_value(json_object_get(c, "conversation")), conv) &&
            !strcmp(json_string_value(json_object_get(c, "tools")) ?: "", tools) &&
            !json_is_true(json_object_get(c, "add_generation_prompt")) &&
            !json_object_get(c, "kwargs"))
            text = json_string_value(json_object_get(c, "expected"));
    }
    cr_assert_not_null(text, "no case for %s", conv);
    /* the calls as one reply: each <|tool_call>...<tool_call|> of the text */
    char reply[4096] = "<|channel>thought\nI will call.<channel|>";
    size_t n = strlen(reply);
    for (const char *p = strstr(text, "<|tool_call>"); p; p = strstr(p, "<|tool_call>")) {
        const char *e = strstr(p, "<tool_call|>") + strlen("<tool_call|>");
        cr_assert_lt(n + (size_t)(e - p), sizeof reply);
        memcpy(reply + n, p, (size_t)(e - p));
        n += (size_t)(e - p);
        p = e;
    }
    reply[n] = '\0';
    cr_assert_gt(json_array_size(want), 0);
    check_split_(reply, true, "I will call.", "", want);
    /* without tools on offer the calls are content */
    json_t *none = json_array();
    check_split_(reply, false, "I will call.", reply + strlen("<|channel>thought\nI will "
                                                              "call.<channel|>"), none);
    json_decref(none);
    json_decref(want);
}

Test(chat_gemma4, reads_the_templates_calls_back)
{
    check_conversation_calls_("tool_round", "weather");
    check_conversation_calls_("tool_parallel", "many");
    check_conversation_calls_("tool_nested_args", "many");
    check_conversation_calls_("tool_empty_args", "many");
    check_conversation_calls_("tool_then_two_rounds", "weather");
}

/* Strings as the model writes them: quotes, backslashes, newlines, control
 * bytes and markers' look-alikes inside, all escaped into JSON; keys in
 * <|"|> quotes (the template's escape_keys form); white space around. */
Test(chat_gemma4, call_strings_become_json)
{
    const char *reply =
        "Sure.<|tool_call>call:f{ s:<|\"|>say \"hi\" \\ <b>\n\tx\x01<|\"y<|<|\"|>, "
        "<|\"|>k:ey<|\"|>:[ 1, -2.5e3 , true,null,{}, [] ],o:{a:{b:False}}}<tool_call|>";
    /* False is no JSON: it stays as written (the client's JSON parse fails) */
    got g;
    pl_reply_split s;
    split_(reply, true, 0, 1, &g, &s);
    cr_expect_str_eq(g.content, "Sure.");
    cr_assert_eq(json_array_size(g.calls), 1);
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(g.calls, 0), "arguments")),
                     "{\"s\":\"say \\\"hi\\\" \\\\ <b>\\n\\tx\\u0001<|\\\"y<|\","
                     "\"k:ey\":[1,-2.5e3,true,null,{},[]],\"o\":{\"a\":{\"b\":False}}}");
    json_decref(g.calls);
}

Test(chat_gemma4, cut_inside_a_call)
{
    got g;
    pl_reply_split s;
    split_("<|tool_call>call:get_weather{city:<|\"|>Par", true, 0, 3, &g, &s);
    cr_expect(s.in_call);
    cr_assert_eq(json_array_size(g.calls), 1);
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(g.calls, 0), "name")),
                     "get_weather");
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(g.calls, 0), "arguments")),
                     "{\"city\":\"Par");
    json_decref(g.calls);
}

/* The forced-call grammar (one call of any tool, or up to four) accepts
 * the calls as the template writes them, after a thought channel when
 * thinking is on (api/oai_tools.c wraps them with .thought), and refuses
 * other functions and broken syntax. */
static pl_dfa *grammar_(json_t *tools, bool many, bool thinking)
{
    struct evbuffer *b = evbuffer_new();
    evbuffer_add(b, "(?:", 3);
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        const char *nm = json_string_value(json_object_get(fn, "name"));
        char msg[200], *esc = NULL;
        size_t len = 0, cap = 0;
        cr_assert(pl_regex_escape_append(&esc, &len, &cap, nm, strlen(nm)) == 0);
        if (i)
            evbuffer_add(b, "|", 1);
        cr_assert_eq(pl_tool_gemma4.call_regex_params(b, esc, json_object_get(fn, "parameters"),
                                                      0, msg, sizeof msg), 0, "%s", msg);
        free(esc);
    }
    evbuffer_add(b, ")", 1);
    char *one = pl_evbuffer_take(b), *re = pl_tool_gemma4.reply_regex(one, many, 4);
    cr_assert_eq(pl_tool_gemma4.thought, &pl_reasoning_gemma4);
    if (thinking) {
        char *w = pl_tool_gemma4.thought->wrap(re);
        free(re);
        re = w;
    }
    char err[256];
    pl_dfa *d = pl_regex_compile(re, strlen(re), 0, 1 << 18, err, sizeof err);
    cr_assert_not_null(d, "%s (regex of %zu bytes)", err, strlen(re));
    free(one), free(re);
    return d;
}

static const char *calls_of_(const char *conv, const char *tools, char *out, size_t cap)
{
    size_t i, n = 0;
    json_t *c;
    const char *text = NULL;
    json_array_foreach(json_object_get(doc, "cases"), i, c) {
        if (!strcmp(json_string_value(json_object_get(c, "conversation")), conv) &&
            !strcmp(json_string_value(json_object_get(c, "tools")) ?: "", tools) &&
            !json_is_true(json_object_get(c, "add_generation_prompt")) &&
            !json_object_get(c, "kwargs"))
            text = json_string_value(json_object_get(c, "expected"));
    }
    cr_assert_not_null(text);
    for (const char *p = strstr(text, "<|tool_call>"); p; p = strstr(p, "<|tool_call>")) {
        const char *e = strstr(p, "<tool_call|>") + strlen("<tool_call|>");
        cr_assert_lt(n + (size_t)(e - p), cap);
        memcpy(out + n, p, (size_t)(e - p));
        n += (size_t)(e - p);
        p = e;
    }
    out[n] = '\0';
    return out;
}

Test(chat_gemma4, call_grammar_accepts_the_templates_calls)
{
    json_t *tools = json_object_get(json_object_get(doc, "tools"), "many");
    pl_dfa *one = grammar_(tools, false, false), *many = grammar_(tools, true, false);
    char buf[4096], with[4200];
    const char *single = calls_of_("tool_round", "weather", buf, sizeof buf);
    cr_expect(pl_dfa_match(one, single, strlen(single)), "%s", single);
    snprintf(with, sizeof with, "<|channel>thought\nplan <b>it</b><channel|>%s", single);
    cr_expect_not(pl_dfa_match(one, with, strlen(with)), "%s", with);
    pl_dfa *think = grammar_(tools, false, true);
    cr_expect(pl_dfa_match(think, with, strlen(with)), "%s", with);
    cr_expect(pl_dfa_match(think, single, strlen(single)), "%s", single);
    pl_dfa_free(think);
    const char *empty = calls_of_("tool_empty_args", "many", buf, sizeof buf);
    cr_expect(pl_dfa_match(one, empty, strlen(empty)), "%s", empty);
    const char *two = calls_of_("tool_parallel", "many", buf, sizeof buf);
    cr_expect_not(pl_dfa_match(one, two, strlen(two)), "%s", two);
    cr_expect(pl_dfa_match(many, two, strlen(two)), "%s", two);
    static const char *const bad[] = {
        "<|tool_call>call:other{}<tool_call|>",
        "<|tool_call>call:get_weather{city:Paris}<tool_call|>",
        "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,}<tool_call|>",
        "<|tool_call>call:search{Limit:1.5}<tool_call|>",
        "Sure.<|tool_call>call:now{}<tool_call|>",
        /* outside the schema: an enum's other value, a string for a number,
         * a required key missing, a key twice, keys out of dictsort's order */
        "<|tool_call>call:get_weather{city:<|\"|>a<|\"|>,unit:<|\"|>kelvin<|\"|>}<tool_call|>",
        "<|tool_call>call:search{filters:[],query:<|\"|>q<|\"|>,tags:[<|\"|>c<|\"|>]}"
        "<tool_call|>",
        "<|tool_call>call:search{filters:[{field:<|\"|>y<|\"|>,value:<|\"|>1<|\"|>}],"
        "query:<|\"|>q<|\"|>}<tool_call|>",
        "<|tool_call>call:get_weather{unit:<|\"|>celsius<|\"|>}<tool_call|>",
        "<|tool_call>call:get_weather{city:<|\"|>a<|\"|>,city:<|\"|>b<|\"|>}<tool_call|>",
        "<|tool_call>call:search{query:<|\"|>q<|\"|>,filters:[]}<tool_call|>",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_expect_not(pl_dfa_match(many, bad[i], strlen(bad[i])), "%s", bad[i]);
    const char *nested = "<|tool_call>call:search{filters:[{field:<|\"|>y<|\"|>,value:1}],"
                         "options:{lang:<|\"|>en<|\"|>},query:<|\"|>q<|\"|>}<tool_call|>";
    cr_expect(pl_dfa_match(one, nested, strlen(nested)), "%s", nested);
    /* strings hold partial quotes and runs of '<' */
    const char *quotes = "<|tool_call>call:get_weather{city:<|\"|>a<|<|\"<<|\"|<b <<|\"|>}"
                         "<tool_call|>";
    cr_expect(pl_dfa_match(one, quotes, strlen(quotes)), "%s", quotes);
    const char *closed = "<|tool_call>call:get_weather{city:<|\"|>a<|\"|>b<|\"|>}<tool_call|>";
    cr_expect_not(pl_dfa_match(one, closed, strlen(closed)), "%s", closed);
    /* a nullable property takes null, an untyped object any members */
    const char *loose = "<|tool_call>call:search{Extra:{a:[1,{b:<|\"|>c<|\"|>}]},filters:[],"
                        "Limit:3,query:<|\"|><|\"|>,safe:null,tags:[<|\"|>b<|\"|>,<|\"|>a"
                        "<|\"|>]}<tool_call|>";
    cr_expect(pl_dfa_match(one, loose, strlen(loose)), "%s", loose);
    pl_dfa_free(one);
    pl_dfa_free(many);
}

/* A string's maxLength and minLength bound its characters (a '<' is not
 * one of them then). */
Test(chat_gemma4, call_grammar_bounds_strings)
{
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                               "{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\","
                               "\"minLength\":1,\"maxLength\":3}}}}}]", 0, NULL);
    cr_assert_not_null(tools);
    pl_dfa *d = grammar_(tools, false, false);
    static const char *const good[] = {
        "<|tool_call>call:f{s:<|\"|>a<|\"|>}<tool_call|>",
        "<|tool_call>call:f{s:<|\"|>\xc3\xa9t\xc3\xa9<|\"|>}<tool_call|>",
    }, *const bad[] = {
        "<|tool_call>call:f{s:<|\"|><|\"|>}<tool_call|>",
        "<|tool_call>call:f{s:<|\"|>abcd<|\"|>}<tool_call|>",
        "<|tool_call>call:f{s:<|\"|>a<b<|\"|>}<tool_call|>",
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        cr_expect(pl_dfa_match(d, good[i], strlen(good[i])), "%s", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_expect_not(pl_dfa_match(d, bad[i], strlen(bad[i])), "%s", bad[i]);
    pl_dfa_free(d);
    json_decref(tools);
}
