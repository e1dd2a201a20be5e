/* stopstr.h - stop-string matching for streamed text.
 *
 * Text is produced piecewise; a stop string may straddle pieces. Given the
 * text not yet sent to the client, pl_stopstr_scan says how much of it is
 * safe to send: everything before the earliest stop-string occurrence, or,
 * without one, everything but the longest tail that could still grow into a
 * stop string. So a client never sees a prefix of a stop string that later
 * completes.
 */
#ifndef PL_STOPSTR_H
#define PL_STOPSTR_H

#include <stdbool.h>
#include <stddef.h>

/**
 * pending: text not yet emitted. stops: n stop strings (non-empty).
 * Returns how many bytes of pending may be emitted now; *stopped is set
 * when a stop string occurs, and then the return value is its offset (the
 * stop string and what follows are dropped).
 */
size_t pl_stopstr_scan(const char *pending, size_t len, char *const *stops, int n,
                       bool *stopped);
/** pl_stopstr_scan that also says which stop string occurs first: *which
 *  is its index, -1 when none does. */
size_t pl_stopstr_scan_at(const char *pending, size_t len, char *const *stops, int n,
                          int *which);

/** Length of the longest complete-UTF-8 prefix of s[0..len). */
size_t pl_utf8_complete_len(const char *s, size_t len);

#endif
