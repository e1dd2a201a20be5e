/* harmony.c - a gpt-oss reply split by channel as it streams (harmony.h). */
#include "backends/text/harmony.h"

#include <string.h>

enum { HEADER, BODY, RAW };

/* What ends a body. <|start|> and <|channel|> also begin the next header
 * (a model that leaves out <|end|>). */
static const char *const terminators[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>",
                                          "<|channel|>"};
#define N_TERM (sizeof terminators / sizeof terminators[0])

/* What a header may begin with: the first follows the prompt's
 * "<|start|>assistant", the others an <|end|>. */
static const char *const openers[] = {"<|channel|>", " to=", "<|start|>", "assistant"};
#define N_OPEN (sizeof openers / sizeof openers[0])

static const char MESSAGE[] = "<|message|>";

void pl_harmony_stream_init(pl_harmony_stream *s)
{
    memset(s, 0, sizeof *s);
}

static bool is_prefix(const char *p, size_t n, const char *of)
{
    return n <= strlen(of) && memcmp(p, of, n) == 0;
}

/* Whether p[0..n) may still begin a marker of the list. */
static bool may_begin(const char *p, size_t n, const char *const *list, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (is_prefix(p, n, list[i]))
            return true;
    return false;
}

/* ---- headers ---- */

static size_t word_len(const char *p, const char *end)
{
    size_t n = 0;
    while (p + n < end && p[n] != ' ' && p[n] != '<')
        n++;
    return n;
}

static bool name_valid(const char *p, size_t n)
{
    if (n == 0 || n > PL_HARMONY_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (!(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && !(c >= '0' && c <= '9') &&
            c != '_' && c != '-')
            return false;
    }
    return true;
}

/* The recipient "to=..." of a header (where "to=" begins a word). */
static const char *recipient(const char *h, const char *end, size_t *n)
{
    for (const char *p = h; (p = memmem(p, (size_t)(end - p), "to=", 3)); p += 3) {
        if (p == h || p[-1] == ' ' || p[-1] == '>') {
            *n = word_len(p + 3, end);
            return p + 3;
        }
    }
    return NULL;
}

/* The completed header (without <|message|>): where its body goes. */
static void header_done(pl_harmony_stream *s)
{
    const char *h = s->head, *end = s->head + s->n_head - (sizeof MESSAGE - 1);
    size_t rn = 0;
    const char *to = recipient(h, end, &rn);
    const char *ch = memmem(h, (size_t)(end - h), "<|channel|>", 11);
    size_t cn = ch ? word_len(ch + 11, end) : 0;
    static const char fn[] = "functions.";
    if (to && rn > sizeof fn - 1 && !memcmp(to, fn, sizeof fn - 1) &&
        name_valid(to + sizeof fn - 1, rn - (sizeof fn - 1))) {
        s->part = PL_HARMONY_CALL;
        memcpy(s->name, to + sizeof fn - 1, rn - (sizeof fn - 1));
        s->name[rn - (sizeof fn - 1)] = '\0';
        s->n_calls++;
    } else if (to || (ch && cn == 8 && !memcmp(ch + 11, "analysis", 8))) {
        s->part = PL_HARMONY_REASONING;
    } else {
        s->part = PL_HARMONY_CONTENT;
    }
    s->state = BODY;
    s->n_head = 0;
}

/* Whether the header so far begins with a whole opener. */
static bool header_opened(const pl_harmony_stream *s)
{
    for (size_t i = 0; i < N_OPEN; i++)
        if (s->n_head >= strlen(openers[i]) && !memcmp(s->head, openers[i], strlen(openers[i])))
            return true;
    return false;
}

/* One more header byte: 1 when the header is complete, -1 when it cannot
 * be a header (the reply is plain text then; c is not taken), else 0. */
static int header_push(pl_harmony_stream *s, char c)
{
    if (s->n_head == PL_HARMONY_HEADER_MAX || (unsigned char)c < 0x20 ||
        (unsigned char)c > 0x7e)
        return -1;
    s->head[s->n_head++] = c;
    size_t n = s->n_head;
    if (!header_opened(s) && !may_begin(s->head, n, openers, N_OPEN)) {
        s->n_head--;
        return -1;
    }
    if (n >= sizeof MESSAGE - 1 && !memcmp(s->head + n - (sizeof MESSAGE - 1), MESSAGE,
                                           sizeof MESSAGE - 1)) {
        header_done(s);
        return 1;
    }
    return 0;
}

/* ---- bodies ---- */

static void put(pl_harmony_out *out, const char *p, size_t n)
{
    memcpy(out->buf + out->n, p, n);
    out->n += n;
}

/* The longest suffix of p[0..n) that may begin a terminator. */
static size_t marker_suffix(const char *p, size_t n)
{
    for (size_t k = n < PL_HARMONY_HOLD ? n : PL_HARMONY_HOLD; k > 0; k--)
        if (may_begin(p + n - k, k, terminators, N_TERM))
            return k;
    return 0;
}

/* The held bytes form a terminator: the body ends, a header begins. */
static bool terminated(pl_harmony_stream *s)
{
    for (size_t i = 0; i < N_TERM; i++) {
        if (s->n_hold != strlen(terminators[i]) || memcmp(s->hold, terminators[i], s->n_hold))
            continue;
        s->state = HEADER;
        s->part = PL_HARMONY_NONE;
        s->n_head = i >= 3 ? s->n_hold : 0;    /* <|start|>, <|channel|> open it */
        memcpy(s->head, s->hold, s->n_head);
        s->n_hold = 0;
        return true;
    }
    return false;
}

/* Body bytes from text[0..len) until the body ends; returns those used. */
static size_t body_feed(pl_harmony_stream *s, const char *text, size_t len,
                        pl_harmony_out *out)
{
    size_t i = 0;
    out->part = s->part;
    while (i < len) {
        if (s->n_hold == 0) {
            const char *lt = memchr(text + i, '<', len - i);
            size_t upto = lt ? (size_t)(lt - text) : len;
            put(out, text + i, upto - i);
            i = upto;
            if (!lt)
                break;
        }
        s->hold[s->n_hold++] = text[i++];
        if (terminated(s))
            return i;
        if (may_begin(s->hold, s->n_hold, terminators, N_TERM))
            continue;
        size_t k = marker_suffix(s->hold, s->n_hold);
        put(out, s->hold, s->n_hold - k);
        memmove(s->hold, s->hold + s->n_hold - k, k);
        s->n_hold = k;
    }
    return i;
}

/* ---- the stream ---- */

/* Not harmony after all: the header so far and all that follows is
 * content. */
static void go_raw(pl_harmony_stream *s, pl_harmony_out *out)
{
    s->state = RAW;
    s->part = PL_HARMONY_CONTENT;
    out->part = PL_HARMONY_CONTENT;
    put(out, s->head, s->n_head);
    s->n_head = 0;
}

size_t pl_harmony_stream_feed(pl_harmony_stream *s, const char *text, size_t len,
                              pl_harmony_out *out)
{
    size_t i = 0;
    out->n = 0;
    out->part = s->state == HEADER ? PL_HARMONY_NONE : s->part;
    out->began = false;
    while (i < len) {
        if (s->state == RAW) {
            if (out->n && out->part != PL_HARMONY_CONTENT)
                return i;         /* the bytes of another part first */
            out->part = PL_HARMONY_CONTENT;
            put(out, text + i, len - i);
            return len;
        }
        if (s->state == BODY) {
            i += body_feed(s, text + i, len - i, out);
            continue;
        }
        int r = header_push(s, text[i]);
        if (r == 1) {
            out->began = true;
            return i + 1;
        }
        if (r < 0) {
            if (out->n && out->part != PL_HARMONY_CONTENT)
                return i;         /* text[i] again, after these bytes */
            go_raw(s, out);
            continue;             /* text[i] is content now */
        }
        i++;
    }
    return len;
}

bool pl_harmony_stream_feed_all(pl_harmony_stream *s, const char *text, size_t len,
                                pl_harmony_out_fn fn, void *ud)
{
    enum { CHUNK = 256 };
    char buf[CHUNK + PL_HARMONY_SLACK];
    pl_harmony_out o = {.buf = buf};
    for (size_t at = 0; at < len;) {
        size_t n = len - at < CHUNK ? len - at : CHUNK;
        at += pl_harmony_stream_feed(s, text + at, n, &o);
        if (!fn(ud, &o))
            return false;
    }
    return true;
}

void pl_harmony_stream_finish(pl_harmony_stream *s, pl_harmony_out *out)
{
    out->n = 0;
    out->began = false;
    out->part = s->part;
    if (s->state == HEADER && header_opened(s)) {
        s->n_head = 0;            /* a header cut short: no message */
    } else if (s->state == HEADER && s->n_head) {
        go_raw(s, out);
    } else if (s->state == BODY) {
        put(out, s->hold, s->n_hold);
        s->n_hold = 0;
    }
}
