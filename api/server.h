/* server.h - parley's HTTP server: the evhttp front, the route table, the
 * served models, and request limits.
 *
 * Everything here runs on the main (libevent) thread.
 */
#ifndef PL_API_SERVER_H
#define PL_API_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include <event2/http.h>
#include <jansson.h>

#include "backends/backend.h"

typedef struct pl_server pl_server;

struct pl_dispatch;

/** A served model: the name clients use, the backend behind it, and its
 *  one admission point. */
typedef struct pl_model_entry {
    char *name;                  /**< owned */
    pl_backend *backend;         /**< owned by the server */
    /** Every request for the model goes through it (schedulers/dispatch.h):
     *  the OpenAI endpoints as its interactive class, jobs as its other
     *  clients. Owned by the server; its reserve is interactive_reserve. */
    struct pl_dispatch *dispatch;
    int64_t created;             /**< unix time the model was loaded */
} pl_model_entry;

/** HTTP methods as a bitmask, for routes. */
#define PL_HTTP_GET 1u
#define PL_HTTP_POST 2u
#define PL_HTTP_DELETE 4u
/** Every other method (PUT, PATCH, OPTIONS, TRACE): a route taking it answers
 *  405 itself, with the Allow header its sub-paths need. */
#define PL_HTTP_OTHER 0x80000000u

/** A route handler. path is the decoded request path (no query). */
typedef void (*pl_route_fn)(pl_server *s, struct evhttp_request *req,
                            const char *path, void *ud);

/** A hook other modules use to add to GET /status (e.g. the jobs API). */
typedef void (*pl_status_fn)(pl_server *s, json_t *status, void *ud);
/** A hook that appends Prometheus text families to GET /metrics. */
typedef void (*pl_metrics_fn)(pl_server *s, struct evbuffer *out, void *ud);

typedef struct pl_server_opts {
    long max_body_bytes;         /**< 413 above */
    int max_embed_inputs;        /**< inputs of one POST /v1/embeddings (400 above;
                                      0: 2048) */
    long stream_buffer_bytes;    /**< per-stream output cap before pausing */
    bool access_log;             /**< one log line per request (access_log.h) */
    int interactive_reserve;     /**< slots jobs leave to OpenAI requests on
                                      each model; -1: 10% of its capacity */
    /* Zero fields below take the defaults of the option table. */
    long max_header_bytes;       /**< 431 above (default 64 KiB) */
    long max_upload_bytes;       /**< largest body any endpoint takes (>= max_body_bytes) */
    int idle_timeout_s;          /**< idle keep-alive connections close (default 60) */
    int header_timeout_s;        /**< a request head must arrive within (default 20) */
    int body_timeout_s;          /**< a request body must arrive within (default 60) */
    int max_connections;         /**< 503 past it (default 1000) */
    int stream_stall_timeout_s;  /**< a stream whose client reads nothing this long is
                                      aborted (sse.h; default 60) */
    const char *const *api_keys; /**< borrowed during pl_server_new; none: no auth */
    int n_api_keys;
    const char *allowed_origins; /**< comma-separated; NULL: none */
    const char *allowed_hosts;   /**< Host names allowed without API keys, besides
                                      localhost and the bound address (auth.h) */
    int rate_limit_rpm, rate_limit_tpm;  /**< per key; 0: none */
} pl_server_opts;

/** Create a server on base. Returns NULL on error. */
pl_server *pl_server_new(struct event_base *base, const pl_server_opts *o);
/** Stop listening, abort streams and free the models. */
void pl_server_free(pl_server *s);

/** Add a model (and its dispatch); the server owns the backend from now
 *  on, except on -1 (the caller frees it). */
int pl_server_add_model(pl_server *s, const char *name, pl_backend *b);
/** Find a served model by name; NULL when unknown. */
pl_model_entry *pl_server_find_model(pl_server *s, const char *name);
int pl_server_n_models(const pl_server *s);
pl_model_entry *pl_server_model(pl_server *s, int i);

/**
 * Add a route. A pattern ending in '*' matches any path with that prefix;
 * otherwise the match is exact. methods is a PL_HTTP_* mask: a matching
 * path with another method gets 405.
 */
int pl_server_add_route(pl_server *s, const char *pattern, unsigned methods,
                        pl_route_fn fn, void *ud);
void pl_server_add_status_hook(pl_server *s, pl_status_fn fn, void *ud);
void pl_server_add_metrics_hook(pl_server *s, pl_metrics_fn fn, void *ud);

/** Bind and listen. *port_io: in, the port (0 = any); out, the real one. */
int pl_server_listen(pl_server *s, const char *host, int *port_io);

/** Shutdown: close the listening socket; connections already accepted go
 *  on being served. */
void pl_server_stop_accepting(pl_server *s);
/** A generation request (chat, completions, responses) starts / has ended
 *  (its reply is complete or its client gone): what a graceful shutdown
 *  waits for. */
void pl_server_call_begin(pl_server *s);
void pl_server_call_end(pl_server *s);
int pl_server_n_calls(const pl_server *s);
/** Are replies still being written out? A shutdown waits for this too:
 *  a reply is complete for its request before the loop has written it. */
bool pl_server_output_pending(const pl_server *s);


struct event_base *pl_server_base(pl_server *s);
const pl_server_opts *pl_server_get_opts(const pl_server *s);

/** Run every status hook into st (used by GET /status). */
void pl_server_run_status_hooks(pl_server *s, json_t *st);
/** Run every metrics hook into out (used by GET /metrics). */
void pl_server_run_metrics_hooks(pl_server *s, struct evbuffer *out);

/** The API key index of the request being routed now (call from a route
 *  handler, synchronously); 0 when no keys are configured. */
int pl_server_current_key(const pl_server *s);
/** Charge tokens a reply used to a key's tokens-per-minute budget. */
void pl_server_charge_tokens(pl_server *s, int key, long tokens);
/** Count a stream aborted for stalling (GET /status shows it). */
void pl_server_count_stall(pl_server *s);

/** A fresh id with the given prefix, e.g. "chatcmpl-" + 24 hex chars. */
void pl_server_new_id(pl_server *s, const char *prefix, char *out, size_t n);

#endif
