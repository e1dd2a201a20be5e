/* reasoning_harmony.c - reasoning format "harmony" (reasoning_format.h):
 * gpt-oss's channels, split by backends/text/harmony.h into reasoning
 * (analysis), content (final, commentary to no one) and, when the request
 * offers tools, calls to functions.NAME. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/text/reasoning_format.h"

/* Any text without "<|" (a harmony body: no marker in it). */
static const char NOT_MARKER[] = "(?:[^<]|<+[^<|])*<*";

static char *wrap_(const char *re)
{
    return pl_reasoning_wrap_parts("<\\|channel\\|>analysis<\\|message\\|>", NOT_MARKER,
                                   "<\\|end\\|><\\|start\\|>assistant", re);
}

/* Content is the final channel's message. */
static char *wrap_content_(const char *re)
{
    size_t n = strlen(re) + 40;
    char *final = malloc(n);
    if (!final)
        return NULL;
    snprintf(final, n, "<\\|channel\\|>final<\\|message\\|>(?:%s)", re);
    char *s = wrap_(final);
    free(final);
    return s;
}

static void init_(pl_reply_split *s, pl_thinking thinking)
{
    (void)thinking;  /* harmony's prompt leaves the channel to the model */
    pl_harmony_stream_init(&s->u.harmony);
}

static pl_reply_piece_kind kind_(const pl_reply_split *s, pl_harmony_part part)
{
    if (part == PL_HARMONY_REASONING)
        return PL_REPLY_PIECE_REASONING;
    return part == PL_HARMONY_CALL && s->calls ? PL_REPLY_PIECE_CALL_ARGS
                                               : PL_REPLY_PIECE_CONTENT;
}

/* A harmony output: its bytes, then the call it begins. */
static bool out_(pl_reply_split *s, const pl_harmony_out *o, pl_reply_piece_fn fn, void *ud)
{
    pl_reply_piece p = {.kind = kind_(s, o->part), .text = o->buf, .len = o->n,
                        .index = s->n_calls - 1};
    if (o->n && !fn(ud, &p))
        return false;
    if (o->began && s->u.harmony.part == PL_HARMONY_REASONING)
        s->saw_open = true;
    if (!o->began || s->u.harmony.part != PL_HARMONY_CALL || !s->calls)
        return true;
    p = (pl_reply_piece){.kind = PL_REPLY_PIECE_CALL_BEGIN, .index = s->n_calls++,
                         .name = s->u.harmony.name};
    return fn(ud, &p);
}

typedef struct out_ctx {
    pl_reply_split *s;
    pl_reply_piece_fn fn;
    void *ud;
} out_ctx;

static bool each_(void *ud, const pl_harmony_out *o)
{
    out_ctx *x = ud;
    return out_(x->s, o, x->fn, x->ud);
}

static bool feed_(pl_reply_split *s, const char *text, size_t len, int n_tokens,
                  pl_reply_piece_fn fn, void *ud)
{
    bool in = s->u.harmony.part == PL_HARMONY_REASONING;
    int calls = s->u.harmony.n_calls;
    out_ctx x = {s, fn, ud};
    bool ok = pl_harmony_stream_feed_all(&s->u.harmony, text, len, each_, &x);
    s->in_call = s->u.harmony.part == PL_HARMONY_CALL;
    if (in && s->u.harmony.part == PL_HARMONY_REASONING && calls == s->u.harmony.n_calls)
        s->reasoning_tokens += n_tokens;
    return ok;
}

static bool finish_(pl_reply_split *s, pl_reply_piece_fn fn, void *ud)
{
    char buf[PL_HARMONY_SLACK];
    pl_harmony_out o = {.buf = buf};
    pl_harmony_stream_finish(&s->u.harmony, &o);
    bool in = s->u.harmony.part == PL_HARMONY_CALL;
    bool ok = out_(s, &o, fn, ud);
    s->in_call = in;
    return ok;
}

static pl_reply_settled settle_(const pl_reply_split *s)
{
    return (pl_reply_settled){.has_reasoning = s->saw_open};   /* even an empty analysis */
}

/* ---- a job's whole reply ---- */

typedef struct text_buf {
    char *p;
    size_t n, cap;
} text_buf;

static int buf_put_(text_buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

typedef struct split_bufs {
    text_buf content, reasoning;
} split_bufs;

/* A body goes to the content (final, or commentary to no one) or to the
 * reasoning (analysis, and calls: a job offers no tools). */
static bool put_(void *ud, const pl_harmony_out *o)
{
    split_bufs *b = ud;
    if (!o->n)
        return true;
    return buf_put_(o->part == PL_HARMONY_CONTENT ? &b->content : &b->reasoning, o->buf,
                    o->n) == 0;
}

static int split_whole_(char **text, size_t *len, char **reasoning)
{
    char buf[PL_HARMONY_SLACK];
    pl_harmony_out o = {.buf = buf};
    split_bufs b = {0};
    pl_harmony_stream s;
    *reasoning = NULL;
    pl_harmony_stream_init(&s);
    if (!pl_harmony_stream_feed_all(&s, *text, *len, put_, &b))
        goto fail;
    pl_harmony_stream_finish(&s, &o);
    if (!put_(&b, &o) || buf_put_(&b.content, "", 0) < 0)
        goto fail;
    free(*text);
    *text = b.content.p;
    *len = b.content.n;
    *reasoning = b.reasoning.p;   /* NULL: none */
    return 0;
fail:
    free(b.content.p);
    free(b.reasoning.p);
    return -1;
}

const pl_reasoning_format pl_reasoning_harmony = {
    .name = "harmony",
    .thinking_off_closes = false,
    .wrap = wrap_,
    .wrap_content = wrap_content_,
    .init = init_,
    .feed = feed_,
    .finish = finish_,
    .settle = settle_,
    .split_whole = split_whole_,
};
