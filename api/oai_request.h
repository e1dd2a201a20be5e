/* oai_request.h - the OpenAI request core: one call of chat completions,
 * completions or Responses, from admission to its last byte.
 *
 * An endpoint parses its body into pl_oai_params and hands the call to
 * pl_oai_call_start() with its format (how its reply is written). The core
 * does the rest, the same for every endpoint:
 *
 *   - admission: each choice is queued on the model's dispatch
 *     (schedulers/dispatch.h) as an interactive request; what dispatch
 *     admits is submitted through backend.h (the only submit of the API);
 *     a choice that ends frees its slot and pumps the dispatch, so jobs
 *     back off while interactive requests run;
 *   - the sinks: a model with a reasoning format has each delta split into
 *     reasoning, content and calls (api/oai_reasoning.h; reasoning tokens
 *     counted, a whole qwen3 reply settled as vLLM settles it); text is
 *     kept where the reply needs it (non-stream, tools,
 *     or the format asks), logprobs are accumulated (non-stream), an
 *     upstream's tool-call deltas are merged (or streamed when the format
 *     streams them), and a stream with tools holds its text back while it
 *     may be a call (pl_oai_tools_classify), then sends it as content once
 *     it cannot be;
 *   - the client: a closed connection aborts every choice; a slow reader
 *     pauses them (backpressure, api/sse.h); a stream on a backend with
 *     late errors starts at its first output, so an early failure is still
 *     a plain HTTP error;
 *   - the end, once: usage to the access log and the key's token budget,
 *     the format's last events or whole reply, an OpenAI error otherwise.
 *
 * Every allocation a call needs before its reply starts is made in
 * pl_oai_call_start, so out-of-memory there is a 500 JSON error; out of
 * memory later ends the call with an error its client sees. Main thread.
 */
#ifndef PL_API_OAI_REQUEST_H
#define PL_API_OAI_REQUEST_H

#include <stdbool.h>
#include <stdint.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "api/oai_params.h"
#include "api/oai_wire.h"
#include "api/server.h"
#include "api/sse.h"
#include "schedulers/dispatch.h"

typedef struct pl_oai_call pl_oai_call;

/** One choice: one backend request. The endpoint's format reads these. */
typedef struct pl_oai_choice {
    pl_oai_call *call;
    int index;
    pl_dispatch_req dr;          /**< its admission */
    uint64_t id;                 /**< backend request id */
    bool active;                 /**< submitted and not done */
    pl_finish finish;
    bool up_tool_finish;         /**< the upstream finished with "tool_calls" */
    int stop_index;              /**< pl_result.stop_index: the stop string
                                      that ended it (index + 1), 0: none */
    struct evbuffer *text;       /**< the whole text, when kept (else NULL) */
    pl_oai_logprobs lp;          /**< non-stream, logprobs requested */
    size_t text_offset;          /**< completions logprobs text_offset */
    int tool_state;              /**< stream with tools: PL_TOOLS_* */
    json_t *up_calls;            /**< the upstream's tool calls (merged deltas),
                                      or those of the reply's split */
    struct pl_reply_split *split; /**< a model with a reasoning format: the
                                      reply's split (backends/text/
                                      reasoning_format.h);
                                      text then holds the content only */
    struct evbuffer *reasoning;  /**< the reasoning text, when kept */
    bool reasoning_shown;        /**< the reply has reasoning (a string in
                                      reasoning_content; else null) */
} pl_oai_choice;

/** How an endpoint writes its reply. NULL members are skipped. */
typedef struct pl_oai_format {
    /** After the id is set, before admission (e.g. compose the chunk
     *  prefix): -1 on out-of-memory (a 500, nothing sent). */
    int (*prepare)(pl_oai_call *c);
    /** The stream started (headers sent): its first events. */
    void (*stream_begin)(pl_oai_call *c);
    /** Text and logprobs of a delta of ch (d->len may be 0). */
    void (*stream_delta)(pl_oai_call *c, pl_oai_choice *ch, const pl_delta *d);
    /** Reasoning text of a delta of ch (with its logprobs, when it carries
     *  the delta's). */
    void (*stream_reasoning)(pl_oai_call *c, pl_oai_choice *ch, const pl_delta *d);
    /** An upstream's tool-call deltas, streamed as they come; NULL: they
     *  are merged into ch->up_calls. */
    void (*stream_tool_delta)(pl_oai_call *c, pl_oai_choice *ch, const pl_delta *d);
    /** ch finished well (r: its result). */
    void (*stream_choice_end)(pl_oai_call *c, pl_oai_choice *ch, const pl_result *r);
    /** The last events: of a success, or of c->error when c->failed. */
    void (*stream_end)(pl_oai_call *c);
    /** The whole reply of a success (new ref), NULL on out-of-memory. */
    json_t *(*reply)(pl_oai_call *c);
    /** Free the endpoint's state (c->ep). */
    void (*free_ep)(void *ep);
} pl_oai_format;

/** A call. Fields are the core's; the format reads them and owns ep. */
struct pl_oai_call {
    pl_server *s;
    struct evhttp_request *req;  /**< NULL once the client is gone */
    json_t *body;                /**< the chat-form body (a remote backend
                                      passes it through) */
    pl_oai_params p;
    pl_model_entry *model;
    char id[64];
    int64_t created;
    pl_sse *sse;                 /**< the stream, once started */
    pl_close_watch *watch;       /**< non-stream: the client-close watch */
    pl_oai_usage usage;
    int key;                     /**< API key index (tokens-per-minute) */
    pl_err error;                /**< the first failure */
    bool failed;
    bool started;                /**< pl_oai_call_start returned 0 */
    int n_done, n_choices;
    const pl_oai_format *fmt;
    void *ep;                    /**< the endpoint's state */
    pl_oai_choice choices[];
};

typedef struct pl_oai_call_opts {
    pl_server *s;
    struct evhttp_request *req;
    json_t *body;                /**< stolen */
    pl_oai_params *p;            /**< moved in (zeroed) */
    pl_model_entry *model;
    const char *id_prefix;       /**< "chatcmpl-", "cmpl-", "resp_" */
    bool keep_text;              /**< keep every choice's text (Responses) */
    const pl_oai_format *fmt;
    void *ep;                    /**< stolen: freed with fmt->free_ep */
} pl_oai_call_opts;

/** Start a call: admit and submit every choice, then start the reply (the
 *  stream, or the close watch). 0: the core owns everything and replies.
 *  -1: nothing was sent, body, params and ep are freed, *err says why
 *  (a backend refusal keeps its own status); the caller replies it. */
int pl_oai_call_start(const pl_oai_call_opts *o, pl_err *err);

/** A finished choice's tool calls (new ref; NULL: none), for the endpoints
 *  that answer with whole calls (Responses, Anthropic's Messages): the
 *  upstream's (or a native reply's split) as they came, else the kept text
 *  parsed for calls (oai_tools.h), which then keeps only what is outside
 *  them; a call cut by the length is dropped. */
json_t *pl_oai_choice_settle_calls(pl_oai_call *c, pl_oai_choice *ch);

#endif
