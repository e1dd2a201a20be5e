/* stopstr.c - stop-string matching for streamed text. */
#include "backends/stopstr.h"

#include <string.h>

size_t pl_stopstr_scan(const char *pending, size_t len, char *const *stops, int n,
                       bool *stopped)
{
    int which;
    size_t k = pl_stopstr_scan_at(pending, len, stops, n, &which);
    *stopped = which >= 0;
    return k;
}

size_t pl_stopstr_scan_at(const char *pending, size_t len, char *const *stops, int n,
                          int *which)
{
    *which = -1;
    size_t first = len;
    for (int i = 0; i < n; i++) {
        size_t sl = strlen(stops[i]);
        if (sl == 0 || sl > len)
            continue;
        const char *hit = memmem(pending, len, stops[i], sl);
        if (hit && (size_t)(hit - pending) < first) {
            first = (size_t)(hit - pending);
            *which = i;
        }
    }
    if (*which >= 0)
        return first;
    /* Hold back the longest tail that is a proper prefix of a stop string. */
    size_t hold = 0;
    for (int i = 0; i < n; i++) {
        size_t sl = strlen(stops[i]);
        size_t maxk = sl - 1 < len ? sl - 1 : len;
        for (size_t k = maxk; k > hold; k--) {
            if (memcmp(pending + len - k, stops[i], k) == 0) {
                hold = k;
                break;
            }
        }
    }
    return len - hold;
}

size_t pl_utf8_complete_len(const char *s, size_t len)
{
    /* Look back at most 3 bytes for the start of an unfinished sequence. */
    for (size_t back = 1; back <= 4 && back <= len; back++) {
        unsigned char c = (unsigned char)s[len - back];
        if ((c & 0xC0) == 0x80)
            continue;                     /* continuation byte */
        size_t need = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3
                    : (c & 0xF8) == 0xF0 ? 4 : 1;
        return back < need ? len - back : len;
    }
    return len;
}
