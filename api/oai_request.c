/* oai_request.c - the OpenAI request core: admission through the model's
 * dispatch, the backend sinks, the client (close, backpressure), tool-call
 * holding, the end of a call. See oai_request.h. */
#include "api/oai_request.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/access_log.h"
#include "api/oai_reasoning.h"
#include "api/oai_tools.h"
#include "api/respond.h"

static void set_oom(pl_err *e)
{
    pl_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
}

static void call_free(pl_oai_call *c)
{
    pl_server_call_end(c->s);
    pl_server_charge_tokens(c->s, c->key,
                            (long)c->usage.prompt_tokens + c->usage.completion_tokens);
    for (int i = 0; i < c->n_choices; i++) {
        pl_oai_choice *ch = &c->choices[i];
        pl_dispatch_remove(c->model->dispatch, &ch->dr);   /* if still queued */
        if (ch->text)
            evbuffer_free(ch->text);
        if (ch->reasoning)
            evbuffer_free(ch->reasoning);
        free(ch->split);
        pl_oai_logprobs_free(&ch->lp);
        json_decref(ch->up_calls);
    }
    if (c->fmt->free_ep)
        c->fmt->free_ep(c->ep);
    pl_oai_params_free(&c->p);
    json_decref(c->body);
    free(c);
}

/* The first failure is the one the client hears of. */
static void call_fail(pl_oai_call *c, const pl_err *e)
{
    if (c->failed)
        return;
    c->failed = true;
    c->error = *e;
}

/* A choice ended: its slot on the model's dispatch goes to whoever is next
 * (jobs back off while interactive requests run). */
static void choice_release(pl_oai_call *c, pl_oai_choice *ch)
{
    if (!ch->active)
        return;
    ch->active = false;
    pl_dispatch_done(c->model->dispatch, &ch->dr, 0);
    pl_dispatch_pump(c->model->dispatch);
}

/* Stop every choice: queued ones leave the dispatch, running ones are
 * aborted (their sinks are never called again). */
static void call_abort_all(pl_oai_call *c)
{
    for (int i = 0; i < c->n_choices; i++) {
        pl_oai_choice *ch = &c->choices[i];
        pl_dispatch_remove(c->model->dispatch, &ch->dr);
        if (ch->active) {
            pl_backend_abort(c->model->backend, ch->id);
            choice_release(c, ch);
        }
    }
}

/* ---- the end ---- */

static void reply_end(pl_oai_call *c)
{
    pl_unwatch_close(c->req, c->watch);
    c->watch = NULL;
    json_t *o = c->failed ? NULL : c->fmt->reply(c);
    if (o) {
        pl_reply_json(c->req, 200, o);
        return;
    }
    if (!c->failed)
        set_oom(&c->error);
    pl_reply_error(c->req, &c->error);
}

/* Every choice is done (or the call failed and none runs): the last
 * events or the whole reply, then free. */
static void call_end(pl_oai_call *c)
{
    if (c->req)
        pl_access_usage(c->req, c->usage.prompt_tokens, c->usage.completion_tokens);
    if (c->sse) {
        if (c->fmt->stream_end)
            c->fmt->stream_end(c);
        pl_sse_flush(c->sse);
        pl_sse_end(c->sse);
        c->sse = NULL;
    } else {
        reply_end(c);
    }
    call_free(c);
}

/* Fail the call now: stop every choice and end it. */
static void call_die(pl_oai_call *c, const pl_err *e)
{
    call_fail(c, e);
    call_abort_all(c);
    call_end(c);
}

static void call_die_oom(pl_oai_call *c)
{
    pl_err e;
    set_oom(&e);
    call_die(c, &e);
}

/* ---- the client ---- */

static void on_client_close(void *ud)
{
    pl_oai_call *c = ud;
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
    pl_oai_call *c = ud;
    pl_backend *b = c->model->backend;
    for (int i = 0; i < c->n_choices; i++)
        if (c->choices[i].active && b->ops->set_paused)
            b->ops->set_paused(b, c->choices[i].id, paused);
}

/* Start the SSE stream and the format's first events. -1 on out of
 * memory, nothing sent. */
static int stream_start(pl_oai_call *c)
{
    if (c->watch) {
        pl_unwatch_close(c->req, c->watch);
        c->watch = NULL;
    }
    pl_sse_cbs cbs = {on_client_close, on_pause, c};
    c->sse = pl_sse_start(c->s, c->req, pl_server_get_opts(c->s)->stream_buffer_bytes, cbs);
    if (!c->sse)
        return -1;
    if (c->fmt->stream_begin)
        c->fmt->stream_begin(c);
    return 0;
}

/* A deferred stream starts at its first output; out of memory ends the
 * call with an error reply. Returns false when c is gone. */
static bool stream_ensure(pl_oai_call *c)
{
    if (c->sse || !c->p.stream)
        return true;
    if (stream_start(c) == 0)
        return true;
    call_die_oom(c);
    return false;
}

/* Start the reply: the stream, or the client-close watch (non-stream, and
 * streams on backends with late errors until their first output). -1 on
 * out of memory, nothing sent. */
static int reply_start(pl_oai_call *c)
{
    if (c->p.stream && !c->model->backend->ops->late_errors)
        return stream_start(c);
    c->watch = pl_watch_close(c->req, on_client_close, c);
    return c->watch ? 0 : -1;
}

/* ---- the sinks ---- */

enum { HOLD_NO = 0, HOLD_YES, HOLD_GONE };

/* Stream with tools: the text so far (ch->text) is held back while it may
 * be a call; once it cannot be, it goes out as content (PL_TOOLS_TEXT). */
static int hold_for_tools(pl_oai_call *c, pl_oai_choice *ch)
{
    if (ch->tool_state == PL_TOOLS_TEXT || !pl_oai_tools_active(&c->p))
        return HOLD_NO;
    if (ch->tool_state == PL_TOOLS_HOLD)
        return HOLD_YES;
    size_t n = evbuffer_get_length(ch->text);
    const char *t = (const char *)evbuffer_pullup(ch->text, -1);
    if (n && !t) {
        call_die_oom(c);
        return HOLD_GONE;
    }
    ch->tool_state = pl_oai_tools_classify(&c->p, t, n);
    if (ch->tool_state != PL_TOOLS_TEXT)
        return HOLD_YES;          /* a call, or still undecided */
    pl_delta all = {.text = t, .len = n};
    c->fmt->stream_delta(c, ch, &all);
    pl_sse_flush(c->sse);
    return HOLD_YES;
}

/* What the end needs of d: the text, logprobs, an upstream's calls.
 * -1 on out of memory. */
static int keep_delta(pl_oai_call *c, pl_oai_choice *ch, const pl_delta *d, bool calls_live)
{
    if (d->n_tool_calls && !calls_live &&
        pl_oai_merge_tool_deltas(&ch->up_calls, d->tool_calls, d->n_tool_calls) < 0)
        return -1;
    if (d->len && ch->text && evbuffer_add(ch->text, d->text, d->len) < 0)
        return -1;
    if (!c->p.stream && ch->lp.arr[0])
        pl_oai_logprobs_add(&ch->lp, d, &ch->text_offset);
    return 0;
}

/* A delta's content (and tool-call fragments): kept, held while it may be
 * a call, streamed. Returns false when c is gone. */
static bool deliver(pl_oai_call *c, pl_oai_choice *ch, const pl_delta *d)
{
    bool calls_live = c->p.stream && c->fmt->stream_tool_delta;
    if (keep_delta(c, ch, d, calls_live) < 0) {
        call_die_oom(c);
        return false;
    }
    if (!c->p.stream || !(d->len || d->logprobs || (d->n_tool_calls && calls_live)))
        return true;
    if (!stream_ensure(c))
        return false;
    if (d->len) {
        int h = hold_for_tools(c, ch);
        if (h != HOLD_NO)
            return h != HOLD_GONE;
    }
    if (d->len || d->logprobs)
        c->fmt->stream_delta(c, ch, d);
    if (d->n_tool_calls && calls_live)
        c->fmt->stream_tool_delta(c, ch, d);
    pl_sse_flush(c->sse);
    return true;
}

/* A delta's reasoning text: kept, streamed. False when c is gone. */
static bool deliver_reasoning(pl_oai_call *c, pl_oai_choice *ch, const pl_delta *d)
{
    if (ch->reasoning && evbuffer_add(ch->reasoning, d->text, d->len) < 0) {
        call_die_oom(c);
        return false;
    }
    if (!c->p.stream || !c->fmt->stream_reasoning)
        return true;
    if (!stream_ensure(c))
        return false;
    c->fmt->stream_reasoning(c, ch, d);
    pl_sse_flush(c->sse);
    return true;
}

/* A split delta's pieces; the first text piece of a stream carries the
 * delta's logprobs (non-stream logprobs are kept whole, beforehand). */
typedef struct piece_ctx {
    pl_oai_call *c;
    pl_oai_choice *ch;
    const pl_delta *d;           /* NULL at the end */
    bool lp_sent;
} piece_ctx;

static bool on_piece(void *ud, const pl_reply_piece *p)
{
    piece_ctx *x = ud;
    pl_delta d = {.text = p->text, .len = p->len};
    pl_tool_call_delta t = {.index = p->index};
    char id[40];
    if (p->kind == PL_REPLY_PIECE_CALL_BEGIN) {
        pl_oai_call_id(id, sizeof id);
        t.id = id;
        t.name = p->name;
    } else if (p->kind == PL_REPLY_PIECE_CALL_ARGS) {
        t.arguments = p->text;
        t.arguments_len = p->len;
    } else if (!x->lp_sent) {
        d.tokens = x->d->tokens;
        d.n_tokens = x->d->n_tokens;
        d.logprobs = x->d->logprobs;
        x->lp_sent = true;
    }
    if (p->kind == PL_REPLY_PIECE_REASONING)
        return deliver_reasoning(x->c, x->ch, &d);
    if (p->kind != PL_REPLY_PIECE_CONTENT)
        d = (pl_delta){.tool_calls = &t, .n_tool_calls = 1};
    return deliver(x->c, x->ch, &d);
}

static void split_delta(pl_oai_call *c, pl_oai_choice *ch, const pl_delta *d)
{
    if (!c->p.stream && ch->lp.arr[0])
        pl_oai_logprobs_add(&ch->lp, d, &ch->text_offset);
    piece_ctx x = {c, ch, d, !c->p.stream || !d->logprobs};
    if (!pl_reply_split_feed(ch->split, d->text, d->len, d->n_tokens, on_piece, &x))
        return;
    if (!x.lp_sent) {             /* only tags or headers: the logprobs alone */
        pl_delta e = {.text = "", .tokens = d->tokens, .n_tokens = d->n_tokens,
                      .logprobs = d->logprobs};
        deliver(c, ch, &e);
    }
}

/* The reply ended well: what the split held back, the reasoning tokens,
 * the calls' finish, and a whole qwen3 reply settled as vLLM settles it.
 * False when c is gone. */
static bool split_end(pl_oai_call *c, pl_oai_choice *ch)
{
    piece_ctx x = {c, ch, NULL, true};
    /* max_tokens cut a call's arguments (calls in the reply's channels):
     * the complete calls stay, the cut one is dropped from a whole reply
     * (a stream has sent its bytes), and the finish is "length" (as for
     * the other formats) */
    bool cut_call = ch->split->in_call && ch->finish == PL_FINISH_LENGTH;
    if (!pl_reply_split_finish(ch->split, on_piece, &x))
        return false;
    c->usage.reasoning_tokens += ch->split->reasoning_tokens;
    if (ch->split->n_calls && !cut_call)
        ch->up_tool_finish = true;
    if (cut_call && !c->p.stream && ch->up_calls) {
        json_array_remove(ch->up_calls, json_array_size(ch->up_calls) - 1);
        if (!json_array_size(ch->up_calls)) {
            json_decref(ch->up_calls);
            ch->up_calls = NULL;
        }
    }
    pl_reply_settled st = pl_reply_split_settle(ch->split);
    size_t nr = ch->reasoning ? evbuffer_get_length(ch->reasoning) : 0;
    ch->reasoning_shown = st.has_reasoning || nr > 0 ||
                          (c->p.stream && ch->split->saw_open);
    if (c->p.stream || !ch->text)
        return true;
    evbuffer_drain(ch->text, st.content_skip);
    if (st.rejoin && (evbuffer_add(ch->text, "<think>", 7) < 0 ||
                      evbuffer_add_buffer(ch->text, ch->reasoning) < 0)) {
        call_die_oom(c);
        return false;
    }
    ch->reasoning_shown &= !st.rejoin;
    return true;
}

static void on_delta(void *ud, const pl_delta *d)
{
    pl_oai_choice *ch = ud;
    if (ch->split)
        split_delta(ch->call, ch, d);
    else
        deliver(ch->call, ch, d);
}

static void on_done(void *ud, const pl_result *r)
{
    pl_oai_choice *ch = ud;
    pl_oai_call *c = ch->call;
    choice_release(c, ch);
    ch->finish = r->finish;
    ch->up_tool_finish = r->tool_calls;
    ch->stop_index = r->stop_index;
    c->usage.completion_tokens += r->completion_tokens;
    if (ch->index % c->p.n == 0) {  /* each prompt counts once, as OpenAI counts */
        c->usage.prompt_tokens += r->prompt_tokens;
        c->usage.cached_tokens += r->cached_tokens;
    }
    if (r->finish == PL_FINISH_ERROR || r->finish == PL_FINISH_ABORT) {
        pl_err e;
        if (r->error)
            e = *r->error;
        else
            pl_err_set(&e, 503, "server_error", NULL, NULL, "the backend stopped the request");
        call_fail(c, &e);
        call_abort_all(c);
    } else if (ch->split && !c->failed && !split_end(c, ch)) {
        return;
    } else if (c->p.stream && !c->failed) {
        if (!stream_ensure(c))
            return;
        if (c->fmt->stream_choice_end)
            c->fmt->stream_choice_end(c, ch, r);
        pl_sse_flush(c->sse);
    }
    if (++c->n_done < c->n_choices && !c->failed)
        return;
    for (int i = 0; i < c->n_choices; i++)
        if (c->choices[i].active)
            return;
    call_end(c);
}

/* ---- admission ---- */

/* The backend request of choice i: prompt i / n, and a seed of its own. */
static void choice_request(pl_oai_call *c, int i, pl_gen_request *r)
{
    pl_oai_to_request(&c->p, r);
    r->oai_body = c->body;       /* a remote backend passes the rest through */
    r->conversation_key = pl_oai_prompt_cache_key(c->body);
    pl_oai_request_prompt(&c->p, i / c->p.n, r);
    if (c->p.sampling.has_seed) {
        r->sampling.seed = c->p.sampling.seed + (uint64_t)(i % c->p.n);
    } else if (c->p.n > 1) {
        /* Choices without a seed must differ from each other. */
        r->sampling.has_seed = true;
        r->sampling.seed = ((uint64_t)rand() << 32 ^ (uint64_t)rand()) + (uint64_t)i;
    }
}

/* The dispatch admitted ch: submit it. A refusal ends its admission and
 * fails the call: inside pl_oai_call_start its caller replies; later (an
 * admission that waited) it ends like any failed choice. */
static void choice_submit(void *ud, pl_dispatch_req *dr)
{
    pl_oai_choice *ch = ud;
    pl_oai_call *c = ch->call;
    pl_gen_request r;
    pl_err err = {0};
    if (c->failed) {             /* another choice was refused: no use */
        pl_dispatch_done(c->model->dispatch, dr, 0);
        return;
    }
    choice_request(c, ch->index, &r);
    pl_sink sink = {on_delta, on_done, ch};
    if (pl_backend_submit(c->model->backend, &r, sink, &ch->id, &err) == 0) {
        ch->active = true;
        return;
    }
    pl_dispatch_done(c->model->dispatch, dr, 0);
    if (c->started) {
        pl_result res = {.finish = PL_FINISH_ERROR, .error = &err};
        on_done(ch, &res);
        return;
    }
    call_fail(c, &err);
}

/* The buffers each choice needs; -1 on out of memory. */
static int choice_alloc(pl_oai_call *c, pl_oai_choice *ch, bool keep_text)
{
    if (keep_text || !c->p.stream || pl_oai_tools_active(&c->p))
        if (!(ch->text = evbuffer_new()))
            return -1;
    if (c->p.chat && c->p.reasoning_fmt) {
        if (!(ch->split = malloc(sizeof *ch->split)))
            return -1;
        pl_reply_split_init(ch->split, c->p.reasoning_fmt,
                          c->p.tools_native && c->p.tools &&
                              c->p.tool_choice != PL_TOOL_CHOICE_NONE,
                          c->p.thinking);
        if ((keep_text || !c->p.stream) && !(ch->reasoning = evbuffer_new()))
            return -1;
    }
    if (!c->p.stream && c->p.sampling.logprobs && pl_oai_logprobs_init(&ch->lp, c->p.chat) < 0)
        return -1;
    return 0;
}

/* Queue every choice on the model's dispatch and pump: interactive
 * requests are admitted at once. On failure every choice is stopped. */
static int call_admit(pl_oai_call *c, pl_err *err)
{
    pl_dispatch *d = c->model->dispatch;
    for (int i = 0; i < c->n_choices; i++) {
        pl_oai_choice *ch = &c->choices[i];
        ch->dr = (pl_dispatch_req){.submit = choice_submit, .ud = ch};
        if (pl_dispatch_push(d, PL_DISPATCH_INTERACTIVE, &ch->dr) < 0) {
            set_oom(err);
            goto fail;
        }
    }
    pl_dispatch_pump(d);
    if (!c->failed)
        return 0;
    *err = c->error;
fail:
    call_abort_all(c);
    return -1;
}

static pl_oai_call *call_new(const pl_oai_call_opts *o)
{
    int n = pl_oai_n_choices(o->p);
    pl_oai_call *c = calloc(1, sizeof *c + (size_t)n * sizeof(pl_oai_choice));
    if (!c)
        return NULL;
    c->s = o->s;
    c->req = o->req;
    c->body = o->body;
    c->p = *o->p;
    memset(o->p, 0, sizeof *o->p);
    c->model = o->model;
    c->fmt = o->fmt;
    c->ep = o->ep;
    c->n_choices = n;
    c->created = (int64_t)time(NULL);
    c->key = pl_server_current_key(o->s);
    pl_server_new_id(o->s, o->id_prefix, c->id, sizeof c->id);
    pl_server_call_begin(o->s);
    for (int i = 0; i < n; i++)
        c->choices[i] = (pl_oai_choice){.call = c, .index = i};
    return c;
}

int pl_oai_call_start(const pl_oai_call_opts *o, pl_err *err)
{
    pl_oai_call *c = call_new(o);
    if (!c) {
        pl_oai_params_free(o->p);
        json_decref(o->body);
        if (o->fmt->free_ep)
            o->fmt->free_ep(o->ep);
        set_oom(err);
        return -1;
    }
    for (int i = 0; i < c->n_choices; i++)
        if (choice_alloc(c, &c->choices[i], o->keep_text) < 0)
            goto oom;
    if (c->fmt->prepare && c->fmt->prepare(c) < 0)
        goto oom;
    /* Submit before any reply goes out, so a backend refusal still gets
     * its own status; backends never call the sink from inside submit. */
    if (call_admit(c, err) < 0)
        goto fail;
    if (reply_start(c) < 0) {
        call_abort_all(c);   /* the sinks are never called after abort */
        goto oom;
    }
    c->started = true;
    return 0;
oom:
    set_oom(err);
fail:
    call_free(c);
    return -1;
}

json_t *pl_oai_choice_settle_calls(pl_oai_call *c, pl_oai_choice *ch)
{
    json_t *calls = ch->up_calls;
    ch->up_calls = NULL;
    if (calls || !pl_oai_tools_active(&c->p) || ch->tool_state == PL_TOOLS_TEXT)
        return calls;
    size_t n = evbuffer_get_length(ch->text);
    const char *t = (const char *)evbuffer_pullup(ch->text, -1);
    pl_oai_tool_reply r;
    pl_oai_tools_reply(&c->p, t, n, ch->finish, &r);
    if (!r.text_is_content) {
        evbuffer_drain(ch->text, n);
        if (r.content)
            evbuffer_add(ch->text, r.content, strlen(r.content));
        calls = r.calls;
        r.calls = NULL;
    }
    pl_oai_tool_reply_free(&r);
    return calls;
}
