/* fake_upstream.h - a scriptable OpenAI-compatible upstream for the remote
 * backend's fault tests, on libmicrohttpd (a different HTTP stack from
 * parley's libevent server, so the two are not tested against themselves).
 *
 * GET /v1/models lists one model. Each POST to /v1/chat/completions or
 * /v1/completions takes the next scripted step (or the default step when the
 * script is used up) and answers with it: a status and body, or an SSE
 * stream of chat/completion chunks with delays, a drop mid-way, malformed
 * data, or no end at all. It runs in its own threads (one per connection).
 */
#ifndef PL_TEST_FAKE_UPSTREAM_H
#define PL_TEST_FAKE_UPSTREAM_H

#include <stdbool.h>

typedef struct pl_fake_step {
    int status;                  /**< 0 = 200 with a stream */
    const char *body;            /**< the body of a non-200 reply */
    int retry_after_s;           /**< > 0: a Retry-After header */
    int header_delay_ms;         /**< wait before the headers (slow headers) */
    int n_tokens;                /**< tokens to stream (0 = 3) */
    int token_delay_ms;
    int drop_after;              /**< > 0: close the connection after this many */
    bool malformed;              /**< send a broken JSON event first */
    bool never_end;              /**< stream tokens until the client leaves */
    bool no_usage;               /**< leave out the final usage chunk */
    bool error_event;            /**< after the tokens, an in-stream error */
    bool end_early;              /**< after the tokens, end without a finish */
    bool tool_calls;             /**< chat: stream PL_FAKE_TOOL_EVENTS tool-call
                                      fragments (two calls, see the .c), finish
                                      "tool_calls" */
} pl_fake_step;

/** The tool calls a tool_calls step streams, as OpenAI objects. */
#define PL_FAKE_TOOL_CALLS \
    "[{\"id\":\"call_w1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\"," \
    "\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}},{\"id\":\"call_t2\",\"type\":" \
    "\"function\",\"function\":{\"name\":\"get_time\",\"arguments\":\"{}\"}}]"
#define PL_FAKE_TOOL_EVENTS 4

typedef struct pl_fake_upstream pl_fake_upstream;

/** Start on 127.0.0.1, a free port; model is the id /v1/models lists. */
pl_fake_upstream *pl_fake_start(const char *model);
void pl_fake_stop(pl_fake_upstream *f);
/** "http://127.0.0.1:PORT/v1" */
const char *pl_fake_url(pl_fake_upstream *f);
/** Append a step to the script (copied; body too). */
void pl_fake_push(pl_fake_upstream *f, const pl_fake_step *s);
/** POSTs received so far. */
int pl_fake_requests(pl_fake_upstream *f);
/** Streams the client closed before their end. */
int pl_fake_client_closed(pl_fake_upstream *f);
/** The last POST body (malloc'd copy; the caller frees), or NULL. */
char *pl_fake_last_body(pl_fake_upstream *f);

#endif
