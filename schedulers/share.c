/* share.c - a served model's slots across jobs: capacity, interactive
 * reserve, weighted least-attained-service. See share.h. */
#include "schedulers/share.h"

#include <stdlib.h>
#include <string.h>

typedef struct client {
    bool used, active;           /* active: ready or in flight at last look */
    pl_share_client c;
} client;

struct pl_share {
    int capacity, reserve;
    int jobs_inflight, interactive;
    client *v;
    int n, cap_v;
    double cost_sum;             /* completed requests' cost, for the mean */
    uint64_t cost_n;
};

int pl_share_default_reserve(int capacity)
{
    return capacity <= 1 ? 0 : (capacity + 9) / 10;
}

void pl_share_set_capacity(pl_share *s, int capacity, int reserve)
{
    s->capacity = capacity < 1 ? 1 : capacity;
    s->reserve = reserve < 0 ? pl_share_default_reserve(s->capacity) : reserve;
    if (s->reserve > s->capacity - 1)
        s->reserve = s->capacity - 1;
}

pl_share *pl_share_new(int capacity, int reserve)
{
    pl_share *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    pl_share_set_capacity(s, capacity, reserve);
    return s;
}

void pl_share_free(pl_share *s)
{
    if (!s)
        return;
    free(s->v);
    free(s);
}

static double norm(const client *k)
{
    return k->c.attained / k->c.weight;
}

/* The least normalised service among active clients other than skip;
 * -1 when there is none. */
static double active_floor(const pl_share *s, int skip)
{
    double m = -1;
    for (int i = 0; i < s->n; i++)
        if (i != skip && s->v[i].used && s->v[i].active && (m < 0 || norm(&s->v[i]) < m))
            m = norm(&s->v[i]);
    return m;
}

int pl_share_join(pl_share *s, double weight, int cap)
{
    int id = 0;
    while (id < s->n && s->v[id].used)
        id++;
    if (id == s->cap_v) {
        int nc = s->cap_v ? 2 * s->cap_v : 8;
        client *v = realloc(s->v, (size_t)nc * sizeof *v);
        if (!v)
            return -1;
        s->v = v;
        s->cap_v = nc;
    }
    if (id == s->n)
        s->n++;
    client *k = &s->v[id];
    memset(k, 0, sizeof *k);
    k->used = true;
    k->c.weight = weight > 0 ? weight : 1;
    k->c.cap = cap;
    return id;
}

void pl_share_leave(pl_share *s, int id)
{
    if (id < 0 || id >= s->n || !s->v[id].used)
        return;
    s->jobs_inflight -= s->v[id].c.inflight;
    s->v[id].used = false;
    while (s->n > 0 && !s->v[s->n - 1].used)
        s->n--;
}

static bool room_on_model(const pl_share *s)
{
    return s->jobs_inflight < s->capacity - s->reserve &&
           s->jobs_inflight + s->interactive < s->capacity;
}

int pl_share_pick(pl_share *s, pl_share_ready_fn ready, void *ud)
{
    if (!room_on_model(s))
        return -1;
    int best = -1;
    for (int i = 0; i < s->n; i++) {
        client *k = &s->v[i];
        if (!k->used)
            continue;
        bool r = (k->c.cap <= 0 || k->c.inflight < k->c.cap) && ready(ud, i);
        if (r && !k->active) {
            /* Back from idle: no banked credit. */
            double f = active_floor(s, i);
            if (f >= 0 && norm(k) < f)
                k->c.attained = f * k->c.weight;
        }
        k->active = r || k->c.inflight > 0;
        if (r && (best < 0 || norm(k) < norm(&s->v[best])))
            best = i;
    }
    return best;
}

static double mean_cost(const pl_share *s)
{
    return s->cost_n ? s->cost_sum / (double)s->cost_n : 1.0;
}

double pl_share_dispatched(pl_share *s, int id)
{
    if (id < 0 || id >= s->n || !s->v[id].used)
        return 0;
    client *k = &s->v[id];
    double est = mean_cost(s);
    k->c.inflight++;
    k->c.dispatched++;
    k->c.attained += est;
    s->jobs_inflight++;
    return est;
}

void pl_share_completed(pl_share *s, int id, double cost, double est)
{
    if (id < 0 || id >= s->n || !s->v[id].used)
        return;
    client *k = &s->v[id];
    if (cost > 0) {
        s->cost_sum += cost;
        s->cost_n++;
    }
    k->c.attained += cost - est;
    if (k->c.attained < 0)
        k->c.attained = 0;
    k->c.inflight--;
    k->c.completed++;
    s->jobs_inflight--;
}

void pl_share_interactive(pl_share *s, int delta)
{
    s->interactive += delta;
    if (s->interactive < 0)
        s->interactive = 0;
}

void pl_share_counts_get(const pl_share *s, pl_share_counts *c)
{
    memset(c, 0, sizeof *c);
    c->capacity = s->capacity;
    c->reserve = s->reserve;
    c->jobs_inflight = s->jobs_inflight;
    c->interactive_inflight = s->interactive;
    for (int i = 0; i < s->n; i++)
        c->clients += s->v[i].used;
}

bool pl_share_client_get(const pl_share *s, int id, pl_share_client *out)
{
    if (id < 0 || id >= s->n || !s->v[id].used)
        return false;
    *out = s->v[id].c;
    return true;
}
