/* sse.h - a Server-Sent Events writer with backpressure, and client-close
 * watching for any in-progress request.
 *
 * libevent's evhttp_send_reply_chunk queues without limit for a slow
 * reader. pl_sse caps the connection's pending output: past the cap it
 * asks its owner to pause (the owner pauses the backend request), and when
 * the output has drained it asks to resume.
 */
#ifndef PL_API_SSE_H
#define PL_API_SSE_H

#include <stdbool.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "api/server.h"

typedef struct pl_sse pl_sse;

typedef struct pl_sse_cbs {
    void (*on_close)(void *ud);              /**< client went away */
    void (*on_pause)(void *ud, bool paused); /**< backpressure on / off */
    void *ud;
} pl_sse_cbs;

typedef struct pl_close_watch pl_close_watch;

/**
 * Call fn(ud) if the client closes the connection before the reply is
 * sent. evhttp alone notices a close only when it writes, so the watch
 * also polls the socket for EOF while nothing is written. After fn runs,
 * req is gone: never touch it again, and the watch is freed. Otherwise
 * clear it with pl_unwatch_close before replying.
 */
pl_close_watch *pl_watch_close(struct evhttp_request *req, void (*fn)(void *), void *ud);
void pl_unwatch_close(struct evhttp_request *req, pl_close_watch *w);

/** Send the 200 headers (text/event-stream) and start the chunked reply.
 *  cap: the most bytes left pending before on_pause(true). A stream whose
 *  client reads nothing for srv's stream_stall_timeout_s (the kernel sees
 *  none of the bytes sent to it acknowledged, or delivery stays paused) is
 *  closed (on_close runs) and counted.
 *  Returns NULL on out-of-memory, with nothing sent: the caller still owns
 *  the reply. */
pl_sse *pl_sse_start(pl_server *srv, struct evhttp_request *req, long cap, pl_sse_cbs cbs);
/** Scratch buffer to compose the next event into (owned by the writer). */
struct evbuffer *pl_sse_buf(pl_sse *s);
/** Send what was composed in pl_sse_buf as one chunk, flushed now. */
void pl_sse_flush(pl_sse *s);
/** Convenience: send "data: <json>\n\n". */
void pl_sse_send_data(pl_sse *s, const char *json, size_t len);
/** Finish the reply and free the writer. */
void pl_sse_end(pl_sse *s);
/** Free the writer after on_close (the request is gone). */
void pl_sse_free_closed(pl_sse *s);
/** Bytes pending on the connection now. */
size_t pl_sse_pending(const pl_sse *s);

#endif
