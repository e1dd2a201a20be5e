/* job_reasoning.c - a job reply's reasoning set apart from its text (see
 * jobs_internal.h, pl_job_reply_split). */
#include <stdlib.h>
#include <string.h>

#include "backends/engine/text/harmony.h"
#include "backends/engine/text/reasoning.h"
#include "src/jobs/jobs_internal.h"

typedef struct text_buf {
    char *p;
    size_t n, cap;
} text_buf;

static int buf_put(text_buf *b, const char *s, size_t n)
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

/* A body goes to the content (final, or commentary to no one) or to the
 * reasoning (analysis, and calls: a job offers no tools). */
static int harmony_put(text_buf *content, text_buf *reasoning, const pl_harmony_out *o)
{
    if (!o->n)
        return 0;
    return buf_put(o->part == PL_HARMONY_CONTENT ? content : reasoning, o->buf, o->n);
}

static int split_harmony(char **text, size_t *len, char **reasoning)
{
    enum { CHUNK = 512 };
    char buf[CHUNK + PL_HARMONY_SLACK];
    text_buf c = {0}, r = {0};
    pl_harmony_stream s;
    pl_harmony_stream_init(&s);
    for (size_t at = 0; at < *len;) {
        size_t n = *len - at < CHUNK ? *len - at : CHUNK;
        pl_harmony_out o = {.buf = buf};
        at += pl_harmony_stream_feed(&s, *text + at, n, &o);
        if (harmony_put(&c, &r, &o) < 0)
            goto fail;
    }
    pl_harmony_out o = {.buf = buf};
    pl_harmony_stream_finish(&s, &o);
    if (harmony_put(&c, &r, &o) < 0 || buf_put(&c, "", 0) < 0)
        goto fail;
    free(*text);
    *text = c.p;
    *len = c.n;
    *reasoning = r.p;   /* NULL: none */
    return 0;
fail:
    free(c.p);
    free(r.p);
    return -1;
}

int pl_job_reply_split(const char *format, char **text, size_t *len, char **reasoning)
{
    *reasoning = NULL;
    if (!format || !*text)
        return 0;
    if (!strcmp(format, "harmony"))
        return split_harmony(text, len, reasoning);
    if (strcmp(format, "qwen3"))
        return 0;
    pl_text_span rs, cs;
    if (!pl_reasoning_split(*text, *len, false, &rs, &cs))
        return 0;
    *reasoning = strndup(*text + rs.off, rs.len);
    if (!*reasoning)
        return -1;
    memmove(*text, *text + cs.off, cs.len);
    (*text)[cs.len] = '\0';
    *len = cs.len;
    return 0;
}
