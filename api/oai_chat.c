/* oai_chat.c - POST /v1/chat/completions and POST /v1/completions.
 *
 * One call context per HTTP request; n choices become n backend requests.
 * Streaming replies are composed straight into the SSE writer's buffer
 * (a per-request constant prefix plus the escaped delta), so the token path
 * does no JSON tree building and no allocation of its own.
 */
#include "api/oai_chat.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/oai_params.h"
#include "api/respond.h"
#include "api/sse.h"
#include "src/base/log.h"

/* Append a string literal without its NUL. */
#define ADD_LIT(b, lit) evbuffer_add((b), (lit), strlen(lit))

typedef struct oai_call oai_call;

typedef struct oai_choice {
    oai_call *call;
    int index;
    uint64_t id;                 /* backend request id */
    bool active;                 /* submitted and not done */
    pl_finish finish;
    struct evbuffer *text;       /* non-stream: the whole text */
    struct evbuffer *lp;         /* non-stream: logprobs entries, comma-joined */
    int completion_tokens;
    size_t text_offset;          /* completions logprobs text_offset */
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
    int prompt_tokens, cached_tokens, completion_tokens;
    pl_err error;
    bool failed;
    oai_choice choices[];
};

static void call_free(oai_call *c)
{
    for (int i = 0; i < c->p.n; i++) {
        if (c->choices[i].text)
            evbuffer_free(c->choices[i].text);
        if (c->choices[i].lp)
            evbuffer_free(c->choices[i].lp);
    }
    pl_oai_params_free(&c->p);
    json_decref(c->body);
    free(c->prefix);
    free(c);
}

static void call_abort_all(oai_call *c)
{
    for (int i = 0; i < c->p.n; i++) {
        if (c->choices[i].active) {
            c->choices[i].active = false;
            pl_backend_abort(c->model->backend, c->choices[i].id);
        }
    }
}

/* ---- logprobs as JSON text ---- */

/* JSON has no infinities: a masked token's -inf becomes OpenAI's -9999. */
static double lp_json(float lp)
{
    return isfinite(lp) ? (double)lp : -9999.0;
}

static void put_token_json(struct evbuffer *b, const char *tok, size_t len)
{
    ADD_LIT(b, "\"");
    pl_json_escape(b, tok, len);
    ADD_LIT(b, "\"");
}

static void put_bytes_json(struct evbuffer *b, const char *tok, size_t len)
{
    ADD_LIT(b, "[");
    for (size_t i = 0; i < len; i++)
        evbuffer_add_printf(b, i ? ",%u" : "%u", (unsigned char)tok[i]);
    ADD_LIT(b, "]");
}

/* One chat logprobs "content" entry. */
static void put_chat_logprob(struct evbuffer *b, const pl_token_logprob *lp)
{
    ADD_LIT(b, "{\"token\":");
    put_token_json(b, lp->token, lp->token_len);
    evbuffer_add_printf(b, ",\"logprob\":%.6g,\"bytes\":", lp_json(lp->logprob));
    put_bytes_json(b, lp->token, lp->token_len);
    ADD_LIT(b, ",\"top_logprobs\":[");
    for (int k = 0; k < lp->n_top; k++) {
        ADD_LIT(b, ",{\"token\":" + (k == 0));
        put_token_json(b, lp->top[k].token, lp->top[k].token_len);
        evbuffer_add_printf(b, ",\"logprob\":%.6g,\"bytes\":", lp_json(lp->top[k].logprob));
        put_bytes_json(b, lp->top[k].token, lp->top[k].token_len);
        ADD_LIT(b, "}");
    }
    ADD_LIT(b, "]}");
}

/* Completions logprobs for a run of tokens: the four parallel arrays. */
static void put_completion_logprobs(struct evbuffer *b, const pl_delta *d, size_t *offset)
{
    ADD_LIT(b, "{\"tokens\":[");
    for (int i = 0; i < d->n_tokens; i++) {
        if (i)
            ADD_LIT(b, ",");
        put_token_json(b, d->logprobs[i].token, d->logprobs[i].token_len);
    }
    ADD_LIT(b, "],\"token_logprobs\":[");
    for (int i = 0; i < d->n_tokens; i++)
        evbuffer_add_printf(b, i ? ",%.6g" : "%.6g", lp_json(d->logprobs[i].logprob));
    ADD_LIT(b, "],\"top_logprobs\":[");
    for (int i = 0; i < d->n_tokens; i++) {
        ADD_LIT(b, ",{" + (i == 0));
        for (int k = 0; k < d->logprobs[i].n_top; k++) {
            if (k)
                ADD_LIT(b, ",");
            put_token_json(b, d->logprobs[i].top[k].token, d->logprobs[i].top[k].token_len);
            evbuffer_add_printf(b, ":%.6g", lp_json(d->logprobs[i].top[k].logprob));
        }
        ADD_LIT(b, "}");
    }
    ADD_LIT(b, "],\"text_offset\":[");
    for (int i = 0; i < d->n_tokens; i++) {
        evbuffer_add_printf(b, i ? ",%zu" : "%zu", *offset);
        *offset += d->logprobs[i].token_len;
    }
    ADD_LIT(b, "]}");
}

/* ---- streaming ---- */

static void stream_begin_chunk(oai_call *c, struct evbuffer *b, int index)
{
    evbuffer_add(b, c->prefix, strlen(c->prefix));
    evbuffer_add_printf(b, "{\"index\":%d,", index);
}

static void stream_delta(oai_choice *ch, const pl_delta *d)
{
    oai_call *c = ch->call;
    struct evbuffer *b = pl_sse_buf(c->sse);
    stream_begin_chunk(c, b, ch->index);
    if (c->p.chat)
        ADD_LIT(b, "\"delta\":{\"content\":\"");
    else
        ADD_LIT(b, "\"text\":\"");
    pl_json_escape(b, d->text, d->len);
    if (c->p.chat)
        ADD_LIT(b, "\"},\"logprobs\":");
    else
        ADD_LIT(b, "\",\"logprobs\":");
    if (d->logprobs && c->p.chat) {
        ADD_LIT(b, "{\"content\":[");
        for (int i = 0; i < d->n_tokens; i++) {
            if (i)
                ADD_LIT(b, ",");
            put_chat_logprob(b, &d->logprobs[i]);
        }
        ADD_LIT(b, "]}");
    } else if (d->logprobs) {
        put_completion_logprobs(b, d, &ch->text_offset);
    } else {
        ADD_LIT(b, "null");
    }
    ADD_LIT(b, ",\"finish_reason\":null}]}\n\n");
    pl_sse_flush(c->sse);
}

static void stream_finish_choice(oai_choice *ch)
{
    oai_call *c = ch->call;
    struct evbuffer *b = pl_sse_buf(c->sse);
    stream_begin_chunk(c, b, ch->index);
    evbuffer_add_printf(b, "%s\"logprobs\":null,\"finish_reason\":\"%s\"}]}\n\n",
                        c->p.chat ? "\"delta\":{}," : "\"text\":\"\",",
                        pl_finish_name(ch->finish));
    pl_sse_flush(c->sse);
}

static json_t *usage_json(oai_call *c)
{
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", c->prompt_tokens,
                     "completion_tokens", c->completion_tokens, "total_tokens",
                     c->prompt_tokens + c->completion_tokens, "prompt_tokens_details",
                     "cached_tokens", c->cached_tokens);
}

static void stream_end(oai_call *c)
{
    if (c->failed) {
        json_t *e = pl_err_to_json(&c->error);
        char *s = json_dumps(e, JSON_COMPACT);
        pl_sse_send_data(c->sse, s, strlen(s));
        free(s);
        json_decref(e);
    } else if (c->p.include_usage) {
        json_t *u = json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", c->id, "object",
                              c->p.chat ? "chat.completion.chunk" : "text_completion",
                              "created", (json_int_t)c->created, "model", c->model->name,
                              "choices", "usage", usage_json(c));
        char *s = json_dumps(u, JSON_COMPACT);
        pl_sse_send_data(c->sse, s, strlen(s));
        free(s);
        json_decref(u);
    }
    ADD_LIT(pl_sse_buf(c->sse), "data: [DONE]\n\n");
    pl_sse_flush(c->sse);
    pl_sse_end(c->sse);
    c->sse = NULL;
    call_free(c);
}

/* ---- non-streaming ---- */

static json_t *choice_json(oai_call *c, oai_choice *ch)
{
    size_t len = evbuffer_get_length(ch->text);
    json_t *text = json_stringn((const char *)evbuffer_pullup(ch->text, -1), len);
    if (!text)
        text = json_string("");
    json_t *lp = json_null();
    if (ch->lp) {
        size_t n = evbuffer_get_length(ch->lp);
        evbuffer_add(ch->lp, "", 1);
        char *raw = (char *)evbuffer_pullup(ch->lp, -1);
        json_t *arr;
        if (c->p.chat) {
            char *wrapped = malloc(n + 3);
            snprintf(wrapped, n + 3, "[%s]", raw);
            arr = json_loads(wrapped, 0, NULL);
            free(wrapped);
            lp = json_pack("{s:o}", "content", arr ? arr : json_array());
        } else {
            lp = json_loads(raw, 0, NULL);
            if (!lp)
                lp = json_null();
        }
    }
    const char *fr = pl_finish_name(ch->finish);
    if (c->p.chat)
        return json_pack("{s:i, s:{s:s, s:o}, s:o, s:s?}", "index", ch->index, "message",
                         "role", "assistant", "content", text, "logprobs", lp,
                         "finish_reason", fr);
    return json_pack("{s:i, s:o, s:o, s:s?}", "index", ch->index, "text", text, "logprobs",
                     lp, "finish_reason", fr);
}

static void reply_complete(oai_call *c)
{
    pl_unwatch_close(c->req, c->watch);
    c->watch = NULL;
    if (c->failed) {
        pl_reply_error(c->req, &c->error);
        call_free(c);
        return;
    }
    json_t *choices = json_array();
    for (int i = 0; i < c->p.n; i++)
        json_array_append_new(choices, choice_json(c, &c->choices[i]));
    json_t *r = json_pack("{s:s, s:s, s:I, s:s, s:o, s:o, s:n}", "id", c->id, "object",
                          c->p.chat ? "chat.completion" : "text_completion", "created",
                          (json_int_t)c->created, "model", c->model->name, "choices",
                          choices, "usage", usage_json(c), "system_fingerprint");
    pl_reply_json(c->req, 200, r);
    call_free(c);
}

/* Completions logprobs arrive per delta; merge them into one object. */
static void nonstream_logprobs(oai_choice *ch, const pl_delta *d)
{
    if (!ch->lp)
        ch->lp = evbuffer_new();
    if (ch->call->p.chat) {
        for (int i = 0; i < d->n_tokens; i++) {
            if (evbuffer_get_length(ch->lp))
                ADD_LIT(ch->lp, ",");
            put_chat_logprob(ch->lp, &d->logprobs[i]);
        }
        return;
    }
    /* Completions: rebuild the parallel arrays by re-parsing is wasteful;
     * keep one object per delta and merge at the end. */
    struct evbuffer *tmp = evbuffer_new();
    put_completion_logprobs(tmp, d, &ch->text_offset);
    evbuffer_add(tmp, "", 1);
    json_t *part = json_loads((const char *)evbuffer_pullup(tmp, -1), 0, NULL);
    evbuffer_free(tmp);
    json_t *acc = NULL;
    if (evbuffer_get_length(ch->lp)) {
        evbuffer_add(ch->lp, "", 1);
        acc = json_loads((const char *)evbuffer_pullup(ch->lp, -1), 0, NULL);
        evbuffer_drain(ch->lp, evbuffer_get_length(ch->lp));
    }
    if (!acc) {
        acc = part;
    } else if (part) {
        const char *k;
        json_t *v;
        json_object_foreach(part, k, v) json_array_extend(json_object_get(acc, k), v);
        json_decref(part);
    }
    char *s = acc ? json_dumps(acc, JSON_COMPACT) : NULL;
    if (s)
        evbuffer_add(ch->lp, s, strlen(s));
    free(s);
    json_decref(acc);
}

/* ---- backend sink ---- */

static void on_delta(void *ud, const pl_delta *d)
{
    oai_choice *ch = ud;
    oai_call *c = ch->call;
    if (c->sse) {
        if (d->len || d->logprobs)
            stream_delta(ch, d);
        return;
    }
    evbuffer_add(ch->text, d->text, d->len);
    if (d->logprobs && d->n_tokens)
        nonstream_logprobs(ch, d);
}

static void on_done(void *ud, const pl_result *r)
{
    oai_choice *ch = ud;
    oai_call *c = ch->call;
    ch->active = false;
    ch->finish = r->finish;
    ch->completion_tokens = r->completion_tokens;
    c->completion_tokens += r->completion_tokens;
    if (ch->index == 0 || !c->prompt_tokens) {
        c->prompt_tokens = r->prompt_tokens;
        c->cached_tokens = r->cached_tokens;
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
    } else if (c->sse) {
        stream_finish_choice(ch);
    }
    if (++c->n_done < c->p.n && !c->failed)
        return;
    for (int i = 0; i < c->p.n; i++)
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
    for (int i = 0; i < c->p.n; i++)
        if (c->choices[i].active && ops->set_paused)
            ops->set_paused(c->model->backend, c->choices[i].id, paused);
}

/* ---- the handler ---- */

static void build_prefix(oai_call *c)
{
    struct evbuffer *b = evbuffer_new();
    evbuffer_add_printf(b, "data: {\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":",
                        c->id, c->p.chat ? "chat.completion.chunk" : "text_completion",
                        (long long)c->created);
    put_token_json(b, c->model->name, strlen(c->model->name));
    ADD_LIT(b, ",\"choices\":[");
    size_t n = evbuffer_get_length(b);
    c->prefix = malloc(n + 1);
    evbuffer_remove(b, c->prefix, n);
    c->prefix[n] = '\0';
    evbuffer_free(b);
}

static void stream_role_chunks(oai_call *c)
{
    if (!c->p.chat)
        return;
    for (int i = 0; i < c->p.n; i++) {
        struct evbuffer *b = pl_sse_buf(c->sse);
        stream_begin_chunk(c, b, i);
        ADD_LIT(b, "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
                        "\"finish_reason\":null}]}\n\n");
        pl_sse_flush(c->sse);
    }
}

/* Submit every choice; on failure abort the ones already submitted. */
static int call_submit(oai_call *c, pl_err *err)
{
    pl_gen_request r;
    pl_oai_to_request(&c->p, &r);
    for (int i = 0; i < c->p.n; i++) {
        oai_choice *ch = &c->choices[i];
        ch->call = c;
        ch->index = i;
        if (!c->p.stream)
            ch->text = evbuffer_new();
        if (c->p.sampling.has_seed) {
            r.sampling.seed = c->p.sampling.seed + (uint64_t)i;
        } else if (c->p.n > 1) {
            /* Choices without a seed must differ from each other. */
            r.sampling.has_seed = true;
            r.sampling.seed = ((uint64_t)rand() << 32 ^ (uint64_t)rand()) + (uint64_t)i;
        }
        pl_sink sink = {on_delta, on_done, ch};
        if (pl_backend_submit(c->model->backend, &r, sink, &ch->id, err) < 0) {
            call_abort_all(c);
            return -1;
        }
        ch->active = true;
    }
    return 0;
}

static void handle(pl_server *s, struct evhttp_request *req, bool chat)
{
    json_t *body = pl_read_json_body(req, pl_server_get_opts(s)->max_body_bytes);
    if (!body)
        return;
    pl_oai_params p;
    pl_err err;
    if (pl_oai_parse(body, chat, &p, &err) < 0) {
        pl_oai_params_free(&p);
        json_decref(body);
        pl_reply_error(req, &err);
        return;
    }
    pl_model_entry *m = pl_server_find_model(s, p.model);
    if (!m) {
        pl_err_set(&err, 404, "invalid_request_error", "model", "model_not_found",
                   "The model '%s' does not exist", p.model);
        pl_oai_params_free(&p);
        json_decref(body);
        pl_reply_error(req, &err);
        return;
    }
    oai_call *c = calloc(1, sizeof *c + (size_t)p.n * sizeof(oai_choice));
    c->s = s;
    c->req = req;
    c->body = body;
    c->p = p;
    c->model = m;
    c->created = (int64_t)time(NULL);
    pl_server_new_id(s, chat ? "chatcmpl-" : "cmpl-", c->id, sizeof c->id);
    /* Submit before any reply goes out, so a backend refusal still gets its
     * own status; backends never call the sink from inside submit. */
    if (call_submit(c, &err) < 0) {
        pl_reply_error(req, &err);
        call_free(c);
        return;
    }
    if (p.stream) {
        build_prefix(c);
        pl_sse_cbs cbs = {on_client_close, on_pause, c};
        c->sse = pl_sse_start(req, pl_server_get_opts(s)->stream_buffer_bytes, cbs);
        stream_role_chunks(c);
        return;
    }
    c->watch = pl_watch_close(req, on_client_close, c);
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
