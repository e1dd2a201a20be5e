/* anthropic_messages.c - POST /v1/messages and POST
 * /v1/messages/count_tokens: Anthropic's wire format over the request core
 * (api/oai_request.h); see anthropic.h.
 *
 * A Messages body becomes a chat-completions body (anthropic_req.c), one
 * backend request and one message. Its content is, in order, a thinking
 * block (the model's reasoning, api/oai_reasoning.h), a text block, and a
 * tool_use block per call (parsed as chat parses them, api/oai_tools.h).
 * Streaming sends Anthropic's events: message_start, ping, then per block
 * content_block_start, content_block_delta (thinking_delta, text_delta,
 * input_json_delta), content_block_stop, then message_delta (stop_reason,
 * usage) and message_stop; each as "event: <type>" + "data: <json>".
 * Thinking and text deltas are composed straight into the stream buffer:
 * the token path allocates nothing. A block opens at its first delta and
 * closes when another opens. Text that may be a call is held back by the
 * core, as in the chat stream; calls go out at the end, each block's input
 * as one input_json_delta. The prompt's token count is known at the end
 * only: message_start says 0 input tokens, message_delta the real count
 * (the SDKs take it from there).
 *
 * stop_reason: "tool_use" when calls came back, "max_tokens" when cut,
 * "stop_sequence" (and stop_sequence) when one of the request's stop
 * sequences ended it (pl_result.stop_index: the engine and the mock tell,
 * a remote upstream does not), else "end_turn".
 */
#include "api/anthropic.h"

#include <stdlib.h>
#include <string.h>

#include "api/oai_reasoning.h"
#include "api/oai_request.h"
#include "api/oai_tools.h"
#include "api/respond.h"

enum { BLOCK_NONE = 0, BLOCK_THINKING, BLOCK_TEXT, BLOCK_TOOL };

/* A call's Messages state beside the core's. */
typedef struct msg_ep {
    json_t *calls;               /* the reply's tool calls (chat form), or NULL */
    int n_blocks;                /* stream: blocks opened so far */
    int open;                    /* stream: BLOCK_* open now */
    bool text_sent;              /* stream: text went out as it came */
} msg_ep;

static msg_ep *ep_of(const pl_oai_call *c)
{
    return c->ep;
}

static void ep_free(void *p)
{
    msg_ep *e = p;
    if (e)
        json_decref(e->calls);
    free(e);
}

/* ---- errors ---- */

bool pl_anthropic_path(const char *uri)
{
    return uri && !strncmp(uri, "/v1/messages", 12) &&
           (!uri[12] || uri[12] == '/' || uri[12] == '?');
}

static const char *error_type(int status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

json_t *pl_anthropic_error_json(const pl_err *e)
{
    json_t *m = pl_err_to_json(e);   /* its message and param, made valid UTF-8 */
    json_t *oe = json_object_get(m, "error");
    const char *msg = json_string_value(json_object_get(oe, "message"));
    const char *param = json_string_value(json_object_get(oe, "param"));
    char text[sizeof e->message + sizeof e->param + 2];
    snprintf(text, sizeof text, "%s%s%s", param ? param : "", param ? ": " : "",
             msg ? msg : "");
    json_t *o = m ? json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type",
                              error_type(e->status), "message", text) : NULL;
    json_decref(m);
    return o;
}

/* ---- the message ---- */

/* The stop sequence that ended the reply, when the backend tells and it is
 * one of the request's (not a stop string parley added), else NULL. */
static const char *matched_stop(const pl_oai_call *c)
{
    const pl_oai_choice *ch = &c->choices[0];
    int i = ch->stop_index - 1;
    if (ch->finish != PL_FINISH_STOP || i < 0 || i >= c->p.sampling.n_stop)
        return NULL;
    const char *s = c->p.sampling.stop[i];
    json_t *asked = json_object_get(c->body, "stop"), *v;
    size_t k;
    json_array_foreach(asked, k, v)
        if (!strcmp(json_string_value(v), s))
            return s;
    return NULL;
}

static const char *stop_reason(const pl_oai_call *c)
{
    if (c->choices[0].finish == PL_FINISH_LENGTH)
        return "max_tokens";
    if (json_array_size(ep_of(c)->calls))
        return "tool_use";
    return matched_stop(c) ? "stop_sequence" : "end_turn";
}

static json_t *usage_json(const pl_oai_call *c)
{
    const pl_oai_usage *u = &c->usage;
    return json_pack("{s:i, s:i, s:i, s:i}", "input_tokens", u->prompt_tokens - u->cached_tokens,
                     "cache_creation_input_tokens", 0, "cache_read_input_tokens",
                     u->cached_tokens, "output_tokens", u->completion_tokens);
}

static const char *buf_text(struct evbuffer *b, size_t *n)
{
    *n = b ? evbuffer_get_length(b) : 0;
    return *n ? (const char *)evbuffer_pullup(b, -1) : "";
}

/* Call k's tool_use block; its input is the arguments' object ({} when
 * they are not one: an upstream's malformed call). */
static json_t *tool_use_block(const pl_oai_call *c, size_t k, bool with_input)
{
    json_t *tc = json_array_get(ep_of(c)->calls, k), *fn = json_object_get(tc, "function");
    const char *args = json_string_value(json_object_get(fn, "arguments"));
    json_t *input = with_input && args ? json_loads(args, 0, NULL) : NULL;
    if (!json_is_object(input)) {
        json_decref(input);
        input = json_object();
    }
    return json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id",
                     json_string_value(json_object_get(tc, "id")), "name",
                     json_string_value(json_object_get(fn, "name")), "input", input);
}

static json_t *thinking_block(const char *t, size_t n)
{
    return json_pack("{s:s, s:o, s:s}", "type", "thinking", "thinking",
                     pl_json_string_lossy(t, n), "signature", "");
}

static json_t *text_block(const char *t, size_t n)
{
    return json_pack("{s:s, s:o}", "type", "text", "text", pl_json_string_lossy(t, n));
}

/* The message object; done: with its content, stop_reason and usage. */
static json_t *message_json(const pl_oai_call *c, bool done)
{
    json_t *o = json_pack("{s:s, s:s, s:s, s:[], s:s, s:n, s:n}", "id", c->id, "type", "message",
                          "role", "assistant", "content", "model", c->model->name,
                          "stop_reason", "stop_sequence");
    if (!o)
        return NULL;
    if (!done) {
        json_object_set_new(o, "usage", json_pack("{s:i, s:i}", "input_tokens", 0,
                                                  "output_tokens", 0));
        return o;
    }
    const pl_oai_choice *ch = &c->choices[0];
    json_t *content = json_object_get(o, "content");
    size_t n, nr;
    const char *t = buf_text(ch->text, &n), *r = buf_text(ch->reasoning, &nr);
    if (ch->reasoning_shown)
        json_array_append_new(content, thinking_block(r, nr));
    if (n || (!ch->reasoning_shown && !ep_of(c)->calls))
        json_array_append_new(content, text_block(t, n));
    for (size_t k = 0; k < json_array_size(ep_of(c)->calls); k++)
        json_array_append_new(content, tool_use_block(c, k, true));
    json_object_set_new(o, "stop_reason", json_string(stop_reason(c)));
    if (matched_stop(c) && !json_array_size(ep_of(c)->calls))
        json_object_set_new(o, "stop_sequence", json_string(matched_stop(c)));
    json_object_set_new(o, "usage", usage_json(c));
    return o;
}

/* The reply's tool calls, once (pl_oai_choice_settle_calls). */
static void settle_calls(pl_oai_call *c)
{
    msg_ep *e = ep_of(c);
    if (!e->calls)
        e->calls = pl_oai_choice_settle_calls(c, &c->choices[0]);
}

static json_t *msg_reply(pl_oai_call *c)
{
    settle_calls(c);
    return message_json(c, true);
}

/* ---- the stream ---- */

/* One event: "event: type" and o (stolen) as its data, type set in o. */
static void send_event(pl_oai_call *c, const char *type, json_t *o)
{
    if (o)
        json_object_set_new(o, "type", json_string(type));
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    struct evbuffer *b = pl_sse_buf(c->sse);
    evbuffer_add_printf(b, "event: %s\ndata: ", s ? type : "error");
    if (s)
        evbuffer_add(b, s, strlen(s));
    else
        evbuffer_add_printf(b, "{\"type\":\"error\",\"error\":{\"type\":\"api_error\","
                               "\"message\":\"out of memory\"}}");
    evbuffer_add(b, "\n\n", 2);
    pl_sse_flush(c->sse);
    free(s);
}

static void block_close(pl_oai_call *c)
{
    msg_ep *e = ep_of(c);
    if (e->open == BLOCK_NONE)
        return;
    e->open = BLOCK_NONE;
    send_event(c, "content_block_stop", json_pack("{s:i}", "index", e->n_blocks - 1));
}

/* Open block (stolen) as the next index, closing the one open. */
static void block_open(pl_oai_call *c, int kind, json_t *block)
{
    msg_ep *e = ep_of(c);
    block_close(c);
    e->open = kind;
    send_event(c, "content_block_start",
               json_pack("{s:i, s:o}", "index", e->n_blocks++, "content_block", block));
}

/* A thinking_delta or text_delta of the open block. */
static void put_delta(pl_oai_call *c, const char *kind, const char *key, const char *t,
                      size_t n)
{
    struct evbuffer *b = pl_sse_buf(c->sse);
    evbuffer_add_printf(b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\","
                        "\"index\":%d,\"delta\":{\"type\":\"%s\",\"%s\":\"",
                        ep_of(c)->n_blocks - 1, kind, key);
    pl_json_escape(b, t, n);
    evbuffer_add(b, "\"}}\n\n", 5);
}

static void msg_stream_begin(pl_oai_call *c)
{
    send_event(c, "message_start", json_pack("{s:o}", "message", message_json(c, false)));
    send_event(c, "ping", json_object());
}

static void msg_stream_reasoning(pl_oai_call *c, pl_oai_choice *ch, const pl_delta *d)
{
    if (!d->len)
        return;
    if (ep_of(c)->open != BLOCK_THINKING)
        block_open(c, BLOCK_THINKING, thinking_block("", 0));
    put_delta(c, "thinking_delta", "thinking", d->text, d->len);
}

static void put_text(pl_oai_call *c, const char *t, size_t n)
{
    if (ep_of(c)->open != BLOCK_TEXT)
        block_open(c, BLOCK_TEXT, text_block("", 0));
    put_delta(c, "text_delta", "text", t, n);
}

static void msg_stream_delta(pl_oai_call *c, pl_oai_choice *ch, const pl_delta *d)
{
    if (!d->len)
        return;
    ep_of(c)->text_sent = true;
    put_text(c, d->text, d->len);
}

/* Each call's block: its start (input {}), its input as one
 * input_json_delta, its stop. */
static void stream_calls(pl_oai_call *c)
{
    msg_ep *e = ep_of(c);
    for (size_t k = 0; k < json_array_size(e->calls); k++) {
        json_t *fn = json_object_get(json_array_get(e->calls, k), "function");
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        block_open(c, BLOCK_TOOL, tool_use_block(c, k, false));
        send_event(c, "content_block_delta",
                   json_pack("{s:i, s:{s:s, s:s}}", "index", e->n_blocks - 1, "delta", "type",
                             "input_json_delta", "partial_json", args ? args : "{}"));
    }
    block_close(c);
}

static void stream_fail(pl_oai_call *c)
{
    block_close(c);
    send_event(c, "error", pl_anthropic_error_json(&c->error));
}

static void msg_stream_end(pl_oai_call *c)
{
    if (c->failed) {
        stream_fail(c);
        return;
    }
    settle_calls(c);
    size_t n;
    const char *t = buf_text(c->choices[0].text, &n);
    if (n && !ep_of(c)->text_sent)   /* held text: what was outside the calls */
        put_text(c, t, n);
    stream_calls(c);
    json_t *u = usage_json(c);
    const char *seq = json_array_size(ep_of(c)->calls) ? NULL : matched_stop(c);
    send_event(c, "message_delta",
               json_pack("{s:{s:s, s:o}, s:o}", "delta", "stop_reason", stop_reason(c),
                         "stop_sequence", seq ? json_string(seq) : json_null(), "usage", u));
    send_event(c, "message_stop", json_object());
}

static const pl_oai_format msg_format = {
    .stream_begin = msg_stream_begin,
    .stream_delta = msg_stream_delta,
    .stream_reasoning = msg_stream_reasoning,
    .stream_end = msg_stream_end,
    .reply = msg_reply,
    .free_ep = ep_free,
};

/* ---- handlers ---- */

/* The chat-form body of a Messages body, parsed into p with its model's
 * tools rendered; need_max_tokens for /v1/messages. */
static int prepare(pl_server *s, json_t *body, bool need_max_tokens, json_t **chat,
                   pl_oai_params *p, pl_model_entry **model, pl_err *err)
{
    *chat = pl_anthropic_chat_body(body, need_max_tokens, err);
    if (!*chat)
        return -1;
    if (pl_oai_parse(*chat, true, p, err) < 0) {
        pl_anthropic_rename_param(err);
        return -1;
    }
    *model = pl_server_find_model(s, p->model);
    if (!*model)
        return pl_err_set(err, 404, "not_found_error", "model", "model_not_found",
                          "model '%s' does not exist on this server", p->model);
    pl_sampling_apply_model_defaults(&p->sampling, *chat, (*model)->backend->sampling_defaults);
    if (pl_oai_tools_prepare(p, *chat, (*model)->backend, err) < 0) {
        pl_anthropic_rename_param(err);
        return -1;
    }
    return 0;
}

static void create(pl_server *s, struct evhttp_request *req, json_t *body)
{
    pl_err err;
    pl_oai_params p = {0};
    json_t *chat = NULL;
    pl_model_entry *model = NULL;
    msg_ep *e = calloc(1, sizeof *e);
    if (!e) {
        pl_err_set(&err, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    if (prepare(s, body, true, &chat, &p, &model, &err) < 0 ||
        pl_oai_reasoning_prepare(&p, model->backend, &err) < 0) {
        pl_anthropic_rename_param(&err);
        goto fail;
    }
    pl_oai_call_opts o = {.s = s, .req = req, .body = chat, .p = &p, .model = model,
                          .id_prefix = "msg_", .fmt = &msg_format, .ep = e};
    json_decref(body);
    if (pl_oai_call_start(&o, &err) < 0)
        pl_reply_error(req, &err);   /* the core freed chat, p and e */
    return;
fail:
    pl_reply_error(req, &err);
    pl_oai_params_free(&p);
    json_decref(chat);
    json_decref(body);
    ep_free(e);
}

/* {"input_tokens": N}: the prompt the same body would send (system, turns,
 * tools as the model's template renders them, the assistant header). */
static void count_tokens(pl_server *s, struct evhttp_request *req, json_t *body)
{
    pl_err err;
    pl_oai_params p = {0};
    json_t *chat = NULL;
    pl_model_entry *model = NULL;
    int32_t *ids = NULL;
    int n = 0;
    if (prepare(s, body, false, &chat, &p, &model, &err) < 0)
        goto fail;
    pl_gen_request r;
    pl_oai_to_request(&p, &r);
    if (!model->backend->ops->tokenize) {
        pl_err_set(&err, 501, "api_error", NULL, NULL, "the %s model '%s' cannot count tokens",
                   model->backend->ops->kind, model->name);
        goto fail;
    }
    if (model->backend->ops->tokenize(model->backend, &r, false, &ids, &n, &err) < 0)
        goto fail;
    pl_reply_json(req, 200, json_pack("{s:i}", "input_tokens", n));
    goto done;
fail:
    pl_reply_error(req, &err);
done:
    free(ids);
    pl_oai_params_free(&p);
    json_decref(chat);
    json_decref(body);
}

static void route(pl_server *s, struct evhttp_request *req, const char *path, void *ud)
{
    json_t *body = pl_read_json_body(req, pl_server_get_opts(s)->max_body_bytes);
    if (!body)
        return;   /* replied */
    if (!strcmp(path, "/v1/messages"))
        create(s, req, body);
    else
        count_tokens(s, req, body);
}

void pl_anthropic_register(pl_server *s)
{
    pl_server_add_route(s, "/v1/messages", PL_HTTP_POST, route, NULL);
    pl_server_add_route(s, "/v1/messages/count_tokens", PL_HTTP_POST, route, NULL);
}
