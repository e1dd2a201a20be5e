/* conversation.c - seed 000's three pools (pending, pre-departure heap,
 * per-model in-flight) and the completion rules. See conversation.h. */
#include "schedulers/conversation.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct conv_state {
    uint8_t status;              /* pl_conv_status */
    bool finalized;
    int round;                   /* current round */
    int rounds_completed;
    uint64_t done_mask;          /* agents completed in the current round */
    pl_conv_req *queued;         /* pending + ready requests (cnext_ list) */
} conv_state;

/* A binary min-heap of ready requests (req_less order). */
typedef struct req_heap {
    pl_conv_req **v;
    int n, cap;
    pl_conv_policy policy;       /* the order (same in every heap) */
} req_heap;

typedef struct model_state {
    int capacity, inflight, ready;
    req_heap heap;               /* this model's share of pre-departure */
} model_state;

/* A doubly linked list through prev_/next_ (pending or in-flight). */
typedef struct req_list {
    pl_conv_req *head, *tail;
    int n;
} req_list;

#define CHUNK_REQS 256

struct pl_conv_sched {
    int n_agents, n_models, num_rounds, max_retries, n_conv;
    int agent_model[PL_CONV_MAX_AGENTS];
    uint64_t agent_deps[PL_CONV_MAX_AGENTS];
    uint64_t all_agents;
    conv_state *conv;
    model_state *model;
    int n_ready;                 /* pre-departure, all models */
    pl_conv_req **frontier;      /* scratch heap for ordered walks */
    int frontier_cap;
    req_list pending, inflight;
    pl_conv_req *free_reqs;
    void **chunks;               /* request slabs, freed at the end */
    int n_chunks, chunks_cap;
    uint64_t next_seq, next_ready_seq;
    pl_conv_policy policy;
};

/* ---- request allocation: slabs + free list, no malloc per request ---- */

static pl_conv_req *req_new(pl_conv_sched *s)
{
    if (!s->free_reqs) {
        if (s->n_chunks == s->chunks_cap) {
            int cap = s->chunks_cap ? 2 * s->chunks_cap : 8;
            void **c = realloc(s->chunks, (size_t)cap * sizeof *c);
            if (!c)
                return NULL;
            s->chunks = c;
            s->chunks_cap = cap;
        }
        pl_conv_req *slab = calloc(CHUNK_REQS, sizeof *slab);
        if (!slab)
            return NULL;
        s->chunks[s->n_chunks++] = slab;
        for (int i = CHUNK_REQS - 1; i >= 0; i--) {
            slab[i].next_ = s->free_reqs;
            s->free_reqs = &slab[i];
        }
    }
    pl_conv_req *r = s->free_reqs;
    s->free_reqs = r->next_;
    memset(r, 0, sizeof *r);
    r->heap_idx_ = -1;
    return r;
}

static void req_recycle(pl_conv_sched *s, pl_conv_req *r)
{
    r->pool = PL_CONV_POOL_NONE;
    r->next_ = s->free_reqs;
    s->free_reqs = r;
}

/* ---- lists ---- */

static void list_push(req_list *l, pl_conv_req *r)
{
    r->next_ = NULL;
    r->prev_ = l->tail;
    if (l->tail)
        l->tail->next_ = r;
    else
        l->head = r;
    l->tail = r;
    l->n++;
}

static void list_unlink(req_list *l, pl_conv_req *r)
{
    if (r->prev_)
        r->prev_->next_ = r->next_;
    else
        l->head = r->next_;
    if (r->next_)
        r->next_->prev_ = r->prev_;
    else
        l->tail = r->prev_;
    r->prev_ = r->next_ = NULL;
    l->n--;
}

static void conv_link(conv_state *c, pl_conv_req *r)
{
    r->cprev_ = NULL;
    r->cnext_ = c->queued;
    if (c->queued)
        c->queued->cprev_ = r;
    c->queued = r;
}

static void conv_unlink(conv_state *c, pl_conv_req *r)
{
    if (r->cprev_)
        r->cprev_->cnext_ = r->cnext_;
    else
        c->queued = r->cnext_;
    if (r->cnext_)
        r->cnext_->cprev_ = r->cprev_;
    r->cprev_ = r->cnext_ = NULL;
}

/* ---- the pre-departure pool ----
 *
 * One priority order across all models. It is stored as one binary heap per
 * model: dispatch compares the heads of the models that have a free slot
 * (O(models)), so a full model's requests are never walked over. (A single
 * heap gives the same order, but skipping a full model's requests costs a
 * walk past every one of them that ranks first: measured 20 us per
 * dispatch+completion with a full second model and 10,000 queued, against
 * 0.1 us here; see BENCHMARKS.md.) Peeking merges the heaps in order. */

/* Seed 000's key: (0 if reprompt else 1, -rounds_completed, conversation,
 * round), then creation order so equal keys keep a deterministic order. */
static inline bool key_priority(const pl_conv_req *a, const pl_conv_req *b)
{
    if (a->is_reprompt != b->is_reprompt)
        return a->is_reprompt;
    if (a->rounds_completed != b->rounds_completed)
        return a->rounds_completed > b->rounds_completed;
    if (a->conversation != b->conversation)
        return a->conversation < b->conversation;
    if (a->round != b->round)
        return a->round < b->round;
    return a->seq < b->seq;
}

/* The naive baseline: whole conversations in order, agents in index order
 * (a re-prompt keeps its agent's place). */
static inline bool key_naive(const pl_conv_req *a, const pl_conv_req *b)
{
    if (a->conversation != b->conversation)
        return a->conversation < b->conversation;
    if (a->round != b->round)
        return a->round < b->round;
    if (a->agent != b->agent)
        return a->agent < b->agent;
    return a->seq < b->seq;
}

static inline bool req_less_p(pl_conv_policy p, const pl_conv_req *a,
                              const pl_conv_req *b)
{
    switch (p) {
    case PL_CONV_POLICY_FCFS: return a->ready_seq < b->ready_seq;
    case PL_CONV_POLICY_NAIVE: return key_naive(a, b);
    default: return key_priority(a, b);
    }
}

#define req_less(h, a, b) req_less_p((h)->policy, (a), (b))

/*
 * The one sift-up and sift-down, shared by the model heaps and the
 * frontier: place r at slot i of the min-heap v[0..n) (policy order).
 * track: keep each request's heap_idx_ current. The model heaps do; the
 * frontier holds requests of the model heaps, whose heap_idx_ it must
 * leave alone. (Both are inlined with track constant.)
 */
static inline void slot_set(pl_conv_req **v, int i, pl_conv_req *r, bool track)
{
    v[i] = r;
    if (track)
        r->heap_idx_ = i;
}

static inline void sift_up(pl_conv_policy p, pl_conv_req **v, int i, pl_conv_req *r,
                           bool track)
{
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!req_less_p(p, r, v[parent]))
            break;
        slot_set(v, i, v[parent], track);
        i = parent;
    }
    slot_set(v, i, r, track);
}

static inline void sift_down(pl_conv_policy p, pl_conv_req **v, int n, int i,
                             pl_conv_req *r, bool track)
{
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && req_less_p(p, v[c + 1], v[c]))
            c++;
        if (!req_less_p(p, v[c], r))
            break;
        slot_set(v, i, v[c], track);
        i = c;
    }
    slot_set(v, i, r, track);
}

static int heap_push(req_heap *h, pl_conv_req *r)
{
    if (h->n == h->cap) {
        int cap = h->cap ? 2 * h->cap : 64;
        pl_conv_req **v = realloc(h->v, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        h->v = v;
        h->cap = cap;
    }
    h->n++;
    sift_up(h->policy, h->v, h->n - 1, r, true);
    return 0;
}

static void heap_remove(req_heap *h, pl_conv_req *r)
{
    int i = r->heap_idx_;
    pl_conv_req *last = h->v[--h->n];
    r->heap_idx_ = -1;
    if (i == h->n)
        return;
    if (i > 0 && req_less(h, last, h->v[(i - 1) / 2]))
        sift_up(h->policy, h->v, i, last, true);
    else
        sift_down(h->policy, h->v, h->n, i, last, true);
}

/* The frontier: a small min-heap of requests, used to walk the model heaps
 * together in priority order without modifying them. */
static int frontier_grow(pl_conv_sched *s, int need)
{
    if (need <= s->frontier_cap)
        return 0;
    int cap = s->frontier_cap ? s->frontier_cap : 64;
    while (cap < need)
        cap *= 2;
    pl_conv_req **f = realloc(s->frontier, (size_t)cap * sizeof *f);
    if (!f)
        return -1;
    s->frontier = f;
    s->frontier_cap = cap;
    return 0;
}

static void frontier_push(pl_conv_sched *s, int *n, pl_conv_req *r)
{
    int i = (*n)++;
    sift_up(s->policy, s->frontier, i, r, false);
}

static pl_conv_req *frontier_pop(pl_conv_sched *s, int *n)
{
    pl_conv_req *top = s->frontier[0], *last = s->frontier[--(*n)];
    if (*n > 0)
        sift_down(s->policy, s->frontier, *n, 0, last, false);
    return top;
}

/* Copy the first k ready requests, in dispatch-priority order, to out. */
static int ready_first_k(pl_conv_sched *s, pl_conv_req **out, int k)
{
    int n = 0, got = 0;
    if (frontier_grow(s, s->n_models + 2 * k + 2) < 0)
        return 0;
    for (int m = 0; m < s->n_models; m++)
        if (s->model[m].heap.n > 0)
            frontier_push(s, &n, s->model[m].heap.v[0]);
    while (n > 0 && got < k) {
        pl_conv_req *r = frontier_pop(s, &n);
        out[got++] = r;
        req_heap *h = &s->model[r->model].heap;
        int c = 2 * r->heap_idx_ + 1;
        if (c < h->n)
            frontier_push(s, &n, h->v[c]);
        if (c + 1 < h->n)
            frontier_push(s, &n, h->v[c + 1]);
    }
    return got;
}

/* ---- pools ---- */

static int make_ready(pl_conv_sched *s, pl_conv_req *r)
{
    r->ready_seq = s->next_ready_seq;     /* the heap orders by it (FCFS) */
    if (heap_push(&s->model[r->model].heap, r) < 0)
        return -1;
    r->pool = PL_CONV_POOL_READY;
    s->next_ready_seq++;
    s->model[r->model].ready++;
    s->n_ready++;
    return 0;
}

/* Remove a queued (pending or ready) request from its pool. */
static void unqueue(pl_conv_sched *s, pl_conv_req *r)
{
    if (r->pool == PL_CONV_POOL_PENDING) {
        list_unlink(&s->pending, r);
    } else if (r->pool == PL_CONV_POOL_READY) {
        heap_remove(&s->model[r->model].heap, r);
        s->model[r->model].ready--;
        s->n_ready--;
    }
    conv_unlink(&s->conv[r->conversation], r);
}

static pl_conv_req *enqueue(pl_conv_sched *s, int conv, int agent, int attempt,
                            bool reprompt)
{
    conv_state *c = &s->conv[conv];
    pl_conv_req *r = req_new(s);
    if (!r)
        return NULL;
    r->conversation = conv;
    r->round = c->round;
    r->agent = agent;
    r->model = s->agent_model[agent];
    r->attempt = attempt;
    r->is_reprompt = reprompt;
    r->rounds_completed = c->rounds_completed;
    r->seq = s->next_seq++;
    if ((s->agent_deps[agent] & ~c->done_mask) == 0) {
        if (make_ready(s, r) < 0) {
            req_recycle(s, r);
            return NULL;
        }
    } else {
        r->pool = PL_CONV_POOL_PENDING;
        list_push(&s->pending, r);
    }
    conv_link(c, r);
    return r;
}

static int create_round(pl_conv_sched *s, int conv)
{
    s->conv[conv].done_mask = 0;
    for (int a = 0; a < s->n_agents; a++)
        if (!enqueue(s, conv, a, 0, false))
            return -1;
    return 0;
}

/* Move the conversation's pending requests whose dependencies are now done. */
static void release_pending(pl_conv_sched *s, int conv)
{
    conv_state *c = &s->conv[conv];
    for (pl_conv_req *r = c->queued; r; r = r->cnext_) {
        if (r->pool != PL_CONV_POOL_PENDING ||
            (s->agent_deps[r->agent] & ~c->done_mask) != 0)
            continue;
        list_unlink(&s->pending, r);
        if (make_ready(s, r) < 0) {
            /* OOM growing the heap: keep it pending rather than lose it. */
            r->pool = PL_CONV_POOL_PENDING;
            list_push(&s->pending, r);
        }
    }
}

static unsigned fail_conv(pl_conv_sched *s, int conv)
{
    conv_state *c = &s->conv[conv];
    while (c->queued) {
        pl_conv_req *r = c->queued;
        unqueue(s, r);
        req_recycle(s, r);
    }
    c->status = PL_CONV_STATUS_FAILED;
    return PL_CONV_EV_FAILED;
}

/* ---- public ---- */

const char *pl_conv_policy_name(pl_conv_policy p)
{
    static const char *n[] = {"parley", "fcfs", "naive"};
    return (unsigned)p <= PL_CONV_POLICY_NAIVE ? n[p] : "?";
}

int pl_conv_policy_parse(const char *name)
{
    for (int p = 0; name && p <= PL_CONV_POLICY_NAIVE; p++)
        if (!strcmp(name, pl_conv_policy_name((pl_conv_policy)p)))
            return p;
    return -1;
}

static bool deps_acyclic(const uint64_t *deps, int n)
{
    uint64_t placed = 0;
    for (int pass = 0; pass < n; pass++) {
        bool progress = false;
        for (int a = 0; a < n; a++) {
            if (!(placed >> a & 1) && (deps[a] & ~placed) == 0) {
                placed |= 1ull << a;
                progress = true;
            }
        }
        if (!progress)
            break;
    }
    uint64_t all = n == 64 ? ~0ull : (1ull << n) - 1;
    return placed == all;
}

static bool config_ok(const pl_conv_sched_config *cfg)
{
    if (cfg->n_agents < 1 || cfg->n_agents > PL_CONV_MAX_AGENTS ||
        cfg->n_models < 1 || cfg->num_rounds < 1 || cfg->max_retries < 0 ||
        cfg->n_conversations < 0 || !cfg->agent_model || !cfg->agent_deps ||
        (unsigned)cfg->policy > PL_CONV_POLICY_NAIVE)
        return false;
    uint64_t all = cfg->n_agents == 64 ? ~0ull : (1ull << cfg->n_agents) - 1;
    for (int a = 0; a < cfg->n_agents; a++) {
        if (cfg->agent_model[a] < 0 || cfg->agent_model[a] >= cfg->n_models)
            return false;
        if ((cfg->agent_deps[a] & ~all) || (cfg->agent_deps[a] >> a & 1))
            return false;
    }
    return deps_acyclic(cfg->agent_deps, cfg->n_agents);
}

pl_conv_sched *pl_conv_sched_init(const pl_conv_sched_config *cfg)
{
    if (!config_ok(cfg))
        return NULL;
    pl_conv_sched *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->n_agents = cfg->n_agents;
    s->n_models = cfg->n_models;
    s->num_rounds = cfg->num_rounds;
    s->max_retries = cfg->max_retries;
    s->n_conv = cfg->n_conversations;
    memcpy(s->agent_model, cfg->agent_model, (size_t)cfg->n_agents * sizeof(int));
    memcpy(s->agent_deps, cfg->agent_deps, (size_t)cfg->n_agents * sizeof(uint64_t));
    s->all_agents = s->n_agents == 64 ? ~0ull : (1ull << s->n_agents) - 1;
    s->conv = calloc((size_t)s->n_conv + 1, sizeof *s->conv);
    s->model = calloc((size_t)s->n_models, sizeof *s->model);
    if (!s->conv || !s->model)
        goto fail;
    s->policy = cfg->policy;
    for (int m = 0; m < s->n_models; m++) {
        s->model[m].capacity = 1;
        s->model[m].heap.policy = cfg->policy;
    }
    return s;
fail:
    pl_conv_sched_free(s);
    return NULL;
}

void pl_conv_sched_free(pl_conv_sched *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n_chunks; i++)
        free(s->chunks[i]);
    free(s->chunks);
    for (int m = 0; s->model && m < s->n_models; m++)
        free(s->model[m].heap.v);
    free(s->frontier);
    free(s->conv);
    free(s->model);
    free(s);
}

void pl_conv_sched_set_capacity(pl_conv_sched *s, int model, int capacity)
{
    if (model >= 0 && model < s->n_models)
        s->model[model].capacity = capacity < 1 ? 1 : capacity;
}

int pl_conv_sched_start(pl_conv_sched *s, int conv)
{
    if (conv < 0 || conv >= s->n_conv ||
        s->conv[conv].status != PL_CONV_STATUS_IDLE)
        return -1;
    s->conv[conv].status = PL_CONV_STATUS_ACTIVE;
    if (create_round(s, conv) < 0) {
        fail_conv(s, conv);
        return -1;
    }
    return 0;
}

/* Move a ready request to in-flight. */
static pl_conv_req *take(pl_conv_sched *s, pl_conv_req *r)
{
    unqueue(s, r);
    r->pool = PL_CONV_POOL_INFLIGHT;
    list_push(&s->inflight, r);
    s->model[r->model].inflight++;
    return r;
}

pl_conv_req *pl_conv_sched_dispatch(pl_conv_sched *s)
{
    pl_conv_req *best = NULL;
    if (s->policy == PL_CONV_POLICY_NAIVE && s->inflight.n > 0)
        return NULL;
    for (int m = 0; m < s->n_models; m++) {
        const model_state *ms = &s->model[m];
        if (ms->heap.n > 0 && ms->inflight < ms->capacity &&
            (!best || req_less(s, ms->heap.v[0], best)))
            best = ms->heap.v[0];
    }
    return best ? take(s, best) : NULL;
}

bool pl_conv_sched_can_dispatch(const pl_conv_sched *s, int m)
{
    if (m < 0 || m >= s->n_models)
        return false;
    const model_state *ms = &s->model[m];
    if (s->policy == PL_CONV_POLICY_NAIVE && s->inflight.n > 0)
        return false;
    return ms->heap.n > 0 && ms->inflight < ms->capacity;
}

pl_conv_req *pl_conv_sched_dispatch_model(pl_conv_sched *s, int m)
{
    return pl_conv_sched_can_dispatch(s, m) ? take(s, s->model[m].heap.v[0]) : NULL;
}

static unsigned complete_ok(pl_conv_sched *s, conv_state *c, int conv, int agent)
{
    c->done_mask |= 1ull << agent;
    if (c->done_mask != s->all_agents) {
        release_pending(s, conv);
        return 0;
    }
    c->rounds_completed++;
    if (c->rounds_completed >= s->num_rounds) {
        c->status = PL_CONV_STATUS_SUCCEEDED;
        return PL_CONV_EV_ROUND_DONE | PL_CONV_EV_SUCCEEDED;
    }
    c->round++;
    if (create_round(s, conv) < 0)
        return PL_CONV_EV_ROUND_DONE | fail_conv(s, conv);
    return PL_CONV_EV_ROUND_DONE;
}

unsigned pl_conv_sched_complete(pl_conv_sched *s, pl_conv_req *r,
                                pl_conv_outcome outcome)
{
    int conv = r->conversation, agent = r->agent, attempt = r->attempt;
    conv_state *c = &s->conv[conv];
    list_unlink(&s->inflight, r);
    s->model[r->model].inflight--;
    req_recycle(s, r);
    if (c->status != PL_CONV_STATUS_ACTIVE)
        return PL_CONV_EV_STALE;
    switch (outcome) {
    case PL_CONV_OK:
        return complete_ok(s, c, conv, agent);
    case PL_CONV_INVALID:
        if (attempt < s->max_retries) {
            if (enqueue(s, conv, agent, attempt + 1, true))
                return PL_CONV_EV_REPROMPT;
        }
        return fail_conv(s, conv);
    default:
        return fail_conv(s, conv);
    }
}

unsigned pl_conv_sched_fail(pl_conv_sched *s, int conv)
{
    if (conv < 0 || conv >= s->n_conv)
        return 0;
    uint8_t st = s->conv[conv].status;
    if (st != PL_CONV_STATUS_ACTIVE && st != PL_CONV_STATUS_IDLE)
        return 0;
    return fail_conv(s, conv);
}

bool pl_conv_sched_finalize(pl_conv_sched *s, int conv)
{
    if (conv < 0 || conv >= s->n_conv)
        return false;
    conv_state *c = &s->conv[conv];
    if (c->finalized || (c->status != PL_CONV_STATUS_SUCCEEDED &&
                         c->status != PL_CONV_STATUS_FAILED))
        return false;
    c->finalized = true;
    return true;
}

pl_conv_status pl_conv_sched_status(const pl_conv_sched *s, int conv)
{
    if (conv < 0 || conv >= s->n_conv)
        return PL_CONV_STATUS_IDLE;
    return (pl_conv_status)s->conv[conv].status;
}

int pl_conv_sched_rounds_completed(const pl_conv_sched *s, int conv)
{
    return conv >= 0 && conv < s->n_conv ? s->conv[conv].rounds_completed : 0;
}

uint64_t pl_conv_sched_round_done_mask(const pl_conv_sched *s, int conv)
{
    return conv >= 0 && conv < s->n_conv ? s->conv[conv].done_mask : 0;
}

void pl_conv_sched_counts(const pl_conv_sched *s, pl_conv_counts *c)
{
    memset(c, 0, sizeof *c);
    c->pending = s->pending.n;
    c->ready = s->n_ready;
    c->inflight = s->inflight.n;
    for (int i = 0; i < s->n_conv; i++) {
        switch (s->conv[i].status) {
        case PL_CONV_STATUS_IDLE: c->idle++; break;
        case PL_CONV_STATUS_ACTIVE: c->active++; break;
        case PL_CONV_STATUS_SUCCEEDED: c->succeeded++; break;
        default: c->failed++; break;
        }
    }
}

void pl_conv_sched_model_counts(const pl_conv_sched *s, int model,
                                int *inflight, int *capacity, int *ready)
{
    const model_state *m = &s->model[model];
    if (inflight)
        *inflight = m->inflight;
    if (capacity)
        *capacity = m->capacity;
    if (ready)
        *ready = m->ready;
}

static void entry_of(pl_conv_entry *e, const pl_conv_req *r)
{
    e->conversation = r->conversation;
    e->round = r->round;
    e->agent = r->agent;
    e->model = r->model;
    e->attempt = r->attempt;
    e->is_reprompt = r->is_reprompt;
}

int pl_conv_sched_peek(pl_conv_sched *s, pl_conv_pool pool,
                       pl_conv_entry *out, int k)
{
    if (k <= 0)
        return 0;
    int n = 0;
    if (pool == PL_CONV_POOL_READY) {
        pl_conv_req **buf = malloc((size_t)k * sizeof *buf);
        n = buf ? ready_first_k(s, buf, k) : 0;
        for (int i = 0; i < n; i++)
            entry_of(&out[i], buf[i]);
        free(buf);
        return n;
    }
    const req_list *l = pool == PL_CONV_POOL_PENDING ? &s->pending
                      : pool == PL_CONV_POOL_INFLIGHT ? &s->inflight : NULL;
    for (const pl_conv_req *r = l ? l->head : NULL; r && n < k; r = r->next_)
        entry_of(&out[n++], r);
    return n;
}

pl_conv_req *pl_conv_sched_inflight_first(pl_conv_sched *s)
{
    return s->inflight.head;
}

pl_conv_req *pl_conv_sched_inflight_next(pl_conv_req *r)
{
    return r->next_;
}

int pl_conv_sched_next_need(pl_conv_sched *s, int *need)
{
    pl_conv_req **buf = malloc(((size_t)s->n_ready + 1) * sizeof *buf);
    int *rank = calloc((size_t)s->n_models, sizeof *rank);
    if (!buf || !rank) {
        free(buf);
        free(rank);
        return -1;
    }
    for (int c = 0; c < s->n_conv; c++) {
        uint8_t st = s->conv[c].status;
        need[c] = st == PL_CONV_STATUS_IDLE ? PL_CONV_NEED_NONE
                : st != PL_CONV_STATUS_ACTIVE ? PL_CONV_NEED_DONE : INT_MAX;
    }
    /* Running: needed now. A pending request waits on requests of its
     * conversation that are running or ready, which set its need. */
    for (const pl_conv_req *r = s->inflight.head; r; r = r->next_)
        need[r->conversation] = need[r->conversation] == INT_MAX ? 0 : need[r->conversation];
    /* Ready: the wave of its model's dispatch order it will leave in. */
    int n = ready_first_k(s, buf, s->n_ready);
    for (int i = 0; i < n; i++) {
        const model_state *m = &s->model[buf[i]->model];
        int nd = 1 + rank[buf[i]->model]++ / (m->capacity > 0 ? m->capacity : 1);
        int *cur = &need[buf[i]->conversation];
        if (*cur == INT_MAX || (*cur > nd && *cur != 0))
            *cur = nd;
    }
    for (int c = 0; c < s->n_conv; c++)
        if (need[c] == INT_MAX)
            need[c] = 0;
    free(buf);
    free(rank);
    return 0;
}
