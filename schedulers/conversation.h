/* conversation.h - a job's conversations: what each agent request waits
 * for, and what its completion changes.
 *
 * A pure data structure (no threads, no I/O), one per job. It keeps seed
 * 000's rules about conversations; the order and the bound are its
 * models' admission points' (dispatch.h):
 *
 *   pending        requests blocked on speak_after_within_round agents that
 *                  have not completed yet in the same round: kept here, as
 *                  what they wait for is another agent's reply in the same
 *                  conversation, maybe on another model;
 *   pre-departure  a request whose dependencies are done is pushed to its
 *                  model's dispatch, which orders it by the seed's tuple
 *                  among every job's requests on that model and admits it
 *                  when the model has room and it is this job's turn;
 *   in-flight      dispatch counts and bounds them; the job's own list is
 *                  kept here (to abort a conversation's requests).
 *
 * An admitted request comes back through the config's submit callback (the
 * job sends it through backend.h). pl_convs_complete() applies its outcome
 * synchronously: state update, dependency release, re-prompt on a
 * validation failure, the next round when a round completes, failure
 * isolation after max_retries; then the caller pumps (pl_convs_pump), so
 * what the completion readied competes for the slot it freed.
 * Conversations are independent: nothing in one ever blocks or unblocks
 * another. The naive baseline's one request at a time across all of the
 * job's models is kept here too (a job-wide rule).
 */
#ifndef PL_SCHED_CONVERSATION_H
#define PL_SCHED_CONVERSATION_H

#include <stdbool.h>
#include <stdint.h>

#include "schedulers/dispatch.h"

/** Agents per job: dependencies are kept as 64-bit masks. */
#define PL_CONV_MAX_AGENTS 64

typedef enum pl_conv_pool {
    PL_CONV_POOL_NONE = 0,
    PL_CONV_POOL_PENDING,
    PL_CONV_POOL_READY,      /**< pre-departure (in its model's dispatch) */
    PL_CONV_POOL_INFLIGHT,
} pl_conv_pool;

typedef enum pl_conv_status {
    PL_CONV_STATUS_IDLE = 0,   /**< not started (e.g. skipped on resume) */
    PL_CONV_STATUS_ACTIVE,
    PL_CONV_STATUS_SUCCEEDED,
    PL_CONV_STATUS_FAILED,
} pl_conv_status;

/** How a dispatched request ended. */
typedef enum pl_conv_outcome {
    PL_CONV_OK = 0,          /**< valid response: the agent is done this round */
    PL_CONV_INVALID,         /**< failed validation: re-prompt or, after
                                  max_retries re-prompts, fail the conversation */
    PL_CONV_ERROR,           /**< backend error: the conversation fails */
} pl_conv_outcome;

/** Event flags returned by pl_convs_complete() and _fail(). */
enum {
    PL_CONV_EV_REPROMPT = 1u << 0,       /**< a re-prompt was queued */
    PL_CONV_EV_ROUND_DONE = 1u << 1,     /**< the request's round completed */
    PL_CONV_EV_SUCCEEDED = 1u << 2,      /**< the conversation completed */
    PL_CONV_EV_FAILED = 1u << 3,         /**< the conversation failed */
    PL_CONV_EV_STALE = 1u << 4,          /**< the conversation was already
                                              terminal: only the slot was freed */
    PL_CONV_EV_NOMEM = 1u << 5,          /**< with FAILED: out of memory
                                              queueing its next request */
};

typedef struct pl_convs pl_convs;

/**
 * A request. `d` is dispatch's view of it (the tuple and the order); the
 * fields after it are read-only for callers except `ud` and `backend_id`,
 * which are the caller's. Owned by pl_convs: valid from the submit
 * callback until it is passed to pl_convs_complete().
 */
typedef struct pl_conv_req {
    pl_dispatch_req d;
    int conversation;        /**< conversation index (question order) */
    int round;               /**< 0-based round */
    int agent;               /**< agent index */
    int model;               /**< model index of the agent */
    int attempt;             /**< 0 for the first try, +1 per re-prompt */
    bool is_reprompt;
    int rounds_completed;    /**< conversation progress when queued */
    pl_conv_pool pool;
    void *ud;                /**< caller data (e.g. the submitted request) */
    uint64_t backend_id;     /**< caller data (backend request id) */
    /* internal links */
    struct pl_conv_req *prev_, *next_;     /* pending / in-flight list */
    struct pl_conv_req *cprev_, *cnext_;   /* conversation's queued list */
} pl_conv_req;

typedef struct pl_convs_config {
    int n_agents;                /**< 1..PL_CONV_MAX_AGENTS */
    int n_models;                /**< >= 1 */
    int num_rounds;              /**< >= 1 */
    int max_retries;             /**< re-prompts allowed per agent and round */
    int n_conversations;         /**< >= 0 */
    const int *agent_model;      /**< n_agents model indices (copied) */
    const uint64_t *agent_deps;  /**< n_agents masks: bit j = speaks after j
                                      (copied); must be acyclic */
    /** n_agents reply limits (max_tokens; 0: up to the context), copied
     *  into each request for dispatch's KV rule; NULL: all 0. */
    const int *agent_max_tokens;
    pl_dispatch_policy policy;   /**< 0: PL_DISPATCH_PRIORITY */
    /** n_models: each model's admission point (borrowed; outlives us).
     *  The job joins each as one client. */
    pl_dispatch *const *dispatch;
    const char *name;            /**< the job's name there (borrowed) */
    double weight;               /**< its share weight on each (<= 0: 1) */
    const int *model_cap;        /**< n_models own in-flight bounds (<= 0:
                                      none); NULL: none */
    /** Submit an admitted request to its backend. If that fails, the
     *  caller completes r (PL_CONV_ERROR), inside the call or later. */
    void (*submit)(void *ud, pl_conv_req *r);
    /** May the job dispatch now (e.g. its I/O keeps up)? NULL: always. */
    bool (*may_go)(void *ud);
    void *ud;
} pl_convs_config;

/** One row of a pool listing (for /status and the live view). */
typedef struct pl_conv_entry {
    int conversation, round, agent, model, attempt;
    bool is_reprompt;
} pl_conv_entry;

typedef struct pl_conv_counts {
    int pending, ready, inflight;
    int idle, active, succeeded, failed;     /**< conversations */
} pl_conv_counts;

/** Create a job's conversations and join each model's dispatch. Returns
 *  NULL on invalid config (bad index, self or cyclic dependency, no
 *  dispatch) or OOM. Every conversation starts IDLE. */
pl_convs *pl_convs_new(const pl_convs_config *cfg);
/** Take whatever is still queued out of the dispatches, leave them, free. */
void pl_convs_free(pl_convs *c);
/** Leave the dispatches now (the job finished: nothing is queued); later
 *  calls are for status only. Idempotent. */
void pl_convs_detach(pl_convs *c);

/** Start an IDLE conversation: its round-0 requests become pending or go
 *  to their dispatch. Returns 0, or -1 if it is not IDLE / out of range /
 *  OOM (then it is FAILED). Does not pump. */
int pl_convs_start(pl_convs *c, int conversation);

/** Pump every model's dispatch the job uses (after starts and
 *  completions, once the state is up to date). */
void pl_convs_pump(pl_convs *c);

/** Apply the outcome of an in-flight request and recycle it (r is invalid
 *  afterwards): its slot is freed with cost (tokens it used; 0 for an
 *  abort), then the rules run. Does not pump. Returns PL_CONV_EV_* flags. */
unsigned pl_convs_complete(pl_convs *c, pl_conv_req *r, pl_conv_outcome outcome,
                           double cost);

/** Fail an ACTIVE (or IDLE) conversation now, e.g. on cancel: its pending
 *  and pre-departure requests are removed; its in-flight ones stay counted
 *  until completed (they come back as STALE). Returns PL_CONV_EV_FAILED, or
 *  0 if it was already terminal. */
unsigned pl_convs_fail(pl_convs *c, int conversation);

/** Idempotent finalisation guard: true exactly once for a terminal
 *  conversation, false before it is terminal and on every later call. */
bool pl_convs_finalize(pl_convs *c, int conversation);

pl_conv_status pl_convs_status(const pl_convs *c, int conversation);
int pl_convs_rounds_completed(const pl_convs *c, int conversation);
/** Bit i set when agent i completed in the conversation's current round. */
uint64_t pl_convs_round_done_mask(const pl_convs *c, int conversation);

void pl_convs_counts(const pl_convs *c, pl_conv_counts *k);
/** The job's in-flight count, bound (min(its own cap, the model's
 *  capacity)) and pre-departure count on a model. */
void pl_convs_model_counts(const pl_convs *c, int model, int *inflight, int *capacity,
                           int *ready);

/** The first k entries of a pool: pending in arrival order, pre-departure
 *  in dispatch-priority order (the job's models merged), in-flight in
 *  dispatch order. Returns the number written. */
int pl_convs_peek(pl_convs *c, pl_conv_pool pool, pl_conv_entry *out, int k);

/** Next need of a conversation (pl_convs_next_need). */
#define PL_CONV_NEED_DONE (-1)   /**< succeeded or failed: never again */
#define PL_CONV_NEED_NONE (-2)   /**< not started: nothing to say */

/**
 * How soon each conversation sends its next request, for KV retention
 * (DESIGN.md, "Conversation-aware KV"): need[c] for c < n_conversations is
 * 0 when it has a request in flight, 1 + w when its best ready request
 * leaves in dispatch wave w of its model (its rank among the job's
 * pre-departure requests on that model divided by the job's bound there),
 * PL_CONV_NEED_DONE or PL_CONV_NEED_NONE. O(ready log ready). Returns 0,
 * -1 on OOM.
 */
int pl_convs_next_need(pl_convs *c, int *need);

/** Iterate in-flight requests (dispatch order): first, then next(r). */
pl_conv_req *pl_convs_inflight_first(pl_convs *c);
pl_conv_req *pl_convs_inflight_next(pl_conv_req *r);

#endif
