/* conversation.h - the conversation scheduler: which agent request goes next.
 *
 * A pure data structure (no threads, no I/O) holding seed 000's three pools:
 *
 *   pending        requests blocked on speak_after_within_round agents that
 *                  have not completed yet in the same round;
 *   pre-departure  ready requests in ONE priority order across all models,
 *                  keyed (0 if reprompt else 1, -rounds_completed,
 *                  conversation, round) then creation order (a stable
 *                  tiebreak); stored as a min-heap per model whose heads are
 *                  compared, so skipping a full model costs nothing;
 *   in-flight      dispatched requests, counted per model and bounded by the
 *                  model's capacity.
 *
 * pl_conv_sched_dispatch() takes the best ready request whose model has a free
 * slot; requests of a full model are skipped, never block other models.
 * "Best" is the dispatch policy's order: seed 000's key by default; two
 * baselines for benchmarks (first ready, first served; and one request at a
 * time, conversation by conversation) change only that order and gate.
 * pl_conv_sched_complete() applies a completion synchronously: state update,
 * dependency release, re-prompt on a validation failure, the next round when
 * a round completes, failure isolation after max_retries. Conversations are
 * independent: nothing in one ever blocks or unblocks another.
 */
#ifndef PL_SCHED_CONVERSATION_H
#define PL_SCHED_CONVERSATION_H

#include <stdbool.h>
#include <stdint.h>

/** Agents per job: dependencies are kept as 64-bit masks. */
#define PL_CONV_MAX_AGENTS 64

typedef enum pl_conv_pool {
    PL_CONV_POOL_NONE = 0,
    PL_CONV_POOL_PENDING,
    PL_CONV_POOL_READY,      /**< pre-departure */
    PL_CONV_POOL_INFLIGHT,
} pl_conv_pool;

typedef enum pl_conv_status {
    PL_CONV_STATUS_IDLE = 0,   /**< not started (e.g. skipped on resume) */
    PL_CONV_STATUS_ACTIVE,
    PL_CONV_STATUS_SUCCEEDED,
    PL_CONV_STATUS_FAILED,
} pl_conv_status;

/** The dispatch policy: the pre-departure order and the in-flight gate.
 *  Dependencies, re-prompts, rounds and failures work the same in all. */
typedef enum pl_conv_policy {
    PL_CONV_POLICY_PRIORITY = 0, /**< seed 000's key (reprompt, -progress,
                                      conversation, round); the default */
    PL_CONV_POLICY_FCFS,         /**< first ready, first dispatched: the order
                                      requests entered pre-departure */
    PL_CONV_POLICY_NAIVE,        /**< one request in flight across all models,
                                      ordered (conversation, round, agent):
                                      conversations run one at a time and
                                      their agents in index order */
} pl_conv_policy;

/** Policy name ("parley", "fcfs", "naive"), and back: -1 if unknown. */
const char *pl_conv_policy_name(pl_conv_policy p);
int pl_conv_policy_parse(const char *name);

/** How a dispatched request ended. */
typedef enum pl_conv_outcome {
    PL_CONV_OK = 0,          /**< valid response: the agent is done this round */
    PL_CONV_INVALID,         /**< failed validation: re-prompt or, after
                                  max_retries re-prompts, fail the conversation */
    PL_CONV_ERROR,           /**< backend error: the conversation fails */
} pl_conv_outcome;

/** Event flags returned by pl_conv_sched_complete() and _fail(). */
enum {
    PL_CONV_EV_REPROMPT = 1u << 0,       /**< a re-prompt was queued */
    PL_CONV_EV_ROUND_DONE = 1u << 1,     /**< the request's round completed */
    PL_CONV_EV_SUCCEEDED = 1u << 2,      /**< the conversation completed */
    PL_CONV_EV_FAILED = 1u << 3,         /**< the conversation failed */
    PL_CONV_EV_STALE = 1u << 4,          /**< the conversation was already
                                              terminal: only the slot was freed */
};

/**
 * A request. Fields above `ud` are read-only for callers; `ud` and
 * `backend_id` are the caller's. Owned by the scheduler: valid from dispatch
 * until it is passed to pl_conv_sched_complete().
 */
typedef struct pl_conv_req {
    int conversation;        /**< conversation index (question order) */
    int round;               /**< 0-based round */
    int agent;               /**< agent index */
    int model;               /**< model index of the agent */
    int attempt;             /**< 0 for the first try, +1 per re-prompt */
    bool is_reprompt;
    int rounds_completed;    /**< conversation progress when queued */
    uint64_t seq;            /**< creation order: the stable tiebreak */
    uint64_t ready_seq;      /**< order of entry into pre-departure */
    pl_conv_pool pool;
    void *ud;                /**< caller data (e.g. the submitted request) */
    uint64_t backend_id;     /**< caller data (backend request id) */
    /* internal links */
    int heap_idx_;
    struct pl_conv_req *prev_, *next_;     /* global pending / in-flight list */
    struct pl_conv_req *cprev_, *cnext_;   /* conversation's queued list */
} pl_conv_req;

typedef struct pl_conv_sched_config {
    int n_agents;                /**< 1..PL_CONV_MAX_AGENTS */
    int n_models;                /**< >= 1 */
    int num_rounds;              /**< >= 1 */
    int max_retries;             /**< re-prompts allowed per agent and round */
    int n_conversations;         /**< >= 0 */
    const int *agent_model;      /**< n_agents model indices (copied) */
    const uint64_t *agent_deps;  /**< n_agents masks: bit j = speaks after j
                                      (copied); must be acyclic */
    pl_conv_policy policy;       /**< 0: PL_CONV_POLICY_PRIORITY */
} pl_conv_sched_config;

typedef struct pl_conv_sched pl_conv_sched;

/** One row of a pool listing (for /status and the live view). */
typedef struct pl_conv_entry {
    int conversation, round, agent, model, attempt;
    bool is_reprompt;
} pl_conv_entry;

typedef struct pl_conv_counts {
    int pending, ready, inflight;
    int idle, active, succeeded, failed;     /**< conversations */
} pl_conv_counts;

/** Create a scheduler. Returns NULL on invalid config (bad index, self or
 *  cyclic dependency) or OOM. Every conversation starts IDLE. Every model's
 *  capacity starts at 1. */
pl_conv_sched *pl_conv_sched_init(const pl_conv_sched_config *cfg);
void pl_conv_sched_free(pl_conv_sched *s);

/** Set a model's in-flight bound (>= 1). */
void pl_conv_sched_set_capacity(pl_conv_sched *s, int model, int capacity);

/** Start an IDLE conversation: its round-0 requests enter pending or
 *  pre-departure. Returns 0, or -1 if it is not IDLE / out of range / OOM. */
int pl_conv_sched_start(pl_conv_sched *s, int conversation);

/** Move the best ready request whose model has room to in-flight and return
 *  it; NULL when none can go. Loop until NULL. */
pl_conv_req *pl_conv_sched_dispatch(pl_conv_sched *s);

/** The same for one model only: its best ready request if the model has a
 *  free slot (a caller sharing the model across schedulers decides when),
 *  NULL otherwise. */
pl_conv_req *pl_conv_sched_dispatch_model(pl_conv_sched *s, int model);
/** Would pl_conv_sched_dispatch_model return a request? */
bool pl_conv_sched_can_dispatch(const pl_conv_sched *s, int model);

/** Apply the outcome of an in-flight request and recycle it (r is invalid
 *  afterwards). Returns PL_CONV_EV_* flags. */
unsigned pl_conv_sched_complete(pl_conv_sched *s, pl_conv_req *r,
                                pl_conv_outcome outcome);

/** Fail an ACTIVE (or IDLE) conversation now, e.g. on cancel: its pending
 *  and pre-departure requests are removed; its in-flight ones stay counted
 *  until completed (they come back as STALE). Returns PL_CONV_EV_FAILED, or
 *  0 if it was already terminal. */
unsigned pl_conv_sched_fail(pl_conv_sched *s, int conversation);

/** Idempotent finalisation guard: true exactly once for a terminal
 *  conversation, false before it is terminal and on every later call. */
bool pl_conv_sched_finalize(pl_conv_sched *s, int conversation);

pl_conv_status pl_conv_sched_status(const pl_conv_sched *s, int conversation);
int pl_conv_sched_rounds_completed(const pl_conv_sched *s, int conversation);
/** Bit i set when agent i completed in the conversation's current round. */
uint64_t pl_conv_sched_round_done_mask(const pl_conv_sched *s, int conversation);

void pl_conv_sched_counts(const pl_conv_sched *s, pl_conv_counts *c);
/** Per-model in-flight count, capacity and ready (pre-departure) count. */
void pl_conv_sched_model_counts(const pl_conv_sched *s, int model,
                                int *inflight, int *capacity, int *ready);

/** The first k entries of a pool: pending in arrival order, pre-departure
 *  in dispatch-priority order, in-flight in dispatch order. Returns the
 *  number written. */
int pl_conv_sched_peek(pl_conv_sched *s, pl_conv_pool pool,
                       pl_conv_entry *out, int k);

/** Next need of a conversation (pl_conv_sched_next_need). */
#define PL_CONV_NEED_DONE (-1)   /**< succeeded or failed: never again */
#define PL_CONV_NEED_NONE (-2)   /**< not started: nothing to say */

/**
 * How soon each conversation sends its next request, for KV retention
 * (DESIGN.md, "Conversation-aware KV"): need[c] for c < n_conversations is
 * 0 when it has a request in flight, 1 + w when its best ready request leaves in dispatch wave w
 * of its model (its rank in that model's pre-departure order divided by
 * the model's capacity), PL_CONV_NEED_DONE or PL_CONV_NEED_NONE. O(ready
 * log ready). Returns 0, -1 on OOM.
 */
int pl_conv_sched_next_need(pl_conv_sched *s, int *need);

/** Iterate in-flight requests (dispatch order): first, then next(r). */
pl_conv_req *pl_conv_sched_inflight_first(pl_conv_sched *s);
pl_conv_req *pl_conv_sched_inflight_next(pl_conv_req *r);

#endif
