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

/** What a replica does with one family of constraints (remote_constrain.c):
 *  what its start-up probe saw, or that its kind has no field for them. */
typedef enum remote_cstate {
    REMOTE_C_UNKNOWN = 0,        /**< not probed (yet): sent, unverified */
    REMOTE_C_ENFORCED,           /**< the probe's reply matched the constraint */
    REMOTE_C_IGNORED,            /**< the probe's reply did not: the field is dropped */
    REMOTE_C_REFUSED,            /**< the upstream refused the probe's field (4xx) */
    REMOTE_C_UNSUPPORTED,        /**< the kind cannot express it (Ollama: a regex) */
} remote_cstate;

typedef enum remote_cfamily {
    REMOTE_CF_REGEX = 0,         /**< regex and choice */
    REMOTE_CF_JSON,              /**< JSON schema and json_object */
    REMOTE_CF_N,
} remote_cfamily;

/** A replica's constraint support (remote_cprobe.c fills it). */
#define REMOTE_MAX_EDIMS 64      /**< Matryoshka lengths kept */

typedef struct remote_caps {
    remote_cstate state[REMOTE_CF_N];
    char why[REMOTE_CF_N][160];  /**< what the probe saw, for messages */
    bool style_known;            /**< vLLM: /version or a probe decided guided */
    bool guided;                 /**< vLLM: guided_* (before 0.10.2), not structured_outputs */
    int version;                 /**< vLLM's /version as major*10000+minor*100+patch; 0 unknown */
    int probes;                  /**< probe rounds started */
    struct remote_cprobe *inflight;  /**< a probe on the loop, or NULL */
} remote_caps;

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
    remote_caps caps;            /**< constraint support (remote_cprobe.c) */
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
    /* embeddings (remote_embed.c): the upstream model's shape, when its
     * GET /models entry says it embeds */
    bool embeds, declared;       /**< declared: --upstream-embed-dimensions */
    pl_embed_info einfo;
    int edims[REMOTE_MAX_EDIMS], n_edims;
    struct remote_embed *embeds_live;
    uint64_t embed_ids;
};

/* remote_embed.c: POST /v1/embeddings to an upstream that serves it */
/** Read a GET /models body: the upstream model's embedding capabilities. */
void pl_remote_embed_apply_models(remote_backend *rb, const char *body, size_t len);
int pl_remote_embed_info(pl_backend *b, pl_embed_info *out);
/** The upstream model embeds in dim dimensions (--upstream-embed-dimensions). */
void pl_remote_embed_declare(remote_backend *rb, int dim);
int pl_remote_embed(pl_backend *b, const pl_embed_request *q, pl_embed_sink sink,
                    uint64_t *id, pl_err *err);
/** Abort an embedding request by id; false when id is none of them. */
bool pl_remote_embed_abort(remote_backend *rb, uint64_t id);
void pl_remote_embed_free_all(remote_backend *rb);

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

/** Whom a body is for: the kind and, for vLLM, its field style. */
typedef struct remote_target {
    pl_remote_kind kind;
    bool guided;                 /**< vLLM: guided_* rather than structured_outputs */
    int version;                 /**< vLLM's version (remote_caps.version); 0 unknown */
    const char *model;           /**< the upstream's model id */
} remote_target;

/* remote_body.c */
/** The upstream request body for req, as JSON (new reference), or NULL
 *  with err: a 400 for a constraint t cannot carry, 500 on OOM. */
json_t *pl_remote_body_json(const pl_gen_request *req, const remote_target *t, pl_err *err);
/** The body as malloc'd JSON text for rb's model-level target, or NULL
 *  with err (as pl_remote_body_json). */
char *pl_remote_body(const pl_gen_request *req, remote_backend *rb, pl_err *err);

/* remote_constrain.c: constraints in each kind's own fields */
/** The target of rb's requests: its kind, and the field style of the
 *  first replica whose style is known. */
remote_target pl_remote_target_of(remote_backend *rb);
/** Add to o what makes t's upstream enforce req's constraint and its
 *  tool_choice; for an OpenAI request only what the upstream would not
 *  understand of the client's own fields. 0, or -1 with a 400 in err. */
int pl_remote_put_constraint(json_t *o, const pl_gen_request *req, const remote_target *t,
                             pl_err *err);
/** Whether rb's replicas enforce a constraint of kind k (and, with a
 *  client body, its tool_choice): 0, or -1 with a 400 in err naming the
 *  upstream and the constraint; param names the request's field. */
int pl_remote_check_constraint(remote_backend *rb, pl_constraint_kind k, bool chat,
                               const json_t *client, const char *param, pl_err *err);
/** A replica's constraint support for /status (new reference). */
json_t *pl_remote_caps_json(const remote_replica *rep);
/** Name of a state ("enforced", ...). */
const char *pl_remote_cstate_name(remote_cstate s);

/* remote_cprobe.c: one tiny constrained request per family and replica */
/** Probe every healthy replica now, blocking up to timeout_ms in all
 *  (start-up). */
void pl_remote_cprobe_startup(remote_backend *rb, int timeout_ms);
/** Probe rep on the loop if its support is still unknown (a replica that
 *  came up after start-up); at most a few rounds per replica. */
void pl_remote_cprobe_async(remote_replica *rep);
/** Stop probes on the loop (before the loop is freed). */
void pl_remote_cprobe_stop(remote_backend *rb);

#endif
