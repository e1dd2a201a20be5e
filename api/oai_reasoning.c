/* oai_reasoning.c - replies split into reasoning, content and (harmony)
 * calls; constraints moved after the reasoning (oai_reasoning.h). */
#include "api/oai_reasoning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/constrain/constraint.h"

#define CHUNK 256                /* bytes split at a time (stack buffers) */

pl_oai_reasoning_fmt pl_oai_reasoning_format(pl_backend *b)
{
    const char *f = pl_backend_reasoning_format(b);
    if (f && !strcmp(f, "qwen3"))
        return PL_OAI_REASONING_QWEN3;
    if (f && !strcmp(f, "harmony"))
        return PL_OAI_REASONING_HARMONY;
    return PL_OAI_REASONING_NONE;
}

/* ---- constraints after the reasoning ---- */

/* Any text without "</think>": runs of '<' that begin the tag partway
 * ("<", "</", ... "</think") are followed by a byte that breaks it. */
static const char NOT_CLOSE_THINK[] =
    "(?:[^<]|(?:<(?:/(?:t(?:h(?:i(?:n(?:k)?)?)?)?)?)?)*<(?:[^</]|/(?:[^<t]|t(?:[^<h]|h(?:[^<i]|"
    "i(?:[^<n]|n(?:[^<k]|k[^<>])))))))*(?:<(?:/(?:t(?:h(?:i(?:n(?:k)?)?)?)?)?)?)*";
/* Any text without "<|" (a harmony body: no marker in it). */
static const char NOT_MARKER[] = "(?:[^<]|<+[^<|])*<*";

char *pl_oai_reasoning_wrap(pl_oai_reasoning_fmt fmt, const char *re)
{
    const char *pre = fmt == PL_OAI_REASONING_QWEN3 ? "(?:<think>" : "(?:<\\|channel\\|>"
                                                                     "analysis<\\|message\\|>";
    const char *mid = fmt == PL_OAI_REASONING_QWEN3 ? NOT_CLOSE_THINK : NOT_MARKER;
    const char *post = fmt == PL_OAI_REASONING_QWEN3 ? "</think>)?(?:"
                                                     : "<\\|end\\|><\\|start\\|>assistant)?(?:";
    size_t n = strlen(pre) + strlen(mid) + strlen(post) + strlen(re) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s%s%s%s)", pre, mid, post, re);
    return s;
}

int pl_oai_reasoning_prepare(pl_oai_params *p, pl_backend *b, pl_err *err)
{
    p->reasoning_fmt = pl_oai_reasoning_format(b);
    pl_sampling *sp = &p->sampling;
    if (!p->chat || p->reasoning_fmt == PL_OAI_REASONING_NONE ||
        sp->constraint == PL_CONSTRAINT_NONE || p->constraint_after_reasoning ||
        (p->reasoning_fmt == PL_OAI_REASONING_QWEN3 && p->thinking == PL_THINKING_OFF))
        return 0;
    char *re = pl_constraint_regex(sp->constraint, sp->constraint_text, b->json_ws, err);
    if (!re)
        return -1;
    char *final = re;
    if (p->reasoning_fmt == PL_OAI_REASONING_HARMONY) {
        size_t n = strlen(re) + 40;
        final = malloc(n);
        if (final)
            snprintf(final, n, "<\\|channel\\|>final<\\|message\\|>(?:%s)", re);
        free(re);
    }
    char *wrapped = final ? pl_oai_reasoning_wrap(p->reasoning_fmt, final) : NULL;
    free(final);
    if (!wrapped)
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    free(sp->constraint_text);
    sp->constraint = PL_CONSTRAINT_REGEX;
    sp->constraint_text = wrapped;
    p->constraint_after_reasoning = true;
    return 0;
}

/* ---- splitting ---- */

void pl_oai_split_init(pl_oai_split *s, pl_oai_reasoning_fmt fmt, bool calls)
{
    memset(s, 0, sizeof *s);
    s->fmt = fmt;
    s->calls = calls;
    pl_reasoning_stream_init(&s->think, false);
    pl_harmony_stream_init(&s->harmony);
}

void pl_oai_call_id(char *id, size_t cap)
{
    snprintf(id, cap, "call_%08x%08x%08x", (unsigned)rand(), (unsigned)rand(),
             (unsigned)rand());
}

/* Pieces of one kind are gathered while the kind stays the same. */
typedef struct gather {
    pl_oai_piece_kind kind;
    char buf[CHUNK + PL_REASONING_HOLD + 1];
    size_t n;
    pl_oai_piece_fn fn;
    void *ud;
    bool ok;
} gather;

static void flush(gather *g)
{
    if (g->ok && g->n) {
        pl_oai_piece p = {.kind = g->kind, .text = g->buf, .len = g->n};
        g->ok = g->fn(g->ud, &p);
    }
    g->n = 0;
}

static void gather_add(gather *g, pl_oai_piece_kind kind, const char *p, size_t n)
{
    if (!n)
        return;
    if (g->kind != kind || g->n + n > sizeof g->buf)
        flush(g);
    g->kind = kind;
    memcpy(g->buf + g->n, p, n);
    g->n += n;
}

/* qwen3: byte by byte, so that pieces keep their order across the tags
 * (a delta is a token or a few). */
static void think_bytes(pl_oai_split *s, const char *text, size_t len, gather *g)
{
    char r[PL_REASONING_HOLD + 1], c[PL_REASONING_HOLD + 1];
    pl_reasoning_delta d = {.reasoning = r, .content = c};
    for (size_t i = 0; i < len && g->ok; i++) {
        int before = s->think.state;
        pl_reasoning_stream_feed(&s->think, text + i, 1, &d);
        if (before == PL_REASONING_BEFORE && s->think.state != PL_REASONING_BEFORE)
            s->saw_open = true;
        if (s->think.state == PL_REASONING_BEFORE)
            s->n_before += d.n_content;
        gather_add(g, PL_OAI_PIECE_REASONING, r, d.n_reasoning);
        gather_add(g, PL_OAI_PIECE_CONTENT, c, d.n_content);
    }
}

static pl_oai_piece_kind harmony_kind(const pl_oai_split *s, pl_harmony_part part)
{
    if (part == PL_HARMONY_REASONING)
        return PL_OAI_PIECE_REASONING;
    return part == PL_HARMONY_CALL && s->calls ? PL_OAI_PIECE_CALL_ARGS : PL_OAI_PIECE_CONTENT;
}

/* A harmony output: its bytes, then the call it begins. */
static bool harmony_out(pl_oai_split *s, const pl_harmony_out *o, pl_oai_piece_fn fn, void *ud)
{
    pl_oai_piece p = {.kind = harmony_kind(s, o->part), .text = o->buf, .len = o->n,
                      .index = s->n_calls - 1};
    if (o->n && !fn(ud, &p))
        return false;
    if (o->began && s->harmony.part == PL_HARMONY_REASONING)
        s->saw_open = true;
    if (!o->began || s->harmony.part != PL_HARMONY_CALL || !s->calls)
        return true;
    p = (pl_oai_piece){.kind = PL_OAI_PIECE_CALL_BEGIN, .index = s->n_calls++,
                       .name = s->harmony.name};
    return fn(ud, &p);
}

typedef struct harmony_ctx {
    pl_oai_split *s;
    pl_oai_piece_fn fn;
    void *ud;
} harmony_ctx;

static bool harmony_each(void *ud, const pl_harmony_out *o)
{
    harmony_ctx *x = ud;
    return harmony_out(x->s, o, x->fn, x->ud);
}

static bool harmony_bytes(pl_oai_split *s, const char *text, size_t len, pl_oai_piece_fn fn,
                          void *ud)
{
    harmony_ctx x = {s, fn, ud};
    return pl_harmony_stream_feed_all(&s->harmony, text, len, harmony_each, &x);
}

bool pl_oai_split_feed(pl_oai_split *s, const char *text, size_t len, int n_tokens,
                       pl_oai_piece_fn fn, void *ud)
{
    if (s->fmt == PL_OAI_REASONING_HARMONY) {
        bool in = s->harmony.part == PL_HARMONY_REASONING;
        int calls = s->harmony.n_calls;
        bool ok = harmony_bytes(s, text, len, fn, ud);
        if (in && s->harmony.part == PL_HARMONY_REASONING && calls == s->harmony.n_calls)
            s->reasoning_tokens += n_tokens;
        return ok;
    }
    gather g = {.fn = fn, .ud = ud, .ok = true};
    bool in = s->think.state == PL_REASONING_INSIDE;
    for (size_t at = 0; at < len && g.ok; at += CHUNK)
        think_bytes(s, text + at, len - at < CHUNK ? len - at : CHUNK, &g);
    flush(&g);
    if (in && s->think.state == PL_REASONING_INSIDE)
        s->reasoning_tokens += n_tokens;
    return g.ok;
}

bool pl_oai_split_finish(pl_oai_split *s, pl_oai_piece_fn fn, void *ud)
{
    if (s->fmt == PL_OAI_REASONING_HARMONY) {
        char buf[PL_HARMONY_SLACK];
        pl_harmony_out o = {.buf = buf};
        pl_harmony_stream_finish(&s->harmony, &o);
        return harmony_out(s, &o, fn, ud);
    }
    char r[PL_REASONING_HOLD], c[PL_REASONING_HOLD];
    pl_reasoning_delta d = {.reasoning = r, .content = c};
    pl_reasoning_stream_finish(&s->think, &d);
    if (s->think.state == PL_REASONING_BEFORE)
        s->n_before += d.n_content;
    pl_oai_piece pr = {.kind = PL_OAI_PIECE_REASONING, .text = r, .len = d.n_reasoning};
    pl_oai_piece pc = {.kind = PL_OAI_PIECE_CONTENT, .text = c, .len = d.n_content};
    return (!pr.len || fn(ud, &pr)) && (!pc.len || fn(ud, &pc));
}

pl_oai_settled pl_oai_split_settle(const pl_oai_split *s)
{
    pl_oai_settled r = {0};
    if (s->fmt != PL_OAI_REASONING_QWEN3) {
        r.has_reasoning = s->saw_open;   /* an analysis message, even empty */
        return r;
    }
    if (s->think.state == PL_REASONING_AFTER) {           /* closed: what came before is dropped */
        r.has_reasoning = true;
        r.content_skip = s->n_before;
    } else if (s->saw_open) {            /* never closed: the reply as written */
        r.rejoin = true;
    }
    return r;
}
