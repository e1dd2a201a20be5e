/* reasoning_qwen3.c - reasoning formats "qwen3" (reasoning_format.h):
 * <think> ... </think> before the answer, split by
 * backends/text/reasoning.h as vLLM's qwen3 parser splits it; and
 * "qwen35", the same tags after a generation prompt that opened the
 * block (Qwen3.5's template), so that a reply starts inside it. */
#include <stdlib.h>
#include <string.h>

#include "backends/text/reasoning_format.h"

#define CHUNK 256                /* bytes split at a time (stack buffers) */

/* Any text without "</think>": runs of '<' that begin the tag partway
 * ("<", "</", ... "</think") are followed by a byte that breaks it. */
static const char NOT_CLOSE_THINK[] =
    "(?:[^<]|(?:<(?:/(?:t(?:h(?:i(?:n(?:k)?)?)?)?)?)?)*<(?:[^</]|/(?:[^<t]|t(?:[^<h]|h(?:[^<i]|"
    "i(?:[^<n]|n(?:[^<k]|k[^<>])))))))*(?:<(?:/(?:t(?:h(?:i(?:n(?:k)?)?)?)?)?)?)*";

static char *wrap_(const char *re)
{
    return pl_reasoning_wrap_parts("<think>", NOT_CLOSE_THINK, "</think>", re);
}

static void init_(pl_reply_split *s, pl_thinking thinking)
{
    (void)thinking;  /* Qwen3's prompt never opens the block */
    pl_reasoning_stream_init(&s->u.think, false);
}

static void init_opened_(pl_reply_split *s, pl_thinking thinking)
{
    s->opened_by_prompt = thinking != PL_THINKING_OFF;
    pl_reasoning_stream_init(&s->u.think, s->opened_by_prompt);
}

/* Pieces of one kind are gathered while the kind stays the same. */
typedef struct gather {
    pl_reply_piece_kind kind;
    char buf[CHUNK + PL_REASONING_HOLD + 1];
    size_t n;
    pl_reply_piece_fn fn;
    void *ud;
    bool ok;
} gather;

static void flush_(gather *g)
{
    if (g->ok && g->n) {
        pl_reply_piece p = {.kind = g->kind, .text = g->buf, .len = g->n};
        g->ok = g->fn(g->ud, &p);
    }
    g->n = 0;
}

static void gather_add_(gather *g, pl_reply_piece_kind kind, const char *p, size_t n)
{
    if (!n)
        return;
    if (g->kind != kind || g->n + n > sizeof g->buf)
        flush_(g);
    g->kind = kind;
    memcpy(g->buf + g->n, p, n);
    g->n += n;
}

/* Byte by byte, so that pieces keep their order across the tags (a delta
 * is a token or a few). */
static void think_bytes_(pl_reply_split *s, const char *text, size_t len, gather *g)
{
    char r[PL_REASONING_HOLD + 1], c[PL_REASONING_HOLD + 1];
    pl_reasoning_delta d = {.reasoning = r, .content = c};
    for (size_t i = 0; i < len && g->ok; i++) {
        int before = s->u.think.state;
        pl_reasoning_stream_feed(&s->u.think, text + i, 1, &d);
        if (before == PL_REASONING_BEFORE && s->u.think.state != PL_REASONING_BEFORE)
            s->saw_open = true;
        if (s->u.think.state == PL_REASONING_BEFORE)
            s->n_before += d.n_content;
        gather_add_(g, PL_REPLY_PIECE_REASONING, r, d.n_reasoning);
        gather_add_(g, PL_REPLY_PIECE_CONTENT, c, d.n_content);
    }
}

static bool feed_(pl_reply_split *s, const char *text, size_t len, int n_tokens,
                  pl_reply_piece_fn fn, void *ud)
{
    gather g = {.fn = fn, .ud = ud, .ok = true};
    bool in = s->u.think.state == PL_REASONING_INSIDE;
    for (size_t at = 0; at < len && g.ok; at += CHUNK)
        think_bytes_(s, text + at, len - at < CHUNK ? len - at : CHUNK, &g);
    flush_(&g);
    if (in && s->u.think.state == PL_REASONING_INSIDE)
        s->reasoning_tokens += n_tokens;
    return g.ok;
}

static bool finish_(pl_reply_split *s, pl_reply_piece_fn fn, void *ud)
{
    char r[PL_REASONING_HOLD], c[PL_REASONING_HOLD];
    pl_reasoning_delta d = {.reasoning = r, .content = c};
    pl_reasoning_stream_finish(&s->u.think, &d);
    if (s->u.think.state == PL_REASONING_BEFORE)
        s->n_before += d.n_content;
    pl_reply_piece pr = {.kind = PL_REPLY_PIECE_REASONING, .text = r, .len = d.n_reasoning};
    pl_reply_piece pc = {.kind = PL_REPLY_PIECE_CONTENT, .text = c, .len = d.n_content};
    return (!pr.len || fn(ud, &pr)) && (!pc.len || fn(ud, &pc));
}

static pl_reply_settled settle_(const pl_reply_split *s)
{
    pl_reply_settled r = {0};
    if (s->u.think.state == PL_REASONING_AFTER) {   /* closed: what came before is dropped */
        r.has_reasoning = true;
        r.content_skip = s->n_before;
    } else if (s->opened_by_prompt) {  /* cut inside the prompt's block */
        r.has_reasoning = true;
    } else if (s->saw_open) {    /* never closed: the reply as written */
        r.rejoin = true;
    }
    return r;
}

/* The whole reply's split (inside: the prompt opened the block). */
static int split_whole_at_(char **text, size_t *len, char **reasoning, bool inside)
{
    pl_text_span rs, cs;
    *reasoning = NULL;
    if (!pl_reasoning_split(*text, *len, inside, &rs, &cs))
        return 0;
    *reasoning = strndup(*text + rs.off, rs.len);
    if (!*reasoning)
        return -1;
    memmove(*text, *text + cs.off, cs.len);
    (*text)[cs.len] = '\0';
    *len = cs.len;
    return 0;
}

static int split_whole_(char **text, size_t *len, char **reasoning)
{
    return split_whole_at_(text, len, reasoning, false);
}

/* A job's reply after a prompt that may have opened the block: it did
 * when the reply closes one it never opened. */
static int split_whole_opened_(char **text, size_t *len, char **reasoning)
{
    const char *close = memmem(*text, *len, "</think>", 8);
    const char *open = memmem(*text, *len, "<think>", 7);
    return split_whole_at_(text, len, reasoning, close && (!open || open > close));
}

static char *wrap_opened_(const char *re)
{
    return pl_reasoning_wrap_parts("", NOT_CLOSE_THINK, "</think>", re);
}

const pl_reasoning_format pl_reasoning_qwen35 = {
    .name = "qwen35",
    .thinking_off_closes = true,
    .wrap = wrap_opened_,
    .wrap_content = wrap_opened_,
    .init = init_opened_,
    .feed = feed_,
    .finish = finish_,
    .settle = settle_,
    .split_whole = split_whole_opened_,
};

const pl_reasoning_format pl_reasoning_qwen3 = {
    .name = "qwen3",
    .thinking_off_closes = true,
    .wrap = wrap_,
    .wrap_content = wrap_,
    .init = init_,
    .feed = feed_,
    .finish = finish_,
    .settle = settle_,
    .split_whole = split_whole_,
};
