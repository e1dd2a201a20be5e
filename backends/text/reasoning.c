/* reasoning.c - <think> ... </think> into reasoning and content
 * (reasoning.h), as vLLM's qwen3 reasoning parser does it. */
#include "backends/text/reasoning.h"

#include <string.h>

static const char open_tag[] = "<think>", close_tag[] = "</think>";

static const char *find(const char *s, size_t n, const char *tag)
{
    return memmem(s, n, tag, strlen(tag));
}

bool pl_reasoning_split(const char *text, size_t len, bool inside, pl_text_span *reasoning,
                        pl_text_span *content)
{
    *reasoning = (pl_text_span){0, 0};
    *content = (pl_text_span){0, len};
    size_t start = 0;
    if (!inside) {
        const char *o = find(text, len, open_tag);
        if (!o)
            return false;
        start = (size_t)(o - text) + strlen(open_tag);
    }
    const char *c = find(text + start, len - start, close_tag);
    if (!c)
        return false;
    size_t end = (size_t)(c - text);
    *reasoning = (pl_text_span){start, end - start};
    size_t after = end + strlen(close_tag);
    *content = (pl_text_span){after, len - after};
    return true;
}

void pl_reasoning_stream_init(pl_reasoning_stream *s, bool inside)
{
    memset(s, 0, sizeof *s);
    s->state = inside ? PL_REASONING_INSIDE : PL_REASONING_BEFORE;
}

static void emit(pl_reasoning_stream *s, pl_reasoning_delta *out, const char *p, size_t n)
{
    if (s->state == PL_REASONING_INSIDE) {
        memcpy(out->reasoning + out->n_reasoning, p, n);
        out->n_reasoning += n;
    } else {
        memcpy(out->content + out->n_content, p, n);
        out->n_content += n;
    }
}

/* The longest suffix of p[0..n) that is a prefix of tag. */
static size_t tag_prefix_suffix(const char *p, size_t n, const char *tag)
{
    size_t t = strlen(tag);
    for (size_t k = t < n ? t : n; k > 0; k--)
        if (memcmp(p + n - k, tag, k) == 0)
            return k;
    return 0;
}

static const char *awaited(const pl_reasoning_stream *s)
{
    return s->state == PL_REASONING_BEFORE ? open_tag : close_tag;
}

/* A byte c after the held tag bytes that does not continue the tag: the
 * held bytes and c are text, but for the part that may begin it again. */
static void mismatch(pl_reasoning_stream *s, char c, pl_reasoning_delta *out)
{
    const char *tag = awaited(s);
    char cand[PL_REASONING_HOLD + 1];
    memcpy(cand, tag, s->matched);
    cand[s->matched] = c;
    size_t n = s->matched + 1, k = tag_prefix_suffix(cand, n, tag);
    emit(s, out, cand, n - k);
    s->matched = k;
}

void pl_reasoning_stream_feed(pl_reasoning_stream *s, const char *text, size_t len,
                              pl_reasoning_delta *out)
{
    out->n_reasoning = out->n_content = 0;
    size_t i = 0;
    while (i < len) {
        if (s->state == PL_REASONING_AFTER) {
            emit(s, out, text + i, len - i);
            return;
        }
        if (s->matched == 0) {   /* both tags begin with '<' */
            const char *lt = memchr(text + i, '<', len - i);
            size_t upto = lt ? (size_t)(lt - text) : len;
            emit(s, out, text + i, upto - i);
            i = upto;
            if (!lt)
                return;
        }
        const char *tag = awaited(s);
        char c = text[i++];
        if (c != tag[s->matched]) {
            mismatch(s, c, out);
        } else if (++s->matched == strlen(tag)) {
            s->state++;
            s->matched = 0;
        }
    }
}

void pl_reasoning_stream_finish(pl_reasoning_stream *s, pl_reasoning_delta *out)
{
    out->n_reasoning = out->n_content = 0;
    if (s->state != PL_REASONING_AFTER)
        emit(s, out, awaited(s), s->matched);
    s->matched = 0;
}
