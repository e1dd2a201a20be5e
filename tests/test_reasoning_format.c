/* test_reasoning_format.c - the reasoning format vtables
 * (backends/text/reasoning_format.h), each against itself: the streamed
 * split gives the same pieces however the reply is cut (one feed, byte by
 * byte), and the whole-reply split a job uses equals what the stream gave,
 * settled as a whole reply is (qwen3: text before <think> dropped, an
 * unclosed block the reply as written). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/text/reasoning_format.h"

typedef struct parts {
    char reasoning[512], content[512];
    size_t nr, nc;
    char order[1024];            /* "R[..]C[..]" merged by kind, in order */
    char last;
} parts;

static bool collect_(void *ud, const pl_reply_piece *p)
{
    parts *g = ud;
    static const char kinds[] = "RCBA";
    char k = kinds[p->kind];
    size_t l = strlen(g->order);
    if (p->kind == PL_REPLY_PIECE_REASONING) {
        memcpy(g->reasoning + g->nr, p->text, p->len);
        g->reasoning[g->nr += p->len] = '\0';
    } else if (p->kind == PL_REPLY_PIECE_CONTENT) {
        memcpy(g->content + g->nc, p->text, p->len);
        g->content[g->nc += p->len] = '\0';
    }
    if (k == 'B')
        snprintf(g->order + l, sizeof g->order - l, "B[%s]", p->name);
    else if (k == g->last && l)
        snprintf(g->order + l - 1, sizeof g->order - l + 1, "%.*s]", (int)p->len, p->text);
    else if (p->len)
        snprintf(g->order + l, sizeof g->order - l, "%c[%.*s]", k, (int)p->len, p->text);
    g->last = p->len || k == 'B' ? k : g->last;
    return true;
}

/* The reply split with feeds of cut bytes (0: one feed). */
static pl_reply_settled split_(const pl_reasoning_format *f, const char *reply, size_t cut,
                               parts *g)
{
    pl_reply_split s;
    size_t n = strlen(reply);
    memset(g, 0, sizeof *g);
    pl_reply_split_init(&s, f, false, PL_THINKING_DEFAULT);
    for (size_t at = 0; at < n; at += cut ? cut : n)
        cr_assert(pl_reply_split_feed(&s, reply + at, cut && n - at > cut ? cut : n - at, 1,
                                      collect_, g));
    cr_assert(pl_reply_split_finish(&s, collect_, g));
    return pl_reply_split_settle(&s);
}

static const char *const qwen3_replies[] = {
    "<think>plan</think>\n\nAnswer: C",
    "pre<think>a</thi b</think>post",
    "<think>never closed",
    "no block at all",
    "<think></think>",
    "a < b <thin</think> c",
};

static const char *const harmony_replies[] = {
    "<|channel|>analysis<|message|>why<|end|><|start|>assistant<|channel|>final<|message|>ok",
    "<|channel|>final<|message|>only<|return|>",
    "<|channel|>analysis<|message|>a <| b<|end|><|start|>assistant<|channel|>final"
    "<|message|>c<|return|>",
    "not harmony at all",
    "<|channel|>commentary<|message|>preamble<|end|><|start|>assistant<|channel|>final"
    "<|message|>done",
};

static void check_(const pl_reasoning_format *f, const char *const *replies, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        parts whole, bytes;
        pl_reply_settled sw = split_(f, replies[i], 0, &whole);
        pl_reply_settled sb = split_(f, replies[i], 1, &bytes);
        cr_expect_str_eq(bytes.order, whole.order, "%s: '%s'", f->name, replies[i]);
        cr_expect(sw.has_reasoning == sb.has_reasoning && sw.rejoin == sb.rejoin &&
                  sw.content_skip == sb.content_skip, "%s: '%s' settles", f->name, replies[i]);
        /* the whole-reply split, as a job takes it */
        char *text = strdup(replies[i]), *reasoning = NULL;
        size_t len = strlen(text);
        cr_assert_eq(f->split_whole(&text, &len, &reasoning), 0);
        char content[1100];
        if (sw.rejoin)
            snprintf(content, sizeof content, "%s<think>%s", whole.content, whole.reasoning);
        else
            snprintf(content, sizeof content, "%s", whole.content + sw.content_skip);
        cr_expect_str_eq(text, content, "%s: '%s' content", f->name, replies[i]);
        cr_expect_eq(len, strlen(text));
        bool has = sw.has_reasoning && !sw.rejoin;
        if (has && (whole.nr || f == &pl_reasoning_qwen3))
            cr_expect(reasoning && !strcmp(reasoning, whole.reasoning), "%s: '%s' reasoning '%s'",
                      f->name, replies[i], reasoning ? reasoning : "(null)");
        else
            cr_expect_null(reasoning, "%s: '%s' reasoning '%s'", f->name, replies[i], reasoning);
        free(text);
        free(reasoning);
    }
}

Test(reasoning_format, qwen3_whole_equals_streamed)
{
    check_(&pl_reasoning_qwen3, qwen3_replies, sizeof qwen3_replies / sizeof qwen3_replies[0]);
}

Test(reasoning_format, harmony_whole_equals_streamed)
{
    check_(&pl_reasoning_harmony, harmony_replies,
           sizeof harmony_replies / sizeof harmony_replies[0]);
}
