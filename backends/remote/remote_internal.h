/* remote_internal.h - the remote backend's shared state (not public). */
#ifndef PL_REMOTE_INTERNAL_H
#define PL_REMOTE_INTERNAL_H

#include <stdint.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "backends/remote/curl_loop.h"
#include "backends/remote/remote.h"
#include "backends/remote/sse_reader.h"

#define REMOTE_AFF_SLOTS 4096    /* affinity table entries (direct-mapped) */
#define REMOTE_ERRBODY_MAX 65536 /* error bodies kept, bytes */

typedef struct remote_backend remote_backend;

typedef struct remote_replica {
    remote_backend *rb;
    int index;
    char *base_url;              /**< with /v1, no trailing '/' */
    char *root_url;              /**< base_url without its /v1 */
    char *shown_url;             /**< base_url without its userinfo: what logs,
                                      /status and /metrics show */
    pl_remote_kind kind;         /**< resolved when probed */
    bool healthy;
    int outstanding;             /**< requests on it now */
    int reported_cap;            /**< the upstream's capacity; 0: unknown */
    int max_model_len;           /**< 0: unknown */
    int consecutive_failures;
    uint64_t requests, errors, retries, ejections;
    char last_error[160];
    /* health checks: one transfer at a time */
    struct event *health_timer;
    pl_curl_xfer hx;
    struct evbuffer *hbody;
    int hstage;                  /**< 0: GET models, 1: capacity probe */
} remote_replica;

typedef struct remote_aff {
    uint64_t key;
    int replica;
} remote_aff;

struct remote_backend {
    pl_backend base;
    pl_remote_opts o;            /**< strings below are owned copies */
    char *api_key, *upstream_model;
    struct curl_slist *headers;  /**< shared request headers */
    pl_curl_loop *loop;
    remote_replica *reps;
    int n_reps;
    remote_aff aff[REMOTE_AFF_SLOTS];
    /* requests by id: id = (generation << 24) | slot */
    struct remote_req **slots;
    uint32_t *gen, *free_slots, n_slots, n_free;
    int active;
    uint64_t submitted, completed, failed, aborted, retries;
    uint64_t affinity_hits, affinity_moves;
    uint64_t turn;               /**< rotates ties between equally loaded replicas */
};

/* remote_replicas.c */
remote_replica *pl_remote_route(remote_backend *rb, uint64_t key, const remote_replica *avoid);
void pl_remote_replica_ok(remote_replica *rep);
void pl_remote_replica_failed(remote_replica *rep, bool eject, const char *why);
int pl_remote_replica_capacity(const remote_replica *rep);
int pl_remote_capacity_sum(remote_backend *rb);
json_t *pl_remote_replicas_json(remote_backend *rb);
void pl_remote_health_start(remote_backend *rb);
void pl_remote_health_stop(remote_backend *rb);

/* remote_probe.c: parse what upstreams report (also used at start-up). */
/** Read GET /models: does it list model, its max_model_len and parley's
 *  capacity (0 when absent), the only id when there is one. */
int pl_remote_parse_models(const char *body, size_t len, const char *model, bool *found,
                           int *max_model_len, int *capacity, char **only_id,
                           pl_remote_kind *guess);
/** vLLM /metrics: num_gpu_blocks and block_size of vllm:cache_config_info. */
int pl_remote_parse_vllm_metrics(const char *text, size_t len, long *blocks, long *block_size);
/** vLLM /metrics: the KV cache usage (0..1: vllm:kv_cache_usage_perc, or
 *  gpu_cache_usage_perc before its rename; the mean over the server's
 *  engines), -1 when absent. */
double pl_remote_parse_vllm_usage(const char *text, size_t len);
/** llama.cpp /props: total_slots (and n_ctx when given). */
int pl_remote_parse_props(const char *body, size_t len, int *slots, int *n_ctx);
/** Blocking GET for start-up; body into out. Returns the HTTP status or -1. */
long pl_remote_get_blocking(const char *url, const char *api_key, int timeout_ms,
                            struct evbuffer *out, char *err, size_t errlen);
/** The capacity URL of a kind (root + /metrics, /props), or NULL. */
const char *pl_remote_capacity_path(pl_remote_kind k);
/** Apply a capacity probe's body to rep. */
void pl_remote_apply_capacity(remote_replica *rep, const char *body, size_t len);
/** Apply a models body to rep; returns 0, -1 if it is not a model list. */
int pl_remote_apply_models(remote_replica *rep, const char *body, size_t len);

/* remote_body.c */
/** The upstream request body (malloc'd JSON text) for req. */
char *pl_remote_body(const pl_gen_request *req, const char *upstream_model, pl_remote_kind kind);

#endif
