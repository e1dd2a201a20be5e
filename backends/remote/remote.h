/* remote.h - a backend that serves a model from OpenAI-compatible upstream
 * servers: vLLM, SGLang, llama-server, Ollama, OpenAI, another parley.
 *
 * One model may have several replicas (base URLs). Requests go to the
 * healthy replica with the fewest outstanding requests, except that a
 * request with a conversation key returns to the replica that served the
 * key before (its prefix cache holds the conversation) while that replica
 * is healthy and not loaded past a bound. Transfers run on libcurl's multi
 * interface driven by the main loop, always streaming; see DESIGN.md.
 */
#ifndef PL_REMOTE_H
#define PL_REMOTE_H

#include <stdbool.h>

#include "backends/backend.h"

/** What the upstream runs: where capacity is read from, and the fields a
 *  constraint is sent in (remote_constrain.c). */
typedef enum pl_remote_kind {
    PL_REMOTE_AUTO = 0,          /**< guess from GET /v1/models (--upstream) */
    PL_REMOTE_OPENAI,
    PL_REMOTE_VLLM,
    PL_REMOTE_SGLANG,
    PL_REMOTE_LLAMACPP,
    PL_REMOTE_OLLAMA,
    PL_REMOTE_PARLEY,
} pl_remote_kind;

/** The kind named s ("vllm", ...), or -1 when s is no remote kind. */
int pl_remote_kind_parse(const char *s);
const char *pl_remote_kind_name(pl_remote_kind k);

typedef struct pl_remote_opts {
    const char *model;           /**< the served name */
    pl_remote_kind kind;
    const char *const *urls;     /**< base URLs including /v1, one per replica */
    int n_urls;
    const char *api_key;         /**< sent as a bearer token; NULL or "": none */
    const char *upstream_model;  /**< NULL or "": model, or the only one listed */
    int upper_bound;             /**< max concurrent sequences per replica */
    /** --capacity worst-case: a vLLM replica's capacity is its KV tokens /
     *  max_model_len (seed 000); otherwise its free blocks over a request's
     *  estimated need (remote_probe.c). */
    bool worst_case_capacity;
    int max_model_len;           /**< 0: what the upstream reports */
    int connect_timeout_ms;      /**< TCP (and TLS) connect */
    int first_token_timeout_ms;  /**< request sent -> first token; 0: none */
    int token_timeout_ms;        /**< gap between tokens; 0: none */
    int max_attempts;            /**< tries before the first token (>= 1) */
    int health_interval_ms;      /**< health check period */
    bool affinity;               /**< route keys back to their replica */
    /** Start-up constraint probe: how long to wait for every replica's
     *  reply (remote_cprobe.c); 0: no probe, constraints are sent
     *  unverified. */
    int probe_timeout_ms;
    /** The upstream model embeds, in vectors of this length (POST
     *  /v1/embeddings passes to it); 0: when its GET /models entry says so
     *  (parley's capabilities). */
    int embed_dim;
} pl_remote_opts;

/** In the message of every constraint probe (fakes in tests spot it). */
#define PL_REMOTE_PROBE_MARK "parley constraint probe"

/**
 * Create the backend on base. Each replica is probed once (blocking, at
 * start-up only) for its models, context length and capacity; a replica that
 * does not answer starts ejected and is re-admitted by the health checks.
 * Returns NULL with a message in err (a bad URL, or an upstream that lists
 * several models and none of them is upstream_model).
 */
pl_backend *pl_remote_new(struct event_base *base, const pl_remote_opts *o, char *err,
                          size_t errlen);

/**
 * May a model id an upstream lists be served under its own name? Ids come
 * from outside, so they are held to what a client may send: 1 to 256
 * bytes of (valid UTF-8) text with no control characters, no backslash, no
 * leading '/' and no ".." path segment (HF-style "org/name" and Ollama's
 * "name:tag" pass). Returns NULL when it may, else why not.
 */
const char *pl_remote_model_id_problem(const char *id);

/**
 * List the model ids an upstream serves (GET base_url/models), blocking;
 * for start-up (`parley serve --upstream URL`). Returns 0 and a malloc'd
 * array of malloc'd strings, or -1 with err.
 */
int pl_remote_list_models(const char *base_url, const char *api_key, int timeout_ms,
                          char ***ids, int *n, char *err, size_t errlen);

#endif
