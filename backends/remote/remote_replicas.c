/* remote_replicas.c - replica health, capacity and routing.
 *
 * Routing: a request with a conversation key goes to the replica that
 * served the key before (a direct-mapped table), else to the key's
 * rendezvous-hash replica, so its prefix cache keeps hitting; but only
 * while that replica is healthy, not full, and holds no more than
 * REMOTE_LOAD_BOUND times its fair share of the outstanding requests plus
 * REMOTE_LOAD_SLACK (bounded-load consistent hashing; the slack keeps keys
 * home when little else runs), and not full unless all are. Otherwise, and
 * for requests without a key, the healthy replica with the lowest
 * outstanding/capacity wins.
 */
#include <stdio.h>
#include <string.h>

#include "backends/remote/remote_internal.h"
#include "src/base/log.h"

#define REMOTE_LOAD_BOUND 1.25
#define REMOTE_LOAD_SLACK 4
#define REMOTE_EJECT_AFTER 3     /* consecutive 5xx before a replica is ejected */

int pl_remote_replica_capacity(const remote_replica *rep)
{
    int ub = rep->rb->o.upper_bound;
    return rep->reported_cap > 0 && rep->reported_cap < ub ? rep->reported_cap : ub;
}

int pl_remote_capacity_sum(remote_backend *rb)
{
    int sum = 0;
    for (int i = 0; i < rb->n_reps; i++)
        if (rb->reps[i].healthy)
            sum += pl_remote_replica_capacity(&rb->reps[i]);
    return sum > 0 ? sum : 1;
}

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static bool has_room(const remote_replica *r)
{
    return r->healthy && r->outstanding < pl_remote_replica_capacity(r);
}

/* Within the load bound: healthy, at most its fair share, and not full
 * unless every other healthy replica is full too (then the request waits
 * in some upstream's queue anyway, best in the one holding its prefix). */
static bool within_bound(remote_backend *rb, const remote_replica *r, int total, int n_ok)
{
    if (!r->healthy)
        return false;
    if (!has_room(r))
        for (int i = 0; i < rb->n_reps; i++)
            if (&rb->reps[i] != r && has_room(&rb->reps[i]))
                return false;
    double fair = REMOTE_LOAD_BOUND * (double)(total + 1) / (n_ok > 0 ? n_ok : 1) +
                  REMOTE_LOAD_SLACK;
    return (double)(r->outstanding + 1) <= fair + 1e-9 || n_ok == 1;
}

/* The healthy replica with the lowest outstanding/capacity (any replica
 * when none is healthy); ties rotate, so equal replicas take turns. */
static remote_replica *least_loaded(remote_backend *rb, const remote_replica *avoid)
{
    remote_replica *best = NULL;
    double best_load = 0;
    uint64_t tie = rb->turn++;
    for (int pass = 0; pass < 2 && !best; pass++) {
        for (int k = 0; k < rb->n_reps; k++) {
            remote_replica *r = &rb->reps[(k + tie) % (uint64_t)rb->n_reps];
            if ((pass == 0 && !r->healthy) || (r == avoid && rb->n_reps > 1))
                continue;
            double load = (double)r->outstanding / pl_remote_replica_capacity(r);
            if (!best || load < best_load) {
                best = r;
                best_load = load;
            }
        }
    }
    return best ? best : &rb->reps[0];
}

remote_replica *pl_remote_route(remote_backend *rb, uint64_t key, const remote_replica *avoid)
{
    int total = 0, n_ok = 0;
    for (int i = 0; i < rb->n_reps; i++) {
        total += rb->reps[i].outstanding;
        n_ok += rb->reps[i].healthy;
    }
    if (!key || !rb->o.affinity || rb->n_reps == 1)
        return least_loaded(rb, avoid);
    remote_aff *a = &rb->aff[mix64(key) % REMOTE_AFF_SLOTS];
    remote_replica *r = NULL;
    if (a->key == key && a->replica < rb->n_reps)
        r = &rb->reps[a->replica];
    if (!r) {                    /* rendezvous hash: the key's home replica */
        uint64_t best = 0;
        for (int i = 0; i < rb->n_reps; i++) {
            uint64_t w = mix64(key ^ mix64((uint64_t)i + 1));
            if (rb->reps[i].healthy && (!r || w > best)) {
                r = &rb->reps[i];
                best = w;
            }
        }
    }
    if (r && r != avoid && within_bound(rb, r, total, n_ok)) {
        if (a->key == key)
            rb->affinity_hits++;
    } else {
        if (a->key == key)
            rb->affinity_moves++;
        r = least_loaded(rb, avoid);
    }
    a->key = key;
    a->replica = r->index;
    return r;
}

static void set_health(remote_replica *rep, bool ok, const char *why)
{
    if (rep->healthy == ok)
        return;
    rep->healthy = ok;
    if (ok) {
        pl_info("upstream %s: healthy again", rep->shown_url);
    } else {
        rep->ejections++;
        pl_warn("upstream %s: ejected (%s)", rep->shown_url, why);
    }
}

void pl_remote_replica_ok(remote_replica *rep)
{
    rep->consecutive_failures = 0;
}

void pl_remote_replica_failed(remote_replica *rep, bool eject, const char *why)
{
    rep->errors++;
    snprintf(rep->last_error, sizeof rep->last_error, "%s", why);
    if (eject || ++rep->consecutive_failures >= REMOTE_EJECT_AFTER)
        set_health(rep, false, why);
}

json_t *pl_remote_replicas_json(remote_backend *rb)
{
    json_t *a = json_array();
    for (int i = 0; i < rb->n_reps; i++) {
        remote_replica *r = &rb->reps[i];
        json_array_append_new(a, json_pack(
            "{s:s, s:s, s:b, s:i, s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:s, s:o}", "url", r->shown_url,
            "kind", pl_remote_kind_name(r->kind), "healthy", r->healthy, "outstanding",
            r->outstanding, "capacity", pl_remote_replica_capacity(r), "reported_capacity",
            r->reported_cap, "max_model_len", r->max_model_len, "requests",
            (json_int_t)r->requests, "errors", (json_int_t)r->errors, "retries",
            (json_int_t)r->retries, "ejections", (json_int_t)r->ejections, "last_error",
            r->last_error, "constraints", pl_remote_caps_json(r)));
    }
    return a;
}

/* ---- health checks: GET /models, then the kind's capacity probe ---- */

static void health_arm(remote_replica *rep)
{
    int ms = rep->rb->o.health_interval_ms;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(rep->health_timer, &tv);
}

static size_t health_write(char *p, size_t sz, size_t n, void *ud)
{
    remote_replica *rep = ud;
    if (evbuffer_get_length(rep->hbody) + sz * n > 4u << 20)
        return 0;                /* a hostile /metrics does not grow us */
    evbuffer_add(rep->hbody, p, sz * n);
    return sz * n;
}

static void health_get(remote_replica *rep, const char *url);

static void health_done(pl_curl_xfer *x, CURLcode rc)
{
    remote_replica *rep = x->ud;
    long status = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(x->easy);
    x->easy = NULL;
    const char *body = (const char *)evbuffer_pullup(rep->hbody, -1);
    size_t len = evbuffer_get_length(rep->hbody);
    if (rep->hstage == 0) {
        if (rc != CURLE_OK || status != 200 || pl_remote_apply_models(rep, body, len) < 0) {
            char why[160];
            snprintf(why, sizeof why, "health check: %s",
                     rc != CURLE_OK ? curl_easy_strerror(rc) : "GET /models failed");
            if (rep->healthy)
                pl_remote_replica_failed(rep, true, why);
        } else {
            set_health(rep, true, NULL);
            rep->consecutive_failures = 0;
            pl_remote_cprobe_async(rep);      /* a replica that came up late */
            const char *path = pl_remote_capacity_path(rep->kind);
            if (path) {
                char url[2048];
                snprintf(url, sizeof url, "%s%s", rep->root_url, path);
                rep->hstage = 1;
                health_get(rep, url);
                return;
            }
        }
    } else if (rc == CURLE_OK && status == 200) {
        pl_remote_apply_capacity(rep, body, len);
    }
    health_arm(rep);
}

static void health_get(remote_replica *rep, const char *url)
{
    remote_backend *rb = rep->rb;
    evbuffer_drain(rep->hbody, evbuffer_get_length(rep->hbody));
    CURL *e = curl_easy_init();
    if (!e) {
        health_arm(rep);
        return;
    }
    long t = rb->o.connect_timeout_ms > 0 ? rb->o.connect_timeout_ms : 2000;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, rb->headers);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, t);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, t + 3000);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, health_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, rep);
    rep->hx.easy = e;
    rep->hx.done = health_done;
    rep->hx.ud = rep;
    if (pl_curl_loop_add(rb->loop, &rep->hx) < 0) {
        curl_easy_cleanup(e);
        rep->hx.easy = NULL;
        health_arm(rep);
    }
}

static void on_health_timer(evutil_socket_t fd, short what, void *arg)
{
    remote_replica *rep = arg;
    char url[2048];
    snprintf(url, sizeof url, "%s/models", rep->base_url);
    rep->hstage = 0;
    health_get(rep, url);
}

void pl_remote_health_start(remote_backend *rb)
{
    for (int i = 0; i < rb->n_reps; i++) {
        remote_replica *rep = &rb->reps[i];
        rep->hbody = evbuffer_new();
        rep->health_timer = evtimer_new(rb->base.base, on_health_timer, rep);
        health_arm(rep);
    }
}

void pl_remote_health_stop(remote_backend *rb)
{
    for (int i = 0; i < rb->n_reps; i++) {
        remote_replica *rep = &rb->reps[i];
        if (rep->hx.easy) {
            pl_curl_loop_remove(rb->loop, &rep->hx);
            curl_easy_cleanup(rep->hx.easy);
            rep->hx.easy = NULL;
        }
        if (rep->health_timer)
            event_free(rep->health_timer);
        if (rep->hbody)
            evbuffer_free(rep->hbody);
        rep->health_timer = NULL;
        rep->hbody = NULL;
    }
}
