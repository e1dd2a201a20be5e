/* access_log.h - one line per HTTP request: method, path, status, duration,
 * prompt and completion tokens, request id (text or JSON, --log-format).
 *
 * The server opens a record when it routes a request; the reply paths
 * close it: pl_reply_* (respond.c) and the end of an SSE stream with the
 * status sent, a client that left first with 499 (nginx's "client closed
 * request"). Handlers that know token counts add them before replying.
 * Records live in a per-thread table keyed by the request, recycled through
 * a free list: no allocation per request in steady state. A request with no
 * record (logging off, or a server built without it) costs one lookup.
 */
#ifndef PL_API_ACCESS_LOG_H
#define PL_API_ACCESS_LOG_H

#include <event2/http.h>

/** Open the record of req. request_id is copied (at most 63 bytes). */
void pl_access_begin(struct evhttp_request *req, const char *method, const char *path,
                     const char *request_id);
/** Add token counts to req's record, if it has one. */
void pl_access_usage(struct evhttp_request *req, int prompt_tokens, int completion_tokens);
/** Log req's line with this status and close the record (no-op without
 *  one). req is only used as a key: it may already be freed by evhttp. */
void pl_access_end(struct evhttp_request *req, int status);
/** Records still open (tests). */
int pl_access_open_count(void);

#endif
