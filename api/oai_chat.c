/* oai_chat.c - POST /v1/chat/completions and POST /v1/completions: their
 * wire format over the request core (api/oai_request.h).
 *
 * n choices (prompts x n for completions) become n backend requests; the
 * core admits, streams and ends them. Here: parsing, the chunk stream
 * (role chunks, content and tool-call chunks, finish chunks, usage,
 * [DONE]) and the non-streamed reply, whose encoding is api/oai_wire.c's.
 */
#include "api/oai_chat.h"

#include <stdlib.h>
#include <string.h>

#include "api/oai_reasoning.h"
#include "api/oai_request.h"
#include "api/oai_tools.h"
#include "api/respond.h"
#include "src/base/json_dump.h"

/* The chunk prefix of a stream: everything up to "choices":[. */
typedef struct chat_ep {
    char *prefix;
} chat_ep;

static void ep_free(void *ep)
{
    chat_ep *e = ep;
    if (e)
        free(e->prefix);
    free(e);
}

static const char *prefix_of(const pl_oai_call *c)
{
    return ((const chat_ep *)c->ep)->prefix;
}

static int chat_prepare(pl_oai_call *c)
{
    if (!c->p.stream)
        return 0;
    chat_ep *e = c->ep;
    e->prefix = pl_oai_chunk_prefix(c->id, c->p.chat, c->created, c->model->name,
                                    c->p.include_usage);
    return e->prefix ? 0 : -1;
}

/* ---- streaming ---- */

/* Send o (stolen) as one "data:" event; out-of-memory sends the error. */
static void stream_send_json(pl_oai_call *c, json_t *o)
{
    size_t n = 0;
    char *s = o ? pl_json_dumps(o, &n) : NULL;
    json_decref(o);
    if (!s) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\","
                                  "\"type\":\"server_error\",\"param\":null,\"code\":null}}";
        pl_sse_send_data(c->sse, oom, sizeof oom - 1);
        return;
    }
    pl_sse_send_data(c->sse, s, n);
    free(s);
}

static void chat_stream_begin(pl_oai_call *c)
{
    for (int i = 0; c->p.chat && i < c->n_choices; i++) {
        pl_oai_put_role_chunk(pl_sse_buf(c->sse), prefix_of(c), i);
        pl_sse_flush(c->sse);
    }
}

static void chat_stream_delta(pl_oai_call *c, pl_oai_choice *ch, const pl_delta *d)
{
    pl_oai_put_delta_chunk(pl_sse_buf(c->sse), prefix_of(c), c->p.chat, ch->index, d,
                           &ch->text_offset);
}

static void chat_stream_reasoning(pl_oai_call *c, pl_oai_choice *ch, const pl_delta *d)
{
    pl_oai_put_reasoning_chunk(pl_sse_buf(c->sse), prefix_of(c), ch->index, d);
}

static void chat_stream_tool_delta(pl_oai_call *c, pl_oai_choice *ch, const pl_delta *d)
{
    pl_oai_put_tool_delta_chunk(pl_sse_buf(c->sse), prefix_of(c), ch->index, d->tool_calls,
                                d->n_tool_calls, c->p.legacy_functions);
}

/* Stream with tools, at the end: the held text as calls and what is left
 * of it as content (oai_tools.h, pl_oai_tools_reply), with the finish
 * chunk. Returns false when nothing was held. */
static bool finish_held(pl_oai_call *c, pl_oai_choice *ch)
{
    size_t n = ch->text ? evbuffer_get_length(ch->text) : 0;
    if (!pl_oai_tools_active(&c->p) || ch->tool_state == PL_TOOLS_TEXT || !n)
        return false;
    const char *t = (const char *)evbuffer_pullup(ch->text, -1);
    pl_oai_tool_reply r;
    pl_oai_tools_reply(&c->p, t, n, ch->finish, &r);
    pl_oai_tools_put_end(&c->p, pl_sse_buf(c->sse), prefix_of(c), ch->index, &r, t, n,
                         &ch->text_offset);
    pl_oai_tool_reply_free(&r);
    return true;
}

static void chat_stream_choice_end(pl_oai_call *c, pl_oai_choice *ch, const pl_result *r)
{
    if (ch->up_tool_finish)
        pl_oai_put_tool_finish_chunk(pl_sse_buf(c->sse), prefix_of(c), ch->index,
                                     c->p.legacy_functions ? "function_call" : "tool_calls");
    else if (!finish_held(c, ch))
        pl_oai_put_finish_chunk(pl_sse_buf(c->sse), prefix_of(c), c->p.chat, ch->index,
                                ch->finish);
}

static void chat_stream_end(pl_oai_call *c)
{
    if (c->failed)
        stream_send_json(c, pl_err_to_json(&c->error));
    else if (c->p.include_usage)
        stream_send_json(c, pl_oai_reply_json(c->id, c->p.chat, c->created, c->model->name,
                                              NULL, &c->usage));
    evbuffer_add(pl_sse_buf(c->sse), "data: [DONE]\n\n", 14);
}

/* ---- non-streaming ---- */

static json_t *reasoning_json(pl_oai_choice *ch)
{
    size_t n = evbuffer_get_length(ch->reasoning);
    const char *t = (const char *)evbuffer_pullup(ch->reasoning, -1);
    return ch->reasoning_shown ? pl_json_string_lossy(n ? t : "", n) : json_null();
}

static json_t *choice_json(pl_oai_call *c, pl_oai_choice *ch)
{
    size_t len = evbuffer_get_length(ch->text);
    const char *text = (const char *)evbuffer_pullup(ch->text, -1);
    json_t *lp = ch->lp.arr[0] ? pl_oai_logprobs_json(&ch->lp) : json_null();
    if ((len && !text) || !lp) {
        json_decref(lp);
        return NULL;
    }
    json_t *o = pl_oai_choice_json(c->p.chat, ch->index, text, len, lp, ch->finish);
    if (o && pl_oai_tools_active(&c->p)) {   /* calls, and what is left as content */
        pl_oai_tool_reply r;
        pl_oai_tools_reply(&c->p, text, len, ch->finish, &r);
        pl_oai_tools_set_message(&c->p, o, &r);
        pl_oai_tool_reply_free(&r);
    }
    if (o && ch->up_calls) {       /* the upstream's calls, as it sent them */
        size_t i;
        json_t *call, *msg = json_object_get(o, "message");
        json_array_foreach(ch->up_calls, i, call)
            json_object_del(call, "index");
        if (!len)
            json_object_set_new(msg, "content", json_null());
        json_object_set(msg, "tool_calls", ch->up_calls);
        if (ch->up_tool_finish)
            json_object_set_new(o, "finish_reason", json_string("tool_calls"));
        if (c->p.legacy_functions)
            pl_oai_tools_legacy_message(o);
    }
    if (o && ch->split)            /* vLLM's reasoning_content: a string or null */
        json_object_set_new(json_object_get(o, "message"), "reasoning_content",
                            reasoning_json(ch));
    return o;
}

static json_t *chat_reply(pl_oai_call *c)
{
    json_t *choices = json_array();
    for (int i = 0; choices && i < c->n_choices; i++) {
        if (json_array_append_new(choices, choice_json(c, &c->choices[i])) < 0) {
            json_decref(choices);
            choices = NULL;
        }
    }
    return choices ? pl_oai_reply_json(c->id, c->p.chat, c->created, c->model->name, choices,
                                       &c->usage)
                   : NULL;
}

static const pl_oai_format chat_format = {
    .prepare = chat_prepare,
    .stream_begin = chat_stream_begin,
    .stream_delta = chat_stream_delta,
    .stream_reasoning = chat_stream_reasoning,
    .stream_tool_delta = chat_stream_tool_delta,
    .stream_choice_end = chat_stream_choice_end,
    .stream_end = chat_stream_end,
    .reply = chat_reply,
    .free_ep = ep_free,
};

/* ---- the handler ---- */

static void handle(pl_server *s, struct evhttp_request *req, bool chat)
{
    pl_err err;
    pl_oai_params p;
    json_t *body = pl_read_json_body(req, pl_server_get_opts(s)->max_body_bytes);
    if (!body)
        return;   /* replied */
    if (pl_oai_parse(body, chat, &p, &err) < 0)
        goto fail_params;
    pl_model_entry *m = pl_server_find_model(s, p.model);
    if (!m) {
        pl_err_set(&err, 404, "invalid_request_error", "model", "model_not_found",
                   "The model '%s' does not exist", p.model);
        goto fail_params;
    }
    pl_embed_info ei;
    if (pl_backend_embed_info(m->backend, &ei) == 0) {
        pl_err_set(&err, 400, "invalid_request_error", "model", "model_not_generative",
                   "The model '%s' is an embedding model: it serves POST /v1/embeddings and "
                   "does not generate text", p.model);
        goto fail_params;
    }
    pl_sampling_apply_model_defaults(&p.sampling, body, m->backend->sampling_defaults);
    if (pl_oai_tools_prepare(&p, body, m->backend, &err) < 0 ||
        pl_oai_reasoning_prepare(&p, m->backend, &err) < 0)
        goto fail_params;
    chat_ep *e = calloc(1, sizeof *e);
    if (!e) {
        pl_err_set(&err, 500, "server_error", NULL, NULL, "out of memory");
        goto fail_params;
    }
    pl_oai_call_opts o = {.s = s, .req = req, .body = body, .p = &p, .model = m,
                          .id_prefix = chat ? "chatcmpl-" : "cmpl-", .fmt = &chat_format,
                          .ep = e};
    if (pl_oai_call_start(&o, &err) < 0)
        pl_reply_error(req, &err);   /* the core freed body, p and e */
    return;
fail_params:
    pl_oai_params_free(&p);
    pl_reply_error(req, &err);
    json_decref(body);
}

static void chat_route(pl_server *s, struct evhttp_request *req, const char *path, void *ud)
{
    handle(s, req, true);
}

static void completions_route(pl_server *s, struct evhttp_request *req, const char *path,
                              void *ud)
{
    handle(s, req, false);
}

void pl_oai_chat_register(pl_server *s)
{
    pl_server_add_route(s, "/v1/chat/completions", PL_HTTP_POST, chat_route, NULL);
    pl_server_add_route(s, "/v1/completions", PL_HTTP_POST, completions_route, NULL);
}
