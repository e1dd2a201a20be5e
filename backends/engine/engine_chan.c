/* engine_chan.c - the channels between the threads: the inbox and the
 * outbox (locked FIFO queues of recycled messages), the eventfd that wakes
 * the main loop, the main thread's registry of live requests, and delivery
 * of deltas and results to the sinks on the main thread.
 *
 * Threads: the main thread pushes to the inbox, owns the registry and
 * delivers; the engine thread takes from the inbox and posts to the
 * outbox. in_lock and out_lock guard what both touch; each function
 * asserts the thread it may run on. */
#include "backends/engine/engine_chan.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <event2/event.h>

#include "backends/engine/engine_req.h"

/* ---- inbox: main -> engine ---- */

void pl_engine_inbox_push_(pl_engine *e, eng_msg *m)
{
    pl_engine_inbox_push2_(e, m, NULL);
}

void pl_engine_inbox_push2_(pl_engine *e, eng_msg *m, eng_msg *then)
{
    PL_ASSERT_ON_THREAD(&e->main_role);
    pthread_mutex_lock(&e->in_lock);
    pl_engine_queue_push_(&e->inbox, m);
    if (then)
        pl_engine_queue_push_(&e->inbox, then);
    pthread_cond_signal(&e->in_cond);
    pthread_mutex_unlock(&e->in_lock);
}

void pl_engine_control_(pl_engine *e, uint64_t id, eng_msg_type type)
{
    eng_msg *m = calloc(1, sizeof *m);
    if (!m)
        return;
    m->type = type;
    m->id = id;
    pl_engine_inbox_push_(e, m);
}

void pl_engine_inbox_stop_(pl_engine *e)
{
    PL_ASSERT_ON_THREAD(&e->main_role);
    pthread_mutex_lock(&e->in_lock);
    e->stop = true;
    pthread_cond_signal(&e->in_cond);
    pthread_mutex_unlock(&e->in_lock);
}

eng_msg *pl_engine_inbox_take_(pl_engine *e, bool block, bool *stop)
{
    PL_ASSERT_ON_THREAD(&e->engine_role);
    pthread_mutex_lock(&e->in_lock);
    while (block && !e->inbox.head && !e->stop)
        pthread_cond_wait(&e->in_cond, &e->in_lock);
    eng_msg *m = e->inbox.head;
    e->inbox.head = e->inbox.tail = NULL;
    *stop = e->stop;
    pthread_mutex_unlock(&e->in_lock);
    return m;
}

/* ---- outbox: engine -> main ---- */

eng_msg *pl_engine_msg_get_(pl_engine *e)
{
    PL_ASSERT_ON_THREAD(&e->engine_role);
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

void pl_engine_post_(pl_engine *e)
{
    PL_ASSERT_ON_THREAD(&e->engine_role);
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

/* ---- registry of live requests (main thread) ---- */

static uint32_t sub_hash_(uint64_t id)
{
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdull;
    id ^= id >> 33;
    return (uint32_t)id;
}

static int sub_grow_(pl_engine *e)
{
    uint32_t nb = e->subs ? (e->subs_mask + 1) * 2 : 256;
    eng_sub **nt = calloc(nb, sizeof *nt);
    if (!nt)
        return -1;
    for (uint32_t i = 0; e->subs && i <= e->subs_mask; i++) {
        eng_sub *s = e->subs[i];
        while (s) {
            eng_sub *next = s->next;
            uint32_t h = sub_hash_(s->id) & (nb - 1);
            s->next = nt[h];
            nt[h] = s;
            s = next;
        }
    }
    free(e->subs);
    e->subs = nt;
    e->subs_mask = nb - 1;
    return 0;
}

int pl_engine_sub_add_(pl_engine *e, uint64_t id, pl_sink sink)
{
    PL_ASSERT_ON_THREAD(&e->main_role);
    if ((!e->subs || (uint32_t)e->n_subs > e->subs_mask) && sub_grow_(e) < 0)
        return -1;
    eng_sub *s = malloc(sizeof *s);
    if (!s)
        return -1;
    uint32_t h = sub_hash_(id) & e->subs_mask;
    *s = (eng_sub){.id = id, .sink = sink, .next = e->subs[h]};
    e->subs[h] = s;
    e->n_subs++;
    return 0;
}

eng_sub *pl_engine_sub_find_(pl_engine *e, uint64_t id)
{
    PL_ASSERT_ON_THREAD(&e->main_role);
    if (!e->subs)
        return NULL;
    for (eng_sub *s = e->subs[sub_hash_(id) & e->subs_mask]; s; s = s->next)
        if (s->id == id)
            return s;
    return NULL;
}

void pl_engine_sub_remove_(pl_engine *e, uint64_t id)
{
    PL_ASSERT_ON_THREAD(&e->main_role);
    if (!e->subs)
        return;
    eng_sub **pp = &e->subs[sub_hash_(id) & e->subs_mask];
    for (; *pp; pp = &(*pp)->next) {
        if ((*pp)->id == id) {
            eng_sub *s = *pp;
            *pp = s->next;
            free(s);
            e->n_subs--;
            return;
        }
    }
}

void pl_engine_subs_free_(pl_engine *e)
{
    PL_ASSERT_ON_THREAD(&e->main_role);
    for (uint32_t i = 0; e->subs && i <= e->subs_mask; i++)
        for (eng_sub *s = e->subs[i], *next; s; s = next) {
            next = s->next;
            free(s);
        }
    free(e->subs);
    e->subs = NULL;
}

/* ---- delivery (main thread) ---- */

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
    PL_ASSERT_ON_THREAD(&e->main_role);
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
    PL_ASSERT_ON_THREAD(&e->main_role);
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
    PL_ASSERT_ON_THREAD(&e->main_role);
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
