/* engine_loop.c - the engine thread: take requests and aborts from the
 * inbox; while fewer than max_inflight steps run, schedule the next one
 * into the free input buffer and launch it; otherwise wait for the oldest
 * step and process its sampled ids (DESIGN.md, "engine step pipeline").
 * Everything here runs on the engine thread, which owns the scheduler, the
 * KV blocks and the runner; the functions it calls assert it. */
#include "backends/engine/engine_loop.h"

#include <stdio.h>
#include <stdlib.h>

#include "backends/engine/engine_chan.h"
#include "backends/engine/engine_kv.h"
#include "backends/engine/engine_req.h"
#include "backends/engine/engine_stats.h"
#include "backends/engine/engine_text.h"

static pl_seq_sampling seq_sampling_(const eng_req *r)
{
    const pl_sampling *sp = &r->sp;
    pl_seq_sampling s = {
        .temperature = (float)sp->temperature,
        .top_p = (float)sp->top_p,
        .top_k = sp->top_k,
        .min_p = (float)sp->min_p,
        .presence_penalty = (float)sp->presence_penalty,
        .frequency_penalty = (float)sp->frequency_penalty,
        .repetition_penalty = (float)sp->repetition_penalty,
        .seed = sp->has_seed ? sp->seed : r->id * 0x9e3779b97f4a7c15ull,
        .top_logprobs = sp->logprobs ? sp->top_logprobs : -1,
        .logit_bias = sp->logit_bias,
        .n_logit_bias = sp->n_logit_bias,
        .ignore_eos = sp->ignore_eos,
        .fsm = r->fsm,
        .fsm_state = 0,
    };
    return s;
}

static void on_submit_(pl_engine *e, eng_req *r)
{
    pl_seq_sampling ss = seq_sampling_(r);
    r->seq = pl_batch_add(e->batch, r->id, r->prompt, r->n_prompt, r->max_new,
                          r->priority, &ss, r);
    if (r->seq) {
        r->seq->conv_key = r->conv_key;
        r->seq->reply_private = r->reply_private;
    }
    free(r->prompt);
    r->prompt = NULL;
    if (r->seq)
        r->seq->prompt_logprobs = r->plp != NULL;
    if (!r->seq) {
        pl_err err;
        pl_err_set(&err, 500, "server_error", NULL, NULL,
                   "engine could not queue the request");
        pl_engine_emit_done_(e, r, PL_FINISH_ERROR, &err);
        pl_engine_req_free_(r);
    }
}

static void on_control_(pl_engine *e, eng_msg *m)
{
    if (m->type == ENG_MSG_RETAIN) {
        pl_kv_blocks_hint(e->kv, m->id, m->n == PL_NEED_DONE ? PL_KV_NEED_DONE : m->n);
        if (e->ckpt)
            pl_kv_ckpt_hint(e->ckpt, m->id, m->n == PL_NEED_DONE ? PL_KV_NEED_DONE : m->n);
        e->st_local.hints++;
        return;
    }
    pl_batch_seq *s = pl_batch_find(e->batch, m->id);
    if (!s)
        return;                       /* finished already */
    if (m->type == ENG_MSG_ABORT) {
        eng_req *r = s->ud;
        pl_batch_finish(e->batch, s);     /* blocks freed now */
        pl_engine_req_defer_free_(e, r);
        e->st_local.aborted++;
    } else {
        pl_batch_set_paused(e->batch, s, m->type == ENG_MSG_PAUSE);
        e->st_local.pause_msgs++;
    }
}

/* Take everything from the inbox; block for it when told to. Returns
 * false when the engine is stopping. */
static bool inbox_drain_(pl_engine *e, bool block)
{
    bool stop;
    eng_msg *m = pl_engine_inbox_take_(e, block, &stop);
    if (m)
        e->stalled = false;
    bool any = m != NULL;
    while (m) {
        eng_msg *next = m->next;
        if (m->type == ENG_MSG_SUBMIT) {
            m->req->done_msg = m;     /* kept for its DONE */
            pl_engine_kv_seen_(e, m->req);
            on_submit_(e, m->req);
        } else {
            on_control_(e, m);
            pl_engine_msg_free_(m);
        }
        m = next;
    }
    if (any)
        pl_engine_kv_publish_(e);
    pl_engine_post_(e);
    return !stop;
}

/* End one sequence's request with a server error. */
static void fail_seq_(pl_engine *e, pl_batch_seq *s, const char *msg)
{
    eng_req *r = s->ud;
    if (!r)
        return;
    pl_err err;
    pl_err_set(&err, 500, "server_error", NULL, NULL, "%s", msg);
    pl_engine_emit_done_(e, r, PL_FINISH_ERROR, &err);
    pl_batch_finish(e->batch, s);
    pl_engine_req_defer_free_(e, r);
}

/* A runner failure fails every sequence of the step. */
static void fail_step_(pl_engine *e, pl_batch_step *st, const char *what)
{
    char msg[64];
    snprintf(msg, sizeof msg, "runner %s failed", what);
    for (int k = 0; k < st->in.n_seqs; k++)
        fail_seq_(e, st->seqs[k], msg);
}

/* Schedule into buffer n_launched % 2 and launch. Returns false when
 * nothing could be scheduled. */
static bool launch_next_(pl_engine *e)
{
    int idx = (int)(e->n_launched % PL_RUNNER_MAX_INFLIGHT);
    if (e->step_busy[idx])
        abort();                      /* would overwrite a buffer in flight */
    pl_batch_step *st = &e->steps[idx];
    double t0 = pl_engine_now_ms_();
    int rows = pl_batch_schedule(e->batch, st);
    double t1 = pl_engine_now_ms_();
    if (rows == 0) {
        pl_batch_step_retire(e->batch, st);
        return false;
    }
    for (int k = 0; k < st->in.n_seqs; k++) {
        eng_req *r = st->seqs[k]->ud;
        if (r && r->t_sched == 0)
            r->t_sched = t1;
    }
    if (e->n_inflight == 0 && e->t_last_done > 0) {
        double gap = t1 - e->t_last_done;
        e->st_local.idle_gap_ms += gap;
        if (gap > e->st_local.max_idle_gap_ms)
            e->st_local.max_idle_gap_ms = gap;
    }
    /* Partial-block reuse: the copies this step's rows build on. */
    for (int k = 0; k < st->n_copies; k++)
        e->runner->ops->copy_block(e->runner, st->copy_src[k], st->copy_dst[k]);
    int ticket = e->runner->ops->launch(e->runner, &st->in);
    if (ticket < 0) {
        fail_step_(e, st, "launch");
        pl_batch_step_retire(e->batch, st);
        pl_engine_post_(e);
        return true;
    }
    e->step_busy[idx] = true;
    e->inflight[e->n_inflight++] = (eng_inflight){st, ticket};
    e->n_launched++;
    eng_stats *s = &e->st_local;
    s->steps++;
    s->schedule_ms += t1 - t0;
    s->rows += (uint64_t)rows;
    s->decode_rows += (uint64_t)st->n_decode_rows;
    s->prefill_rows += (uint64_t)st->n_prefill_rows;
    s->preemptions += (uint64_t)st->n_preempted;
    s->deferrals += (uint64_t)st->n_deferred;
    return true;
}

/* Wait for the oldest step, process its sampled ids, retire it. */
static void finish_oldest_(pl_engine *e)
{
    eng_inflight f = e->inflight[0];
    e->inflight[0] = e->inflight[1];
    e->n_inflight--;
    const pl_step_output *out = NULL;
    int rc = e->runner->ops->wait(e->runner, f.ticket, &out);
    double t0 = pl_engine_now_ms_();
    e->t_last_done = t0;
    if (rc < 0 || !out) {
        fail_step_(e, f.st, "step");
    } else {
        e->st_local.execute_ms += out->exec_ms;
        if (f.st->in.n_row_next > 0)
            pl_engine_prompt_rows_(e, f.st, out);
        for (int k = 0; k < f.st->in.n_seqs; k++) {
            pl_batch_seq *s = f.st->seqs[k];
            if (!f.st->in.seq_sample[k])
                continue;
            eng_req *r = s->ud;
            if (out->sampled[k] < 0) {    /* no token: every logit NaN */
                fail_seq_(e, s, "the model produced no valid token (non-finite logits)");
                continue;
            }
            if (r && r->echo && !r->echo_sent && s->state != PL_SEQ_FINISHED) {
                if (pl_engine_emit_prompt_(e, r, s) < 0) {  /* before its first token */
                    pl_engine_fail_oom_(e, r, s);
                    pl_engine_req_defer_free_(e, r);
                    continue;
                }
                if (r->score_only) {                 /* scored: no token */
                    pl_engine_emit_done_(e, r, PL_FINISH_LENGTH, NULL);
                    pl_batch_finish(e->batch, s);
                    pl_engine_req_defer_free_(e, r);
                    continue;
                }
            }
            if (!pl_batch_append(e->batch, s, out->sampled[k]))
                continue;             /* finished: the extra token */
            e->st_local.tokens_out++;
            pl_engine_on_token_(e, s, out->sampled[k], out, k);
            if (s->state == PL_SEQ_FINISHED)
                pl_engine_req_defer_free_(e, r);
        }
    }
    pl_batch_step_retire(e->batch, f.st);
    e->step_busy[f.st - e->steps] = false;
    e->n_retired++;
    pl_engine_req_sweep_(e);
    pl_engine_kv_publish_(e);        /* before the DONEs go */
    pl_engine_post_(e);
    e->st_local.steps_done++;
    e->st_local.process_ms += pl_engine_now_ms_() - t0;
}

/* When nothing is queued or in flight: check the KV invariant. */
static void idle_check_(pl_engine *e)
{
    if (pl_batch_has_seqs(e->batch) || e->n_inflight)
        return;
    eng_stats *s = &e->st_local;
    s->idle_checks++;
    s->idle_check_step = s->steps_done;
    s->idle_ok = pl_kv_blocks_check_idle(e->kv, s->idle_why, sizeof s->idle_why);
}

static void loop_(pl_engine *e)
{
    for (;;) {
        bool block = e->stalled && e->n_inflight == 0;
        if (block) {
            idle_check_(e);
            pl_engine_stats_publish_(e);
        }
        if (!inbox_drain_(e, block))
            return;
        if (e->n_inflight < e->max_inflight && pl_batch_has_seqs(e->batch) &&
            launch_next_(e)) {
            pl_engine_stats_publish_(e);
            continue;
        }
        if (e->n_inflight > 0) {
            finish_oldest_(e);
            pl_engine_stats_publish_(e);
            continue;
        }
        e->stalled = true;
    }
}

void *pl_engine_thread_main_(void *arg)
{
    pl_engine *e = arg;
    pl_thread_role_set(&e->engine_role);
    e->stalled = true;
    loop_(e);
    /* Stopping: let the runner finish what it has, drop everything. */
    while (e->n_inflight > 0) {
        eng_inflight f = e->inflight[0];
        e->inflight[0] = e->inflight[1];
        e->n_inflight--;
        const pl_step_output *out;
        e->runner->ops->wait(e->runner, f.ticket, &out);
        pl_batch_step_retire(e->batch, f.st);
        e->n_retired++;
    }
    pl_batch_seq *s;
    while ((s = pl_batch_first(e->batch))) {
        eng_req *r = s->ud;
        pl_batch_finish(e->batch, s);
        pl_engine_req_free_(r);
    }
    while (e->deferred) {
        eng_req *r = e->deferred;
        e->deferred = r->next;
        pl_engine_req_free_(r);
    }
    pl_thread_role_clear(&e->engine_role);    /* the main thread's again */
    return NULL;
}
