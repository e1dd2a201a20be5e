/* respond.h - replies: JSON bodies, OpenAI error JSON, request bodies, and
 * JSON string escaping into evbuffers (used by the SSE writer). */
#ifndef PL_API_RESPOND_H
#define PL_API_RESPOND_H

#include <stddef.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <jansson.h>

#include "backends/backend.h"
#include "src/base/utf8.h"   /* pl_json_string_lossy, as the stream replaces */

/** Send a JSON reply with the given status; steals the reference to body.
 *  body NULL (a failed json_pack) or out-of-memory sends a 500 error. */
void pl_reply_json(struct evhttp_request *req, int status, json_t *body);
/** Send the contents of body (left empty) with the given status and
 *  Content-Type. */
void pl_reply_buffer(struct evhttp_request *req, int status, const char *content_type,
                     struct evbuffer *body);
/** Send {"error":{"message","type","param","code"}} with e->status. */
void pl_reply_error(struct evhttp_request *req, const pl_err *e);
/** Shorthand: build the error and send it. */
void pl_reply_errorf(struct evhttp_request *req, int status, const char *type,
                     const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/** The error object as JSON (a new reference). */
json_t *pl_err_to_json(const pl_err *e);

/**
 * Parse the request body as a JSON object. Returns a new reference, or NULL
 * after replying 413 (too large) or 400 (malformed JSON, invalid UTF-8, not
 * an object).
 */
json_t *pl_read_json_body(struct evhttp_request *req, long max_bytes);
/** The same with jansson decoding flags added (JSON_ALLOW_NUL: strings
 *  may hold \u0000, for endpoints that read them by length). */
json_t *pl_read_json_body_flags(struct evhttp_request *req, long max_bytes, size_t flags);

/** Append s[0..len) to b as the inside of a JSON string (no quotes).
 *  Each ill-formed UTF-8 sequence (its longest valid start, or one byte)
 *  becomes U+FFFD, as Python's errors="replace" decodes it. */
void pl_json_escape(struct evbuffer *b, const char *s, size_t len);

/** Reason phrase for a status code. */
const char *pl_http_reason(int status);

#endif
