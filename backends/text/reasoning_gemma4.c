/* reasoning_gemma4.c - reasoning format "gemma4" (reasoning_format.h):
 * Gemma 4's replies, split as llama.cpp's gemma4 parser splits them
 * (common/parsers/gemma4.cpp in llama-cpp-python 0.3.36's sdist):
 *
 *   <|channel>thought\n REASONING <channel|> CONTENT
 *   <|tool_call>call:NAME{key:value,...}<tool_call|>   (when tools are offered)
 *
 * A thought channel may come anywhere (the prompt closes an empty one unless
 * thinking is on; the model may still open one); a stray <channel|>, and
 * the end-of-turn markers (<turn|>, <|tool_response>) that a detokeniser
 * shows, are dropped. A call's arguments are Gemma's object syntax (keys
 * bare, strings between <|"|> quotes, no escapes) and come out as JSON,
 * byte by byte as they are read: keys and strings quoted and escaped, the
 * rest (numbers, true, false, null, brackets) as written, None (what the
 * template prints for a null) as null. The state is
 * fixed-size; marker prefixes are held back until they complete or fail. */
#include <stdlib.h>
#include <string.h>

#include "backends/text/reasoning_format.h"

enum {
    G_TEXT = 0,                  /* content */
    G_CHANNEL,                   /* after <|channel>: the channel's name */
    G_THOUGHT,                   /* reasoning */
    G_CALL_NAME,                 /* after <|tool_call>: "call:NAME" up to '{' */
    G_ARGS,                      /* the arguments object */
    G_CALL_END,                  /* after the object: <tool_call|> */
};

/* Where the arguments' reader is (G_ARGS). */
enum { A_KEY_START, A_KEY, A_VALUE, A_STRING, A_SCALAR, A_AFTER };

static const char CH_OPEN[] = "<|channel>", CH_CLOSE[] = "<channel|>";
static const char CALL_OPEN[] = "<|tool_call>", CALL_CLOSE[] = "<tool_call|>";
static const char QUOTE[] = "<|\"|>";
static const char *const ENDS[] = {"<turn|>", "<|tool_response>", "<tool_response|>"};

#define GATHER 512

typedef struct out {
    pl_reply_split *s;
    pl_reply_piece_kind kind;
    char buf[GATHER];
    size_t n;
    pl_reply_piece_fn fn;
    void *ud;
    bool ok;
} out;

static void flush_(out *o)
{
    if (o->ok && o->n) {
        pl_reply_piece p = {.kind = o->kind, .text = o->buf, .len = o->n,
                            .index = o->s->n_calls - 1};
        o->ok = o->fn(o->ud, &p);
    }
    o->n = 0;
}

static void emit_(out *o, pl_reply_piece_kind kind, const char *p, size_t n)
{
    for (; n && o->ok; p++, n--) {
        if (o->kind != kind || o->n == sizeof o->buf)
            flush_(o);
        o->kind = kind;
        o->buf[o->n++] = *p;
        if (kind == PL_REPLY_PIECE_REASONING)
            o->s->u.gemma4.n_reasoning++;
    }
}

static void args_(out *o, const char *p, size_t n)
{
    emit_(o, PL_REPLY_PIECE_CALL_ARGS, p, n);
}

/* One byte of a JSON string's body, escaped. */
static void args_str_byte_(out *o, char ch)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char c = (unsigned char)ch;
    char e[6] = {'\\', 0};
    size_t n = 2;
    switch (c) {
    case '"': e[1] = '"'; break;
    case '\\': e[1] = '\\'; break;
    case '\n': e[1] = 'n'; break;
    case '\r': e[1] = 'r'; break;
    case '\t': e[1] = 't'; break;
    default:
        if (c >= 0x20) {
            args_(o, &ch, 1);
            return;
        }
        memcpy(e + 1, "u00", 3);
        e[4] = hex[c >> 4];
        e[5] = hex[c & 15];
        n = 6;
    }
    args_(o, e, n);
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

/* The arguments reader: one ordinary byte (no marker). */
static void args_byte_(out *o, pl_gemma4_stream *g, char c)
{
    for (;;) {
        switch (g->a) {
        case A_KEY_START:
            if (is_ws(c))
                return;
            if (c == '}' || c == ']')
                break;                          /* an empty object: closed below */
            args_(o, "\"", 1);
            g->a = A_KEY;
            continue;
        case A_KEY:
            if (c == ':') {
                args_(o, "\":", 2);
                g->a = A_VALUE;
            } else {
                args_str_byte_(o, c);
            }
            return;
        case A_STRING:
            args_str_byte_(o, c);
            return;
        case A_VALUE:
            if (is_ws(c))
                return;
            if (c == '{' || c == '[') {
                if (g->depth < (int)sizeof g->stack)
                    g->stack[g->depth] = c;
                g->depth++;
                args_(o, &c, 1);
                g->a = c == '{' ? A_KEY_START : A_VALUE;
                return;
            }
            if (c == ']' || c == '}')
                break;                          /* an empty array */
            g->a = A_SCALAR;
            if (c == 'N') {                     /* the template's None: null */
                args_(o, "null", 4);
                g->none_left = 3;
                return;
            }
            continue;
        case A_SCALAR:
            if (c == ',' || c == '}' || c == ']' || is_ws(c)) {
                g->a = A_AFTER;
                g->none_left = 0;
                continue;
            }
            if (g->none_left && c == "one"[3 - g->none_left]) {
                g->none_left--;
                return;
            }
            args_(o, &c, 1);
            return;
        case A_AFTER:
            if (is_ws(c))
                return;
            if (c == ',') {
                args_(o, ",", 1);
                bool obj = g->depth <= (int)sizeof g->stack && g->stack[g->depth - 1] == '{';
                g->a = obj ? A_KEY_START : A_VALUE;
                return;
            }
            break;
        }
        /* a closing bracket */
        args_(o, &c, 1);
        if (--g->depth == 0) {
            g->state = G_CALL_END;
            return;
        }
        g->a = A_AFTER;
        return;
    }
}

/* The markers that can start in the current state. */
static bool is_marker_prefix_(const pl_gemma4_stream *g, bool calls, const char *h, size_t n,
                              const char **full)
{
    const char *cands[8];
    int k = 0;
    switch (g->state) {
    case G_TEXT:
        cands[k++] = CH_OPEN;
        cands[k++] = CH_CLOSE;
        if (calls)
            cands[k++] = CALL_OPEN;
        for (size_t i = 0; i < sizeof ENDS / sizeof *ENDS; i++)
            cands[k++] = ENDS[i];
        break;
    case G_CHANNEL:
    case G_THOUGHT: cands[k++] = CH_CLOSE; break;
    case G_ARGS:
        if (g->a != A_KEY || (g->quoted_key && !g->key_closed))
            cands[k++] = QUOTE;
        break;
    case G_CALL_END: cands[k++] = CALL_CLOSE; break;
    default: break;
    }
    bool prefix = false;
    *full = NULL;
    for (int i = 0; i < k; i++) {
        size_t m = strlen(cands[i]);
        if (n <= m && !memcmp(cands[i], h, n)) {
            prefix = true;
            if (n == m)
                *full = cands[i];
        }
    }
    return prefix;
}

static void marker_(out *o, pl_gemma4_stream *g, const char *m)
{
    pl_reply_split *s = o->s;
    if (m == CH_OPEN) {
        g->state = G_CHANNEL;
        g->n_name = 0;
        s->saw_open = true;
    } else if (m == CH_CLOSE) {
        g->state = G_TEXT;     /* the end of the thought, or a stray close */
    } else if (m == CALL_OPEN) {
        g->state = G_CALL_NAME;
        g->n_name = 0;
        s->in_call = true;
    } else if (m == QUOTE) {
        if (g->a == A_STRING) {
            args_(o, "\"", 1);
            g->a = A_AFTER;
        } else if (g->a == A_KEY_START) {   /* a quoted key (the template's escape_keys) */
            args_(o, "\"", 1);
            g->a = A_KEY;
            g->quoted_key = true;
        } else if (g->a == A_KEY) {
            g->key_closed = true;
        } else {
            args_(o, "\"", 1);
            g->a = A_STRING;
        }
    } else if (m == CALL_CLOSE) {
        g->state = G_TEXT;
        s->in_call = false;
    }
    /* ENDS: dropped */
}

/* One ordinary byte in the current state. */
static void byte_(out *o, pl_gemma4_stream *g, char c)
{
    pl_reply_split *s = o->s;
    switch (g->state) {
    case G_TEXT:
        emit_(o, PL_REPLY_PIECE_CONTENT, &c, 1);
        break;
    case G_THOUGHT:
        emit_(o, PL_REPLY_PIECE_REASONING, &c, 1);
        break;
    case G_CHANNEL:
        /* "thought" then white space (llama.cpp: literal, then space) */
        if (g->n_name < 7 && c == "thought"[g->n_name]) {
            g->n_name++;
            break;
        }
        if (g->n_name == 7 && is_ws(c))
            break;
        g->state = G_THOUGHT;
        byte_(o, g, c);
        break;
    case G_CALL_NAME:
        if (c == '{') {
            g->name[g->n_name] = '\0';
            const char *name = g->name;
            if (!strncmp(name, "call:", 5))
                name += 5;
            flush_(o);
            pl_reply_piece p = {.kind = PL_REPLY_PIECE_CALL_BEGIN, .index = s->n_calls++,
                                .name = name};
            if (o->ok)
                o->ok = o->fn(o->ud, &p);
            g->state = G_ARGS;
            g->depth = 1;
            g->stack[0] = '{';
            g->a = A_KEY_START;
            args_(o, "{", 1);
        } else if (g->n_name < sizeof g->name - 1) {
            g->name[g->n_name++] = c;
        }
        break;
    case G_ARGS:
        if (g->a == A_KEY && g->quoted_key) {
            if (!g->key_closed) {
                args_str_byte_(o, c);
            } else if (c == ':') {
                args_(o, "\":", 2);
                g->a = A_VALUE;
                g->quoted_key = g->key_closed = false;
            }
            break;
        }
        args_byte_(o, g, c);
        break;
    case G_CALL_END:
        if (!is_ws(c)) {        /* not a call's end after all: content */
            g->state = G_TEXT;
            s->in_call = false;
            byte_(o, g, c);
        }
        break;
    }
}

static void feed_byte_(out *o, char c)
{
    pl_gemma4_stream *g = &o->s->u.gemma4;
    g->hold[g->n_hold++] = c;
    while (g->n_hold) {
        const char *full;
        if (is_marker_prefix_(g, o->s->calls, g->hold, g->n_hold, &full)) {
            if (!full)
                return;  /* wait for more */
            g->n_hold = 0;
            marker_(o, g, full);
            return;
        }
        /* the first held byte is ordinary; the rest is read again */
        char first = g->hold[0];
        memmove(g->hold, g->hold + 1, --g->n_hold);
        byte_(o, g, first);
    }
}

static void init_(pl_reply_split *s, pl_thinking thinking)
{
    (void)thinking;  /* the prompt never leaves a channel open */
    memset(&s->u.gemma4, 0, sizeof s->u.gemma4);
}

static bool feed_(pl_reply_split *s, const char *text, size_t len, int n_tokens,
                  pl_reply_piece_fn fn, void *ud)
{
    out o = {.s = s, .fn = fn, .ud = ud, .ok = true};
    bool in = s->u.gemma4.state == G_THOUGHT || s->u.gemma4.state == G_CHANNEL;
    for (size_t i = 0; i < len && o.ok; i++)
        feed_byte_(&o, text[i]);
    flush_(&o);
    if (in && s->u.gemma4.state == G_THOUGHT)
        s->reasoning_tokens += n_tokens;
    return o.ok;
}

/* The end: held bytes are what they would have been without a marker. */
static bool finish_(pl_reply_split *s, pl_reply_piece_fn fn, void *ud)
{
    out o = {.s = s, .fn = fn, .ud = ud, .ok = true};
    pl_gemma4_stream *g = &s->u.gemma4;
    char hold[sizeof g->hold];
    size_t n = g->n_hold;
    memcpy(hold, g->hold, n);
    g->n_hold = 0;
    for (size_t i = 0; i < n; i++)
        byte_(&o, g, hold[i]);
    flush_(&o);
    return o.ok;
}

static pl_reply_settled settle_(const pl_reply_split *s)
{
    return (pl_reply_settled){.has_reasoning = s->saw_open && s->u.gemma4.n_reasoning > 0};
}

/* ---- a job's whole reply ---- */

typedef struct bufs {
    char *p[2];
    size_t n[2], cap[2];
    bool oom;
} bufs;

static bool put_(void *ud, const pl_reply_piece *p)
{
    bufs *b = ud;
    int k = p->kind == PL_REPLY_PIECE_REASONING;
    if (b->n[k] + p->len + 1 > b->cap[k]) {
        size_t cap = (b->n[k] + p->len + 1) * 2;
        char *q = realloc(b->p[k], cap);
        if (!q) {
            b->oom = true;
            return false;
        }
        b->p[k] = q;
        b->cap[k] = cap;
    }
    memcpy(b->p[k] + b->n[k], p->text, p->len);
    b->n[k] += p->len;
    b->p[k][b->n[k]] = '\0';
    return true;
}

static int split_whole_(char **text, size_t *len, char **reasoning)
{
    pl_reply_split s;
    bufs b = {0};
    *reasoning = NULL;
    pl_reply_split_init(&s, &pl_reasoning_gemma4, false, PL_THINKING_DEFAULT);
    feed_(&s, *text, *len, 0, put_, &b);
    finish_(&s, put_, &b);
    if (b.oom || !(b.p[0] || (b.p[0] = calloc(1, 1)))) {
        free(b.p[0]);
        free(b.p[1]);
        return -1;
    }
    free(*text);
    *text = b.p[0];
    *len = b.n[0];
    *reasoning = b.p[1];
    return 0;
}

/* Any text without "<channel|>": runs of '<' that begin the marker partway
 * ("<", "<c", ... "<channel|") are followed by a byte that breaks it (as
 * reasoning_qwen3.c's "</think>"). */
#define CH_PART "<(?:c(?:h(?:a(?:n(?:n(?:e(?:l(?:\\|)?)?)?)?)?)?)?)?"
static const char NOT_CLOSE[] =
    "(?:[^<]|(?:" CH_PART ")*<(?:[^<c]|c(?:[^<h]|h(?:[^<a]|a(?:[^<n]|n(?:[^<n]|n(?:[^<e]|"
    "e(?:[^<l]|l(?:[^<|]|\\|[^<>])))))))))*(?:" CH_PART ")*";

static char *wrap_(const char *re)
{
    return pl_reasoning_wrap_parts("<\\|channel>thought\\n", NOT_CLOSE, "<channel\\|>", re);
}

const pl_reasoning_format pl_reasoning_gemma4 = {
    .name = "gemma4",
    .thinking_off_closes = true,
    .thinking_default_off = true,
    .wrap = wrap_,
    .wrap_content = wrap_,
    .init = init_,
    .feed = feed_,
    .finish = finish_,
    .settle = settle_,
    .split_whole = split_whole_,
};
