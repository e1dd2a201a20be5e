/* detok.h - streaming detokeniser for one generated sequence.
 *
 * Feed sampled token ids one at a time; each call returns the text that is
 * now final:
 *  - never ends inside a UTF-8 sequence (incomplete bytes are held until
 *    the next token completes them; invalid bytes become U+FFFD, so the
 *    output is always valid UTF-8);
 *  - stop strings are matched across token boundaries, and a suffix that
 *    could still grow into a stop string is held back;
 *  - when a stop string matches, only the text before it is returned and
 *    the detokeniser reports which stop matched.
 * Buffers grow by doubling and are reused: no allocation per token once
 * warm. Not thread-safe; one per sequence.
 */
#ifndef PL_DETOK_H
#define PL_DETOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/text/tokenizer.h"

#define PL_DETOK_MAX_STOPS 16

typedef struct pl_detok {
    const pl_tokenizer *tok;     /**< borrowed; may be NULL for bytes only */
    bool special;                /**< emit control and unused tokens' text */
    int n_stops;
    char *stops[PL_DETOK_MAX_STOPS];       /**< owned copies */
    size_t stop_len[PL_DETOK_MAX_STOPS];
    size_t max_stop;             /**< longest stop string */
    char *hold;                  /**< bytes not yet emitted */
    size_t hold_len, hold_cap;
    char *out;                   /**< the last call's output */
    size_t out_cap;
    int stopped;                 /**< index of the matched stop, or -1 */
} pl_detok;

/** One call's result: text points into the detokeniser and stays valid
 *  until the next call on it. */
typedef struct pl_detok_out {
    const char *text;
    size_t len;
    int stop;                    /**< index of the stop string that matched
                                      in this call, or -1 */
} pl_detok_out;

/** Set up d for a sequence. stops: n_stops NUL-terminated strings (copied;
 *  empty ones ignored), at most PL_DETOK_MAX_STOPS. special: whether
 *  control tokens produce their text. Returns 0, or -1 (too many stops or
 *  out of memory; d is then freed). */
int pl_detok_init(pl_detok *d, const pl_tokenizer *tok,
                  const char *const *stops, int n_stops, bool special);
void pl_detok_free(pl_detok *d);
/** Forget held text and the stop state; keeps the stops and buffers. */
void pl_detok_reset(pl_detok *d);

/** Feed one token. Returns 1 when a stop string matched (out->stop says
 *  which; later feeds return 1 with empty text), 0 otherwise, -1 on
 *  allocation failure. */
int pl_detok_feed(pl_detok *d, int32_t id, pl_detok_out *out);
/** Feed raw bytes (what a token decodes to); same contract as feed. */
int pl_detok_feed_bytes(pl_detok *d, const char *bytes, size_t len,
                        pl_detok_out *out);
/** End of sequence: return everything held (a held stop-string prefix
 *  included); an incomplete UTF-8 sequence at the end becomes U+FFFD.
 *  Returns 0, or -1 on allocation failure. */
int pl_detok_flush(pl_detok *d, pl_detok_out *out);

#endif
