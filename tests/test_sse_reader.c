/* test_sse_reader.c - the incremental SSE parser: every split point of the
 * input gives the same events; line ends, comments, multi-line data, caps. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/remote/sse_reader.h"

typedef struct evs {
    char out[4096];              /* "event|data\n" per event */
    int n, stop_at;
} evs;

static int on_ev(void *ud, const char *event, const char *data, size_t len)
{
    evs *e = ud;
    cr_assert_eq(strlen(data), len, "data is NUL-terminated at len");
    size_t o = strlen(e->out);
    snprintf(e->out + o, sizeof e->out - o, "%s|%s\n", event, data);
    return ++e->n == e->stop_at;
}

static void parse_split(const char *in, size_t split, evs *e)
{
    pl_sse_reader r;
    pl_sse_reader_init(&r, 0);
    memset(e, 0, sizeof *e);
    size_t n = strlen(in);
    cr_assert_eq(pl_sse_reader_feed(&r, in, split, on_ev, e), 0);
    cr_assert_eq(pl_sse_reader_feed(&r, in + split, n - split, on_ev, e), 0);
    pl_sse_reader_free(&r);
}

Test(sse_reader, same_events_at_every_split)
{
    const char *in = ": comment\r\ndata: {\"a\":1}\r\n\r\nevent: error\ndata: x\ndata:y\n\n"
                     "data: [DONE]\r\rid: 7\nretry: 10\nfoo\ndata\n\n";
    const char *want = "|{\"a\":1}\nerror|x\ny\n|[DONE]\n|\n";
    for (size_t k = 0; k <= strlen(in); k++) {
        evs e;
        parse_split(in, k, &e);
        cr_assert_str_eq(e.out, want, "split at %zu", k);
    }
}

Test(sse_reader, byte_at_a_time)
{
    const char *in = "data: he\r\ndata: llo\r\n\r\n";
    pl_sse_reader r;
    pl_sse_reader_init(&r, 0);
    evs e = {0};
    for (size_t i = 0; i < strlen(in); i++)
        cr_assert_eq(pl_sse_reader_feed(&r, in + i, 1, on_ev, &e), 0);
    cr_assert_str_eq(e.out, "|he\nllo\n");
    pl_sse_reader_free(&r);
}

Test(sse_reader, no_event_without_blank_line_or_data)
{
    evs e;
    parse_split("event: x\n\ndata: partial", 3, &e);
    cr_assert_eq(e.n, 0);
}

Test(sse_reader, callback_can_stop)
{
    pl_sse_reader r;
    pl_sse_reader_init(&r, 0);
    evs e = {.stop_at = 1};
    cr_assert_eq(pl_sse_reader_feed(&r, "data: a\n\ndata: b\n\n", 18, on_ev, &e), 1);
    cr_assert_eq(e.n, 1);
    pl_sse_reader_free(&r);
}

Test(sse_reader, oversized_event_fails_and_stays_failed)
{
    pl_sse_reader r;
    pl_sse_reader_init(&r, 64);
    evs e = {0};
    char big[200];
    memset(big, 'x', sizeof big);
    cr_assert_eq(pl_sse_reader_feed(&r, "data: ", 6, on_ev, &e), 0);
    cr_assert_eq(pl_sse_reader_feed(&r, big, sizeof big, on_ev, &e), -1);
    cr_assert_eq(pl_sse_reader_feed(&r, "\n\n", 2, on_ev, &e), -1);
    cr_assert_eq(e.n, 0);
    /* many small data lines add up too */
    pl_sse_reader_reset(&r);
    int rc = 0;
    for (int i = 0; i < 40 && rc == 0; i++)
        rc = pl_sse_reader_feed(&r, "data: abc\n", 10, on_ev, &e);
    cr_assert_eq(rc, -1);
    pl_sse_reader_free(&r);
}
