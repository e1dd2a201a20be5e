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

/** What a fake pretends to be: the owned_by its /v1/models lists, its
 *  /version, and the constraint fields it enforces when parley probes it
 *  (a probe's message holds PL_REMOTE_PROBE_MARK; it takes no script step
 *  and is not counted by pl_fake_requests). A probe whose field the fake
 *  enforces gets a reply that matches it ("123", {"ok": true}), any other
 *  gets "Hello there". */
typedef enum pl_fake_flavour {
    PL_FAKE_PLAIN = 0,           /**< owned_by "fake"; enforces nothing */
    PL_FAKE_VLLM,                /**< 0.11.0: structured_outputs, guided_*, response_format */
    PL_FAKE_VLLM_OLD,            /**< 0.9.2: guided_*, response_format */
    PL_FAKE_VLLM_NEW,            /**< 0.12.0: structured_outputs, response_format */
    PL_FAKE_VLLM_NOVERSION,      /**< no /version; guided_*, response_format */
    PL_FAKE_SGLANG,              /**< regex, ebnf, response_format */
    PL_FAKE_LLAMACPP,            /**< grammar, json_schema, response_format */
    PL_FAKE_OLLAMA,              /**< owned_by "library"; response_format */
} pl_fake_flavour;

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
/** Set the flavour (before a backend probes it). */
void pl_fake_set_flavour(pl_fake_upstream *f, pl_fake_flavour fl);
/** Answer every probe with text and finish_reason finish instead (NULL:
 *  the flavour's answer). Copied. */
void pl_fake_set_probe_reply(pl_fake_upstream *f, const char *text, const char *finish);
/** Hold the reply to each of the next n probes for ms (a slow upstream). */
void pl_fake_delay_probes(pl_fake_upstream *f, int n, int ms);
/** Probes received so far. */
int pl_fake_probes(pl_fake_upstream *f);
/** The last probe body of a family ("regex": one asking "[0-9]{3}",
 *  "json": the other), malloc'd, or NULL. */
char *pl_fake_probe_body(pl_fake_upstream *f, const char *family);

#endif
