/* req_metrics.c - request metrics fed by a sink wrapper around every
 * backend request (backend.c's pl_backend_submit / pl_backend_abort call
 * the trackers here). */
#include "backends/req_metrics.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* vLLM V1's bounds (vllm/v1/metrics/loggers.py), so its dashboards fit. */
static const double ttft_bounds[] = {
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
static const double itl_bounds[] = {
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
static const double latency_bounds[] = {
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
    40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

struct pl_req_track {
    pl_req_metrics *m;
    pl_sink inner;               /* the caller's sink */
    uint64_t id;                 /* backend id, once submit returned */
    double t_submit, t_last;     /* monotonic seconds */
    int tokens;                  /* generation tokens seen in deltas */
    bool first;                  /* the first token was seen */
    bool in_submit, done_early, hashed;
    pl_req_track *next;          /* hash chain or free list */
};

double pl_mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void hist_set(pl_hist *h, const double *b, int n)
{
    memset(h, 0, sizeof *h);
    h->n = n < PL_HIST_MAX_BOUNDS ? n : PL_HIST_MAX_BOUNDS;
    memcpy(h->bounds, b, (size_t)h->n * sizeof *b);
}

void pl_hist_init(pl_hist *h, pl_hist_kind kind)
{
    switch (kind) {
    case PL_HIST_TTFT:
        hist_set(h, ttft_bounds, (int)(sizeof ttft_bounds / sizeof *ttft_bounds));
        break;
    case PL_HIST_ITL:
        hist_set(h, itl_bounds, (int)(sizeof itl_bounds / sizeof *itl_bounds));
        break;
    default:
        hist_set(h, latency_bounds, (int)(sizeof latency_bounds / sizeof *latency_bounds));
        break;
    }
}

void pl_hist_init_125(pl_hist *h, double max)
{
    double b[PL_HIST_MAX_BOUNDS];
    int n = 0;
    static const double mant[] = {1, 2, 5};
    for (double e = 1; n < PL_HIST_MAX_BOUNDS; e *= 10)
        for (int i = 0; i < 3 && n < PL_HIST_MAX_BOUNDS; i++) {
            if (mant[i] * e > max)
                goto done;
            b[n++] = mant[i] * e;
        }
done:
    hist_set(h, b, n);
}

void pl_hist_observe_n(pl_hist *h, double v, uint64_t n)
{
    int i = 0;
    while (i < h->n && v > h->bounds[i])
        i++;
    h->counts[i] += n;
    h->count += n;
    h->sum += v * (double)n;
}

pl_req_metrics *pl_backend_metrics(pl_backend *b)
{
    if (b->metrics)
        return b->metrics;
    pl_req_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    pl_hist_init(&m->ttft, PL_HIST_TTFT);
    pl_hist_init(&m->itl, PL_HIST_ITL);
    pl_hist_init(&m->e2e, PL_HIST_LATENCY);
    pl_hist_init(&m->queue, PL_HIST_LATENCY);
    int len = b->ops->max_model_len ? b->ops->max_model_len(b) : 0;
    pl_hist_init_125(&m->prompt_len, len > 0 ? len : 1e6);
    pl_hist_init_125(&m->gen_len, len > 0 ? len : 1e6);
    b->metrics = m;
    return m;
}

void pl_req_metrics_free(pl_req_metrics *m)
{
    if (!m)
        return;
    for (int i = 0; i < PL_REQ_TRACK_BUCKETS; i++)
        for (pl_req_track *t = m->by_id[i], *n; t; t = n) {
            n = t->next;
            free(t);
        }
    for (pl_req_track *t = m->free_list, *n; t; t = n) {
        n = t->next;
        free(t);
    }
    free(m);
}

static pl_req_track **bucket_(pl_req_metrics *m, uint64_t id)
{
    uint64_t h = id * 0x9E3779B97F4A7C15ull;
    return &m->by_id[h >> 54];   /* 1024 buckets */
}

static void unhash_(pl_req_track *t)
{
    if (!t->hashed)
        return;
    for (pl_req_track **p = bucket_(t->m, t->id); *p; p = &(*p)->next)
        if (*p == t) {
            *p = t->next;
            break;
        }
    t->hashed = false;
}

static void recycle_(pl_req_track *t)
{
    t->next = t->m->free_list;
    t->m->free_list = t;
}

static void track_delta(void *ud, const pl_delta *d)
{
    pl_req_track *t = ud;
    pl_req_metrics *m = t->m;
    if (d->prompt) {             /* an echoed prompt: no token generated */
        pl_sink inner = t->inner;
        inner.on_delta(inner.ud, d);
        return;
    }
    if (d->n_tokens > 0 || d->len > 0 || d->n_tool_calls > 0) {
        double now = pl_mono_s();
        if (!t->first) {
            pl_hist_observe_n(&m->ttft, now - t->t_submit, 1);
            t->first = true;
        } else {
            uint64_t k = d->n_tokens > 0 ? (uint64_t)d->n_tokens : 1;
            pl_hist_observe_n(&m->itl, (now - t->t_last) / (double)k, k);
        }
        t->t_last = now;
    }
    if (d->n_tokens > 0) {
        t->tokens += d->n_tokens;
        m->generation_tokens += (uint64_t)d->n_tokens;
    }
    /* The caller may abort this request from its callback, which recycles
     * t: call it last, with a copy. */
    pl_sink inner = t->inner;
    inner.on_delta(inner.ud, d);
}

static void track_done(void *ud, const pl_result *r)
{
    pl_req_track *t = ud;
    pl_req_metrics *m = t->m;
    double now = pl_mono_s();
    if (!t->first && r->completion_tokens > 0)
        pl_hist_observe_n(&m->ttft, now - t->t_submit, 1);
    if (r->completion_tokens > t->tokens)
        m->generation_tokens += (uint64_t)(r->completion_tokens - t->tokens);
    m->prompt_tokens += r->prompt_tokens > 0 ? (uint64_t)r->prompt_tokens : 0;
    m->cached_tokens += r->cached_tokens > 0 ? (uint64_t)r->cached_tokens : 0;
    int f = r->finish >= PL_FINISH_NONE && r->finish <= PL_FINISH_ERROR ? r->finish
                                                                        : PL_FINISH_ERROR;
    m->finished[f]++;
    pl_hist_observe_n(&m->e2e, now - t->t_submit, 1);
    if (r->finish != PL_FINISH_ERROR) {
        pl_hist_observe_n(&m->queue, r->queue_ms > 0 ? r->queue_ms * 1e-3 : 0.0, 1);
        pl_hist_observe_n(&m->prompt_len, r->prompt_tokens, 1);
        pl_hist_observe_n(&m->gen_len, r->completion_tokens, 1);
    }
    if (r->finish == PL_FINISH_STOP || r->finish == PL_FINISH_LENGTH) {
        pl_dispatch_est_observe(&m->replies, r->completion_tokens);
        pl_dispatch_est_observe(&m->uncached_prompts, r->prompt_tokens - r->cached_tokens);
    }
    m->live--;
    unhash_(t);
    pl_sink inner = t->inner;
    if (t->in_submit)
        t->done_early = true;    /* pl_req_track_submitted recycles it */
    else
        recycle_(t);
    inner.on_done(inner.ud, r);
}

static pl_req_track *track_get_(pl_req_metrics *m)
{
    pl_req_track *t = m->free_list;
    if (t)
        m->free_list = t->next;
    else if (!(t = malloc(sizeof *t)))
        return NULL;
    memset(t, 0, sizeof *t);
    t->m = m;
    return t;
}

pl_req_track *pl_req_track_begin(pl_req_metrics *m, pl_sink inner, pl_sink *wrapped)
{
    pl_req_track *t = m ? track_get_(m) : NULL;
    if (!t) {
        *wrapped = inner;        /* OOM: served untracked */
        return NULL;
    }
    t->inner = inner;
    t->t_submit = t->t_last = pl_mono_s();
    t->in_submit = true;
    m->live++;
    *wrapped = (pl_sink){track_delta, track_done, t};
    return t;
}

void pl_req_track_rejected(pl_req_track *t)
{
    if (!t)
        return;
    t->m->live--;
    t->m->rejected++;
    recycle_(t);
}

void pl_req_track_submitted(pl_req_track *t, uint64_t id)
{
    if (!t)
        return;
    pl_req_metrics *m = t->m;
    m->submitted++;
    if (t->done_early) {
        recycle_(t);
        return;
    }
    t->in_submit = false;
    t->id = id;
    pl_req_track **p = bucket_(m, t->id);
    t->next = *p;
    *p = t;
    t->hashed = true;
}

void pl_req_metrics_abort(pl_req_metrics *m, uint64_t id)
{
    if (m)
        for (pl_req_track *t = *bucket_(m, id); t; t = t->next)
            if (t->id == id) {
                m->finished[PL_FINISH_ABORT]++;
                pl_hist_observe_n(&m->e2e, pl_mono_s() - t->t_submit, 1);
                m->live--;
                unhash_(t);
                recycle_(t);
                break;
            }
}

static double mean_(const pl_hist *h)
{
    return h->count ? h->sum / (double)h->count : 0.0;
}

json_t *pl_req_metrics_json(const pl_req_metrics *m)
{
    return json_pack("{s:I, s:i, s:I, s:I, s:I, s:I, s:{s:I, s:I, s:I, s:I}, s:f, s:f, s:f,"
                     " s:f}",
                     "submitted", (json_int_t)m->submitted, "in_flight", m->live,
                     "rejected", (json_int_t)m->rejected,
                     "prompt_tokens", (json_int_t)m->prompt_tokens,
                     "generation_tokens", (json_int_t)m->generation_tokens,
                     "cached_tokens", (json_int_t)m->cached_tokens, "finished",
                     "stop", (json_int_t)m->finished[PL_FINISH_STOP],
                     "length", (json_int_t)m->finished[PL_FINISH_LENGTH],
                     "abort", (json_int_t)m->finished[PL_FINISH_ABORT],
                     "error", (json_int_t)m->finished[PL_FINISH_ERROR],
                     "ttft_mean_s", mean_(&m->ttft), "itl_mean_s", mean_(&m->itl),
                     "e2e_mean_s", mean_(&m->e2e), "queue_mean_s", mean_(&m->queue));
}
