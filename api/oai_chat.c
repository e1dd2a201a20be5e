/* oai_chat.c - POST /v1/chat/completions and POST /v1/completions: the
 * request lifecycle (parse, submit, sinks, streaming, client disconnect).
 *
 * One call context per HTTP request; n choices become n backend requests.
 * The OpenAI wire encoding lives in api/oai_wire.c. Every allocation a
 * request needs is made before the reply starts, so the token path
 * allocates nothing and out-of-memory is a 500 JSON error, not a crash.
 */
#include "api/oai_chat.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/access_log.h"
#include "api/oai_params.h"
#include "api/oai_tools.h"
#include "api/oai_wire.h"
#include "api/respond.h"
#include "api/sse.h"
#include "schedulers/dispatch.h"
#include "src/base/log.h"

typedef struct oai_call oai_call;

typedef struct oai_choice {
    oai_call *call;
    int index;
    pl_dispatch_req dr;          /* its admission (the model's dispatch) */
    uint64_t id;                 /* backend request id */
    bool active;                 /* submitted and not done */
    pl_finish finish;
    struct evbuffer *text;       /* non-stream: the whole text */
    pl_oai_logprobs lp;          /* non-stream, logprobs requested */
    size_t text_offset;          /* completions logprobs text_offset */
    struct evbuffer *held;       /* stream with tools: text that may be a call */
    int tool_state;              /* stream with tools: 0 undecided, 1 content,
                                    2 holding a call */
    json_t *up_calls;            /* non-stream: the upstream's tool calls */
    bool up_tool_finish;         /* the upstream finished with "tool_calls" */
} oai_choice;

struct oai_call {
    pl_server *s;
    struct evhttp_request *req;  /* NULL once the client is gone */
    json_t *body;
    pl_oai_params p;
    pl_model_entry *model;
    char id[64];
    int64_t created;
    pl_sse *sse;
    pl_close_watch *watch;       /* non-stream: client-close watch */
    char *prefix;                /* stream chunk prefix up to "choices":[ */
    int n_done;
    int n_choices;               /* prompts x n (chat: n) */
    pl_oai_usage usage;
    int key;                     /* API key index, for the tokens-per-minute budget */
    pl_err error;
    bool failed;
    const pl_gen_request *submitting;    /* while call_submit pumps */
    oai_choice choices[];
};

static void call_free(oai_call *c)
{
    pl_server_call_end(c->s);
    pl_server_charge_tokens(c->s, c->key,
                            (long)c->usage.prompt_tokens + c->usage.completion_tokens);
    for (int i = 0; i < c->n_choices; i++) {
        if (c->choices[i].text)
            evbuffer_free(c->choices[i].text);
        if (c->choices[i].held)
            evbuffer_free(c->choices[i].held);
        pl_oai_logprobs_free(&c->choices[i].lp);
        json_decref(c->choices[i].up_calls);
    }
    pl_oai_params_free(&c->p);
    json_decref(c->body);
    free(c->prefix);
    free(c);
}

/* A choice ended: its slot on the model's dispatch goes to whoever is
 * next (jobs back off while interactive requests run). */
static void choice_set_inactive(oai_call *c, oai_choice *ch)
{
    if (!ch->active)
        return;
    ch->active = false;
    pl_dispatch_done(c->model->dispatch, &ch->dr, 0);
    pl_dispatch_pump(c->model->dispatch);
}

static void call_abort_all(oai_call *c)
{
    for (int i = 0; i < c->n_choices; i++) {
        if (c->choices[i].active) {
            pl_backend_abort(c->model->backend, c->choices[i].id);
            choice_set_inactive(c, &c->choices[i]);
        }
    }
}

static void set_oom(pl_err *err)
{
    pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
}

/* ---- streaming ---- */

/* Send o (stolen) as one "data:" event; out-of-memory sends the error. */
static void stream_send_json(oai_call *c, json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\","
                                  "\"type\":\"server_error\",\"param\":null,\"code\":null}}";
        pl_sse_send_data(c->sse, oom, sizeof oom - 1);
        return;
    }
    pl_sse_send_data(c->sse, s, strlen(s));
    free(s);
}

static void stream_end(oai_call *c)
{
    if (c->req)
        pl_access_usage(c->req, c->usage.prompt_tokens, c->usage.completion_tokens);
    if (c->failed)
        stream_send_json(c, pl_err_to_json(&c->error));
    else if (c->p.include_usage)
        stream_send_json(c, pl_oai_reply_json(c->id, c->p.chat, c->created, c->model->name,
                                              NULL, &c->usage));
    evbuffer_add(pl_sse_buf(c->sse), "data: [DONE]\n\n", 14);
    pl_sse_flush(c->sse);
    pl_sse_end(c->sse);
    c->sse = NULL;
    call_free(c);
}

/* ---- non-streaming ---- */

static json_t *choice_json(oai_call *c, oai_choice *ch)
{
    size_t len = evbuffer_get_length(ch->text);
    const char *text = (const char *)evbuffer_pullup(ch->text, -1);
    json_t *lp = ch->lp.arr[0] ? pl_oai_logprobs_json(&ch->lp) : json_null();
    if ((len && !text) || !lp) {
        json_decref(lp);
        return NULL;
    }
    char *content = NULL;
    json_t *calls = pl_oai_tools_active(&c->p) && ch->finish == PL_FINISH_STOP
                        ? pl_oai_tools_parse_reply(&c->p, text, len, &content) : NULL;
    json_t *o = pl_oai_choice_json(c->p.chat, ch->index, text, len, lp, ch->finish);
    if (o && calls) {              /* the reply was a call: content is what is left */
        json_t *msg = json_object_get(o, "message");
        json_object_set_new(msg, "content",
                            content ? pl_json_string_lossy(content, strlen(content)) : json_null());
        json_object_set_new(msg, "tool_calls", calls);
        json_object_set_new(o, "finish_reason", json_string("tool_calls"));
        calls = NULL;
    }
    json_decref(calls);
    free(content);
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
    }
    return o;
}

static void reply_complete(oai_call *c)
{
    pl_access_usage(c->req, c->usage.prompt_tokens, c->usage.completion_tokens);
    pl_unwatch_close(c->req, c->watch);
    c->watch = NULL;
    if (c->failed)
        goto fail;
    json_t *choices = json_array();
    for (int i = 0; choices && i < c->n_choices; i++) {
        if (json_array_append_new(choices, choice_json(c, &c->choices[i])) < 0) {
            json_decref(choices);
            choices = NULL;
        }
    }
    json_t *r = choices ? pl_oai_reply_json(c->id, c->p.chat, c->created, c->model->name,
                                            choices, &c->usage)
                        : NULL;
    if (!r) {
        set_oom(&c->error);
        goto fail;
    }
    pl_reply_json(c->req, 200, r);
    call_free(c);
    return;
fail:
    pl_reply_error(c->req, &c->error);
    call_free(c);
}

/* ---- backend sink ---- */

/* Stream with tools: text that could start a call is held back; once it
 * cannot, it goes out as content (tool_state 1). */
static bool hold_for_tools(oai_call *c, oai_choice *ch, const pl_delta *d)
{
    if (ch->tool_state == PL_TOOLS_TEXT || !pl_oai_tools_active(&c->p))
        return false;
    evbuffer_add(ch->held, d->text, d->len);
    if (ch->tool_state == PL_TOOLS_HOLD)
        return true;
    ch->tool_state = pl_oai_tools_classify(&c->p, (const char *)evbuffer_pullup(ch->held, -1),
                                           evbuffer_get_length(ch->held));
    if (ch->tool_state != PL_TOOLS_TEXT)
        return true;              /* a call, or still undecided */
    size_t all = evbuffer_get_length(ch->held);
    pl_delta flush = {.text = (const char *)evbuffer_pullup(ch->held, -1), .len = all};
    pl_oai_put_delta_chunk(pl_sse_buf(c->sse), c->prefix, true, ch->index, &flush,
                           &ch->text_offset);
    evbuffer_drain(ch->held, all);
    pl_sse_flush(c->sse);
    return true;
}

/* Stream with tools, at the end: held text as calls, or as content. */
static bool finish_held(oai_call *c, oai_choice *ch)
{
    size_t n = ch->held ? evbuffer_get_length(ch->held) : 0;
    if (!pl_oai_tools_active(&c->p) || ch->tool_state == PL_TOOLS_TEXT || !n)
        return false;
    const char *t = (const char *)evbuffer_pullup(ch->held, -1);
    char *content = NULL;
    json_t *calls = ch->finish == PL_FINISH_STOP
                        ? pl_oai_tools_parse_reply(&c->p, t, n, &content) : NULL;
    struct evbuffer *b = pl_sse_buf(c->sse);
    pl_delta d = {.text = calls ? content : t, .len = calls ? (content ? strlen(content) : 0) : n};
    if (d.len)
        pl_oai_put_delta_chunk(b, c->prefix, true, ch->index, &d, &ch->text_offset);
    if (calls)
        pl_oai_put_tool_chunks(b, c->prefix, ch->index, calls);
    json_decref(calls);
    free(content);
    return calls != NULL;
}

static bool stream_ensure(oai_call *c);

static void on_delta(void *ud, const pl_delta *d)
{
    oai_choice *ch = ud;
    oai_call *c = ch->call;
    if ((d->len || d->logprobs || d->n_tool_calls) && !stream_ensure(c))
        return;
    if (c->sse) {
        if (d->len && hold_for_tools(c, ch, d))
            return;
        if (d->len || d->logprobs)
            pl_oai_put_delta_chunk(pl_sse_buf(c->sse), c->prefix, c->p.chat, ch->index, d,
                                   &ch->text_offset);
        if (d->n_tool_calls)
            pl_oai_put_tool_delta_chunk(pl_sse_buf(c->sse), c->prefix, ch->index,
                                        d->tool_calls, d->n_tool_calls);
        if (d->len || d->logprobs || d->n_tool_calls)
            pl_sse_flush(c->sse);
        return;
    }
    evbuffer_add(ch->text, d->text, d->len);
    if (ch->lp.arr[0])
        pl_oai_logprobs_add(&ch->lp, d, &ch->text_offset);
    if (d->n_tool_calls && !c->failed &&
        pl_oai_merge_tool_deltas(&ch->up_calls, d->tool_calls, d->n_tool_calls) < 0) {
        c->failed = true;
        set_oom(&c->error);
    }
}

static void on_done(void *ud, const pl_result *r)
{
    oai_choice *ch = ud;
    oai_call *c = ch->call;
    choice_set_inactive(c, ch);
    ch->finish = r->finish;
    ch->up_tool_finish = r->tool_calls;
    c->usage.completion_tokens += r->completion_tokens;
    if (ch->index % c->p.n == 0) {  /* each prompt counts once, as OpenAI counts */
        c->usage.prompt_tokens += r->prompt_tokens;
        c->usage.cached_tokens += r->cached_tokens;
    }
    if (r->finish == PL_FINISH_ERROR || r->finish == PL_FINISH_ABORT) {
        if (!c->failed) {
            c->failed = true;
            if (r->error)
                c->error = *r->error;
            else
                pl_err_set(&c->error, 503, "server_error", NULL, NULL,
                           "the backend stopped the request");
        }
        call_abort_all(c);
    } else if (c->p.stream) {
        if (!stream_ensure(c))
            return;
        if (r->tool_calls)
            pl_oai_put_tool_finish_chunk(pl_sse_buf(c->sse), c->prefix, ch->index);
        else if (!finish_held(c, ch))
            pl_oai_put_finish_chunk(pl_sse_buf(c->sse), c->prefix, c->p.chat, ch->index,
                                    ch->finish);
        pl_sse_flush(c->sse);
    }
    if (++c->n_done < c->n_choices && !c->failed)
        return;
    for (int i = 0; i < c->n_choices; i++)
        if (c->choices[i].active)
            return;
    if (c->sse)
        stream_end(c);
    else
        reply_complete(c);
}

/* ---- client gone / slow ---- */

static void on_client_close(void *ud)
{
    oai_call *c = ud;
    c->req = NULL;
    c->watch = NULL;
    call_abort_all(c);
    if (c->sse)
        pl_sse_free_closed(c->sse);
    c->sse = NULL;
    call_free(c);
}

static void on_pause(void *ud, bool paused)
{
    oai_call *c = ud;
    pl_backend_ops const *ops = c->model->backend->ops;
    for (int i = 0; i < c->n_choices; i++)
        if (c->choices[i].active && ops->set_paused)
            ops->set_paused(c->model->backend, c->choices[i].id, paused);
}

/* ---- the handler ---- */

/* Per-choice buffers of a non-streamed reply. Returns -1 on out-of-memory. */
static int choice_alloc(oai_call *c, oai_choice *ch)
{
    if (c->p.stream)
        return pl_oai_tools_active(&c->p) && !(ch->held = evbuffer_new()) ? -1 : 0;
    ch->text = evbuffer_new();
    if (!ch->text)
        return -1;
    if (c->p.sampling.logprobs && pl_oai_logprobs_init(&ch->lp, c->p.chat) < 0)
        return -1;
    return 0;
}

/* The model's dispatch admitted the choice (interactive requests go at
 * once): submit it. A refusal ends its admission and fails the call. */
static void choice_admitted(void *ud, pl_dispatch_req *dr)
{
    oai_choice *ch = ud;
    oai_call *c = ch->call;
    pl_sink sink = {on_delta, on_done, ch};
    if (pl_backend_submit(c->model->backend, c->submitting, sink, &ch->id, &c->error) == 0) {
        ch->active = true;
        return;
    }
    pl_dispatch_done(c->model->dispatch, dr, 0);
    c->failed = true;
}

/* Submit every choice; on failure abort the ones already submitted. */
static int call_submit(oai_call *c, pl_err *err)
{
    pl_gen_request r;
    pl_oai_to_request(&c->p, &r);
    r.oai_body = c->body;        /* a remote backend passes the rest through */
    r.conversation_key = pl_oai_prompt_cache_key(c->body);
    for (int i = 0; i < c->n_choices; i++) {
        oai_choice *ch = &c->choices[i];
        ch->call = c;
        ch->index = i;
        if (choice_alloc(c, ch) < 0) {
            set_oom(err);
            goto fail;
        }
        pl_oai_request_prompt(&c->p, i / c->p.n, &r);
        if (c->p.sampling.has_seed) {
            r.sampling.seed = c->p.sampling.seed + (uint64_t)(i % c->p.n);
        } else if (c->p.n > 1) {
            /* Choices without a seed must differ from each other. */
            r.sampling.has_seed = true;
            r.sampling.seed = ((uint64_t)rand() << 32 ^ (uint64_t)rand()) + (uint64_t)i;
        }
        ch->dr = (pl_dispatch_req){.submit = choice_admitted, .ud = ch};
        c->submitting = &r;
        if (pl_dispatch_push(c->model->dispatch, PL_DISPATCH_INTERACTIVE, &ch->dr) == 0)
            pl_dispatch_pump(c->model->dispatch);
        c->submitting = NULL;
        if (c->failed || !ch->active) {
            *err = c->error;
            goto fail;
        }
    }
    return 0;
fail:
    call_abort_all(c);
    return -1;
}

/* Start the SSE stream with the chat role chunks. Returns -1 on
 * out-of-memory, nothing sent. */
static int stream_start(oai_call *c)
{
    if (c->watch) {
        pl_unwatch_close(c->req, c->watch);
        c->watch = NULL;
    }
    pl_sse_cbs cbs = {on_client_close, on_pause, c};
    c->sse = pl_sse_start(c->s, c->req, pl_server_get_opts(c->s)->stream_buffer_bytes, cbs);
    if (!c->sse)
        return -1;
    for (int i = 0; c->p.chat && i < c->n_choices; i++) {
        pl_oai_put_role_chunk(pl_sse_buf(c->sse), c->prefix, i);
        pl_sse_flush(c->sse);
    }
    return 0;
}

/* Start the reply: the SSE stream, or the client-close watch (non-stream,
 * and streams on backends with late errors until their first token).
 * Returns -1 on out-of-memory, nothing sent. */
static int call_start_reply(oai_call *c)
{
    if (c->p.stream) {
        c->prefix = pl_oai_chunk_prefix(c->id, c->p.chat, c->created, c->model->name);
        if (!c->prefix)
            return -1;
        if (!c->model->backend->ops->late_errors)
            return stream_start(c);
    }
    c->watch = pl_watch_close(c->req, on_client_close, c);
    return c->watch ? 0 : -1;
}

/* A deferred stream starts at its first output; on out-of-memory the call
 * ends with an error reply. Returns false when c is gone. */
static bool stream_ensure(oai_call *c)
{
    if (c->sse || !c->p.stream)
        return true;
    if (stream_start(c) == 0)
        return true;
    call_abort_all(c);
    c->failed = true;
    set_oom(&c->error);
    reply_complete(c);
    return false;
}

static void handle(pl_server *s, struct evhttp_request *req, bool chat)
{
    pl_err err;
    pl_oai_params p;
    oai_call *c = NULL;
    json_t *body = pl_read_json_body(req, pl_server_get_opts(s)->max_body_bytes);
    if (!body)
        return;   /* replied */
    if (pl_oai_parse(body, chat, &p, &err) < 0)
        goto fail;
    pl_model_entry *m = pl_server_find_model(s, p.model);
    if (!m) {
        pl_err_set(&err, 404, "invalid_request_error", "model", "model_not_found",
                   "The model '%s' does not exist", p.model);
        goto fail;
    }
    c = calloc(1, sizeof *c + (size_t)pl_oai_n_choices(&p) * sizeof(oai_choice));
    if (!c) {
        set_oom(&err);
        goto fail;
    }
    c->s = s;
    pl_server_call_begin(s);
    c->key = pl_server_current_key(s);
    c->req = req;
    c->body = body;
    c->p = p;
    c->n_choices = pl_oai_n_choices(&p);
    c->model = m;
    c->created = (int64_t)time(NULL);
    pl_server_new_id(s, chat ? "chatcmpl-" : "cmpl-", c->id, sizeof c->id);
    if (pl_oai_tools_prepare(&c->p, body, m->backend, &err) < 0)
        goto fail;
    /* Submit before any reply goes out, so a backend refusal still gets its
     * own status; backends never call the sink from inside submit. */
    if (call_submit(c, &err) < 0)
        goto fail;
    if (call_start_reply(c) < 0) {
        call_abort_all(c);   /* the sinks are never called after abort */
        set_oom(&err);
        goto fail;
    }
    return;
fail:
    pl_reply_error(req, &err);
    if (c) {
        call_free(c);   /* owns body and p */
    } else {
        pl_oai_params_free(&p);
        json_decref(body);
    }
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
