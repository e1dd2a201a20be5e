/* oai_responses.c - POST /v1/responses, GET/DELETE /v1/responses/{id}.
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
 */
#include "api/oai_responses.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/access_log.h"
#include "api/oai_tools.h"
#include "api/respond.h"
#include "api/sse.h"
#include "schedulers/dispatch.h"

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

typedef struct rcall {
    pl_responses_api *a;
    struct evhttp_request *req;  /* NULL once the client is gone */
    json_t *body, *chat, *input, *history;
    pl_oai_params p;
    pl_model_entry *model;
    char id[64], msg_id[64];
    int64_t created;
    pl_dispatch_req dr;          /* its admission (the model's dispatch) */
    const pl_gen_request *submitting;    /* while call_start pumps */
    pl_err submit_err;
    uint64_t backend_id;
    bool active, stored;
    pl_sse *sse;
    pl_close_watch *watch;
    int seq;                     /* stream sequence_number */
    struct evbuffer *text;
    pl_result res;
    pl_err error;
    int tool_state;              /* stream with tools: 0 undecided, 1 text, 2 held */
    bool msg_open;               /* stream: the message item was announced */
    json_t *calls;               /* the reply's tool calls (chat form), or NULL */
} rcall;

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

static const char *status_of(const rcall *c, bool done)
{
    if (!done)
        return "in_progress";
    if (c->res.finish == PL_FINISH_ERROR || c->res.finish == PL_FINISH_ABORT)
        return "failed";
    return c->res.finish == PL_FINISH_LENGTH ? "incomplete" : "completed";
}

static json_t *message_item(const rcall *c, bool done)
{
    json_t *content = json_array();
    if (done) {
        size_t n = evbuffer_get_length(c->text);
        const char *t = (const char *)evbuffer_pullup(c->text, -1);
        json_array_append_new(content, json_pack("{s:s, s:s%, s:[]}", "type", "output_text",
                                                 "text", n ? t : "", n, "annotations"));
    }
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", c->msg_id, "type", "message",
                     "status", done ? (c->res.finish == PL_FINISH_LENGTH ? "incomplete"
                                                                        : "completed")
                                    : "in_progress",
                     "role", "assistant", "content", content);
}

static json_t *or_null(json_t *v)
{
    return v ? json_incref(v) : json_null();
}

/* The message item is in the output unless the reply was calls alone. */
static bool has_message(const rcall *c)
{
    return !c->calls || evbuffer_get_length(c->text) > 0;
}

/* Output item k + has_message: tool call k as a function_call item. */
static json_t *call_item(const rcall *c, size_t k, bool done)
{
    json_t *tc = json_array_get(c->calls, k), *fn = json_object_get(tc, "function");
    char id[96];
    snprintf(id, sizeof id, "fc_%s_%zu", c->msg_id + 4, k);
    const char *args = json_string_value(json_object_get(fn, "arguments"));
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "id", id, "type", "function_call",
                     "status", done ? "completed" : "in_progress", "call_id",
                     json_string_value(json_object_get(tc, "id")), "name",
                     json_string_value(json_object_get(fn, "name")), "arguments",
                     done && args ? args : "");
}

static json_t *request_or(const rcall *c, const char *key, json_t *dflt)
{
    json_t *v = json_object_get(c->body, key);
    if (!v || json_is_null(v))
        return dflt;
    json_decref(dflt);
    return json_incref(v);
}

/* The response object; done adds the output, usage and final status. */
static json_t *response_json(const rcall *c, bool done)
{
    json_t *b = c->body, *o = json_pack(
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
        "store", c->stored);
    if (!o)
        return NULL;
    json_t *md = json_object_get(b, "metadata");
    json_object_set_new(o, "metadata", json_is_object(md) ? json_incref(md) : json_object());
    json_t *tf = json_object_get(json_object_get(b, "text"), "format");
    json_object_set_new(o, "text", tf ? json_pack("{s:O}", "format", tf)
                                      : json_pack("{s:{s:s}}", "format", "type", "text"));
    json_object_set_new(o, "error", json_null());
    json_object_set_new(o, "incomplete_details",
                        done && c->res.finish == PL_FINISH_LENGTH
                            ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null());
    if (!done) {
        json_object_set_new(o, "usage", json_null());
        return o;
    }
    json_t *out = json_object_get(o, "output");
    if (has_message(c))
        json_array_append_new(out, message_item(c, true));
    for (size_t k = 0; k < json_array_size(c->calls); k++)
        json_array_append_new(out, call_item(c, k, true));
    json_object_set_new(o, "usage", json_pack(
        "{s:i, s:{s:i, s:i}, s:i, s:{s:i}, s:i}", "input_tokens", c->res.prompt_tokens,
        "input_tokens_details", "cached_tokens", c->res.cached_tokens, "cache_write_tokens", 0,
        "output_tokens", c->res.completion_tokens, "output_tokens_details",
        "reasoning_tokens", 0, "total_tokens",
        c->res.prompt_tokens + c->res.completion_tokens));
    return o;
}

/* ---- the call ---- */

static void call_free(rcall *c)
{
    pl_server_call_end(c->a->srv);
    if (c->sse)
        pl_sse_end(c->sse);
    if (c->text)
        evbuffer_free(c->text);
    json_decref(c->calls);
    pl_oai_params_free(&c->p);
    json_decref(c->body);
    json_decref(c->chat);
    json_decref(c->input);
    json_decref(c->history);
    free(c);
}

/* The request ended: its slot on the model's dispatch goes to whoever is
 * next (jobs back off while interactive requests run). */
static void set_inactive(rcall *c)
{
    if (!c->active)
        return;
    c->active = false;
    pl_dispatch_done(c->model->dispatch, &c->dr, 0);
    pl_dispatch_pump(c->model->dispatch);
}

/* Send one Responses event: o (stolen) gets type and sequence_number. */
static void send_event(rcall *c, const char *type, json_t *o)
{
    json_object_set_new(o, "type", json_string(type));
    json_object_set_new(o, "sequence_number", json_integer(c->seq++));
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

static json_t *part_json(const rcall *c, bool done)
{
    size_t n = done ? evbuffer_get_length(c->text) : 0;
    const char *t = n ? (const char *)evbuffer_pullup(c->text, -1) : "";
    return json_pack("{s:s, s:s%, s:[]}", "type", "output_text", "text", t, n, "annotations");
}

static json_t *at(const rcall *c)
{
    return json_pack("{s:s, s:i, s:i}", "item_id", c->msg_id, "output_index", 0,
                     "content_index", 0);
}

/* The message item's opening events (once). */
static void message_open(rcall *c)
{
    if (c->msg_open)
        return;
    c->msg_open = true;
    send_event(c, "response.output_item.added",
               json_pack("{s:i, s:o}", "output_index", 0, "item", message_item(c, false)));
    json_t *o = at(c);
    json_object_set_new(o, "part", part_json(c, false));
    send_event(c, "response.content_part.added", o);
}

static void stream_begin(rcall *c)
{
    send_event(c, "response.created", json_pack("{s:o}", "response", response_json(c, false)));
    send_event(c, "response.in_progress",
               json_pack("{s:o}", "response", response_json(c, false)));
    if (!pl_oai_tools_active(&c->p))
        message_open(c);
}

static void put_text_delta(rcall *c, const char *t, size_t n)
{
    struct evbuffer *b = pl_sse_buf(c->sse);
    evbuffer_add_printf(b, "event: response.output_text.delta\ndata: "
                        "{\"type\":\"response.output_text.delta\",\"sequence_number\":%d,"
                        "\"item_id\":\"%s\",\"output_index\":0,\"content_index\":0,"
                        "\"logprobs\":[],\"delta\":\"", c->seq++, c->msg_id);
    pl_json_escape(b, t, n);
    evbuffer_add(b, "\"}\n\n", 4);
    pl_sse_flush(c->sse);
}

/* Each call's item, its arguments as one delta, and its closing events. */
static void stream_calls(rcall *c)
{
    int base = has_message(c);
    for (size_t k = 0; k < json_array_size(c->calls); k++) {
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

static void stream_finish_message(rcall *c)
{
    size_t n = evbuffer_get_length(c->text);
    const char *t = n ? (const char *)evbuffer_pullup(c->text, -1) : "";
    json_t *o = at(c);
    json_object_set_new(o, "text", pl_json_string_lossy(t, n));
    json_object_set_new(o, "logprobs", json_array());
    send_event(c, "response.output_text.done", o);
    o = at(c);
    json_object_set_new(o, "part", part_json(c, true));
    send_event(c, "response.content_part.done", o);
    send_event(c, "response.output_item.done",
               json_pack("{s:i, s:o}", "output_index", 0, "item", message_item(c, true)));
}

static void stream_finish(rcall *c, json_t *resp)
{
    if (has_message(c) && !c->msg_open) {   /* held text that was no call */
        message_open(c);
        size_t held = evbuffer_get_length(c->text);
        if (held)
            put_text_delta(c, (const char *)evbuffer_pullup(c->text, -1), held);
    }
    if (c->msg_open)
        stream_finish_message(c);
    stream_calls(c);
    const char *ty = c->res.finish == PL_FINISH_LENGTH ? "response.incomplete"
                                                       : "response.completed";
    send_event(c, ty, json_pack("{s:O}", "response", resp));
}

static void stream_fail(rcall *c)
{
    send_event(c, "error", json_pack("{s:s, s:s, s:s?}", "code",
                                     *c->error.code ? c->error.code : c->error.type,
                                     "message", c->error.message,
                                     "param", *c->error.param ? c->error.param : NULL));
}

/* The conversation through this response, for a later previous_response_id. */
static json_t *conversation_json(const rcall *c)
{
    json_t *conv = c->history ? json_deep_copy(c->history) : json_array();
    size_t n = evbuffer_get_length(c->text);
    const char *t = n ? (const char *)evbuffer_pullup(c->text, -1) : "";
    json_array_extend(conv, c->input);
    json_t *m = json_pack("{s:s, s:s%}", "role", "assistant", "content", t, n);
    if (m && c->calls) {
        if (!n)
            json_object_set_new(m, "content", json_null());
        json_object_set(m, "tool_calls", c->calls);
    }
    json_array_append_new(conv, m);
    return conv;
}

/* Stream with tools: whether the text so far is held back (it may still
 * be a call); once it cannot be, what was held goes out (tool_state 1). */
static bool hold_for_tools(rcall *c)
{
    if (c->tool_state == PL_TOOLS_TEXT || !pl_oai_tools_active(&c->p))
        return false;
    if (c->tool_state == PL_TOOLS_HOLD)
        return true;
    size_t all = evbuffer_get_length(c->text);
    const char *t = (const char *)evbuffer_pullup(c->text, -1);
    c->tool_state = pl_oai_tools_classify(&c->p, t, all);
    if (c->tool_state != PL_TOOLS_TEXT)
        return true;              /* a call, or still undecided */
    message_open(c);
    put_text_delta(c, t, all);
    return true;
}

static void on_delta(void *ud, const pl_delta *d)
{
    rcall *c = ud;
    evbuffer_add(c->text, d->text, d->len);
    if (d->n_tool_calls && pl_oai_merge_tool_deltas(&c->calls, d->tool_calls,
                                                    d->n_tool_calls) < 0)
        pl_err_set(&c->error, 500, "server_error", NULL, NULL, "out of memory");
    if (!c->sse || !d->len || hold_for_tools(c))
        return;
    put_text_delta(c, d->text, d->len);
}

/* The reply's tool calls: the upstream's, or the text parsed for calls
 * (then c->text keeps only what is outside them). */
static void settle_calls(rcall *c)
{
    size_t i;
    json_t *tc;
    json_array_foreach(c->calls, i, tc)
        json_object_del(tc, "index");
    if (c->calls || !pl_oai_tools_active(&c->p) || c->res.finish != PL_FINISH_STOP ||
        c->tool_state == PL_TOOLS_TEXT)
        return;
    size_t n = evbuffer_get_length(c->text);
    char *content = NULL;
    c->calls = pl_oai_tools_parse_reply(&c->p, (const char *)evbuffer_pullup(c->text, -1), n,
                                        &content);
    if (c->calls) {
        evbuffer_drain(c->text, n);
        if (content)
            evbuffer_add(c->text, content, strlen(content));
    }
    free(content);
}

static void on_done(void *ud, const pl_result *r)
{
    rcall *c = ud;
    set_inactive(c);
    c->res = *r;
    c->res.error = NULL;
    bool failed = r->finish == PL_FINISH_ERROR || r->finish == PL_FINISH_ABORT;
    if (failed && r->error)
        c->error = *r->error;
    else if (failed)
        pl_err_set(&c->error, 503, "server_error", NULL, NULL, "the backend stopped the request");
    if (c->req)
        pl_access_usage(c->req, r->prompt_tokens, r->completion_tokens);
    if (!failed)
        settle_calls(c);
    json_t *resp = failed ? NULL : response_json(c, true);
    if (!failed && !resp)
        pl_err_set(&c->error, 500, "server_error", NULL, NULL, "out of memory");
    if (c->sse) {
        if (resp)
            stream_finish(c, resp);
        else
            stream_fail(c);
    } else {
        pl_unwatch_close(c->req, c->watch);
        if (resp)
            pl_reply_json(c->req, 200, json_incref(resp));
        else
            pl_reply_error(c->req, &c->error);
    }
    if (resp && c->stored)
        store_put(c->a, c->id, json_incref(resp), conversation_json(c));
    json_decref(resp);
    call_free(c);
}

static void on_client_close(void *ud)
{
    rcall *c = ud;
    c->req = NULL;
    if (c->active)
        pl_backend_abort(c->model->backend, c->backend_id);
    set_inactive(c);
    if (c->sse)
        pl_sse_free_closed(c->sse);
    c->sse = NULL;
    call_free(c);
}

static void on_pause(void *ud, bool paused)
{
    rcall *c = ud;
    if (c->active && c->model->backend->ops->set_paused)
        c->model->backend->ops->set_paused(c->model->backend, c->backend_id, paused);
}

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

/* Parse and validate; fills c->chat, c->input, c->p, c->model. */
static int call_prepare(rcall *c, pl_err *e)
{
    json_t *st = json_object_get(c->body, "store");
    if (st && !json_is_boolean(st) && !json_is_null(st))
        return pl_err_set(e, 400, "invalid_request_error", "store", NULL,
                          "'store' must be a boolean");
    c->stored = !json_is_false(st);
    if (prior_conversation(c->a, c->body, &c->history, e) < 0)
        return -1;
    c->chat = pl_responses_chat_body(c->body, c->history, &c->input, e);
    if (!c->chat || pl_responses_parse(c->chat, &c->p, e) < 0)
        return -1;
    c->model = pl_server_find_model(c->a->srv, c->p.model);
    if (!c->model)
        return pl_err_set(e, 404, "invalid_request_error", "model", "model_not_found",
                          "The model '%s' does not exist", c->p.model);
    if (pl_oai_tools_prepare(&c->p, c->chat, c->model->backend, e) < 0) {
        pl_responses_rename_param(e);
        return -1;
    }
    c->text = evbuffer_new();
    return c->text ? 0 : pl_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
}

/* The model's dispatch admitted the request (interactive requests go at
 * once): submit it. A refusal ends its admission. */
static void admitted(void *ud, pl_dispatch_req *dr)
{
    rcall *c = ud;
    pl_sink sink = {on_delta, on_done, c};
    if (pl_backend_submit(c->model->backend, c->submitting, sink, &c->backend_id,
                          &c->submit_err) == 0)
        c->active = true;
    else
        pl_dispatch_done(c->model->dispatch, dr, 0);
}

static int call_start(rcall *c, pl_err *e)
{
    pl_gen_request r;
    pl_oai_to_request(&c->p, &r);
    r.oai_body = c->chat;
    r.conversation_key = pl_oai_prompt_cache_key(c->chat);
    c->dr = (pl_dispatch_req){.submit = admitted, .ud = c};
    c->submitting = &r;
    if (pl_dispatch_push(c->model->dispatch, PL_DISPATCH_INTERACTIVE, &c->dr) == 0)
        pl_dispatch_pump(c->model->dispatch);
    c->submitting = NULL;
    if (!c->active) {
        *e = c->submit_err;
        return -1;
    }
    if (!c->p.stream) {
        c->watch = pl_watch_close(c->req, on_client_close, c);
    } else {
        pl_sse_cbs cbs = {on_client_close, on_pause, c};
        c->sse = pl_sse_start(c->a->srv, c->req,
                              pl_server_get_opts(c->a->srv)->stream_buffer_bytes, cbs);
    }
    if (c->p.stream ? c->sse != NULL : c->watch != NULL) {
        if (c->sse)
            stream_begin(c);
        return 0;
    }
    pl_backend_abort(c->model->backend, c->backend_id);
    set_inactive(c);
    return pl_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
}

static void create(pl_responses_api *a, struct evhttp_request *req)
{
    pl_err e;
    rcall *c = calloc(1, sizeof *c);
    json_t *body = pl_read_json_body(req, pl_server_get_opts(a->srv)->max_body_bytes);
    if (!body) {
        free(c);
        return;   /* replied */
    }
    if (!c) {
        json_decref(body);
        pl_reply_errorf(req, 500, "server_error", NULL, NULL, "out of memory");
        return;
    }
    *c = (rcall){.a = a, .req = req, .body = body, .created = (int64_t)time(NULL)};
    pl_server_call_begin(a->srv);
    pl_server_new_id(a->srv, "resp_", c->id, sizeof c->id);
    pl_server_new_id(a->srv, "msg_", c->msg_id, sizeof c->msg_id);
    if (call_prepare(c, &e) < 0 || call_start(c, &e) < 0)
        goto fail;
    return;
fail:
    pl_reply_error(req, &e);
    call_free(c);
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
