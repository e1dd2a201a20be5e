/* test_oai_reasoning.c - api/oai_reasoning.c: the constraint moved after
 * the reasoning (the regex a reply must match: a think block or an
 * analysis message first, or not, then the constraint; never the closing
 * tag inside the reasoning), and replies split into ordered pieces with
 * their reasoning tokens counted and a whole qwen3 reply settled as
 * vLLM's parser settles it. */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "api/oai_reasoning.h"
#include "backends/constrain/regex.h"

static pl_dfa *compile(const pl_reasoning_format *fmt, const char *inner)
{
    char *re = fmt->wrap(inner);
    cr_assert_not_null(re);
    char err[256];
    pl_dfa *d = pl_regex_compile(re, strlen(re), 0, 4096, err, sizeof err);
    cr_assert_not_null(d, "%s: %s", re, err);
    free(re);
    return d;
}

static bool match(const pl_dfa *d, const char *s)
{
    return pl_dfa_match(d, s, strlen(s));
}

Test(oai_reasoning, qwen3_constraint_after_think)
{
    pl_dfa *d = compile(&pl_reasoning_qwen3, "\\{\"a\": [0-9]+\\}");
    static const char *const yes[] = {
        "{\"a\": 1}", "<think></think>{\"a\": 1}", "<think>plan\nmore</think>{\"a\": 12}",
        "<think>a < b, </th and </thinking> are text</think>{\"a\": 1}",
        "<think><<</think>{\"a\": 1}", "<think></thin</think>{\"a\": 1}",
        "<think>ünïcödé 🙂</think>{\"a\": 1}",
    };
    static const char *const no[] = {
        "<think>{\"a\": 1}", "<think>x</think>y</think>{\"a\": 1}", "x{\"a\": 1}",
        "<think>x</think> {\"a\": 1}", "<think>x</think>{\"a\": 1}</think>", "{\"a\": x}",
    };
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        cr_expect(match(d, yes[i]), "should match: %s", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        cr_expect(!match(d, no[i]), "should not match: %s", no[i]);
    pl_dfa_free(d);
}

Test(oai_reasoning, harmony_constraint_after_analysis)
{
    pl_dfa *d = compile(&pl_reasoning_harmony, "<\\|channel\\|>final<\\|message\\|>ok");
    cr_expect(match(d, "<|channel|>final<|message|>ok"));
    cr_expect(match(d, "<|channel|>analysis<|message|>a < b<|end|><|start|>assistant"
                       "<|channel|>final<|message|>ok"));
    cr_expect(match(d, "<|channel|>analysis<|message|><|end|><|start|>assistant"
                       "<|channel|>final<|message|>ok"));
    cr_expect(!match(d, "<|channel|>analysis<|message|>x<|y<|end|><|start|>assistant"
                        "<|channel|>final<|message|>ok"));
    cr_expect(!match(d, "<|channel|>analysis<|message|>x<|end|><|channel|>final<|message|>ok"));
    pl_dfa_free(d);
}

/* ---- splitting ---- */

typedef struct got {
    char text[1024];             /* "R[...]C[...]B[index name]A[...]" in order */
    int stop_after;              /* stop at this piece (0: never) */
    int n;
} got;

static bool collect(void *ud, const pl_reply_piece *p)
{
    got *g = ud;
    static const char kinds[] = "RCBA";
    size_t l = strlen(g->text);
    if (p->kind == PL_REPLY_PIECE_CALL_BEGIN)
        snprintf(g->text + l, sizeof g->text - l, "B[%d %s]", p->index, p->name);
    else
        snprintf(g->text + l, sizeof g->text - l, "%c[%.*s]", kinds[p->kind], (int)p->len,
                 p->text);
    return ++g->n != g->stop_after;
}

/* Pieces of one kind in a row, merged: how a client sees them. */
static void merged(const char *in, char *out)
{
    char last = 0;
    size_t o = 0;
    for (const char *p = in; *p;) {
        char k = *p;
        const char *end = strchr(p, ']');
        if (k == 'B' || k != last) {
            if (last)
                out[o++] = ']';
            out[o++] = k;
            out[o++] = '[';
        }
        memcpy(out + o, p + 2, (size_t)(end - p - 2));
        o += (size_t)(end - p - 2);
        last = k == 'B' ? 'b' : k;
        p = end + 1;
    }
    if (last)
        out[o++] = ']';
    out[o] = '\0';
}

static void split_all(pl_reply_split *s, const char *reply, size_t cut, got *g)
{
    size_t len = strlen(reply);
    for (size_t at = 0; at < len; at += cut)
        cr_assert(pl_reply_split_feed(s, reply + at, len - at < cut ? len - at : cut, 1, collect,
                                    g));
    cr_assert(pl_reply_split_finish(s, collect, g));
}

Test(oai_reasoning, qwen3_pieces_in_order_however_cut)
{
    const char *reply = "pre<think>a</thi b</think>post";
    for (size_t cut = 1; cut <= strlen(reply); cut++) {
        pl_reply_split s;
        pl_reply_split_init(&s, &pl_reasoning_qwen3, false, PL_THINKING_DEFAULT);
        got g = {0};
        char m[1024];
        split_all(&s, reply, cut, &g);
        merged(g.text, m);
        cr_expect_str_eq(m, "C[pre]R[a</thi b]C[post]", "cut %zu: %s", cut, g.text);
        pl_reply_settled st = pl_reply_split_settle(&s);
        cr_expect(st.has_reasoning && !st.rejoin);
        cr_expect_eq(st.content_skip, 3, "text before <think> is dropped when whole");
    }
}

Test(oai_reasoning, qwen3_counts_tokens_inside)
{
    /* one token a delta: <think>, three inside, </think>, two after */
    static const char *const toks[] = {"<think>", "a", " b", " c", "</think>", "d", " e"};
    pl_reply_split s;
    pl_reply_split_init(&s, &pl_reasoning_qwen3, false, PL_THINKING_DEFAULT);
    got g = {0};
    for (size_t i = 0; i < 7; i++)
        pl_reply_split_feed(&s, toks[i], strlen(toks[i]), 1, collect, &g);
    cr_expect_eq(s.reasoning_tokens, 3);
}

Test(oai_reasoning, qwen3_settles_as_vllm)
{
    pl_reply_split s;
    got g = {0};
    pl_reply_split_init(&s, &pl_reasoning_qwen3, false, PL_THINKING_DEFAULT);
    split_all(&s, "x<think>never closed", 4, &g);
    pl_reply_settled st = pl_reply_split_settle(&s);
    cr_expect(st.rejoin && !st.has_reasoning);   /* content: "x" + "<think>" + "never closed" */
    pl_reply_split_init(&s, &pl_reasoning_qwen3, false, PL_THINKING_DEFAULT);
    split_all(&s, "no block", 3, &g);
    st = pl_reply_split_settle(&s);
    cr_expect(!st.rejoin && !st.has_reasoning && st.content_skip == 0);
}

Test(oai_reasoning, harmony_calls_and_channels)
{
    const char *reply = "<|channel|>analysis<|message|>why<|end|><|start|>assistant"
                        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>"
                        "{\"x\":1}";
    for (size_t cut = 1; cut <= 9; cut++) {
        pl_reply_split s;
        pl_reply_split_init(&s, &pl_reasoning_harmony, true, PL_THINKING_DEFAULT);
        got g = {0};
        char m[1024];
        split_all(&s, reply, cut, &g);
        merged(g.text, m);
        cr_expect_str_eq(m, "R[why]B[0 f]A[{\"x\":1}]", "cut %zu: %s", cut, g.text);
        cr_expect_eq(s.n_calls, 1);
        cr_expect(pl_reply_split_settle(&s).has_reasoning);
    }
    /* without calls (tool_choice none) the call's text is content */
    pl_reply_split s;
    pl_reply_split_init(&s, &pl_reasoning_harmony, false, PL_THINKING_DEFAULT);
    got g = {0};
    char m[1024];
    split_all(&s, reply, 5, &g);
    merged(g.text, m);
    cr_expect_str_eq(m, "R[why]C[{\"x\":1}]");
    cr_expect_eq(s.n_calls, 0);
}

Test(oai_reasoning, stops_when_told)
{
    pl_reply_split s;
    pl_reply_split_init(&s, &pl_reasoning_qwen3, false, PL_THINKING_DEFAULT);
    got g = {.stop_after = 1};
    cr_expect(!pl_reply_split_feed(&s, "a<think>b</think>c", 18, 5, collect, &g));
    cr_expect_eq(g.n, 1);
    pl_reply_split_init(&s, &pl_reasoning_harmony, true, PL_THINKING_DEFAULT);
    got h = {.stop_after = 1};
    const char *r = "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>final"
                    "<|message|>y";
    cr_expect(!pl_reply_split_feed(&s, r, strlen(r), 5, collect, &h));
    cr_expect_eq(h.n, 1);
}

/* Gemma 4's thought channel (reasoning_gemma4.c): any text without
 * "<channel|>" inside, partial markers and runs of '<' included. */
Test(oai_reasoning, gemma4_constraint_after_thought)
{
    pl_dfa *d = compile(&pl_reasoning_gemma4, "ok");
    static const char *const yes[] = {
        "ok", "<|channel>thought\n<channel|>ok", "<|channel>thought\nplan <b>it</b><channel|>ok",
        "<|channel>thought\n<c<channel|>ok", "<|channel>thought\n<channel<channel|>ok",
        "<|channel>thought\n<channel|<channel|>ok", "<|channel>thought\n<<<channel|>ok",
        "<|channel>thought\na<chan<x <channel| >ok<channel|>ok",
        "<|channel>thought\nünïcödé 🙂<channel|>ok",
    };
    static const char *const no[] = {
        "<|channel>thought\nok", "<|channel>thought\nx<channel|>y<channel|>ok",
        "x ok", "<|channel>thought\nx<channel|> ok", "<|channel>thought\nx<channel|>ok<channel|>",
        "<|channel>thought\n<<channel|><channel|>ok",
    };
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        cr_expect(match(d, yes[i]), "should match: %s", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        cr_expect(!match(d, no[i]), "should not match: %s", no[i]);
    pl_dfa_free(d);
}
