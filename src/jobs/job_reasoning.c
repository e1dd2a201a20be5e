/* job_reasoning.c - a job reply's reasoning set apart from its text (see
 * jobs_internal.h, pl_job_reply_split). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backends/text/harmony.h"
#include "backends/text/reasoning.h"
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

typedef struct split_bufs {
    text_buf content, reasoning;
} split_bufs;

/* A body goes to the content (final, or commentary to no one) or to the
 * reasoning (analysis, and calls: a job offers no tools). */
static bool harmony_put(void *ud, const pl_harmony_out *o)
{
    split_bufs *b = ud;
    if (!o->n)
        return true;
    return buf_put(o->part == PL_HARMONY_CONTENT ? &b->content : &b->reasoning, o->buf,
                   o->n) == 0;
}

static int split_harmony(char **text, size_t *len, char **reasoning)
{
    char buf[PL_HARMONY_SLACK];
    pl_harmony_out o = {.buf = buf};
    split_bufs b = {0};
    pl_harmony_stream s;
    pl_harmony_stream_init(&s);
    if (!pl_harmony_stream_feed_all(&s, *text, *len, harmony_put, &b))
        goto fail;
    pl_harmony_stream_finish(&s, &o);
    if (!harmony_put(&b, &o) || buf_put(&b.content, "", 0) < 0)
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
