/* sse_reader.h - an incremental parser of text/event-stream (the WHATWG
 * server-sent events format) for upstream replies.
 *
 * Bytes go in as they arrive, in pieces of any size; each complete event
 * comes out through a callback with its `event:` name and its `data:`
 * lines joined by '\n'. Lines end with LF, CRLF or CR; comment lines (':')
 * and unknown fields are skipped. An event larger than max_event bytes is
 * an error, so a hostile upstream cannot make the reader grow without
 * bound. No allocation once the buffers have grown to the largest event.
 */
#ifndef PL_SSE_READER_H
#define PL_SSE_READER_H

#include <stdbool.h>
#include <stddef.h>

/** Called per event; data is NUL-terminated (len excludes the NUL) and
 *  valid only during the call. Return 0 to go on, non-zero to stop. */
typedef int (*pl_sse_event_fn)(void *ud, const char *event, const char *data, size_t len);

typedef struct pl_sse_reader {
    char *line;                  /**< the current line, not yet ended */
    size_t line_len, line_cap;
    char *data;                  /**< the current event's data */
    size_t data_len, data_cap;
    char event[32];              /**< the current event's name ("" = message) */
    bool has_data;               /**< a data: field was seen in this event */
    bool after_cr;               /**< the last byte was CR (a LF may follow) */
    bool failed;                 /**< an event was too large: stop reading */
    size_t max_event;            /**< cap on line and event size, bytes */
} pl_sse_reader;

/** Start a reader (max_event 0: 1 MiB). Free with pl_sse_reader_free. */
void pl_sse_reader_init(pl_sse_reader *r, size_t max_event);
void pl_sse_reader_free(pl_sse_reader *r);
/** Forget a partial event (to reuse the reader for a new stream). */
void pl_sse_reader_reset(pl_sse_reader *r);

/**
 * Feed n bytes. Returns 0 when all were consumed, 1 when the callback
 * asked to stop (the rest is dropped), -1 when an event or line exceeded
 * max_event or memory ran out (the reader stays failed).
 */
int pl_sse_reader_feed(pl_sse_reader *r, const char *buf, size_t n, pl_sse_event_fn fn,
                       void *ud);

#endif
