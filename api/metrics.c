/* metrics.c - GET /metrics: the served models' figures in Prometheus text,
 * then whatever the metrics hooks (the jobs API) add. */
#include "api/metrics.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>

#include "api/respond.h"
#include "schedulers/dispatch.h"

#define LABELS_MAX 512

void pl_prom_escape(char *out, size_t n, const char *v)
{
    size_t o = 0;
    for (; v && *v && o + 2 < n; v++) {
        if (*v == '\\' || *v == '"') {
            out[o++] = '\\';
            out[o++] = *v;
        } else if (*v == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else {
            out[o++] = *v;
        }
    }
    out[o] = '\0';
}

void pl_prom_family(struct evbuffer *b, const char *name, const char *type,
                    const char *help)
{
    const char *sfx = strcmp(type, "counter") == 0 ? "_total" : "";
    evbuffer_add_printf(b, "# HELP %s%s %s\n# TYPE %s%s %s\n", name, sfx, help, name, sfx,
                        type);
}

void pl_prom_sample(struct evbuffer *b, const char *name, const char *suffix,
                    const char *labels, double v)
{
    bool l = labels && *labels;
    if (v == (double)(int64_t)v && v < 9e15 && v > -9e15)
        evbuffer_add_printf(b, "%s%s%s%s%s %" PRId64 "\n", name, suffix ? suffix : "",
                            l ? "{" : "", l ? labels : "", l ? "}" : "", (int64_t)v);
    else
        evbuffer_add_printf(b, "%s%s%s%s%s %.9g\n", name, suffix ? suffix : "",
                            l ? "{" : "", l ? labels : "", l ? "}" : "", v);
}

void pl_prom_histogram(struct evbuffer *b, const char *name, const char *labels,
                       const pl_hist *h)
{
    uint64_t cum = 0;
    const char *sep = labels && *labels ? "," : "";
    for (int i = 0; i <= h->n; i++) {
        cum += h->counts[i];
        if (i < h->n)
            evbuffer_add_printf(b, "%s_bucket{%s%sle=\"%g\"} %" PRIu64 "\n", name,
                                labels ? labels : "", sep, h->bounds[i], cum);
        else
            evbuffer_add_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name,
                                labels ? labels : "", sep, cum);
    }
    pl_prom_sample(b, name, "_count", labels, (double)h->count);
    pl_prom_sample(b, name, "_sum", labels, h->sum);
}

/* ---- one model's figures ---- */

typedef struct model_view {
    char labels[LABELS_MAX];     /* model_name="..." */
    json_t *stats;               /* the backend's stats (owned) */
    pl_req_metrics *m;           /* NULL before its first request */
    pl_backend *b;
    int capacity;                /* its dispatch's bound now */
} model_view;

static pl_req_metrics zero_metrics_;

static double jnum(json_t *o, const char *path)
{
    /* path: "a" or "a.b" */
    char key[64];
    const char *dot = strchr(path, '.');
    if (dot) {
        snprintf(key, sizeof key, "%.*s", (int)(dot - path), path);
        o = json_object_get(o, key);
        path = dot + 1;
    }
    json_t *v = json_object_get(o, path);
    return json_is_number(v) ? json_number_value(v) : json_is_true(v) ? 1.0 : 0.0;
}

static bool jhas(json_t *o, const char *key)
{
    return json_object_get(o, key) != NULL;
}

typedef double (*model_value_fn)(const model_view *v);

static void family_(struct evbuffer *b, const model_view *v, int n, const char *name,
                    const char *type, const char *help, model_value_fn fn)
{
    pl_prom_family(b, name, type, help);
    const char *sfx = strcmp(type, "counter") == 0 ? "_total" : "";
    for (int i = 0; i < n; i++)
        pl_prom_sample(b, name, sfx, v[i].labels, fn(&v[i]));
}

static double running_(const model_view *v)
{
    if (jhas(v->stats, "running"))
        return jnum(v->stats, "running");
    if (jhas(v->stats, "in_flight"))
        return jnum(v->stats, "in_flight") - jnum(v->stats, "waiting");
    return v->m->live;
}
static double waiting_(const model_view *v) { return jnum(v->stats, "waiting"); }
static double kv_usage_(const model_view *v) { return jnum(v->stats, "kv.usage"); }
static double pc_queries_(const model_view *v) { return jnum(v->stats, "kv.prefix_queries"); }
static double pc_hits_(const model_view *v) { return jnum(v->stats, "kv.prefix_hits"); }
static double preempt_(const model_view *v) { return jnum(v->stats, "preemptions"); }
static double prompt_(const model_view *v) { return (double)v->m->prompt_tokens; }
static double gen_(const model_view *v) { return (double)v->m->generation_tokens; }
static double live_(const model_view *v) { return v->m->live; }
static double capacity_(const model_view *v) { return v->capacity; }
static double steps_(const model_view *v) { return jnum(v->stats, "steps"); }
static double idle_gap_(const model_view *v) { return jnum(v->stats, "timing.idle_gap_ms") / 1e3; }
static double max_gap_(const model_view *v)
{
    return jnum(v->stats, "timing.max_idle_gap_ms") / 1e3;
}
static double rejected_(const model_view *v) { return (double)v->m->rejected; }
static double emb_req_(const model_view *v) { return (double)v->m->embed_requests; }
static double emb_in_(const model_view *v) { return (double)v->m->embed_inputs; }
static double emb_tok_(const model_view *v) { return (double)v->m->embed_tokens; }
static double emb_fail_(const model_view *v) { return (double)v->m->embed_failed; }

/* POST /v1/embeddings per model (the vllm: families count generation only). */
static void embedding_families(struct evbuffer *b, const model_view *v, int n)
{
    family_(b, v, n, "parley:embedding_requests", "counter",
            "Embedding requests answered with vectors.", emb_req_);
    family_(b, v, n, "parley:embedding_inputs", "counter",
            "Embedding vectors returned (inputs embedded).", emb_in_);
    family_(b, v, n, "parley:embedding_tokens", "counter",
            "Tokens embedded (usage.prompt_tokens summed).", emb_tok_);
    family_(b, v, n, "parley:embedding_requests_failed", "counter",
            "Embedding requests the backend ended with an error (ids out of range, over-length "
            "inputs, ...); requests refused while parsing are not counted.", emb_fail_);
}

static void vllm_families(struct evbuffer *b, const model_view *v, int n)
{
    family_(b, v, n, "vllm:num_requests_running", "gauge",
            "Number of requests in model execution batches.", running_);
    family_(b, v, n, "vllm:num_requests_waiting", "gauge",
            "Number of requests waiting to be processed.", waiting_);
    family_(b, v, n, "vllm:kv_cache_usage_perc", "gauge",
            "KV-cache usage. 1 means 100 percent usage.", kv_usage_);
    family_(b, v, n, "vllm:prefix_cache_queries", "counter",
            "Prefix cache queries, in terms of number of queried tokens.", pc_queries_);
    family_(b, v, n, "vllm:prefix_cache_hits", "counter",
            "Prefix cache hits, in terms of number of cached tokens.", pc_hits_);
    family_(b, v, n, "vllm:num_preemptions", "counter",
            "Cumulative number of preemption from the engine.", preempt_);
    family_(b, v, n, "vllm:prompt_tokens", "counter",
            "Number of prefill tokens processed.", prompt_);
    family_(b, v, n, "vllm:generation_tokens", "counter",
            "Number of generation tokens processed.", gen_);
    static const pl_finish reasons[] = {PL_FINISH_STOP, PL_FINISH_LENGTH, PL_FINISH_ABORT,
                                        PL_FINISH_ERROR};
    pl_prom_family(b, "vllm:request_success", "counter",
                   "Count of successfully processed requests.");
    for (int i = 0; i < n; i++)
        for (int r = 0; r < 4; r++) {
            char l[LABELS_MAX + 64];
            snprintf(l, sizeof l, "finished_reason=\"%s\",%s", pl_finish_name(reasons[r]),
                     v[i].labels);
            pl_prom_sample(b, "vllm:request_success", "_total", l,
                           (double)v[i].m->finished[reasons[r]]);
        }
}

typedef struct hist_def {
    const char *name, *help;
    size_t offset;               /* offsetof(pl_req_metrics, hist) */
} hist_def;

static void histogram_families(struct evbuffer *b, const model_view *v, int n)
{
    static const hist_def defs[] = {
        {"vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
         offsetof(pl_req_metrics, ttft)},
        {"vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
         offsetof(pl_req_metrics, itl)},
        {"vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
         offsetof(pl_req_metrics, e2e)},
        {"vllm:request_queue_time_seconds",
         "Histogram of time spent in WAITING phase for request.",
         offsetof(pl_req_metrics, queue)},
        {"vllm:request_prompt_tokens", "Number of prefill tokens processed.",
         offsetof(pl_req_metrics, prompt_len)},
        {"vllm:request_generation_tokens", "Number of generation tokens processed.",
         offsetof(pl_req_metrics, gen_len)},
    };
    for (size_t d = 0; d < sizeof defs / sizeof *defs; d++) {
        pl_prom_family(b, defs[d].name, "histogram", defs[d].help);
        for (int i = 0; i < n; i++)
            pl_prom_histogram(b, defs[d].name, v[i].labels,
                              (const pl_hist *)((const char *)v[i].m + defs[d].offset));
    }
}

/* The engine's cache groups by kind (stats "kv.groups"): blocks in use
 * and cached free, labelled by kind and window. */
static void kv_group_families(struct evbuffer *b, const model_view *v, int n)
{
    static const char *states[] = {"used", "cached_free"};
    pl_prom_family(b, "parley:kv_group_blocks", "gauge",
                   "KV blocks of each kind of cache group (full attention, sliding window), "
                   "in use and cached free.");
    for (int i = 0; i < n; i++) {
        json_t *kv = json_object_get(v[i].stats, "kv");
        json_t *groups = json_object_get(kv, "groups");
        size_t k;
        json_t *g;
        json_array_foreach(groups, k, g) {
            for (int st = 0; st < 2; st++) {
                char l[LABELS_MAX + 96];
                snprintf(l, sizeof l, "%s,kind=\"%s\",window=\"%d\",state=\"%s\"", v[i].labels,
                         json_string_value(json_object_get(g, "kind")),
                         (int)json_integer_value(json_object_get(g, "window")), states[st]);
                pl_prom_sample(b, "parley:kv_group_blocks", "", l,
                               (double)json_integer_value(json_object_get(g, states[st])));
            }
        }
    }
}

/* Hybrids' recurrent-state checkpoints (stats "kv.checkpoints"): slots
 * used and free, bytes each, saves, restores, evictions. */
static void kv_ckpt_families(struct evbuffer *b, const model_view *v, int n)
{
    static const char *states[] = {"used", "free"};
    static const char *counts[][2] = {{"saves", "Recurrent-state checkpoints taken."},
                                      {"restores", "Prefix hits resumed from a checkpoint."},
                                      {"evictions", "Checkpoints dropped for a new one."}};
    pl_prom_family(b, "parley:kv_checkpoints", "gauge",
                   "Recurrent-state checkpoint slots of a hybrid model's cache (the "
                   "recurrent group's share of the KV budget), used and free.");
    for (int i = 0; i < n; i++) {
        json_t *ck = json_object_get(json_object_get(v[i].stats, "kv"), "checkpoints");
        double slots = (double)json_integer_value(json_object_get(ck, "slots"));
        double used = (double)json_integer_value(json_object_get(ck, "used"));
        for (int st = 0; ck && st < 2; st++) {
            char l[LABELS_MAX + 32];
            snprintf(l, sizeof l, "%s,state=\"%s\"", v[i].labels, states[st]);
            pl_prom_sample(b, "parley:kv_checkpoints", "", l, st ? slots - used : used);
        }
    }
    pl_prom_family(b, "parley:kv_checkpoint_bytes", "gauge",
                   "Bytes of one recurrent-state checkpoint.");
    for (int i = 0; i < n; i++) {
        json_t *ck = json_object_get(json_object_get(v[i].stats, "kv"), "checkpoints");
        if (ck)
            pl_prom_sample(b, "parley:kv_checkpoint_bytes", "", v[i].labels,
                           (double)json_integer_value(json_object_get(ck, "bytes_each")));
    }
    for (int c = 0; c < 3; c++) {
        char name[64];
        snprintf(name, sizeof name, "parley:kv_checkpoint_%s", counts[c][0]);
        pl_prom_family(b, name, "counter", counts[c][1]);
        for (int i = 0; i < n; i++) {
            json_t *ck = json_object_get(json_object_get(v[i].stats, "kv"), "checkpoints");
            if (ck)
                pl_prom_sample(b, name, "_total", v[i].labels,
                               (double)json_integer_value(json_object_get(ck, counts[c][0])));
        }
    }
}

static void step_families(struct evbuffer *b, const model_view *v, int n)
{
    family_(b, v, n, "parley:engine_steps", "counter",
            "Engine steps launched (0 for backends without a step loop).", steps_);
    static const char *phases[] = {"schedule", "execute", "process"};
    pl_prom_family(b, "parley:engine_step_seconds", "counter",
                   "Time the engine spent per step phase.");
    for (int i = 0; i < n; i++)
        for (int p = 0; p < 3; p++) {
            char key[64], l[LABELS_MAX + 32];
            snprintf(key, sizeof key, "timing.%s_ms", phases[p]);
            snprintf(l, sizeof l, "%s,phase=\"%s\"", v[i].labels, phases[p]);
            pl_prom_sample(b, "parley:engine_step_seconds", "_total", l,
                           jnum(v[i].stats, key) / 1e3);
        }
    family_(b, v, n, "parley:engine_idle_gap_seconds", "counter",
            "Time the device waited between steps for the host (the idle gap).", idle_gap_);
    family_(b, v, n, "parley:engine_idle_gap_max_seconds", "gauge",
            "Longest idle gap between two steps.", max_gap_);
    family_(b, v, n, "parley:requests_in_flight", "gauge",
            "Requests submitted to the backend and not finished (gateway view).", live_);
    family_(b, v, n, "parley:backend_capacity", "gauge",
            "Requests the model takes at once now: min(upper bound, what fits in the free "
            "KV blocks) (README, capacity).",
            capacity_);
    family_(b, v, n, "parley:requests_rejected", "counter",
            "Requests the backend refused at submit (bad input, over capacity).", rejected_);
    kv_group_families(b, v, n);
    kv_ckpt_families(b, v, n);
}

/* Remote backends list their replicas in stats as "replicas": [{"url",
 * "healthy", "outstanding"}]. */
static void upstream_families(struct evbuffer *b, const model_view *v, int n)
{
    static const char *names[2] = {"parley:upstream_healthy",
                                   "parley:upstream_outstanding_requests"};
    static const char *helps[2] = {"1 when the upstream replica passes health checks.",
                                   "Requests outstanding on the upstream replica."};
    static const char *keys[2] = {"healthy", "outstanding"};
    for (int f = 0; f < 2; f++) {
        pl_prom_family(b, names[f], "gauge", helps[f]);
        for (int i = 0; i < n; i++) {
            json_t *reps = json_object_get(v[i].stats, "replicas");
            size_t k;
            json_t *r;
            json_array_foreach(reps, k, r) {
                char url[256], l[LABELS_MAX + 300];
                const char *u = json_string_value(json_object_get(r, "url"));
                pl_prom_escape(url, sizeof url, u ? u : "");
                snprintf(l, sizeof l, "%s,upstream=\"%s\"", v[i].labels, url);
                pl_prom_sample(b, names[f], "", l, jnum(r, keys[f]));
            }
        }
    }
}

void pl_metrics_render(pl_server *s, struct evbuffer *out)
{
    int n = pl_server_n_models(s);
    model_view *v = calloc((size_t)(n > 0 ? n : 1), sizeof *v);
    if (!v)
        return;
    for (int i = 0; i < n; i++) {
        pl_model_entry *e = pl_server_model(s, i);
        char esc[LABELS_MAX - 16];
        pl_prom_escape(esc, sizeof esc, e->name);
        snprintf(v[i].labels, sizeof v[i].labels, "model_name=\"%s\"", esc);
        v[i].b = e->backend;
        pl_dispatch_counts c;
        pl_dispatch_refresh(e->dispatch);
        pl_dispatch_counts_get(e->dispatch, &c);
        v[i].capacity = c.capacity;
        v[i].stats = e->backend->ops->stats ? e->backend->ops->stats(e->backend) : NULL;
        v[i].m = pl_backend_metrics(e->backend);
        if (!v[i].m)
            v[i].m = &zero_metrics_;
    }
    vllm_families(out, v, n);
    histogram_families(out, v, n);
    step_families(out, v, n);
    upstream_families(out, v, n);
    embedding_families(out, v, n);
    for (int i = 0; i < n; i++)
        json_decref(v[i].stats);
    free(v);
    pl_server_run_metrics_hooks(s, out);
}

static void metrics_get(pl_server *s, struct evhttp_request *req, const char *path, void *ud)
{
    struct evbuffer *out = evbuffer_new();
    if (!out) {
        pl_reply_errorf(req, 500, "server_error", NULL, NULL, "out of memory");
        return;
    }
    pl_metrics_render(s, out);
    pl_reply_buffer(req, 200, "text/plain; version=0.0.4; charset=utf-8", out);
    evbuffer_free(out);
}

void pl_metrics_register(pl_server *s)
{
    pl_server_add_route(s, "/metrics", PL_HTTP_GET, metrics_get, NULL);
}
