/* dispatch.h - one admission point per served model: which request goes to
 * the backend next.
 *
 * A pure data structure (no threads, no I/O). One instance per served
 * model; every request for the model passes through it. It has two kinds
 * of client:
 *
 *   jobs         any number (src/jobs, through schedulers/conversation.h).
 *                Each has its pre-departure pool here: a min-heap in seed
 *                000's order, the tuple (0 if reprompt else 1,
 *                -rounds_completed, conversation_id, round_id) compared
 *                field by field (pl_dispatch_key), then creation order; or
 *                a benchmark baseline's order (fcfs, naive).
 *   interactive  one class, the OpenAI endpoints (api/oai_request.h),
 *                first in, first out.
 *
 * The in-flight bound is decided in one place (dispatch_admits in
 * dispatch.c), from the backend's capacity and, where the backend reports
 * its KV cache, from the blocks a request needs against those free now;
 * both are read through the owner's callbacks before each admission:
 *
 *   - capacity: min(upper bound, what fits now). With a KV view
 *     (pl_dispatch_kv), what fits is the requests in flight plus as many
 *     more of the candidate's need (pl_dispatch_kv_need: its prompt, or
 *     the running estimate of one, plus its max_tokens, or the running
 *     estimate of a reply when that is smaller) as the blocks free or
 *     evictable hold beyond those already promised (the running
 *     sequences' growth to their reply estimate, requests accepted and not
 *     yet holding blocks). max_model_len is a per-request limit, never a
 *     divisor. The bound is at least 1: with nothing in flight a request
 *     goes whatever its need (the backend runs it alone; replies that
 *     outgrow their estimate are the backend's preemption to handle).
 *     Without a view (a mock, a remote upstream, --capacity worst-case)
 *     the backend's capacity is the bound;
 *   - interactive requests are admitted at once and take precedence: they
 *     count in flight, and jobs back off as their own requests finish;
 *   - jobs leave `reserve` slots (with a KV view: the room of `reserve`
 *     requests) to interactive requests and never take the model past its
 *     capacity, so the backend never queues a job's request behind
 *     parley's back;
 *   - among the jobs with a ready request, room under their own cap and
 *     not paused, the one with the least attained service per unit of
 *     weight goes first (weighted least attained service, in the spirit of
 *     Autellix's PLAS). Service is counted in tokens (completion + uncached
 *     prompt). An admission is charged at once with the mean cost of a
 *     request on this model and the difference settled at pl_dispatch_done,
 *     so a burst of admissions is already fair before any finishes. A job
 *     that joins, or becomes ready again after idling, starts from the
 *     least normalised service among the active jobs: idle time is not
 *     banked as credit.
 *
 * Dispatch decides; it never talks to a backend. pl_dispatch_pump() hands
 * each request it admits to the request's submit callback, which submits
 * it through backends/backend.h (the only way parley reaches a backend;
 * scripts/check_layers.sh checks that nothing else calls the submit).
 * Every admitted request is ended exactly once with pl_dispatch_done(),
 * also when its submit failed. Nothing here calls back into a client while
 * the client calls in: push, remove and done never pump; the caller pumps
 * once its own state is up to date (a completion that frees a slot and
 * readies the next round pumps after both, so the new round competes for
 * the slot). pl_dispatch_pump() is re-entrant: a submit that ends its
 * request at once and pumps again is folded into the running pump.
 *
 * What is NOT here: requests blocked on speak_after_within_round (the
 * pending pool) and the rules that move them (dependencies, rounds,
 * re-prompts, failures) belong to the job's conversations
 * (conversation.h): what a request waits for is another agent's reply,
 * possibly on another model. They push a request here once it is ready.
 */
#ifndef PL_SCHED_DISPATCH_H
#define PL_SCHED_DISPATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "schedulers/kv_layout.h"

typedef struct pl_dispatch pl_dispatch;

/** A job's pre-departure order. Only the order changes between them (and
 *  the naive baseline's one-at-a-time, which its conversations keep). */
typedef enum pl_dispatch_policy {
    PL_DISPATCH_PRIORITY = 0,    /**< seed 000's tuple; the default */
    PL_DISPATCH_FCFS,            /**< first ready, first dispatched */
    PL_DISPATCH_NAIVE,           /**< (conversation, round, agent): whole
                                      conversations in order */
} pl_dispatch_policy;

/** Policy name ("parley", "fcfs", "naive"), and back: -1 if unknown. */
const char *pl_dispatch_policy_name(pl_dispatch_policy p);
int pl_dispatch_policy_parse(const char *name);

/** Seed 000's priority tuple, kept as a tuple: compared field by field in
 *  this order, each as the seed reads it. */
typedef struct pl_dispatch_key {
    bool reprompt;               /**< (0 if reprompt else 1): re-prompts first */
    int rounds_completed;        /**< -rounds_completed: progress first */
    int conversation;            /**< conversation_id: lower first */
    int round;                   /**< round_id: lower first */
} pl_dispatch_key;

/** <0, 0, >0 as a goes before, ties with, or goes after b in the seed's
 *  order. */
int pl_dispatch_key_cmp(const pl_dispatch_key *a, const pl_dispatch_key *b);

/**
 * The one int the engine's waiting queue orders by (backend.h's
 * `priority`, lower first, vLLM's convention): the tuple's first two
 * fields, which fit in it without loss (re-prompts 2^20 ahead, minus the
 * rounds completed). The last two need no place: dispatch admits in the
 * tuple's order, and the engine breaks equal priorities by arrival. The
 * baselines pass one priority, so the engine keeps their arrival order.
 */
int pl_dispatch_engine_priority(pl_dispatch_policy p, const pl_dispatch_key *k);

typedef struct pl_dispatch_req pl_dispatch_req;

/** Submit an admitted request to the backend. If the submit fails, the
 *  client ends r with pl_dispatch_done (it may do so inside the call). */
typedef void (*pl_dispatch_submit_fn)(void *ud, pl_dispatch_req *r);

/**
 * A request as dispatch sees it, embedded in its client's own request
 * (the client owns the memory; it must stay put while queued or in
 * flight). The client sets the fields above the line before
 * pl_dispatch_push; the rest belongs to dispatch.
 */
struct pl_dispatch_req {
    pl_dispatch_key key;         /**< jobs: the seed's tuple */
    int agent;                   /**< jobs: the naive order within a round */
    uint64_t seq;                /**< jobs: creation order, the stable tiebreak */
    uint64_t ready_seq;          /**< jobs: order of entry into pre-departure
                                      (fcfs); comparable across models */
    int max_tokens;              /**< its reply's limit; 0: up to the context
                                      (the KV rule then counts the estimate) */
    int prompt_tokens;           /**< its prompt's KV footprint when the client
                                      knows it; 0: the backend's estimate */
    pl_dispatch_submit_fn submit;
    void *ud;                    /**< for submit */
    /* ---- dispatch's ---- */
    int client_;
    uint32_t gen_;               /* the client's generation at push */
    int heap_idx_;
    uint8_t state_;
    double charged_;
    pl_dispatch_req *next_;      /* interactive FIFO */
};

/** Client id of the interactive class (every dispatch has it). */
#define PL_DISPATCH_INTERACTIVE 0

/**
 * A backend's KV cache as admission counts it, in blocks of block_size
 * tokens (backend.h, ops->kv). The backend's figures account for every
 * request it has accepted, those its engine has not seen yet included, so
 * a view read right after a submit already holds that request.
 */
typedef struct pl_dispatch_kv {
    int block_size;              /**< tokens per block (>= 1) */
    int total;                   /**< blocks in the cache */
    int free;                    /**< free or evictable now (cached blocks no
                                      running sequence holds), but those kept */
    int kept;                    /**< evictable blocks admission leaves alone:
                                      the cached prefixes of conversations
                                      running now, which their next requests
                                      reuse (already out of free) */
    int reserved;                /**< promised already: what running sequences
                                      may still take to reach their reply
                                      estimate, and the whole need of requests
                                      accepted but holding no blocks yet */
    int prompt_tokens;           /**< running estimate of a request's prompt
                                      footprint (tokens; a prefix shared by
                                      running sequences split among them);
                                      0: none yet */
    int reply_tokens;            /**< running estimate of a reply's length
                                      (tokens); 0: none yet */
    /** The cache groups the blocks serve (schedulers/kv_layout.h): kinds
     *  of window kind_window[k] (0: full), kind_groups[k] groups each. A
     *  request needs blocks in every group, a sliding one only its
     *  window's. n_kinds 0: one full group. */
    int n_kinds;
    int kind_window[PL_KV_MAX_KINDS], kind_groups[PL_KV_MAX_KINDS];
} pl_dispatch_kv;

/** Reply tokens counted for a request without max_tokens before any reply
 *  has been seen. */
#define PL_DISPATCH_REPLY_PRIOR 256

/** Reply tokens a request with max_tokens (0: up to the context) is counted
 *  for: max_tokens, or the running estimate when smaller (a large
 *  max_tokens is a limit, rarely the length), or PL_DISPATCH_REPLY_PRIOR
 *  when neither is known. */
int pl_dispatch_reply_budget(int max_tokens, int reply_estimate);

/** Blocks a request needs: for each group, ceil((prompt + reply budget) /
 *  block_size), a sliding group's capped at its window's
 *  (pl_kv_layout_group_need); at least 1; prompt_tokens 0 takes the view's
 *  estimate. */
int pl_dispatch_kv_need(const pl_dispatch_kv *kv, int prompt_tokens, int max_tokens);

/** The in-flight bound a KV view gives for requests of `need` blocks:
 *  in_flight plus as many more as the room (free - reserved) holds, within
 *  [1, upper]. */
int pl_dispatch_kv_bound(const pl_dispatch_kv *kv, int in_flight, int need, int upper);

/** A running estimate of a length (reply tokens): an exponentially
 *  weighted mean and variance over the last ~64 observations (plain means
 *  before that). Zero it to start. */
typedef struct pl_dispatch_est {
    double mean, var;
    uint64_t n;
} pl_dispatch_est;

void pl_dispatch_est_observe(pl_dispatch_est *e, double v);
/** mean + 2 standard deviations, rounded up; 0 before any observation. */
int pl_dispatch_est_value(const pl_dispatch_est *e);

typedef struct pl_dispatch_opts {
    int capacity;                /**< the backend's in-flight upper bound (>= 1) */
    int reserve;                 /**< slots jobs leave to interactive
                                      requests; < 0: pl_dispatch_default_reserve
                                      of the capacity now */
    /** The backend's upper bound now (a remote upstream's moves as it is
     *  probed), read before each admission; NULL: it stays as set. */
    int (*capacity_fn)(void *ud);
    void *capacity_ud;
    /** The backend's KV view now, read before each admission; false (or
     *  NULL): none, the capacity alone bounds admission. */
    bool (*kv_fn)(void *ud, pl_dispatch_kv *out);
    void *kv_ud;
} pl_dispatch_opts;

/** The default reserve for a capacity: 10% rounded up, 0 when capacity is
 *  1 (a lone slot is never withheld from jobs). */
int pl_dispatch_default_reserve(int capacity);

/** NULL on OOM. The reserve is clamped so jobs keep at least one slot. */
pl_dispatch *pl_dispatch_new(const pl_dispatch_opts *o);
/** Free; every job must have left. NULL is ignored. */
void pl_dispatch_free(pl_dispatch *d);
/** Set the upper bound (>= 1) and the reserve (< 0: the default, as asked
 *  at creation when it was). */
void pl_dispatch_set_capacity(pl_dispatch *d, int capacity);

typedef struct pl_dispatch_client_opts {
    const char *name;            /**< shown in status (borrowed: the job id) */
    double weight;               /**< share weight; <= 0: 1 */
    int cap;                     /**< own in-flight bound; <= 0: none */
    pl_dispatch_policy policy;   /**< the pre-departure order */
    /** May the client's requests go now (false: it holds them, e.g. its
     *  I/O lags)? Asked at each pick; NULL: always. */
    bool (*may_go)(void *ud);
    void *ud;
} pl_dispatch_client_opts;

/** Add a job. Returns its client id (> 0), -1 on OOM. */
int pl_dispatch_join(pl_dispatch *d, const pl_dispatch_client_opts *o);
/** Remove a job; its pre-departure pool must be empty. Requests of it
 *  still in flight stop counting (their pl_dispatch_done is accepted and
 *  ignored). */
void pl_dispatch_leave(pl_dispatch *d, int client);

/** Queue r (pre-departure) for client (a job id, or PL_DISPATCH_INTERACTIVE).
 *  Returns 0, -1 on OOM (r is not queued). Does not pump. */
int pl_dispatch_push(pl_dispatch *d, int client, pl_dispatch_req *r);
/** Take a queued r out without admitting it (its conversation failed, its
 *  client went away). */
void pl_dispatch_remove(pl_dispatch *d, pl_dispatch_req *r);

/** Admit what may go, in order, calling each request's submit. */
void pl_dispatch_pump(pl_dispatch *d);
/** The request pl_dispatch_step would admit now, or NULL (no side effect). */
pl_dispatch_req *pl_dispatch_peek(pl_dispatch *d);
/** Admit at most one request (the one pl_dispatch_peek names) and submit
 *  it; returns it or NULL. */
pl_dispatch_req *pl_dispatch_step(pl_dispatch *d);

/** An admitted request ended: cost is the service it used (tokens; 0 for
 *  an abort or a failed submit); the charge is settled and its slot freed.
 *  Does not pump. */
void pl_dispatch_done(pl_dispatch *d, pl_dispatch_req *r, double cost);

/** Queued? In flight? */
bool pl_dispatch_queued(const pl_dispatch_req *r);
bool pl_dispatch_inflight(const pl_dispatch_req *r);

/** Order of two requests in policy p (a strictly first: true). */
bool pl_dispatch_less(pl_dispatch_policy p, const pl_dispatch_req *a,
                      const pl_dispatch_req *b);

/** The first k requests of client's pre-departure pool, in its order.
 *  Returns the number written; -1 on OOM. */
int pl_dispatch_ready_first(pl_dispatch *d, int client, pl_dispatch_req **out, int k);

typedef struct pl_dispatch_counts {
    int capacity;                /**< the in-flight bound now: min(upper
                                      bound, what fits now for a request of
                                      need_blocks) */
    int reserve;
    int upper_bound;             /**< the backend's */
    int jobs_inflight, interactive_inflight;
    int inflight_peak;           /**< most requests ever in flight at once */
    int jobs_ready, interactive_waiting;
    int clients;                 /**< jobs joined */
    bool has_kv;                 /**< the KV rule applies (kv below) */
    pl_dispatch_kv kv;           /**< the last view read */
    int need_blocks;             /**< the need capacity counts: a request of
                                      the estimated prompt and reply */
} pl_dispatch_counts;

/** The figures as of the last admission or pump (no callback is called). */
void pl_dispatch_counts_get(const pl_dispatch *d, pl_dispatch_counts *c);
/** Read the backend's bound and KV view again now (what /status shows). */
void pl_dispatch_refresh(pl_dispatch *d);

typedef struct pl_dispatch_client {
    const char *name;
    double weight;
    int cap;                     /**< min(own cap, capacity): its bound */
    int inflight, ready;
    double attained;             /**< tokens, with the admission estimates */
    uint64_t dispatched, completed;
} pl_dispatch_client;

/** Ids of joined jobs are 1 .. pl_dispatch_max_client(d). */
int pl_dispatch_max_client(const pl_dispatch *d);
/** A job's figures; false if client is not a joined job. */
bool pl_dispatch_client_get(const pl_dispatch *d, int client, pl_dispatch_client *out);

#endif
