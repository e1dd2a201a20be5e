/* chunk_scan.h - a non-allocating reader for the common streamed chunk,
 *   {"id":..,"choices":[{"index":0,"delta":{"content":"text"},"finish_reason":null}]}
 * (or "text" for completions), so the token path does not build a JSON
 * tree per token. Anything else - logprobs, usage, errors, tool calls,
 * several choices, odd JSON - is left to the full parser (jansson).
 */
#ifndef PL_CHUNK_SCAN_H
#define PL_CHUNK_SCAN_H

#include <stdbool.h>
#include <stddef.h>

typedef struct pl_chunk_scan {
    char *buf;                   /**< unescaped text (reused; owned) */
    size_t cap;
    size_t len;                  /**< text length in buf */
    char finish[24];             /**< finish_reason, "" when null/absent */
    bool has_choice;
} pl_chunk_scan;

/**
 * Read one chunk. Returns 1 when it was understood (text in s->buf[0..len),
 * finish reason in s->finish), 0 when the caller must use a full JSON
 * parser. Never reads past data[n].
 */
int pl_chunk_scan_read(pl_chunk_scan *s, const char *data, size_t n, bool chat);
void pl_chunk_scan_free(pl_chunk_scan *s);

#endif
