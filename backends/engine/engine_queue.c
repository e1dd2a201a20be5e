/* engine_queue.c - the engine's inbox and outbox: locked FIFO queues of
 * recycled messages, the eventfd that wakes the main loop, and delivery of
 * deltas and results to the sinks on the main thread. */
#include "backends/engine/engine_internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <event2/event.h>

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

/* Clear a recycled message for reuse (its buffers stay). */
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

/* A cleared message for the engine thread: from its local cache, refilled
 * in one go from the messages the main thread has recycled. NULL on OOM. */
eng_msg *pl_engine_msg_get_(pl_engine *e)
{
    if (!e->local_free) {
        pthread_mutex_lock(&e->out_lock);
        e->local_free = e->msg_free;
        e->msg_free = NULL;
        pthread_mutex_unlock(&e->out_lock);
    }
    eng_msg *m = e->local_free;
    if (m)
        e->local_free = m->next;
    else if (!(m = calloc(1, sizeof *m)))
        return NULL;
    pl_engine_msg_clear_(m);
    return m;
}

/* Hand this step's messages to the main thread and wake it once. */
void pl_engine_post_(pl_engine *e)
{
    if (!e->pending_out.head)
        return;
    pthread_mutex_lock(&e->out_lock);
    if (e->outbox.tail)
        e->outbox.tail->next = e->pending_out.head;
    else
        e->outbox.head = e->pending_out.head;
    e->outbox.tail = e->pending_out.tail;
    pthread_mutex_unlock(&e->out_lock);
    e->pending_out.head = e->pending_out.tail = NULL;
    uint64_t one = 1;
    ssize_t w;
    do
        w = write(e->wake_fd, &one, sizeof one);
    while (w < 0 && errno == EINTR);
}

void pl_engine_inbox_push_(pl_engine *e, eng_msg *m)
{
    pl_engine_inbox_push2_(e, m, NULL);
}

void pl_engine_inbox_push2_(pl_engine *e, eng_msg *m, eng_msg *then)
{
    pthread_mutex_lock(&e->in_lock);
    pl_engine_queue_push_(&e->inbox, m);
    if (then)
        pl_engine_queue_push_(&e->inbox, then);
    pthread_cond_signal(&e->in_cond);
    pthread_mutex_unlock(&e->in_lock);
}

/* Logprob arrays of a delta, built in reusable scratch. */
static const pl_token_logprob *delta_logprobs_(pl_engine *e, const eng_msg *m)
{
    int need = m->n * (1 + m->n_top);
    if (need > e->lp_scratch_cap) {
        pl_token_logprob *lp = realloc(e->lp_scratch, (size_t)need * sizeof *lp);
        if (lp)
            e->lp_scratch = lp;
        pl_top_logprob *tp = realloc(e->top_scratch, (size_t)need * sizeof *tp);
        if (tp)
            e->top_scratch = tp;
        if (!lp || !tp)
            return NULL;
        e->lp_scratch_cap = need;
    }
    for (int i = 0; i < m->n; i++) {
        pl_token_logprob *t = &e->lp_scratch[i];
        t->token = e->text.token_bytes(e->text.ud, m->tokens[i], &t->token_len);
        t->logprob = m->lp[i];
        t->n_top = isnan(t->logprob) ? 0 : m->n_top;  /* an echoed prompt's first */
        t->top = e->top_scratch + (size_t)i * (size_t)m->n_top;
        for (int j = 0; j < m->n_top; j++) {
            pl_top_logprob *p = &e->top_scratch[(size_t)i * (size_t)m->n_top + (size_t)j];
            int32_t id = m->top_ids[(size_t)i * (size_t)m->n_top + (size_t)j];
            p->token = e->text.token_bytes(e->text.ud, id, &p->token_len);
            p->logprob = m->top_lp[(size_t)i * (size_t)m->n_top + (size_t)j];
        }
    }
    return e->lp_scratch;
}

/* No memory for a delta's logprobs: the request ends now with a 500 (the
 * engine drops it; its sink hears nothing more). */
static void fail_delivery_(pl_engine *e, uint64_t id, pl_sink sink)
{
    pl_err err;
    pl_err_set(&err, 500, "server_error", NULL, NULL, "out of memory delivering the reply");
    pl_result res = {.finish = PL_FINISH_ERROR, .error = &err};
    e->base.ops->abort(&e->base, id);
    sink.on_done(sink.ud, &res);
}

static void deliver_(pl_engine *e, eng_msg *m)
{
    eng_sub *sub = pl_engine_sub_find_(e, m->id);
    if (!sub)
        return;                       /* aborted by the caller */
    pl_sink sink = sub->sink;
    if (m->type == ENG_MSG_DELTA) {
        pl_delta d = {m->text, m->len, m->tokens, m->n, NULL};
        d.prompt = m->prompt;
        if (m->has_logprobs && !(d.logprobs = delta_logprobs_(e, m))) {
            fail_delivery_(e, m->id, sink);
            return;
        }
        sink.on_delta(sink.ud, &d);
        return;
    }
    pl_engine_sub_remove_(e, m->id);
    if (m->res.finish == PL_FINISH_ERROR)
        m->res.error = &m->err;
    sink.on_done(sink.ud, &m->res);
}

/* Main loop: the engine posted messages. Deliver them in order, then give
 * the messages back for reuse. */
static void wake_cb_(evutil_socket_t fd, short what, void *arg)
{
    pl_engine *e = arg;
    uint64_t v;
    if (read(fd, &v, sizeof v) < 0 && errno != EAGAIN)
        return;
    pthread_mutex_lock(&e->out_lock);
    eng_msg *m = e->outbox.head;
    e->outbox.head = e->outbox.tail = NULL;
    pthread_mutex_unlock(&e->out_lock);
    eng_msg *first = m, *last = NULL;
    for (; m; m = m->next) {
        deliver_(e, m);
        last = m;
    }
    if (!first)
        return;
    pthread_mutex_lock(&e->out_lock);
    last->next = e->msg_free;
    e->msg_free = first;
    pthread_mutex_unlock(&e->out_lock);
}

int pl_engine_wake_init_(pl_engine *e)
{
    e->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (e->wake_fd < 0)
        return -1;
    e->wake_ev = event_new(e->base.base, e->wake_fd, EV_READ | EV_PERSIST,
                           wake_cb_, e);
    if (!e->wake_ev || event_add(e->wake_ev, NULL) < 0)
        return -1;
    return 0;
}

void pl_engine_wake_free_(pl_engine *e)
{
    if (e->wake_ev)
        event_free(e->wake_ev);
    e->wake_ev = NULL;
    if (e->wake_fd >= 0)
        close(e->wake_fd);
    e->wake_fd = -1;
    pl_engine_queue_free_(&e->outbox);
    eng_msg *m = e->msg_free;
    while (m) {
        eng_msg *next = m->next;
        pl_engine_msg_free_(m);
        m = next;
    }
    e->msg_free = NULL;
}
