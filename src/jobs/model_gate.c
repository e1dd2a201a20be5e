/* model_gate.c - a served model's slots across jobs. See model_gate.h. */
#include "src/jobs/model_gate.h"

#include <stdlib.h>
#include <string.h>

#include "schedulers/share.h"
#include "src/jobs/jobs_internal.h"

typedef struct gate_client {
    pl_job *job;
    int model;                   /* the job's model index */
} gate_client;

struct pl_model_gate {
    pl_backend *backend;
    int reserve_opt;             /* as asked (< 0: default) */
    int capacity;
    pl_share *share;
    gate_client *clients;        /* indexed by share client id */
    int n_clients;
    bool pumping, again;
};

pl_model_gate *pl_model_gate_new(pl_backend *b, int reserve)
{
    pl_model_gate *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->backend = b;
    g->reserve_opt = reserve;
    g->capacity = pl_backend_capacity(b);
    g->share = pl_share_new(g->capacity, reserve);
    if (!g->share) {
        free(g);
        return NULL;
    }
    return g;
}

void pl_model_gate_free(pl_model_gate *g)
{
    if (!g)
        return;
    pl_share_free(g->share);
    free(g->clients);
    free(g);
}

pl_backend *pl_model_gate_backend(const pl_model_gate *g)
{
    return g->backend;
}

int model_gate_join(pl_model_gate *g, pl_job *j, int model, double weight, int cap)
{
    int id = pl_share_join(g->share, weight, cap);
    if (id < 0)
        return -1;
    if (id >= g->n_clients) {
        gate_client *v = realloc(g->clients, (size_t)(id + 1) * sizeof *v);
        if (!v) {
            pl_share_leave(g->share, id);
            return -1;
        }
        memset(v + g->n_clients, 0, (size_t)(id + 1 - g->n_clients) * sizeof *v);
        g->clients = v;
        g->n_clients = id + 1;
    }
    g->clients[id] = (gate_client){j, model};
    return id;
}

void model_gate_leave(pl_model_gate *g, int id)
{
    if (id < 0 || id >= g->n_clients || !g->clients[id].job)
        return;
    pl_share_leave(g->share, id);
    g->clients[id].job = NULL;
    model_gate_pump(g);              /* its slots may go to another job */
}

double model_gate_dispatched(pl_model_gate *g, int id)
{
    return pl_share_dispatched(g->share, id);
}

void model_gate_completed(pl_model_gate *g, int id, double cost, double charged)
{
    pl_share_completed(g->share, id, cost, charged);
}

static bool client_ready(void *ud, int id)
{
    pl_model_gate *g = ud;
    gate_client *c = &g->clients[id];
    return c->job && job_can_dispatch(c->job, c->model);
}

/* A remote backend's capacity moves as its upstreams are probed. */
static void sync_capacity(pl_model_gate *g)
{
    int cap = pl_backend_capacity(g->backend);
    if (cap == g->capacity || cap < 1)
        return;
    g->capacity = cap;
    pl_share_set_capacity(g->share, cap, g->reserve_opt);
}

void model_gate_pump(pl_model_gate *g)
{
    if (g->pumping) {
        g->again = true;             /* a dispatch completed synchronously */
        return;
    }
    g->pumping = true;
    do {
        g->again = false;
        sync_capacity(g);
        int id;
        while ((id = pl_share_pick(g->share, client_ready, g)) >= 0)
            job_dispatch_one(g->clients[id].job, g->clients[id].model);
    } while (g->again);
    g->pumping = false;
}

void pl_model_gate_interactive(pl_model_gate *g, int delta)
{
    pl_share_interactive(g->share, delta);
    if (delta < 0)
        model_gate_pump(g);
}

json_t *pl_model_gate_json(const pl_model_gate *g)
{
    pl_share_counts c;
    pl_share_counts_get(g->share, &c);
    json_t *jobs = json_array();
    uint64_t total = 0;
    pl_share_client k;
    for (int i = 0; i < g->n_clients; i++)
        if (g->clients[i].job && pl_share_client_get(g->share, i, &k))
            total += k.dispatched;
    for (int i = 0; i < g->n_clients; i++) {
        if (!g->clients[i].job || !pl_share_client_get(g->share, i, &k))
            continue;
        json_array_append_new(jobs, json_pack("{s:s, s:f, s:i, s:I, s:I, s:f, s:f}",
            "job", pl_job_id(g->clients[i].job), "weight", k.weight, "in_flight", k.inflight,
            "dispatched", (json_int_t)k.dispatched, "completed", (json_int_t)k.completed,
            "attained_tokens", k.attained,
            "share", total ? (double)k.dispatched / (double)total : 0.0));
    }
    return json_pack("{s:s, s:i, s:i, s:i, s:i, s:o}", "model", g->backend->model,
                     "capacity", c.capacity, "interactive_reserve", c.reserve,
                     "jobs_in_flight", c.jobs_inflight,
                     "interactive_in_flight", c.interactive_inflight, "jobs", jobs);
}
