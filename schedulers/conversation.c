/* conversation.c - a job's conversations: the pending pool, the in-flight
 * list, the completion rules; ready requests go to their model's dispatch.
 * See conversation.h. */
#include "schedulers/conversation.h"

#include <limits.h>
#include <stddef.h>
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

/* The job on one model: its dispatch and its client id there. */
typedef struct conv_model {
    pl_convs *c;
    int model;
    pl_dispatch *d;
    int client;                  /* -1: not joined */
    int ready;                   /* its requests in that dispatch's pool */
} conv_model;

/* A doubly linked list through prev_/next_ (pending or in-flight). */
typedef struct req_list {
    pl_conv_req *head, *tail;
    int n;
} req_list;

#define CHUNK_REQS 256

struct pl_convs {
    int n_agents, n_models, num_rounds, max_retries, n_conv;
    int agent_model[PL_CONV_MAX_AGENTS];
    uint64_t agent_deps[PL_CONV_MAX_AGENTS];
    int agent_max_tokens[PL_CONV_MAX_AGENTS];
    uint64_t all_agents;
    pl_dispatch_policy policy;
    conv_state *conv;
    conv_model *model;
    int n_ready;                 /* pre-departure, all models */
    req_list pending, inflight;
    pl_conv_req *free_reqs;
    void **chunks;               /* request slabs, freed at the end */
    int n_chunks, chunks_cap;
    uint64_t next_seq, next_ready_seq;
    void (*submit)(void *ud, pl_conv_req *r);
    bool (*may_go)(void *ud);
    void *ud;
};

/* ---- request allocation: slabs + free list, no malloc per request ---- */

static pl_conv_req *req_new(pl_convs *c)
{
    if (!c->free_reqs) {
        if (c->n_chunks == c->chunks_cap) {
            int cap = c->chunks_cap ? 2 * c->chunks_cap : 8;
            void **v = realloc(c->chunks, (size_t)cap * sizeof *v);
            if (!v)
                return NULL;
            c->chunks = v;
            c->chunks_cap = cap;
        }
        pl_conv_req *slab = calloc(CHUNK_REQS, sizeof *slab);
        if (!slab)
            return NULL;
        c->chunks[c->n_chunks++] = slab;
        for (int i = CHUNK_REQS - 1; i >= 0; i--) {
            slab[i].next_ = c->free_reqs;
            c->free_reqs = &slab[i];
        }
    }
    pl_conv_req *r = c->free_reqs;
    c->free_reqs = r->next_;
    memset(r, 0, sizeof *r);
    return r;
}

static void req_recycle(pl_convs *c, pl_conv_req *r)
{
    r->pool = PL_CONV_POOL_NONE;
    r->next_ = c->free_reqs;
    c->free_reqs = r;
}

static pl_conv_req *req_of(pl_dispatch_req *d)
{
    return (pl_conv_req *)((char *)d - offsetof(pl_conv_req, d));
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

static void conv_link(conv_state *s, pl_conv_req *r)
{
    r->cprev_ = NULL;
    r->cnext_ = s->queued;
    if (s->queued)
        s->queued->cprev_ = r;
    s->queued = r;
}

static void conv_unlink(conv_state *s, pl_conv_req *r)
{
    if (r->cprev_)
        r->cprev_->cnext_ = r->cnext_;
    else
        s->queued = r->cnext_;
    if (r->cnext_)
        r->cnext_->cprev_ = r->cprev_;
    r->cprev_ = r->cnext_ = NULL;
}

/* ---- admission (dispatch calls back) ---- */

/* The naive baseline runs one request at a time across the job's models,
 * the best of their heads first. */
static int naive_next_model(pl_convs *c)
{
    int best = -1;
    pl_dispatch_req *bh = NULL;
    for (int m = 0; m < c->n_models; m++) {
        pl_dispatch_req *h;
        conv_model *cm = &c->model[m];
        if (cm->ready > 0 && pl_dispatch_ready_first(cm->d, cm->client, &h, 1) == 1 &&
            (!bh || pl_dispatch_less(c->policy, h, bh))) {
            bh = h;
            best = m;
        }
    }
    return best;
}

static bool model_may_go(void *ud)
{
    conv_model *cm = ud;
    pl_convs *c = cm->c;
    if (c->may_go && !c->may_go(c->ud))
        return false;
    if (c->policy != PL_DISPATCH_NAIVE)
        return true;
    return c->inflight.n == 0 && naive_next_model(c) == cm->model;
}

/* Dispatch admitted r: it joins the job's in-flight list and is sent. */
static void admitted(void *ud, pl_dispatch_req *d)
{
    pl_convs *c = ud;
    pl_conv_req *r = req_of(d);
    conv_unlink(&c->conv[r->conversation], r);
    c->model[r->model].ready--;
    c->n_ready--;
    r->pool = PL_CONV_POOL_INFLIGHT;
    list_push(&c->inflight, r);
    c->submit(c->ud, r);
}

/* ---- pools ---- */

static int make_ready(pl_convs *c, pl_conv_req *r)
{
    conv_model *cm = &c->model[r->model];
    r->d.key = (pl_dispatch_key){r->is_reprompt, r->rounds_completed, r->conversation,
                                 r->round};
    r->d.agent = r->agent;
    r->d.max_tokens = c->agent_max_tokens[r->agent];
    r->d.ready_seq = c->next_ready_seq;  /* fcfs orders by it */
    r->d.submit = admitted;
    r->d.ud = c;
    if (pl_dispatch_push(cm->d, cm->client, &r->d) < 0)
        return -1;
    r->pool = PL_CONV_POOL_READY;
    c->next_ready_seq++;
    cm->ready++;
    c->n_ready++;
    return 0;
}

/* Remove a queued (pending or ready) request from its pool. */
static void unqueue(pl_convs *c, pl_conv_req *r)
{
    if (r->pool == PL_CONV_POOL_PENDING) {
        list_unlink(&c->pending, r);
    } else if (r->pool == PL_CONV_POOL_READY) {
        pl_dispatch_remove(c->model[r->model].d, &r->d);
        c->model[r->model].ready--;
        c->n_ready--;
    }
    conv_unlink(&c->conv[r->conversation], r);
}

static pl_conv_req *enqueue(pl_convs *c, int conv, int agent, int attempt, bool reprompt)
{
    conv_state *s = &c->conv[conv];
    pl_conv_req *r = req_new(c);
    if (!r)
        return NULL;
    r->conversation = conv;
    r->round = s->round;
    r->agent = agent;
    r->model = c->agent_model[agent];
    r->attempt = attempt;
    r->is_reprompt = reprompt;
    r->rounds_completed = s->rounds_completed;
    r->d.seq = c->next_seq++;
    if ((c->agent_deps[agent] & ~s->done_mask) == 0) {
        if (make_ready(c, r) < 0) {
            req_recycle(c, r);
            return NULL;
        }
    } else {
        r->pool = PL_CONV_POOL_PENDING;
        list_push(&c->pending, r);
    }
    conv_link(s, r);
    return r;
}

static int create_round(pl_convs *c, int conv)
{
    c->conv[conv].done_mask = 0;
    for (int a = 0; a < c->n_agents; a++)
        if (!enqueue(c, conv, a, 0, false))
            return -1;
    return 0;
}

static unsigned fail_conv(pl_convs *c, int conv)
{
    conv_state *s = &c->conv[conv];
    while (s->queued) {
        pl_conv_req *r = s->queued;
        unqueue(c, r);
        req_recycle(c, r);
    }
    s->status = PL_CONV_STATUS_FAILED;
    return PL_CONV_EV_FAILED;
}

/* Move the conversation's pending requests whose dependencies are now
 * done to their dispatch. Out of memory there fails the conversation (a
 * request left pending would wait for ever). */
static unsigned release_pending(pl_convs *c, int conv)
{
    conv_state *s = &c->conv[conv];
    for (pl_conv_req *r = s->queued; r; r = r->cnext_) {
        if (r->pool != PL_CONV_POOL_PENDING || (c->agent_deps[r->agent] & ~s->done_mask) != 0)
            continue;
        list_unlink(&c->pending, r);
        r->pool = PL_CONV_POOL_NONE;
        if (make_ready(c, r) < 0) {
            r->pool = PL_CONV_POOL_PENDING;      /* so that unqueue finds it */
            list_push(&c->pending, r);
            return fail_conv(c, conv) | PL_CONV_EV_NOMEM;
        }
    }
    return 0;
}

/* ---- creation ---- */

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

static bool config_ok(const pl_convs_config *cfg)
{
    if (cfg->n_agents < 1 || cfg->n_agents > PL_CONV_MAX_AGENTS || cfg->n_models < 1 ||
        cfg->num_rounds < 1 || cfg->max_retries < 0 || cfg->n_conversations < 0 ||
        !cfg->agent_model || !cfg->agent_deps || !cfg->dispatch || !cfg->submit ||
        (unsigned)cfg->policy > PL_DISPATCH_NAIVE)
        return false;
    for (int m = 0; m < cfg->n_models; m++)
        if (!cfg->dispatch[m])
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

static int join_models(pl_convs *c, const pl_convs_config *cfg)
{
    for (int m = 0; m < c->n_models; m++) {
        conv_model *cm = &c->model[m];
        *cm = (conv_model){.c = c, .model = m, .d = cfg->dispatch[m], .client = -1};
        pl_dispatch_client_opts o = {
            .name = cfg->name, .weight = cfg->weight,
            .cap = cfg->model_cap ? cfg->model_cap[m] : 0, .policy = cfg->policy,
            .may_go = model_may_go, .ud = cm,
        };
        cm->client = pl_dispatch_join(cm->d, &o);
        if (cm->client < 0)
            return -1;
    }
    return 0;
}

pl_convs *pl_convs_new(const pl_convs_config *cfg)
{
    if (!config_ok(cfg))
        return NULL;
    pl_convs *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->n_agents = cfg->n_agents;
    c->n_models = cfg->n_models;
    c->num_rounds = cfg->num_rounds;
    c->max_retries = cfg->max_retries;
    c->n_conv = cfg->n_conversations;
    c->policy = cfg->policy;
    c->submit = cfg->submit;
    c->may_go = cfg->may_go;
    c->ud = cfg->ud;
    memcpy(c->agent_model, cfg->agent_model, (size_t)cfg->n_agents * sizeof(int));
    memcpy(c->agent_deps, cfg->agent_deps, (size_t)cfg->n_agents * sizeof(uint64_t));
    if (cfg->agent_max_tokens)
        memcpy(c->agent_max_tokens, cfg->agent_max_tokens, (size_t)cfg->n_agents * sizeof(int));
    c->all_agents = c->n_agents == 64 ? ~0ull : (1ull << c->n_agents) - 1;
    c->conv = calloc((size_t)c->n_conv + 1, sizeof *c->conv);
    c->model = calloc((size_t)c->n_models, sizeof *c->model);
    if (!c->conv || !c->model)
        goto fail;
    for (int m = 0; m < c->n_models; m++)
        c->model[m].client = -1;
    if (join_models(c, cfg) < 0)
        goto fail;
    return c;
fail:
    pl_convs_free(c);
    return NULL;
}

void pl_convs_detach(pl_convs *c)
{
    for (int m = 0; c->model && m < c->n_models; m++) {
        if (c->model[m].client >= 0)
            pl_dispatch_leave(c->model[m].d, c->model[m].client);
        c->model[m].client = -1;
    }
}

void pl_convs_free(pl_convs *c)
{
    if (!c)
        return;
    for (int q = 0; c->conv && q < c->n_conv; q++)
        while (c->conv[q].queued)
            unqueue(c, c->conv[q].queued);
    pl_convs_detach(c);
    for (int i = 0; i < c->n_chunks; i++)
        free(c->chunks[i]);
    free(c->chunks);
    free(c->conv);
    free(c->model);
    free(c);
}

/* ---- public ---- */

int pl_convs_start(pl_convs *c, int conv)
{
    if (conv < 0 || conv >= c->n_conv || c->conv[conv].status != PL_CONV_STATUS_IDLE)
        return -1;
    c->conv[conv].status = PL_CONV_STATUS_ACTIVE;
    if (create_round(c, conv) < 0) {
        fail_conv(c, conv);
        return -1;
    }
    return 0;
}

void pl_convs_pump(pl_convs *c)
{
    for (int m = 0; m < c->n_models; m++) {
        bool dup = false;
        for (int k = 0; k < m; k++)
            dup |= c->model[k].d == c->model[m].d;
        if (!dup)
            pl_dispatch_pump(c->model[m].d);
    }
}

static unsigned complete_ok(pl_convs *c, conv_state *s, int conv, int agent)
{
    s->done_mask |= 1ull << agent;
    if (s->done_mask != c->all_agents)
        return release_pending(c, conv);
    s->rounds_completed++;
    if (s->rounds_completed >= c->num_rounds) {
        s->status = PL_CONV_STATUS_SUCCEEDED;
        return PL_CONV_EV_ROUND_DONE | PL_CONV_EV_SUCCEEDED;
    }
    s->round++;
    if (create_round(c, conv) < 0)
        return PL_CONV_EV_ROUND_DONE | fail_conv(c, conv) | PL_CONV_EV_NOMEM;
    return PL_CONV_EV_ROUND_DONE;
}

unsigned pl_convs_complete(pl_convs *c, pl_conv_req *r, pl_conv_outcome outcome,
                           double cost)
{
    int conv = r->conversation, agent = r->agent, attempt = r->attempt;
    conv_state *s = &c->conv[conv];
    list_unlink(&c->inflight, r);
    pl_dispatch_done(c->model[r->model].d, &r->d, cost);
    req_recycle(c, r);
    if (s->status != PL_CONV_STATUS_ACTIVE)
        return PL_CONV_EV_STALE;
    switch (outcome) {
    case PL_CONV_OK:
        return complete_ok(c, s, conv, agent);
    case PL_CONV_INVALID:
        if (attempt >= c->max_retries)
            return fail_conv(c, conv);
        if (enqueue(c, conv, agent, attempt + 1, true))
            return PL_CONV_EV_REPROMPT;
        return fail_conv(c, conv) | PL_CONV_EV_NOMEM;
    default:
        return fail_conv(c, conv);
    }
}

unsigned pl_convs_fail(pl_convs *c, int conv)
{
    if (conv < 0 || conv >= c->n_conv)
        return 0;
    uint8_t st = c->conv[conv].status;
    if (st != PL_CONV_STATUS_ACTIVE && st != PL_CONV_STATUS_IDLE)
        return 0;
    return fail_conv(c, conv);
}

bool pl_convs_finalize(pl_convs *c, int conv)
{
    if (conv < 0 || conv >= c->n_conv)
        return false;
    conv_state *s = &c->conv[conv];
    if (s->finalized ||
        (s->status != PL_CONV_STATUS_SUCCEEDED && s->status != PL_CONV_STATUS_FAILED))
        return false;
    s->finalized = true;
    return true;
}

pl_conv_status pl_convs_status(const pl_convs *c, int conv)
{
    if (conv < 0 || conv >= c->n_conv)
        return PL_CONV_STATUS_IDLE;
    return (pl_conv_status)c->conv[conv].status;
}

int pl_convs_rounds_completed(const pl_convs *c, int conv)
{
    return conv >= 0 && conv < c->n_conv ? c->conv[conv].rounds_completed : 0;
}

uint64_t pl_convs_round_done_mask(const pl_convs *c, int conv)
{
    return conv >= 0 && conv < c->n_conv ? c->conv[conv].done_mask : 0;
}

void pl_convs_counts(const pl_convs *c, pl_conv_counts *k)
{
    memset(k, 0, sizeof *k);
    k->pending = c->pending.n;
    k->ready = c->n_ready;
    k->inflight = c->inflight.n;
    for (int i = 0; i < c->n_conv; i++) {
        switch (c->conv[i].status) {
        case PL_CONV_STATUS_IDLE: k->idle++; break;
        case PL_CONV_STATUS_ACTIVE: k->active++; break;
        case PL_CONV_STATUS_SUCCEEDED: k->succeeded++; break;
        default: k->failed++; break;
        }
    }
}

void pl_convs_model_counts(const pl_convs *c, int model, int *inflight, int *capacity,
                           int *ready)
{
    pl_dispatch_client k = {0};
    const conv_model *cm = &c->model[model];
    if (cm->client >= 0)
        pl_dispatch_client_get(cm->d, cm->client, &k);
    if (inflight)
        *inflight = k.inflight;
    if (capacity)
        *capacity = k.cap;
    if (ready)
        *ready = cm->ready;
}

pl_conv_req *pl_convs_inflight_first(pl_convs *c)
{
    return c->inflight.head;
}

pl_conv_req *pl_convs_inflight_next(pl_conv_req *r)
{
    return r->next_;
}

/* ---- ordered views: pools, next needs ---- */

static void entry_of(pl_conv_entry *e, const pl_conv_req *r)
{
    *e = (pl_conv_entry){r->conversation, r->round, r->agent, r->model, r->attempt,
                         r->is_reprompt};
}

/* The first k ready requests of the job, its models merged in policy
 * order, into out (k slots). Returns the count, -1 on OOM. */
static int ready_first_k(pl_convs *c, pl_conv_req **out, int k)
{
    int nm = c->n_models, got = 0;
    pl_dispatch_req **v = malloc(((size_t)nm * (size_t)k + 1) * sizeof *v);
    int *n = calloc((size_t)nm, sizeof *n), *at = calloc((size_t)nm, sizeof *at);
    if (!v || !n || !at)
        got = -1;
    for (int m = 0; got == 0 && m < nm; m++) {
        conv_model *cm = &c->model[m];
        n[m] = cm->ready > 0 ? pl_dispatch_ready_first(cm->d, cm->client, v + m * k, k) : 0;
        if (n[m] < 0)
            got = -1;
    }
    while (got >= 0 && got < k) {
        int best = -1;
        for (int m = 0; m < nm; m++)
            if (at[m] < n[m] && (best < 0 || pl_dispatch_less(c->policy, v[m * k + at[m]],
                                                              v[best * k + at[best]])))
                best = m;
        if (best < 0)
            break;
        out[got++] = req_of(v[best * k + at[best]++]);
    }
    free(v);
    free(n);
    free(at);
    return got;
}

int pl_convs_peek(pl_convs *c, pl_conv_pool pool, pl_conv_entry *out, int k)
{
    if (k <= 0)
        return 0;
    int n = 0;
    if (pool == PL_CONV_POOL_READY) {
        pl_conv_req **buf = malloc((size_t)k * sizeof *buf);
        n = buf ? ready_first_k(c, buf, k) : 0;
        for (int i = 0; i < n; i++)
            entry_of(&out[i], buf[i]);
        free(buf);
        return n < 0 ? 0 : n;
    }
    const req_list *l = pool == PL_CONV_POOL_PENDING ? &c->pending
                      : pool == PL_CONV_POOL_INFLIGHT ? &c->inflight : NULL;
    for (const pl_conv_req *r = l ? l->head : NULL; r && n < k; r = r->next_)
        entry_of(&out[n++], r);
    return n;
}

/* Ready requests of model m: the wave of its dispatch order each leaves
 * in (rank over the job's bound there) lowers its conversation's need. */
static int need_from_model(pl_convs *c, int m, pl_dispatch_req **buf, int *need)
{
    conv_model *cm = &c->model[m];
    if (cm->ready == 0)
        return 0;
    int cap, n = pl_dispatch_ready_first(cm->d, cm->client, buf, cm->ready);
    if (n < 0)
        return -1;
    pl_convs_model_counts(c, m, NULL, &cap, NULL);
    for (int i = 0; i < n; i++) {
        int nd = 1 + i / (cap > 0 ? cap : 1);
        int *cur = &need[req_of(buf[i])->conversation];
        if (*cur == INT_MAX || (*cur > nd && *cur != 0))
            *cur = nd;
    }
    return 0;
}

int pl_convs_next_need(pl_convs *c, int *need)
{
    pl_dispatch_req **buf = malloc(((size_t)c->n_ready + 1) * sizeof *buf);
    if (!buf)
        return -1;
    for (int q = 0; q < c->n_conv; q++) {
        uint8_t st = c->conv[q].status;
        need[q] = st == PL_CONV_STATUS_IDLE ? PL_CONV_NEED_NONE
                : st != PL_CONV_STATUS_ACTIVE ? PL_CONV_NEED_DONE : INT_MAX;
    }
    /* Running: needed now. A pending request waits on requests of its
     * conversation that are running or ready, which set its need. */
    for (const pl_conv_req *r = c->inflight.head; r; r = r->next_)
        if (need[r->conversation] == INT_MAX)
            need[r->conversation] = 0;
    int rc = 0;
    for (int m = 0; rc == 0 && m < c->n_models; m++)
        rc = need_from_model(c, m, buf, need);
    for (int q = 0; q < c->n_conv; q++)
        if (need[q] == INT_MAX)
            need[q] = 0;
    free(buf);
    return rc;
}
