/* test_reasoning.c - the <think> split (backends/text/reasoning.c)
 * against vLLM's qwen3 reasoning parser's own cases (its
 * tests/reasoning/test_qwen3_reasoning_parser.py: reasoning, content,
 * streamed and whole), and the stream's result for every way of cutting a
 * reply into deltas, tags cut anywhere included. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "backends/text/reasoning.h"

typedef struct split_case {
    const char *output;
    const char *reasoning;       /* NULL: none (vLLM's None) */
    const char *content;         /* NULL: none */
} split_case;

/* vLLM's cases, whole (non-streamed) replies. */
static const split_case whole[] = {
    {"<think>This is a reasoning section</think>This is the rest",
     "This is a reasoning section", "This is the rest"},
    {"This is the rest", NULL, "This is the rest"},
    {"<think>This is a reasoning section</think>", "This is a reasoning section", NULL},
    {"<think>This is a reasoning\nsection</think>This is the rest\nThat",
     "This is a reasoning\nsection", "This is the rest\nThat"},
    {"<think>This is a reasoning section", NULL, "<think>This is a reasoning section"},
    {"<think></think>\n\nok", "", "\n\nok"},
    {"pre<think>r</think>c", "r", "c"},            /* text before <think> is dropped */
};

/* The same replies streamed: an unclosed <think> streams as reasoning. */
static const split_case streamed[] = {
    {"<think>This is a reasoning section</think>This is the rest",
     "This is a reasoning section", "This is the rest"},
    {"This is the rest", NULL, "This is the rest"},
    {"<think>This is a reasoning section</think>", "This is a reasoning section", NULL},
    {"<think>This is a reasoning\nsection</think>This is the rest\nThat",
     "This is a reasoning\nsection", "This is the rest\nThat"},
    {"<think>This is a reasoning section", "This is a reasoning section", NULL},
    {"a < b <th <thinking> c", NULL, "a < b <th <thinking> c"},
    {"<think>x </thin y <</think>z</think>", "x </thin y <", "z</think>"},
    {"<<think>r</think", "r</think", "<"},
};

static void expect_span(const char *text, bool has, pl_text_span sp, const char *want,
                        const char *what)
{
    if (!want || !has) {
        cr_expect(!want || !has || sp.len == 0, "%s: %s: want none", text, what);
        return;
    }
    cr_expect(sp.len == strlen(want) && !memcmp(text + sp.off, want, sp.len),
              "%s: %s: got '%.*s', want '%s'", text, what, (int)sp.len, text + sp.off, want);
}

Test(reasoning, whole_replies_as_vllm)
{
    for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++) {
        const split_case *c = &whole[i];
        pl_text_span r, ct;
        bool has = pl_reasoning_split(c->output, strlen(c->output), false, &r, &ct);
        cr_expect_eq(has, c->reasoning != NULL, "%s", c->output);
        expect_span(c->output, has, r, c->reasoning, "reasoning");
        if (c->content)
            expect_span(c->output, true, ct, c->content, "content");
        else
            cr_expect_eq(ct.len, 0, "%s: content", c->output);
    }
    pl_text_span r, ct;   /* a prompt that opened the block: only </think> */
    const char *t = "plan</think>answer";
    cr_assert(pl_reasoning_split(t, strlen(t), true, &r, &ct));
    expect_span(t, true, r, "plan", "reasoning");
    expect_span(t, true, ct, "answer", "content");
}

/* Feeds text in deltas cut at the given lengths (cycled), concatenating
 * the parts. */
static void stream(const char *text, const size_t *cuts, size_t n_cuts, char *rs, char *cs)
{
    pl_reasoning_stream s;
    pl_reasoning_stream_init(&s, false);
    size_t len = strlen(text), at = 0, nr = 0, nc = 0;
    char r[128], c[128];
    pl_reasoning_delta d = {.reasoning = r, .content = c};
    for (size_t k = 0; at < len; k++) {
        size_t n = cuts[k % n_cuts];
        n = n > len - at ? len - at : n;
        cr_assert_leq(n + PL_REASONING_HOLD, sizeof r);
        pl_reasoning_stream_feed(&s, text + at, n, &d);
        memcpy(rs + nr, r, d.n_reasoning), nr += d.n_reasoning;
        memcpy(cs + nc, c, d.n_content), nc += d.n_content;
        at += n;
    }
    pl_reasoning_stream_finish(&s, &d);
    memcpy(rs + nr, r, d.n_reasoning), nr += d.n_reasoning;
    memcpy(cs + nc, c, d.n_content), nc += d.n_content;
    rs[nr] = cs[nc] = 0;
}

Test(reasoning, streams_alike_however_cut)
{
    static const size_t cuts[][3] = {{1, 1, 1}, {2, 3, 5}, {7, 1, 2}, {100, 100, 100},
                                     {3, 3, 3}, {8, 1, 8}};
    for (size_t i = 0; i < sizeof streamed / sizeof streamed[0]; i++)
        for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
            const split_case *c = &streamed[i];
            char r[256], ct[256];
            stream(c->output, cuts[k], 3, r, ct);
            cr_expect_str_eq(r, c->reasoning ? c->reasoning : "", "%s (cuts %zu)", c->output, k);
            cr_expect_str_eq(ct, c->content ? c->content : "", "%s (cuts %zu)", c->output, k);
        }
}
