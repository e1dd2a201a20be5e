/* sse_reader.c - incremental text/event-stream parsing. */
#include "backends/remote/sse_reader.h"

#include <stdlib.h>
#include <string.h>

void pl_sse_reader_init(pl_sse_reader *r, size_t max_event)
{
    memset(r, 0, sizeof *r);
    r->max_event = max_event ? max_event : (size_t)1 << 20;
}

void pl_sse_reader_free(pl_sse_reader *r)
{
    free(r->line);
    free(r->data);
    memset(r, 0, sizeof *r);
}

void pl_sse_reader_reset(pl_sse_reader *r)
{
    r->line_len = r->data_len = 0;
    r->event[0] = '\0';
    r->has_data = r->after_cr = r->failed = false;
}

/* Grow *buf to hold need bytes (+1 for a NUL); -1 past the cap. */
static int grow(char **buf, size_t *cap, size_t need, size_t max)
{
    if (need > max)
        return -1;
    if (need + 1 <= *cap)
        return 0;
    size_t n = *cap ? *cap : 256;
    while (n < need + 1)
        n *= 2;
    char *p = realloc(*buf, n);
    if (!p)
        return -1;
    *buf = p;
    *cap = n;
    return 0;
}

/* A blank line: dispatch the event, if it has data. */
static int dispatch(pl_sse_reader *r, pl_sse_event_fn fn, void *ud)
{
    int rc = 0;
    if (r->has_data) {
        if (r->data_len > 0 && r->data[r->data_len - 1] == '\n')
            r->data_len--;
        r->data[r->data_len] = '\0';
        rc = fn(ud, r->event, r->data, r->data_len);
    }
    r->data_len = 0;
    r->has_data = false;
    r->event[0] = '\0';
    return rc != 0;
}

/* One complete line (without its end). */
static int process_line(pl_sse_reader *r, pl_sse_event_fn fn, void *ud)
{
    const char *l = r->line;
    size_t n = r->line_len;
    if (n == 0)
        return dispatch(r, fn, ud);
    if (l[0] == ':')
        return 0;
    const char *colon = memchr(l, ':', n);
    size_t flen = colon ? (size_t)(colon - l) : n;
    const char *v = colon ? colon + 1 : l + n;
    size_t vlen = (size_t)(l + n - v);
    if (vlen > 0 && *v == ' ') {
        v++;
        vlen--;
    }
    if (flen == 4 && !memcmp(l, "data", 4)) {
        if (grow(&r->data, &r->data_cap, r->data_len + vlen + 1, r->max_event) < 0)
            return -1;
        memcpy(r->data + r->data_len, v, vlen);
        r->data_len += vlen;
        r->data[r->data_len++] = '\n';
        r->has_data = true;
    } else if (flen == 5 && !memcmp(l, "event", 5)) {
        size_t k = vlen < sizeof r->event - 1 ? vlen : sizeof r->event - 1;
        memcpy(r->event, v, k);
        r->event[k] = '\0';
    }
    return 0;                    /* id:, retry: and unknown fields are ignored */
}

int pl_sse_reader_feed(pl_sse_reader *r, const char *buf, size_t n, pl_sse_event_fn fn,
                       void *ud)
{
    if (r->failed)
        return -1;
    size_t i = 0;
    while (i < n) {
        if (r->after_cr && buf[i] == '\n') {
            r->after_cr = false;
            i++;
            continue;
        }
        r->after_cr = false;
        /* Copy up to the next line end in one go. */
        size_t j = i;
        while (j < n && buf[j] != '\n' && buf[j] != '\r')
            j++;
        if (grow(&r->line, &r->line_cap, r->line_len + (j - i), r->max_event) < 0)
            goto fail;
        memcpy(r->line + r->line_len, buf + i, j - i);
        r->line_len += j - i;
        if (j == n)
            break;
        r->after_cr = buf[j] == '\r';
        i = j + 1;
        int rc = process_line(r, fn, ud);
        r->line_len = 0;
        if (rc < 0)
            goto fail;
        if (rc > 0)
            return 1;
    }
    return 0;
fail:
    r->failed = true;
    return -1;
}
