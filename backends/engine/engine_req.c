/* engine_req.c - messages and requests, the units the engine's channels
 * carry: a message's clear, free and queueing; a request's creation from
 * pl_gen_request (length checks, sampling copy, echo), its DONE, its
 * deferred free; the engine's clock.
 *
 * Threads: a request is made on the main thread or a prepare worker and
 * belongs to the engine thread from the inbox on; its DONE and deferred
 * free run there (asserted). Messages and queues are plain data: whoever
 * holds them (the channels lock the shared ones, engine_chan.c). */
#include "backends/engine/engine_req.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/engine/engine_kv.h"

double pl_engine_now_ms_(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- messages ---- */

void pl_engine_queue_push_(eng_queue *q, eng_msg *m)
{
    m->next = NULL;
    if (q->tail)
        q->tail->next = m;
    else
        q->head = m;
    q->tail = m;
}

void pl_engine_msg_free_(eng_msg *m)
{
    free(m->text);
    free(m->tokens);
    free(m->lp);
    free(m->top_ids);
    free(m->top_lp);
    free(m);
}

void pl_engine_queue_free_(eng_queue *q)
{
    eng_msg *m = q->head;
    while (m) {
        eng_msg *next = m->next;
        if (m->req)
            pl_engine_req_free_(m->req);
        pl_engine_msg_free_(m);
        m = next;
    }
    q->head = q->tail = NULL;
}

void pl_engine_msg_clear_(eng_msg *m)
{
    m->req = NULL;
    m->len = 0;
    m->n = 0;
    m->n_top = 0;
    m->has_logprobs = false;
    m->prompt = false;
    memset(&m->res, 0, sizeof m->res);
    m->next = NULL;
}

/* ---- requests ---- */

/* Echo: the prompt comes back first; with logprobs the runner scores every
 * prompt row (arrays for them here, NaN for the first token). */
static int echo_setup_(pl_engine *e, const pl_gen_request *req, eng_req *r, pl_err *err)
{
    r->echo = req->echo;
    r->score_only = req->echo && req->score_only;
    if (r->score_only)
        r->max_new = 1;          /* the sampled token is dropped */
    if (!req->echo || !req->sampling.logprobs)
        return 0;
    if (!e->runner->can_prompt_logprobs)
        return pl_err_set(err, 400, "invalid_request_error", "echo", "unsupported_parameter",
                          "echo with logprobs (prompt logprobs) is not supported by the %s "
                          "runner yet", e->runner->ops->name);
    int k = req->sampling.top_logprobs;
    k = k < 0 ? 0 : k > PL_MAX_TOP_LOGPROBS ? PL_MAX_TOP_LOGPROBS : k;
    size_t n = (size_t)r->n_prompt;
    r->n_top_prompt = k;
    r->plp = malloc(n * sizeof *r->plp);
    r->ptop_ids = calloc(n * (size_t)k + 1, sizeof *r->ptop_ids);
    r->ptop_lp = calloc(n * (size_t)k + 1, sizeof *r->ptop_lp);
    if (!r->plp || !r->ptop_ids || !r->ptop_lp)
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++)
        r->plp[i] = i ? 0.0f : NAN;
    return 0;
}

eng_req *pl_engine_req_new_(pl_engine *e, const pl_gen_request *req, int32_t *ids, int n,
                            const pl_token_fsm *fsm, pl_err *err)
{
    eng_req *r = NULL;
    if (pl_backend_check_length(req, n, e->max_len, err) < 0)
        goto fail;
    r = calloc(1, sizeof *r);
    if (!r || pl_sampling_copy(&r->sp, &req->sampling) < 0) {
        pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    r->fsm = fsm;
    fsm = NULL;
    if (r->fsm)
        r->sp.ignore_eos = false; /* the grammar decides where the end is allowed */
    r->prompt = ids;
    ids = NULL;
    r->n_prompt = n;
    r->max_new = req->sampling.max_tokens > 0 ? req->sampling.max_tokens : e->max_len - n;
    r->priority = req->priority;
    r->conv_key = req->conversation_key;
    r->reply_private = req->reply_private;
    if (echo_setup_(e, req, r, err) < 0)
        goto fail;
    return r;
fail:
    pl_token_fsm_release(fsm);
    free(ids);
    pl_engine_req_free_(r);
    return NULL;
}

void pl_engine_req_free_(eng_req *r)
{
    if (!r)
        return;
    free(r->prompt);
    free(r->plp);
    free(r->ptop_ids);
    free(r->ptop_lp);
    free(r->pending);
    pl_sampling_free(&r->sp);
    pl_token_fsm_release(r->fsm);
    if (r->done_msg)
        pl_engine_msg_free_(r->done_msg);
    free(r);
}

void pl_engine_req_defer_free_(pl_engine *e, eng_req *r)
{
    PL_ASSERT_ON_THREAD(&e->engine_role);
    r->free_after = e->n_launched;
    r->next = e->deferred;
    e->deferred = r;
}

void pl_engine_req_sweep_(pl_engine *e)
{
    PL_ASSERT_ON_THREAD(&e->engine_role);
    eng_req **pp = &e->deferred;
    while (*pp) {
        eng_req *r = *pp;
        if (r->free_after <= e->n_retired) {
            *pp = r->next;
            pl_engine_req_free_(r);
        } else {
            pp = &r->next;
        }
    }
}

void pl_engine_emit_done_(pl_engine *e, eng_req *r, pl_finish f,
                          const pl_err *err)
{
    PL_ASSERT_ON_THREAD(&e->engine_role);
    eng_msg *m = r->done_msg;
    if (!m)
        return;
    r->done_msg = NULL;
    pl_engine_msg_clear_(m);
    m->type = ENG_MSG_DONE;
    m->id = r->id;
    pl_batch_seq *s = r->seq;
    m->res.finish = f;
    m->res.prompt_tokens = r->n_prompt;
    m->res.completion_tokens = s ? pl_batch_seq_generated(s) : 0;
    m->res.cached_tokens = s && s->n_cached > 0 ? s->n_cached : 0;
    m->res.queue_ms = r->t_sched > 0 ? r->t_sched - r->t_submit : 0;
    m->res.ttft_ms = r->t_first > 0 ? r->t_first - r->t_submit : 0;
    m->res.stop_index = f == PL_FINISH_STOP ? r->stop_index : 0;
    if (err)
        m->err = *err;
    if (f == PL_FINISH_STOP || f == PL_FINISH_LENGTH)
        pl_engine_kv_reply_(e, m->res.completion_tokens);
    pl_engine_queue_push_(&e->pending_out, m);
}
