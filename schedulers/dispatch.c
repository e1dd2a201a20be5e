/* dispatch.c - a served model's admission point: the jobs' pre-departure
 * heaps, the interactive FIFO, the in-flight bound, weighted least attained
 * service between jobs. See dispatch.h. */
#include "schedulers/dispatch.h"

#include <stdlib.h>
#include <string.h>

enum { REQ_NONE = 0, REQ_QUEUED, REQ_INFLIGHT };

/* A job: its pre-departure heap (its policy's order) and its share. */
typedef struct client {
    bool used, active;           /* active: ready or in flight at last pick */
    uint32_t gen;                /* bumped at leave: stale requests ignored */
    pl_dispatch_client_opts o;
    pl_dispatch_req **v;         /* the heap */
    int n, cap_v;
    int inflight;
    double attained;
    uint64_t dispatched, completed;
} client;

struct pl_dispatch {
    int upper;                   /* the backend's in-flight upper bound */
    int capacity, reserve, reserve_opt;   /* the bound now, for status */
    int (*capacity_fn)(void *ud);
    void *capacity_ud;
    bool (*kv_fn)(void *ud, pl_dispatch_kv *out);
    void *kv_ud;
    bool has_kv;                 /* the last read gave a view */
    pl_dispatch_kv kv;
    int jobs_inflight, jobs_ready, interactive, peak;
    pl_dispatch_req *iq_head, *iq_tail;      /* interactive, waiting */
    int iq_n;
    client *v;                   /* v[0] unused: the interactive class */
    int n, cap_v;
    double cost_sum;             /* completed requests' cost, for the mean */
    uint64_t cost_n;
    bool pumping, again;
    int *frontier;               /* scratch for ordered walks */
    int frontier_cap;
};

/* ---- policies and the tuple ---- */

const char *pl_dispatch_policy_name(pl_dispatch_policy p)
{
    static const char *n[] = {"parley", "fcfs", "naive"};
    return (unsigned)p <= PL_DISPATCH_NAIVE ? n[p] : "?";
}

int pl_dispatch_policy_parse(const char *name)
{
    for (int p = 0; name && p <= PL_DISPATCH_NAIVE; p++)
        if (!strcmp(name, pl_dispatch_policy_name((pl_dispatch_policy)p)))
            return p;
    return -1;
}

static int cmp_int(int a, int b)
{
    return (a > b) - (a < b);
}

int pl_dispatch_key_cmp(const pl_dispatch_key *a, const pl_dispatch_key *b)
{
    if (a->reprompt != b->reprompt)
        return a->reprompt ? -1 : 1;
    if (a->rounds_completed != b->rounds_completed)
        return cmp_int(b->rounds_completed, a->rounds_completed);
    if (a->conversation != b->conversation)
        return cmp_int(a->conversation, b->conversation);
    return cmp_int(a->round, b->round);
}

int pl_dispatch_engine_priority(pl_dispatch_policy p, const pl_dispatch_key *k)
{
    if (p != PL_DISPATCH_PRIORITY)
        return 0;
    return (k->reprompt ? 0 : 1 << 20) - k->rounds_completed;
}

/* The naive baseline: whole conversations in order, agents in index order
 * (a re-prompt keeps its agent's place). */
static bool less_naive(const pl_dispatch_req *a, const pl_dispatch_req *b)
{
    if (a->key.conversation != b->key.conversation)
        return a->key.conversation < b->key.conversation;
    if (a->key.round != b->key.round)
        return a->key.round < b->key.round;
    if (a->agent != b->agent)
        return a->agent < b->agent;
    return a->seq < b->seq;
}

bool pl_dispatch_less(pl_dispatch_policy p, const pl_dispatch_req *a,
                      const pl_dispatch_req *b)
{
    switch (p) {
    case PL_DISPATCH_FCFS:
        return a->ready_seq < b->ready_seq;
    case PL_DISPATCH_NAIVE:
        return less_naive(a, b);
    default: {
        int c = pl_dispatch_key_cmp(&a->key, &b->key);
        return c < 0 || (c == 0 && a->seq < b->seq);
    }
    }
}

/* ---- a job's heap ---- */

static inline void slot_set(pl_dispatch_req **v, int i, pl_dispatch_req *r)
{
    v[i] = r;
    r->heap_idx_ = i;
}

static void sift_up(pl_dispatch_policy p, pl_dispatch_req **v, int i, pl_dispatch_req *r)
{
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!pl_dispatch_less(p, r, v[parent]))
            break;
        slot_set(v, i, v[parent]);
        i = parent;
    }
    slot_set(v, i, r);
}

static void sift_down(pl_dispatch_policy p, pl_dispatch_req **v, int n, int i,
                      pl_dispatch_req *r)
{
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && pl_dispatch_less(p, v[c + 1], v[c]))
            c++;
        if (!pl_dispatch_less(p, v[c], r))
            break;
        slot_set(v, i, v[c]);
        i = c;
    }
    slot_set(v, i, r);
}

static int heap_push(client *k, pl_dispatch_req *r)
{
    if (k->n == k->cap_v) {
        int cap = k->cap_v ? 2 * k->cap_v : 64;
        pl_dispatch_req **v = realloc(k->v, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        k->v = v;
        k->cap_v = cap;
    }
    k->n++;
    sift_up(k->o.policy, k->v, k->n - 1, r);
    return 0;
}

static void heap_remove(client *k, pl_dispatch_req *r)
{
    int i = r->heap_idx_;
    pl_dispatch_req *last = k->v[--k->n];
    r->heap_idx_ = -1;
    if (i == k->n)
        return;
    if (i > 0 && pl_dispatch_less(k->o.policy, last, k->v[(i - 1) / 2]))
        sift_up(k->o.policy, k->v, i, last);
    else
        sift_down(k->o.policy, k->v, k->n, i, last);
}

/* ---- creation ---- */

int pl_dispatch_default_reserve(int capacity)
{
    return capacity <= 1 ? 0 : (capacity + 9) / 10;
}

/* The reserve jobs leave under a bound of capacity: as asked, or the
 * default of it; never the last slot. */
static int reserve_for(const pl_dispatch *d, int capacity)
{
    int r = d->reserve_opt < 0 ? pl_dispatch_default_reserve(capacity) : d->reserve_opt;
    return r > capacity - 1 ? capacity - 1 : r;
}

/* The in-flight bound for a request of `need` blocks: with a KV view,
 * what is in flight plus the requests of that need the room holds (free
 * or evictable blocks beyond those promised), within [1, upper]; without
 * one, the upper bound. */
static int bound_for(const pl_dispatch *d, int need)
{
    if (!d->has_kv)
        return d->upper;
    return pl_dispatch_kv_bound(&d->kv, d->jobs_inflight + d->interactive, need, d->upper);
}

/* The figures status shows: the bound for a request of the estimated
 * size. */
static void set_bound(pl_dispatch *d)
{
    d->capacity = bound_for(d, pl_dispatch_kv_need(&d->kv, 0, 0));
    d->reserve = reserve_for(d, d->capacity);
}

void pl_dispatch_set_capacity(pl_dispatch *d, int capacity)
{
    d->upper = capacity < 1 ? 1 : capacity;
    set_bound(d);
}

pl_dispatch *pl_dispatch_new(const pl_dispatch_opts *o)
{
    pl_dispatch *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->n = 1;                    /* v[0]: the interactive class's id */
    d->capacity_fn = o->capacity_fn;
    d->capacity_ud = o->capacity_ud;
    d->kv_fn = o->kv_fn;
    d->kv_ud = o->kv_ud;
    d->reserve_opt = o->reserve;
    pl_dispatch_set_capacity(d, o->capacity);
    return d;
}

void pl_dispatch_free(pl_dispatch *d)
{
    if (!d)
        return;
    for (int i = 1; i < d->n; i++)
        free(d->v[i].v);
    free(d->v);
    free(d->frontier);
    free(d);
}

static client *job_of(const pl_dispatch *d, int id)
{
    return id > 0 && id < d->n && d->v[id].used ? &d->v[id] : NULL;
}

int pl_dispatch_join(pl_dispatch *d, const pl_dispatch_client_opts *o)
{
    int id = 1;
    while (id < d->n && d->v[id].used)
        id++;
    if (id >= d->cap_v) {
        int nc = d->cap_v ? 2 * d->cap_v : 8;
        client *v = realloc(d->v, (size_t)nc * sizeof *v);
        if (!v)
            return -1;
        memset(v + d->cap_v, 0, (size_t)(nc - d->cap_v) * sizeof *v);
        d->v = v;
        d->cap_v = nc;
    }
    if (id == d->n)
        d->n++;
    client *k = &d->v[id];
    uint32_t gen = k->gen;
    memset(k, 0, sizeof *k);
    k->used = true;
    k->gen = gen + 1;
    k->o = *o;
    if (!(k->o.weight > 0))
        k->o.weight = 1;
    return id;
}

void pl_dispatch_leave(pl_dispatch *d, int id)
{
    client *k = job_of(d, id);
    if (!k)
        return;
    d->jobs_inflight -= k->inflight;
    d->jobs_ready -= k->n;
    for (int i = 0; i < k->n; i++)
        k->v[i]->state_ = REQ_NONE;
    free(k->v);
    k->v = NULL;
    k->n = k->cap_v = 0;
    k->used = false;
    k->gen++;
    while (d->n > 1 && !d->v[d->n - 1].used)
        d->n--;
}

/* ---- queueing ---- */

int pl_dispatch_push(pl_dispatch *d, int id, pl_dispatch_req *r)
{
    r->client_ = id;
    r->heap_idx_ = -1;
    r->next_ = NULL;
    if (id == PL_DISPATCH_INTERACTIVE) {
        if (d->iq_tail)
            d->iq_tail->next_ = r;
        else
            d->iq_head = r;
        d->iq_tail = r;
        d->iq_n++;
    } else {
        client *k = job_of(d, id);
        if (!k || heap_push(k, r) < 0)
            return -1;
        r->gen_ = k->gen;
        d->jobs_ready++;
    }
    r->state_ = REQ_QUEUED;
    return 0;
}

static void iq_unlink(pl_dispatch *d, pl_dispatch_req *r)
{
    pl_dispatch_req **p = &d->iq_head, *prev = NULL;
    while (*p && *p != r) {
        prev = *p;
        p = &(*p)->next_;
    }
    if (!*p)
        return;
    *p = r->next_;
    if (d->iq_tail == r)
        d->iq_tail = prev;
    r->next_ = NULL;
    d->iq_n--;
}

void pl_dispatch_remove(pl_dispatch *d, pl_dispatch_req *r)
{
    if (r->state_ != REQ_QUEUED)
        return;
    if (r->client_ == PL_DISPATCH_INTERACTIVE) {
        iq_unlink(d, r);
    } else {
        heap_remove(&d->v[r->client_], r);
        d->jobs_ready--;
    }
    r->state_ = REQ_NONE;
}

bool pl_dispatch_queued(const pl_dispatch_req *r)
{
    return r->state_ == REQ_QUEUED;
}

bool pl_dispatch_inflight(const pl_dispatch_req *r)
{
    return r->state_ == REQ_INFLIGHT;
}

/* ---- admission ---- */

/* The in-flight bound, decided here only: may r (of job k, or interactive
 * when k is NULL) be admitted now? Interactive requests always are (they
 * take precedence); jobs leave the reserve and stay under the bound for
 * r's need (bound_for: min(upper bound, what fits now)) with the
 * interactive requests counted. */
static bool dispatch_admits(const pl_dispatch *d, const client *k, const pl_dispatch_req *r)
{
    if (!k)
        return true;
    int cap = bound_for(d, pl_dispatch_kv_need(&d->kv, r->prompt_tokens, r->max_tokens));
    return d->jobs_inflight < cap - reserve_for(d, cap) &&
           d->jobs_inflight + d->interactive < cap &&
           (k->o.cap <= 0 || k->inflight < k->o.cap);
}

static double norm(const client *k)
{
    return k->attained / k->o.weight;
}

/* The least normalised service among active jobs other than skip; -1 when
 * there is none. */
static double active_floor(const pl_dispatch *d, int skip)
{
    double m = -1;
    for (int i = 1; i < d->n; i++)
        if (i != skip && d->v[i].used && d->v[i].active && (m < 0 || norm(&d->v[i]) < m))
            m = norm(&d->v[i]);
    return m;
}

/* The job has requests it would send now (room aside). */
static bool job_waiting(const client *k)
{
    return k->n > 0 && (!k->o.may_go || k->o.may_go(k->o.ud));
}

/* The job to take the next slot: waiting, under its own cap, least
 * attained service / weight (ties: lower id), when the bound admits its
 * first request; -1 when none, or when that request does not fit yet: the
 * room it waits for is not given to another job's smaller request, so a
 * large request is never starved (as the engine never lets its waiting
 * head be overtaken). A job waiting or in flight is active; one back from
 * idle starts at the active jobs' floor (no banked credit). Waiting for
 * room is not idling. Looking twice gives the same answer. */
static int pick_job(pl_dispatch *d)
{
    int best = -1;
    for (int i = 1; i < d->n; i++) {
        client *k = &d->v[i];
        if (!k->used)
            continue;
        bool waiting = job_waiting(k);
        if (waiting && !k->active) {
            double f = active_floor(d, i);
            if (f >= 0 && norm(k) < f)
                k->attained = f * k->o.weight;
        }
        k->active = waiting || k->inflight > 0;
        if (waiting && (k->o.cap <= 0 || k->inflight < k->o.cap) &&
            (best < 0 || norm(k) < norm(&d->v[best])))
            best = i;
    }
    return best > 0 && dispatch_admits(d, &d->v[best], d->v[best].v[0]) ? best : -1;
}

static double mean_cost(const pl_dispatch *d)
{
    return d->cost_n ? d->cost_sum / (double)d->cost_n : 1.0;
}

/* Move r from its pool to in flight, charging its job. */
static void admit(pl_dispatch *d, pl_dispatch_req *r)
{
    pl_dispatch_remove(d, r);
    r->state_ = REQ_INFLIGHT;
    r->charged_ = 0;
    if (r->client_ == PL_DISPATCH_INTERACTIVE) {
        d->interactive++;
        return;
    }
    client *k = &d->v[r->client_];
    r->charged_ = mean_cost(d);
    k->attained += r->charged_;
    k->inflight++;
    k->dispatched++;
    d->jobs_inflight++;
}

static void note_peak(pl_dispatch *d)
{
    if (d->jobs_inflight + d->interactive > d->peak)
        d->peak = d->jobs_inflight + d->interactive;
}

pl_dispatch_req *pl_dispatch_peek(pl_dispatch *d)
{
    if (d->iq_head && dispatch_admits(d, NULL, d->iq_head))
        return d->iq_head;
    int id = pick_job(d);
    return id > 0 ? d->v[id].v[0] : NULL;
}

/* The backend's bound and KV view now: a remote upstream's bound moves as
 * it is probed, an engine's free blocks with every request. */
void pl_dispatch_refresh(pl_dispatch *d)
{
    int up = d->capacity_fn ? d->capacity_fn(d->capacity_ud) : d->upper;
    if (up >= 1)
        d->upper = up;
    d->has_kv = d->kv_fn && d->kv_fn(d->kv_ud, &d->kv) && d->kv.block_size >= 1;
    if (!d->has_kv)
        memset(&d->kv, 0, sizeof d->kv);
    set_bound(d);
}

pl_dispatch_req *pl_dispatch_step(pl_dispatch *d)
{
    pl_dispatch_refresh(d);     /* the last submit is in the view now */
    pl_dispatch_req *r = pl_dispatch_peek(d);
    if (!r)
        return NULL;
    admit(d, r);
    note_peak(d);
    r->submit(r->ud, r);        /* may end r, push, or pump again */
    return r;
}

void pl_dispatch_pump(pl_dispatch *d)
{
    if (d->pumping) {
        d->again = true;
        return;
    }
    d->pumping = true;
    do {
        d->again = false;
        while (pl_dispatch_step(d))
            ;
    } while (d->again);
    d->pumping = false;
}

void pl_dispatch_done(pl_dispatch *d, pl_dispatch_req *r, double cost)
{
    if (r->state_ != REQ_INFLIGHT)
        return;
    r->state_ = REQ_NONE;
    if (r->client_ == PL_DISPATCH_INTERACTIVE) {
        d->interactive--;
        return;
    }
    client *k = job_of(d, r->client_);
    if (!k || k->gen != r->gen_)
        return;                  /* its job left: it stopped counting then */
    if (cost > 0) {
        d->cost_sum += cost;
        d->cost_n++;
    }
    k->attained += cost - r->charged_;
    if (k->attained < 0)
        k->attained = 0;
    k->inflight--;
    k->completed++;
    d->jobs_inflight--;
}

/* ---- ordered walks and figures ---- */

static int frontier_grow(pl_dispatch *d, int need)
{
    if (need <= d->frontier_cap)
        return 0;
    int cap = d->frontier_cap ? d->frontier_cap : 64;
    while (cap < need)
        cap *= 2;
    int *f = realloc(d->frontier, (size_t)cap * sizeof *f);
    if (!f)
        return -1;
    d->frontier = f;
    d->frontier_cap = cap;
    return 0;
}

/* The frontier: a min-heap of positions in k's heap, walked in order
 * without changing the heap. */
static void frontier_push(const client *k, int *f, int *n, int pos)
{
    int i = (*n)++;
    while (i > 0 && pl_dispatch_less(k->o.policy, k->v[pos], k->v[f[(i - 1) / 2]])) {
        f[i] = f[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    f[i] = pos;
}

static int frontier_pop(const client *k, int *f, int *n)
{
    int top = f[0], last = f[--(*n)], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && pl_dispatch_less(k->o.policy, k->v[f[c + 1]], k->v[f[c]]))
            c++;
        if (!pl_dispatch_less(k->o.policy, k->v[f[c]], k->v[last]))
            break;
        f[i] = f[c];
        i = c;
    }
    if (*n > 0)
        f[i] = last;
    return top;
}

int pl_dispatch_ready_first(pl_dispatch *d, int id, pl_dispatch_req **out, int k)
{
    const client *c = job_of(d, id);
    if (!c || k <= 0 || c->n == 0)
        return 0;
    if (frontier_grow(d, 2 * k + 2) < 0)
        return -1;
    int n = 0, got = 0;
    frontier_push(c, d->frontier, &n, 0);
    while (n > 0 && got < k) {
        int pos = frontier_pop(c, d->frontier, &n);
        out[got++] = c->v[pos];
        if (2 * pos + 1 < c->n)
            frontier_push(c, d->frontier, &n, 2 * pos + 1);
        if (2 * pos + 2 < c->n)
            frontier_push(c, d->frontier, &n, 2 * pos + 2);
    }
    return got;
}

void pl_dispatch_counts_get(const pl_dispatch *d, pl_dispatch_counts *c)
{
    memset(c, 0, sizeof *c);
    c->capacity = d->capacity;
    c->reserve = d->reserve;
    c->upper_bound = d->upper;
    c->has_kv = d->has_kv;
    c->kv = d->kv;
    c->need_blocks = d->has_kv ? pl_dispatch_kv_need(&d->kv, 0, 0) : 0;
    c->inflight_peak = d->peak;
    c->jobs_inflight = d->jobs_inflight;
    c->interactive_inflight = d->interactive;
    c->jobs_ready = d->jobs_ready;
    c->interactive_waiting = d->iq_n;
    for (int i = 1; i < d->n; i++)
        c->clients += d->v[i].used;
}

int pl_dispatch_max_client(const pl_dispatch *d)
{
    return d->n - 1;
}

bool pl_dispatch_client_get(const pl_dispatch *d, int id, pl_dispatch_client *out)
{
    const client *k = job_of(d, id);
    if (!k)
        return false;
    *out = (pl_dispatch_client){
        .name = k->o.name, .weight = k->o.weight,
        .cap = k->o.cap > 0 && k->o.cap < d->capacity ? k->o.cap : d->capacity,
        .inflight = k->inflight, .ready = k->n, .attained = k->attained,
        .dispatched = k->dispatched, .completed = k->completed,
    };
    return true;
}
