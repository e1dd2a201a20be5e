/* conversation.c - seed 000's three pools (pending, pre-departure heap,
 * per-model in-flight) and the completion rules. See conversation.h. */
#include "schedulers/conversation.h"

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

typedef struct model_state {
    int capacity, inflight, ready;
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
    pl_conv_req **heap;          /* pre-departure min-heap */
    int heap_n, heap_cap;
    int *frontier;               /* scratch heap of heap indices */
    int frontier_cap;
    req_list pending, inflight;
    pl_conv_req *free_reqs;
    void **chunks;               /* request slabs, freed at the end */
    int n_chunks, chunks_cap;
    uint64_t next_seq;
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

/* ---- the pre-departure heap ---- */

/* Seed 000's key: (0 if reprompt else 1, -rounds_completed, conversation,
 * round), then creation order so equal keys keep a deterministic order. */
static inline bool req_less(const pl_conv_req *a, const pl_conv_req *b)
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

static inline void heap_set(pl_conv_sched *s, int i, pl_conv_req *r)
{
    s->heap[i] = r;
    r->heap_idx_ = i;
}

static void heap_up(pl_conv_sched *s, int i)
{
    pl_conv_req *r = s->heap[i];
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!req_less(r, s->heap[p]))
            break;
        heap_set(s, i, s->heap[p]);
        i = p;
    }
    heap_set(s, i, r);
}

static void heap_down(pl_conv_sched *s, int i)
{
    pl_conv_req *r = s->heap[i];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= s->heap_n)
            break;
        if (c + 1 < s->heap_n && req_less(s->heap[c + 1], s->heap[c]))
            c++;
        if (!req_less(s->heap[c], r))
            break;
        heap_set(s, i, s->heap[c]);
        i = c;
    }
    heap_set(s, i, r);
}

static int heap_push(pl_conv_sched *s, pl_conv_req *r)
{
    if (s->heap_n == s->heap_cap) {
        int cap = s->heap_cap ? 2 * s->heap_cap : 64;
        pl_conv_req **h = realloc(s->heap, (size_t)cap * sizeof *h);
        if (!h)
            return -1;
        s->heap = h;
        s->heap_cap = cap;
    }
    heap_set(s, s->heap_n++, r);
    heap_up(s, s->heap_n - 1);
    return 0;
}

static void heap_remove(pl_conv_sched *s, pl_conv_req *r)
{
    int i = r->heap_idx_;
    pl_conv_req *last = s->heap[--s->heap_n];
    r->heap_idx_ = -1;
    if (i == s->heap_n)
        return;
    heap_set(s, i, last);
    if (i > 0 && req_less(last, s->heap[(i - 1) / 2]))
        heap_up(s, i);
    else
        heap_down(s, i);
}

/* The frontier is a small min-heap of indices into the main heap, used to
 * walk the main heap in priority order without modifying it. */
static bool frontier_less(const pl_conv_sched *s, int a, int b)
{
    return req_less(s->heap[a], s->heap[b]);
}

static int frontier_grow(pl_conv_sched *s, int need)
{
    if (need <= s->frontier_cap)
        return 0;
    int cap = s->frontier_cap ? s->frontier_cap : 64;
    while (cap < need)
        cap *= 2;
    int *f = realloc(s->frontier, (size_t)cap * sizeof *f);
    if (!f)
        return -1;
    s->frontier = f;
    s->frontier_cap = cap;
    return 0;
}

static void frontier_push(pl_conv_sched *s, int *n, int idx)
{
    int i = (*n)++;
    while (i > 0 && frontier_less(s, idx, s->frontier[(i - 1) / 2])) {
        s->frontier[i] = s->frontier[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->frontier[i] = idx;
}

static int frontier_pop(pl_conv_sched *s, int *n)
{
    int top = s->frontier[0], last = s->frontier[--(*n)], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && frontier_less(s, s->frontier[c + 1], s->frontier[c]))
            c++;
        if (!frontier_less(s, s->frontier[c], last))
            break;
        s->frontier[i] = s->frontier[c];
        i = c;
    }
    if (*n > 0)
        s->frontier[i] = last;
    return top;
}

/* Visit ready requests in priority order; stop when visit() returns true.
 * Returns the heap index where it stopped, or -1. Cost: O(v log v) for v
 * visited entries. */
static int heap_walk(pl_conv_sched *s, bool (*visit)(pl_conv_sched *, int, void *),
                     void *ud)
{
    int n = 0;
    if (s->heap_n == 0 || frontier_grow(s, s->heap_n + 1) < 0)
        return -1;
    frontier_push(s, &n, 0);
    while (n > 0) {
        int i = frontier_pop(s, &n);
        if (visit(s, i, ud))
            return i;
        if (2 * i + 1 < s->heap_n)
            frontier_push(s, &n, 2 * i + 1);
        if (2 * i + 2 < s->heap_n)
            frontier_push(s, &n, 2 * i + 2);
    }
    return -1;
}

/* ---- pools ---- */

static int make_ready(pl_conv_sched *s, pl_conv_req *r)
{
    if (heap_push(s, r) < 0)
        return -1;
    r->pool = PL_CONV_POOL_READY;
    s->model[r->model].ready++;
    return 0;
}

/* Remove a queued (pending or ready) request from its pool. */
static void unqueue(pl_conv_sched *s, pl_conv_req *r)
{
    if (r->pool == PL_CONV_POOL_PENDING) {
        list_unlink(&s->pending, r);
    } else if (r->pool == PL_CONV_POOL_READY) {
        heap_remove(s, r);
        s->model[r->model].ready--;
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
        cfg->n_conversations < 0 || !cfg->agent_model || !cfg->agent_deps)
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
    for (int m = 0; m < s->n_models; m++)
        s->model[m].capacity = 1;
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
    free(s->heap);
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

static bool visit_has_room(pl_conv_sched *s, int i, void *ud)
{
    const model_state *m = &s->model[s->heap[i]->model];
    return m->inflight < m->capacity;
}

pl_conv_req *pl_conv_sched_dispatch(pl_conv_sched *s)
{
    /* Fast exit: no model with room has anything ready. */
    bool any = false;
    for (int m = 0; m < s->n_models && !any; m++)
        any = s->model[m].ready > 0 && s->model[m].inflight < s->model[m].capacity;
    if (!any)
        return NULL;
    int i = 0;
    if (!visit_has_room(s, 0, NULL))
        i = heap_walk(s, visit_has_room, NULL);
    if (i < 0)
        return NULL;
    pl_conv_req *r = s->heap[i];
    unqueue(s, r);
    r->pool = PL_CONV_POOL_INFLIGHT;
    list_push(&s->inflight, r);
    s->model[r->model].inflight++;
    return r;
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
    c->ready = s->heap_n;
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

typedef struct peek_ctx {
    pl_conv_entry *out;
    int k, n;
} peek_ctx;

static bool visit_collect(pl_conv_sched *s, int i, void *ud)
{
    peek_ctx *p = ud;
    entry_of(&p->out[p->n++], s->heap[i]);
    return p->n >= p->k;
}

int pl_conv_sched_peek(pl_conv_sched *s, pl_conv_pool pool,
                       pl_conv_entry *out, int k)
{
    if (k <= 0)
        return 0;
    if (pool == PL_CONV_POOL_READY) {
        peek_ctx p = { out, k, 0 };
        heap_walk(s, visit_collect, &p);
        return p.n;
    }
    const req_list *l = pool == PL_CONV_POOL_PENDING ? &s->pending
                      : pool == PL_CONV_POOL_INFLIGHT ? &s->inflight : NULL;
    int n = 0;
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
