/* req_metrics.h - request-level metrics of a backend, the same for every
 * backend: counters and fixed-bucket histograms fed from the sink callbacks.
 *
 * pl_backend_submit() (backend.c) wraps the caller's sink in a tracker
 * that times the request (submit, first token, each later delta, done) and
 * counts its tokens and finish reason, then calls the caller's sink. Sinks run on the
 * main thread, so the counters are plain integers: no locks, no atomics.
 * Trackers are recycled through a free list, so steady-state serving does
 * not allocate; observing a histogram is a short scan of fixed bounds.
 *
 * The histograms use vLLM V1's bucket bounds so that dashboards built for
 * vLLM's /metrics read parley's unchanged.
 */
#ifndef PL_REQ_METRICS_H
#define PL_REQ_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"
#include "schedulers/dispatch.h"

#define PL_HIST_MAX_BOUNDS 32
#define PL_REQ_TRACK_BUCKETS 1024

/** A cumulative histogram: counts[i] = observations <= bounds[i] exclusive
 *  of lower buckets (made cumulative when rendered); counts[n] is +Inf. */
typedef struct pl_hist {
    int n;                                 /**< finite bounds */
    double bounds[PL_HIST_MAX_BOUNDS];     /**< ascending */
    uint64_t counts[PL_HIST_MAX_BOUNDS + 1];
    uint64_t count;
    double sum;
} pl_hist;

/** Which bounds a histogram takes. */
typedef enum pl_hist_kind {
    PL_HIST_TTFT = 0,      /**< vllm:time_to_first_token_seconds */
    PL_HIST_ITL,           /**< vllm:inter_token_latency_seconds */
    PL_HIST_LATENCY,       /**< e2e and queue time */
} pl_hist_kind;

void pl_hist_init(pl_hist *h, pl_hist_kind kind);
/** Bounds 1, 2, 5, 10, 20, 50, ... up to max (token-count histograms). */
void pl_hist_init_125(pl_hist *h, double max);
/** Add n observations of value v (n >= 1). */
void pl_hist_observe_n(pl_hist *h, double v, uint64_t n);

typedef struct pl_req_track pl_req_track;

/** A backend's request metrics. Read on the main thread only. */
typedef struct pl_req_metrics {
    uint64_t prompt_tokens;                /**< of finished requests */
    uint64_t generation_tokens;            /**< as they stream */
    uint64_t cached_tokens;                /**< prompt tokens from prefix cache */
    uint64_t finished[PL_FINISH_ERROR + 1];/**< by pl_finish; [ABORT] also
                                                counts caller aborts */
    uint64_t submitted;
    uint64_t rejected;                     /**< submit() returned -1 */
    int live;                              /**< submitted, not yet done */
    /** POST /v1/embeddings, counted when a request ends (embed() does not
     *  go through pl_backend_submit, so none of the above counts it). */
    uint64_t embed_requests;               /**< answered with vectors */
    uint64_t embed_inputs;                 /**< vectors returned */
    uint64_t embed_tokens;                 /**< tokens embedded */
    uint64_t embed_failed;                 /**< ended with an error */
    pl_hist ttft, itl, e2e, queue;         /**< seconds */
    pl_hist prompt_len, gen_len;           /**< tokens per finished request */
    /** Running estimates over requests that stopped or hit their length:
     *  reply tokens, and prompt tokens not served from the prefix cache
     *  (a remote upstream's KV capacity counts a request by them). */
    pl_dispatch_est replies, uncached_prompts;
    /* trackers: live ones hashed by backend id (for abort), spare ones
     * in a free list */
    pl_req_track *by_id[PL_REQ_TRACK_BUCKETS];
    pl_req_track *free_list;
} pl_req_metrics;

/** The metrics of b, created on first use (NULL on OOM). */
pl_req_metrics *pl_backend_metrics(pl_backend *b);
/** Free a metrics block and its trackers (pl_backend_free does this). */
void pl_req_metrics_free(pl_req_metrics *m);

/** Start tracking a request of m (NULL: none): *wrapped is the sink to
 *  give the backend's submit; it times and counts the request, then calls
 *  inner. Returns the tracker, or NULL (then *wrapped = inner: the request
 *  is served untracked) when m is NULL or out of memory. */
pl_req_track *pl_req_track_begin(pl_req_metrics *m, pl_sink inner, pl_sink *wrapped);
/** The submit returned -1: counted as rejected, t recycled (NULL is
 *  ignored). */
void pl_req_track_rejected(pl_req_track *t);
/** The submit returned 0 with id: t is kept by id for an abort, or
 *  recycled when the request already ended inside submit (NULL is
 *  ignored). */
void pl_req_track_submitted(pl_req_track *t, uint64_t id);
/** The caller aborts id: counted as finished_reason abort and its tracker
 *  recycled; nothing when m is NULL or id is not tracked. */
void pl_req_metrics_abort(pl_req_metrics *m, uint64_t id);

/** A summary for GET /status (new reference): submitted, in_flight,
 *  prompt/generation/cached tokens, finished by reason, and the mean TTFT,
 *  inter-token latency, e2e latency and queue time in seconds. */
json_t *pl_req_metrics_json(const pl_req_metrics *m);

/** Seconds on the monotonic clock. */
double pl_mono_s(void);

#endif
