/* test_stopstr.c - stop-string hold-back and UTF-8 boundaries. */
#include <criterion/criterion.h>
#include <string.h>

#include "backends/stopstr.h"

Test(stopstr, finds_earliest_stop)
{
    char *stops[] = {"END", "xy"};
    bool st;
    cr_expect_eq(pl_stopstr_scan("abc xy END", 10, stops, 2, &st), 4u);
    cr_expect(st);
}

Test(stopstr, holds_back_possible_prefix)
{
    char *stops[] = {"</answer>"};
    bool st;
    const char *s = "the answer </ans";
    cr_expect_eq(pl_stopstr_scan(s, strlen(s), stops, 1, &st), strlen("the answer "));
    cr_expect_not(st);
    /* A tail that cannot start the stop string is released. */
    s = "the answer </b";
    cr_expect_eq(pl_stopstr_scan(s, strlen(s), stops, 1, &st), strlen(s));
}

Test(stopstr, no_stops_releases_all)
{
    bool st;
    cr_expect_eq(pl_stopstr_scan("abc", 3, NULL, 0, &st), 3u);
    cr_expect_not(st);
}

Test(stopstr, streamed_pieces_never_leak_a_completed_stop)
{
    /* Feed "hello STOP world" one byte at a time, emitting what is safe. */
    char *stops[] = {"STOP"};
    const char *in = "hello STOP world";
    char pending[64] = "", out[64] = "";
    size_t plen = 0;
    bool st = false;
    for (size_t i = 0; in[i] && !st; i++) {
        pending[plen++] = in[i];
        size_t n = pl_stopstr_scan(pending, plen, stops, 1, &st);
        strncat(out, pending, n);
        memmove(pending, pending + n, plen - n);
        plen -= n;
    }
    cr_expect(st);
    cr_expect_str_eq(out, "hello ");
}

Test(stopstr, utf8_complete_len)
{
    const char *e = "a\xF0\x9F\x98\x80";    /* a + 😀 */
    cr_expect_eq(pl_utf8_complete_len(e, 5), 5u);
    cr_expect_eq(pl_utf8_complete_len(e, 4), 1u);
    cr_expect_eq(pl_utf8_complete_len(e, 2), 1u);
    cr_expect_eq(pl_utf8_complete_len("\xE4\xBD\xA0", 3), 3u);
    cr_expect_eq(pl_utf8_complete_len("\xE4\xBD", 2), 0u);
}

Test(stopstr, says_which_stop_occurs_first)
{
    char *stops[] = {"END", "xy", "zz"};
    int which;
    cr_expect_eq(pl_stopstr_scan_at("abc xy END", 10, stops, 3, &which), 4u);
    cr_expect_eq(which, 1);
    cr_expect_eq(pl_stopstr_scan_at("END xy", 6, stops, 3, &which), 0u);
    cr_expect_eq(which, 0);
    cr_expect_eq(pl_stopstr_scan_at("abc z", 5, stops, 3, &which), 4u);   /* "z" held */
    cr_expect_eq(which, -1);
}
