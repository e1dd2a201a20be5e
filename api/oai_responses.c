/* oai_responses.c - POST /v1/responses, GET/DELETE /v1/responses/{id}:
 * the Responses wire format over the request core (api/oai_request.h).
 *
 * A Responses body becomes a chat-completions body (oai_responses_req.c),
 * one backend request, and one assistant message item. Streaming sends the
 * Responses event types (response.created ... response.completed), each as
 * "event: <type>" + "data: <json>"; text deltas are composed straight into
 * the stream buffer, so the token path allocates nothing. Stored responses
 * (store: true, the default) keep their object and their conversation
 * (earlier turns + input + output) in a bounded FIFO, for GET and for
 * previous_response_id.
 *
 * With function tools the reply is parsed as in chat (oai_tools.c): calls
 * become function_call output items after the message (which is left out
 * when nothing but calls came back); a stream holds back text that may be
 * a call, as the chat stream does, and sends each call's item and its
 * arguments at the end.
 *
 * A model's reasoning (api/oai_reasoning.h) is a reasoning item before the
 * message, its text a reasoning_text content part, streamed as OpenAI
 * streams it for open-weight models (output_item.added,
 * content_part.added, response.reasoning_text.delta ... .done,
 * content_part.done, output_item.done); the item closes when the message
 * opens. Items are numbered in the order they open.
 */
#include "api/oai_responses.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/oai_reasoning.h"
#include "api/oai_request.h"
#include "api/oai_tools.h"
#include "api/respond.h"

typedef struct stored {
    char id[64];
    json_t *response;            /* the response object */
    json_t *conversation;        /* chat messages through this response */
} stored;

struct pl_responses_api {
    pl_server *srv;
    stored *ring;                /* PL_RESPONSES_STORE_MAX entries */
    int head, count;             /* oldest at head */
};

/* A call's Responses state, beside the core's (api/oai_request.h): the
 * core's body is the chat-form body, its one choice the reply. */
typedef struct resp_ep {
    pl_responses_api *a;
    json_t *body;                /* the Responses body as sent */
    json_t *input, *history;     /* this turn's input; the earlier turns */
    char msg_id[64];
    bool stored;
    int seq;                     /* stream sequence_number */
    bool msg_open;               /* stream: the message item was announced */
    char rs_id[64];              /* the reasoning item's */
    int n_items;                 /* stream: output items opened so far */
    int msg_index, rs_index;     /* stream: their output_index, -1 until open */
    bool rs_open;                /* stream: the reasoning item is open */
    json_t *calls;               /* the reply's tool calls (chat form), or NULL */
} resp_ep;

/* ---- the store ---- */

static stored *store_find(pl_responses_api *a, const char *id)
{
    for (int i = 0; i < a->count; i++) {
        stored *e = &a->ring[(a->head + i) % PL_RESPONSES_STORE_MAX];
        if (!strcmp(e->id, id))
            return e;
    }
    return NULL;
}

static void stored_clear(stored *e)
{
    json_decref(e->response);
    json_decref(e->conversation);
    memset(e, 0, sizeof *e);
}

/* Keep (response, conversation) under id, dropping the oldest when full.
 * Steals both references. */
static void store_put(pl_responses_api *a, const char *id, json_t *resp, json_t *conv)
{
    if (a->count == PL_RESPONSES_STORE_MAX) {
        stored_clear(&a->ring[a->head]);
        a->head = (a->head + 1) % PL_RESPONSES_STORE_MAX;
        a->count--;
    }
    stored *e = &a->ring[(a->head + a->count++) % PL_RESPONSES_STORE_MAX];
    snprintf(e->id, sizeof e->id, "%s", id);
    e->response = resp;
    e->conversation = conv;
}

/* Remove id, keeping the others in order. Returns 0, -1 when absent. */
static int store_del(pl_responses_api *a, const char *id)
{
    int i = 0;
    while (i < a->count && strcmp(a->ring[(a->head + i) % PL_RESPONSES_STORE_MAX].id, id))
        i++;
    if (i == a->count)
        return -1;
    stored_clear(&a->ring[(a->head + i) % PL_RESPONSES_STORE_MAX]);
    for (; i + 1 < a->count; i++)
        a->ring[(a->head + i) % PL_RESPONSES_STORE_MAX] =
            a->ring[(a->head + i + 1) % PL_RESPONSES_STORE_MAX];
    memset(&a->ring[(a->head + a->count - 1) % PL_RESPONSES_STORE_MAX], 0, sizeof(stored));
    a->count--;
    return 0;
}

/* ---- the response object ---- */

static resp_ep *ep_of(const pl_oai_call *c)
{
    return c->ep;
}

static struct evbuffer *text_of(const pl_oai_call *c)
{
    return c->choices[0].text;
}

static pl_finish finish_of(const pl_oai_call *c)
{
    return c->choices[0].finish;
}

static const char *status_of(const pl_oai_call *c, bool done)
{
    if (!done)
        return "in_progress";
    if (c->failed)
        return "failed";
    return finish_of(c) == PL_FINISH_LENGTH ? "incomplete" : "completed";
}

static json_t *message_item(const pl_oai_call *c, bool done)
{
    json_t *content = json_array();
    if (done) {
        size_t n = evbuffer_get_length(text_of(c));
        const char *t = (const char *)evbuffer_pullup(text_of(c), -1);
        json_array_append_new(content, json_pack("{s:s, s:s%, s:[]}", "type", "output_text",
                                                 "text", n ? t : "", n, "annotations"));
    }
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", ep_of(c)->msg_id, "type", "message",
                     "status", done ? (finish_of(c) == PL_FINISH_LENGTH ? "incomplete"
                                                                       : "completed")
                                    : "in_progress",
                     "role", "assistant", "content", content);
}

/* The reasoning text (with a reasoning format; "" else). */
static const char *reasoning_of(const pl_oai_call *c, size_t *n)
{
    struct evbuffer *r = c->choices[0].reasoning;
    *n = r ? evbuffer_get_length(r) : 0;
    return *n ? (const char *)evbuffer_pullup(r, -1) : "";
}

static bool has_reasoning(const pl_oai_call *c)
{
    return c->choices[0].reasoning_shown || ep_of(c)->rs_index >= 0;
}

static json_t *reasoning_part(const pl_oai_call *c, bool done)
{
    size_t n = 0;
    const char *t = done ? reasoning_of(c, &n) : "";
    return json_pack("{s:s, s:o}", "type", "reasoning_text", "text", pl_json_string_lossy(t, n));
}

/* The reasoning item: its text as one reasoning_text part (no summary). */
static json_t *reasoning_item(const pl_oai_call *c, bool done)
{
    json_t *content = json_array();
    if (done)
        json_array_append_new(content, reasoning_part(c, true));
    return json_pack("{s:s, s:s, s:[], s:o, s:n, s:s}", "id", ep_of(c)->rs_id, "type",
                     "reasoning", "summary", "content", content, "encrypted_content",
                     "status", done ? (finish_of(c) == PL_FINISH_LENGTH ? "incomplete"
                                                                       : "completed")
                                    : "in_progress");
}

static json_t *or_null(json_t *v)
{
    return v ? json_incref(v) : json_null();
}

/* The message item is in the output unless the reply was calls alone. */
static bool has_message(const pl_oai_call *c)
{
    return !ep_of(c)->calls || evbuffer_get_length(text_of(c)) > 0;
}

/* Output item k + has_message: tool call k as a function_call item. */
static json_t *call_item(const pl_oai_call *c, size_t k, bool done)
{
    json_t *tc = json_array_get(ep_of(c)->calls, k), *fn = json_object_get(tc, "function");
    char id[96];
    snprintf(id, sizeof id, "fc_%s_%zu", ep_of(c)->msg_id + 4, k);
    const char *args = json_string_value(json_object_get(fn, "arguments"));
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "id", id, "type", "function_call",
                     "status", done ? "completed" : "in_progress", "call_id",
                     json_string_value(json_object_get(tc, "id")), "name",
                     json_string_value(json_object_get(fn, "name")), "arguments",
                     done && args ? args : "");
}

static json_t *request_or(const pl_oai_call *c, const char *key, json_t *dflt)
{
    json_t *v = json_object_get(ep_of(c)->body, key);
    if (!v || json_is_null(v))
        return dflt;
    json_decref(dflt);
    return json_incref(v);
}

/* The response object; done adds the output, usage and final status. */
static json_t *response_json(const pl_oai_call *c, bool done)
{
    json_t *b = ep_of(c)->body, *o = json_pack(
        "{s:s, s:s, s:I, s:s, s:s, s:[], s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:b}",
        "id", c->id, "object", "response", "created_at", (json_int_t)c->created,
        "status", status_of(c, done), "model", c->model->name, "output",
        "parallel_tool_calls", request_or(c, "parallel_tool_calls", json_true()),
        "tool_choice", request_or(c, "tool_choice", json_string("auto")),
        "tools", request_or(c, "tools", json_array()),
        "instructions", or_null(json_object_get(b, "instructions")),
        "max_output_tokens", or_null(json_object_get(b, "max_output_tokens")),
        "temperature", or_null(json_object_get(b, "temperature")),
        "top_p", or_null(json_object_get(b, "top_p")),
        "previous_response_id", or_null(json_object_get(b, "previous_response_id")),
        "store", ep_of(c)->stored);
    if (!o)
        return NULL;
    json_t *md = json_object_get(b, "metadata");
    json_object_set_new(o, "metadata", json_is_object(md) ? json_incref(md) : json_object());
    json_t *tf = json_object_get(json_object_get(b, "text"), "format");
    json_object_set_new(o, "text", tf ? json_pack("{s:O}", "format", tf)
                                      : json_pack("{s:{s:s}}", "format", "type", "text"));
    json_object_set_new(o, "error", json_null());
    json_object_set_new(o, "incomplete_details",
                        done && finish_of(c) == PL_FINISH_LENGTH
                            ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null());
    if (!done) {
        json_object_set_new(o, "usage", json_null());
        return o;
    }
    json_t *out = json_object_get(o, "output");
    const resp_ep *e = ep_of(c);
    bool msg_first = e->msg_index >= 0 && e->rs_index > e->msg_index;
    if (has_message(c) && msg_first)
        json_array_append_new(out, message_item(c, true));
    if (has_reasoning(c))
        json_array_append_new(out, reasoning_item(c, true));
    if (has_message(c) && !msg_first)
        json_array_append_new(out, message_item(c, true));
    for (size_t k = 0; k < json_array_size(ep_of(c)->calls); k++)
        json_array_append_new(out, call_item(c, k, true));
    const pl_oai_usage *u = &c->usage;
    json_object_set_new(o, "usage", json_pack(
        "{s:i, s:{s:i, s:i}, s:i, s:{s:i}, s:i}", "input_tokens", u->prompt_tokens,
        "input_tokens_details", "cached_tokens", u->cached_tokens, "cache_write_tokens", 0,
        "output_tokens", u->completion_tokens, "output_tokens_details",
        "reasoning_tokens", u->reasoning_tokens, "total_tokens", u->prompt_tokens + u->completion_tokens));
    return o;
}

/* ---- the stream ---- */

static void ep_free(void *p)
{
    resp_ep *e = p;
    if (!e)
        return;
    json_decref(e->calls);
    json_decref(e->body);
    json_decref(e->input);
    json_decref(e->history);
    free(e);
}

/* Send one Responses event: o (stolen) gets type and sequence_number. */
static void send_event(pl_oai_call *c, const char *type, json_t *o)
{
    json_object_set_new(o, "type", json_string(type));
    json_object_set_new(o, "sequence_number", json_integer(ep_of(c)->seq++));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    struct evbuffer *b = pl_sse_buf(c->sse);
    evbuffer_add_printf(b, "event: %s\ndata: ", type);
    if (s)
        evbuffer_add(b, s, strlen(s));
    else
        evbuffer_add_printf(b, "{\"type\":\"error\",\"message\":\"out of memory\"}");
    evbuffer_add(b, "\n\n", 2);
    pl_sse_flush(c->sse);
    free(s);
}

static json_t *part_json(const pl_oai_call *c, bool done)
{
    size_t n = done ? evbuffer_get_length(text_of(c)) : 0;
    const char *t = n ? (const char *)evbuffer_pullup(text_of(c), -1) : "";
    return json_pack("{s:s, s:s%, s:[]}", "type", "output_text", "text", t, n, "annotations");
}

static json_t *at(const pl_oai_call *c)
{
    return json_pack("{s:s, s:i, s:i}", "item_id", ep_of(c)->msg_id, "output_index",
                     ep_of(c)->msg_index, "content_index", 0);
}

static json_t *rs_at(const pl_oai_call *c)
{
    return json_pack("{s:s, s:i, s:i}", "item_id", ep_of(c)->rs_id, "output_index",
                     ep_of(c)->rs_index, "content_index", 0);
}

/* The reasoning item's closing events. */
static void reasoning_close(pl_oai_call *c)
{
    resp_ep *e = ep_of(c);
    if (!e->rs_open)
        return;
    e->rs_open = false;
    size_t n;
    const char *t = reasoning_of(c, &n);
    json_t *o = rs_at(c);
    json_object_set_new(o, "text", pl_json_string_lossy(t, n));
    send_event(c, "response.reasoning_text.done", o);
    o = rs_at(c);
    json_object_set_new(o, "part", reasoning_part(c, true));
    send_event(c, "response.content_part.done", o);
    send_event(c, "response.output_item.done", json_pack("{s:i, s:o}", "output_index",
                                                         e->rs_index, "item",
                                                         reasoning_item(c, true)));
}

/* Reasoning text: the item opens at the first (once), each delta is a
 * response.reasoning_text.delta; after the item closed (the message
 * opened) the text only goes into the response object. */
static void resp_stream_reasoning(pl_oai_call *c, pl_oai_choice *ch, const pl_delta *d)
{
    resp_ep *e = ep_of(c);
    if (!d->len || (e->rs_index >= 0 && !e->rs_open))
        return;
    if (e->rs_index < 0) {
        e->rs_index = e->n_items++;
        e->rs_open = true;
        send_event(c, "response.output_item.added", json_pack("{s:i, s:o}", "output_index",
                                                              e->rs_index, "item",
                                                              reasoning_item(c, false)));
        json_t *o = rs_at(c);
        json_object_set_new(o, "part", reasoning_part(c, false));
        send_event(c, "response.content_part.added", o);
    }
    struct evbuffer *b = pl_sse_buf(c->sse);
    evbuffer_add_printf(b, "event: response.reasoning_text.delta\ndata: "
                        "{\"type\":\"response.reasoning_text.delta\",\"sequence_number\":%d,"
                        "\"item_id\":\"%s\",\"output_index\":%d,\"content_index\":0,"
                        "\"delta\":\"", e->seq++, e->rs_id, e->rs_index);
    pl_json_escape(b, d->text, d->len);
    evbuffer_add(b, "\"}\n\n", 4);
}

/* The message item's opening events (once). */
static void message_open(pl_oai_call *c)
{
    if (ep_of(c)->msg_open)
        return;
    reasoning_close(c);
    ep_of(c)->msg_open = true;
    ep_of(c)->msg_index = ep_of(c)->n_items++;
    send_event(c, "response.output_item.added",
               json_pack("{s:i, s:o}", "output_index", ep_of(c)->msg_index, "item",
                         message_item(c, false)));
    json_t *o = at(c);
    json_object_set_new(o, "part", part_json(c, false));
    send_event(c, "response.content_part.added", o);
}

static void resp_stream_begin(pl_oai_call *c)
{
    send_event(c, "response.created", json_pack("{s:o}", "response", response_json(c, false)));
    send_event(c, "response.in_progress",
               json_pack("{s:o}", "response", response_json(c, false)));
    if (!pl_oai_tools_active(&c->p) && !c->choices[0].split)
        message_open(c);   /* else at the first content, after the reasoning */
}

static void put_text_delta(pl_oai_call *c, const char *t, size_t n)
{
    struct evbuffer *b = pl_sse_buf(c->sse);
    evbuffer_add_printf(b, "event: response.output_text.delta\ndata: "
                        "{\"type\":\"response.output_text.delta\",\"sequence_number\":%d,"
                        "\"item_id\":\"%s\",\"output_index\":%d,\"content_index\":0,"
                        "\"logprobs\":[],\"delta\":\"", ep_of(c)->seq++, ep_of(c)->msg_id,
                        ep_of(c)->msg_index);
    pl_json_escape(b, t, n);
    evbuffer_add(b, "\"}\n\n", 4);
}

/* Text goes out in the message item (opened at the first text when the
 * reply may be a call). */
static void resp_stream_delta(pl_oai_call *c, pl_oai_choice *ch, const pl_delta *d)
{
    if (!d->len)
        return;
    message_open(c);
    put_text_delta(c, d->text, d->len);
}

/* Each call's item, its arguments as one delta, and its closing events. */
static void stream_calls(pl_oai_call *c)
{
    int base = ep_of(c)->n_items;
    for (size_t k = 0; k < json_array_size(ep_of(c)->calls); k++) {
        int idx = base + (int)k;
        json_t *done = call_item(c, k, true);
        json_t *id = json_object_get(done, "id"), *args = json_object_get(done, "arguments");
        send_event(c, "response.output_item.added",
                   json_pack("{s:i, s:o}", "output_index", idx, "item", call_item(c, k, false)));
        send_event(c, "response.function_call_arguments.delta",
                   json_pack("{s:O, s:i, s:O}", "item_id", id, "output_index", idx, "delta",
                             args));
        send_event(c, "response.function_call_arguments.done",
                   json_pack("{s:O, s:i, s:O}", "item_id", id, "output_index", idx,
                             "arguments", args));
        send_event(c, "response.output_item.done",
                   json_pack("{s:i, s:o}", "output_index", idx, "item", done));
    }
}

static void stream_finish_message(pl_oai_call *c)
{
    size_t n = evbuffer_get_length(text_of(c));
    const char *t = n ? (const char *)evbuffer_pullup(text_of(c), -1) : "";
    json_t *o = at(c);
    json_object_set_new(o, "text", pl_json_string_lossy(t, n));
    json_object_set_new(o, "logprobs", json_array());
    send_event(c, "response.output_text.done", o);
    o = at(c);
    json_object_set_new(o, "part", part_json(c, true));
    send_event(c, "response.content_part.done", o);
    send_event(c, "response.output_item.done",
               json_pack("{s:i, s:o}", "output_index", ep_of(c)->msg_index, "item",
                         message_item(c, true)));
}

static void stream_finish(pl_oai_call *c, json_t *resp)
{
    reasoning_close(c);
    if (has_message(c) && !ep_of(c)->msg_open) {   /* held text that was no call */
        message_open(c);
        size_t held = evbuffer_get_length(text_of(c));
        if (held)
            put_text_delta(c, (const char *)evbuffer_pullup(text_of(c), -1), held);
        pl_sse_flush(c->sse);
    }
    if (ep_of(c)->msg_open)
        stream_finish_message(c);
    stream_calls(c);
    const char *ty = finish_of(c) == PL_FINISH_LENGTH ? "response.incomplete"
                                                      : "response.completed";
    send_event(c, ty, json_pack("{s:O}", "response", resp));
}

static void stream_fail(pl_oai_call *c)
{
    send_event(c, "error", json_pack("{s:s, s:s, s:s?}", "code",
                                     *c->error.code ? c->error.code : c->error.type,
                                     "message", c->error.message,
                                     "param", *c->error.param ? c->error.param : NULL));
}

/* ---- the end ---- */

/* The conversation through this response, for a later previous_response_id. */
static json_t *conversation_json(const pl_oai_call *c)
{
    resp_ep *e = ep_of(c);
    json_t *conv = e->history ? json_deep_copy(e->history) : json_array();
    size_t n = evbuffer_get_length(text_of(c));
    const char *t = n ? (const char *)evbuffer_pullup(text_of(c), -1) : "";
    json_array_extend(conv, e->input);
    json_t *m = json_pack("{s:s, s:s%}", "role", "assistant", "content", t, n);
    size_t nr;
    const char *r = reasoning_of(c, &nr);
    if (m && has_reasoning(c))     /* for templates that render it again */
        json_object_set_new(m, "reasoning_content", pl_json_string_lossy(r, nr));
    if (m && e->calls) {
        if (!n)
            json_object_set_new(m, "content", json_null());
        json_object_set(m, "tool_calls", e->calls);
    }
    json_array_append_new(conv, m);
    return conv;
}

/* The reply's tool calls, once (pl_oai_choice_settle_calls), without the
 * stream's call indexes. */
static void settle_calls(pl_oai_call *c)
{
    resp_ep *e = ep_of(c);
    size_t i;
    json_t *tc;
    if (!e->calls)
        e->calls = pl_oai_choice_settle_calls(c, &c->choices[0]);
    json_array_foreach(e->calls, i, tc)
        json_object_del(tc, "index");
}

/* The finished response (new ref), stored when asked; NULL on out of
 * memory. */
static json_t *finished_response(pl_oai_call *c)
{
    settle_calls(c);
    json_t *resp = response_json(c, true);
    if (resp && ep_of(c)->stored)
        store_put(ep_of(c)->a, c->id, json_incref(resp), conversation_json(c));
    return resp;
}

static void resp_stream_end(pl_oai_call *c)
{
    json_t *resp = c->failed ? NULL : finished_response(c);
    if (!c->failed && !resp)
        pl_err_set(&c->error, 500, "server_error", NULL, NULL, "out of memory");
    if (resp)
        stream_finish(c, resp);
    else
        stream_fail(c);
    json_decref(resp);
}

static const pl_oai_format resp_format = {
    .stream_begin = resp_stream_begin,
    .stream_delta = resp_stream_delta,
    .stream_reasoning = resp_stream_reasoning,
    .stream_end = resp_stream_end,
    .reply = finished_response,
    .free_ep = ep_free,
};

/* ---- handlers ---- */

/* The earlier conversation of previous_response_id (a new reference), or
 * NULL with *e set; *none when the field is absent. */
static int prior_conversation(pl_responses_api *a, json_t *body, json_t **out, pl_err *e)
{
    json_t *prev = json_object_get(body, "previous_response_id");
    *out = NULL;
    if (!prev || json_is_null(prev))
        return 0;
    if (!json_is_string(prev))
        return pl_err_set(e, 400, "invalid_request_error", "previous_response_id", NULL,
                          "'previous_response_id' must be a string");
    stored *s = store_find(a, json_string_value(prev));
    if (!s)
        return pl_err_set(e, 400, "invalid_request_error", "previous_response_id",
                          "previous_response_not_found",
                          "Previous response with id '%s' not found.",
                          json_string_value(prev));
    *out = json_incref(s->conversation);
    return 0;
}

/* Parse and validate: fills e (the Responses state), *chat (the chat-form
 * body), *p and *model. */
static int call_prepare(resp_ep *e, json_t **chat, pl_oai_params *p, pl_model_entry **model,
                        pl_err *err)
{
    json_t *st = json_object_get(e->body, "store");
    if (st && !json_is_boolean(st) && !json_is_null(st))
        return pl_err_set(err, 400, "invalid_request_error", "store", NULL,
                          "'store' must be a boolean");
    e->stored = !json_is_false(st);
    if (prior_conversation(e->a, e->body, &e->history, err) < 0)
        return -1;
    *chat = pl_responses_chat_body(e->body, e->history, &e->input, err);
    if (!*chat || pl_responses_parse(*chat, p, err) < 0)
        return -1;
    *model = pl_server_find_model(e->a->srv, p->model);
    if (!*model)
        return pl_err_set(err, 404, "invalid_request_error", "model", "model_not_found",
                          "The model '%s' does not exist", p->model);
    pl_sampling_apply_model_defaults(&p->sampling, *chat, (*model)->backend->sampling_defaults);
    if (pl_oai_tools_prepare(p, *chat, (*model)->backend, err) < 0 ||
        pl_oai_reasoning_prepare(p, (*model)->backend, err) < 0) {
        pl_responses_rename_param(err);
        return -1;
    }
    return 0;
}

static void create(pl_responses_api *a, struct evhttp_request *req)
{
    pl_err err;
    pl_oai_params p = {0};
    json_t *chat = NULL;
    pl_model_entry *model = NULL;
    json_t *body = pl_read_json_body(req, pl_server_get_opts(a->srv)->max_body_bytes);
    if (!body)
        return;   /* replied */
    resp_ep *e = calloc(1, sizeof *e);
    if (!e) {
        json_decref(body);
        pl_reply_errorf(req, 500, "server_error", NULL, NULL, "out of memory");
        return;
    }
    *e = (resp_ep){.a = a, .body = body, .msg_index = -1, .rs_index = -1};
    pl_server_new_id(a->srv, "msg_", e->msg_id, sizeof e->msg_id);
    snprintf(e->rs_id, sizeof e->rs_id, "rs_%s", e->msg_id + 4);
    if (call_prepare(e, &chat, &p, &model, &err) < 0) {
        pl_reply_error(req, &err);
        pl_oai_params_free(&p);
        json_decref(chat);
        ep_free(e);
        return;
    }
    pl_oai_call_opts o = {.s = a->srv, .req = req, .body = chat, .p = &p, .model = model,
                          .id_prefix = "resp_", .keep_text = true, .fmt = &resp_format,
                          .ep = e};
    if (pl_oai_call_start(&o, &err) < 0)
        pl_reply_error(req, &err);   /* the core freed chat, p and e */
}

static void item(pl_responses_api *a, struct evhttp_request *req, const char *id)
{
    stored *s = store_find(a, id);
    if (!s) {
        pl_reply_errorf(req, 404, "invalid_request_error", NULL, "not_found",
                        "Response with id '%s' not found.", id);
        return;
    }
    if (evhttp_request_get_command(req) == EVHTTP_REQ_GET) {
        pl_reply_json(req, 200, json_incref(s->response));
        return;
    }
    store_del(a, id);
    pl_reply_json(req, 200, json_pack("{s:s, s:s, s:b}", "id", id, "object",
                                      "response.deleted", "deleted", 1));
}

static void route(pl_server *s, struct evhttp_request *req, const char *path, void *ud)
{
    pl_responses_api *a = ud;
    static const char pre[] = "/v1/responses/";
    if (!strcmp(path, "/v1/responses")) {
        if (evhttp_request_get_command(req) != EVHTTP_REQ_POST)
            pl_reply_errorf(req, 405, "invalid_request_error", NULL, NULL,
                            "use POST on /v1/responses");
        else
            create(a, req);
        return;
    }
    const char *id = path + sizeof pre - 1;
    if (evhttp_request_get_command(req) == EVHTTP_REQ_POST || !*id || strchr(id, '/')) {
        pl_reply_errorf(req, !*id || strchr(id, '/') ? 404 : 405, "invalid_request_error",
                        NULL, NULL, "use GET or DELETE on /v1/responses/{id}");
        return;
    }
    item(a, req, id);
}

pl_responses_api *pl_responses_register(pl_server *s)
{
    pl_responses_api *a = calloc(1, sizeof *a);
    if (a)
        a->ring = calloc(PL_RESPONSES_STORE_MAX, sizeof *a->ring);
    if (!a || !a->ring) {
        free(a);
        return NULL;
    }
    a->srv = s;
    pl_server_add_route(s, "/v1/responses", PL_HTTP_POST, route, a);
    pl_server_add_route(s, "/v1/responses/*", PL_HTTP_GET | PL_HTTP_DELETE, route, a);
    return a;
}

void pl_responses_api_free(pl_responses_api *a)
{
    if (!a)
        return;
    for (int i = 0; i < a->count; i++)
        stored_clear(&a->ring[(a->head + i) % PL_RESPONSES_STORE_MAX]);
    free(a->ring);
    free(a);
}
