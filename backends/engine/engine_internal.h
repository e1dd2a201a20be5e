/* engine_internal.h - the engine backend's state, shared by engine.c (the
 * backend table, main thread), engine_queue.c (inbox/outbox and delivery)
 * and engine_loop.c (the engine thread's step loop). */
#ifndef PL_ENGINE_INTERNAL_H
#define PL_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "backends/constrain/constraint.h"
#include "backends/engine/engine.h"
#include "schedulers/batch.h"
#include "schedulers/dispatch.h"
#include "schedulers/kv_blocks.h"

struct event;

/* Steps a request may wait, at most, for the shared prompt positions a
 * request of the step being scheduled computes (batch.h defer_steps). */
#define PL_ENGINE_DEFER_STEPS 2

/* A request as the engine thread sees it. Created on the main thread,
 * owned by the engine thread once in the inbox. */
typedef struct eng_req {
    uint64_t id;
    int32_t *prompt;              /* handed to pl_batch_add, then freed */
    int n_prompt;
    int max_new;
    int priority;
    uint64_t conv_key;            /* the request's conversation key */
    bool reply_private;           /* backend.h pl_gen_request */
    pl_sampling sp;               /* owned copy (stop strings, bias) */
    const pl_token_fsm *fsm;      /* constraint automaton (a reference) */
    double t_submit, t_sched, t_first;   /* ms, monotonic */
    pl_batch_seq *seq;
    bool echo, score_only;        /* completions echo (backend.h) */
    bool echo_sent;               /* the prompt delta went out */
    int n_top_prompt;             /* alternatives per prompt logprob */
    float *plp;                   /* echo with logprobs: (n_prompt) prompt
                                     logprobs, [0] NaN; NULL otherwise */
    int32_t *ptop_ids;            /* (n_prompt, n_top_prompt) */
    float *ptop_lp;               /* (n_prompt, n_top_prompt) */
    char *pending;                /* text not yet emitted */
    size_t pending_len, pending_cap;
    uint64_t free_after;          /* deferred free: once this many steps
                                     have been retired */
    struct eng_req *next;         /* deferred-free list */
    struct eng_msg *done_msg;     /* its DONE, reserved when it arrives (the
                                     SUBMIT message), so that it always
                                     completes, out of memory or not */
    int kv_blocks;                /* blocks counted for it at submit, until
                                     the engine thread counts it itself */
} eng_req;

typedef enum eng_msg_type {
    ENG_MSG_SUBMIT = 0,
    ENG_MSG_ABORT,
    ENG_MSG_PAUSE,
    ENG_MSG_RESUME,
    ENG_MSG_RETAIN,               /* id: conversation key, n: next need */
    ENG_MSG_DELTA,
    ENG_MSG_DONE,
} eng_msg_type;

/* One queued message. Outbox messages are recycled (with their buffers)
 * so steady-state streaming does not malloc per token. */
typedef struct eng_msg {
    eng_msg_type type;
    uint64_t id;
    eng_req *req;                 /* SUBMIT */
    char *text;                   /* DELTA: text[0..len) */
    size_t len, text_cap;
    int32_t *tokens;              /* DELTA: n tokens */
    float *lp;                    /* DELTA with logprobs: (n) */
    int32_t *top_ids;             /* (n, n_top) */
    float *top_lp;                /* (n, n_top) */
    int n, tok_cap, n_top;
    bool has_logprobs;
    bool prompt;                  /* DELTA: the echoed prompt */
    pl_result res;                /* DONE */
    pl_err err;                   /* DONE with PL_FINISH_ERROR */
    struct eng_msg *next;
} eng_msg;

typedef struct eng_queue {
    eng_msg *head, *tail;
} eng_queue;

/* Main-thread record of a live request: where its events go. */
typedef struct eng_sub {
    uint64_t id;
    pl_sink sink;
    bool preparing;               /* on a prepare worker, not yet in the inbox */
    bool paused;                  /* paused while preparing: paused at submit */
    struct eng_sub *next;         /* hash chain */
} eng_sub;

/* Step timing and counters, written by the engine thread, read by stats. */
typedef struct eng_stats {
    uint64_t steps;               /* steps launched */
    uint64_t steps_done;          /* steps whose outputs were processed */
    uint64_t rows, decode_rows, prefill_rows, preemptions;
    uint64_t deferrals;           /* admissions deferred for a shared prefix */
    uint64_t tokens_out;          /* sampled tokens appended */
    uint64_t aborted;             /* requests aborted by the caller */
    uint64_t pause_msgs;          /* pause and resume requests applied */
    uint64_t hints;               /* retention hints applied */
    double schedule_ms, process_ms, execute_ms, idle_gap_ms;
    double max_idle_gap_ms;
    int running, waiting;
    pl_kv_stats kv;
    uint64_t idle_checks;         /* KV invariant checks when idle */
    uint64_t idle_check_step;     /* steps_done at the last check */
    bool idle_ok;                 /* last check passed (true before any) */
    char idle_why[128];
} eng_stats;

typedef struct eng_inflight {
    pl_batch_step *st;
    int ticket;
} eng_inflight;

typedef struct pl_engine {
    pl_backend base;              /* first: a pl_backend */
    pl_backend_ops ops;           /* kind = the runner's name */
    pl_runner *runner;            /* owned */
    pl_engine_text text;
    pl_constraint_cache *constraints; /* compiled constraints (main thread
                                     looks up, prepare workers compile) */
    struct pl_io_pool *prep;      /* prepare workers (engine_prep.c); NULL:
                                     everything is prepared inline */
    bool closing;                 /* being freed: prepared requests dropped */
    pl_engine_options opt;        /* resolved */
    int max_model_len, n_vocab, capacity;
    int worst_capacity;           /* seed 000's rule (--capacity worst-case) */
    double t_open;                /* ms, monotonic: for busy_fraction */
    int max_len;                  /* effective context: min(max_model_len,
                                     num_blocks * block_size) */

    /* engine thread only */
    pl_kv_blocks *kv;
    pl_batch *batch;
    pl_batch_step steps[PL_RUNNER_MAX_INFLIGHT];
    bool step_busy[PL_RUNNER_MAX_INFLIGHT];
    eng_inflight inflight[PL_RUNNER_MAX_INFLIGHT];
    int n_inflight, max_inflight;
    uint64_t n_launched, n_retired;
    double t_last_done;           /* when the last wait() returned */
    bool stalled;                 /* nothing could be scheduled */
    eng_req *deferred;            /* finished, freed once steps retire */
    eng_msg *local_free;          /* recycled messages taken from outbox */
    eng_queue pending_out;        /* this step's messages, posted at once */
    eng_stats st_local;

    /* inbox: main -> engine */
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t in_lock;
    pthread_cond_t in_cond;
    eng_queue inbox;
    bool stop;

    /* outbox: engine -> main */
    pthread_mutex_t out_lock;
    eng_queue outbox;
    eng_msg *msg_free;            /* recycled messages */
    int wake_fd;                  /* eventfd */
    struct event *wake_ev;

    /* stats snapshot */
    pthread_mutex_t stats_lock;
    eng_stats st_shared;

    /* KV admission (engine_kv.c): the view dispatch reads (ops->kv).
     * The engine thread stores the figures, then kv_seen (release); the
     * main thread loads kv_seen (acquire) first, so a request is counted
     * at least once: by kv_submitted - kv_seen until the engine counts it. */
    bool kv_rule;                 /* false under --capacity worst-case */
    _Atomic int kv_free, kv_kept, kv_reserved, kv_prompt_est, kv_reply_est;
    _Atomic uint64_t kv_seen;     /* blocks of the submits it counts */
    uint64_t kv_seen_local;       /* engine thread */
    pl_dispatch_est kv_replies;   /* engine thread: reply lengths */
    double kv_prompt_ewma;        /* engine thread: prompt footprint */
    uint64_t kv_submitted;        /* main thread: blocks of every submit */

    /* main thread only */
    uint64_t next_id;
    eng_sub **subs;               /* hash of live requests by id */
    uint32_t subs_mask;
    int n_subs;
    pl_token_logprob *lp_scratch; /* delta logprob arrays, reused */
    pl_top_logprob *top_scratch;
    int lp_scratch_cap;
} pl_engine;

double pl_engine_now_ms_(void);

/* engine_queue.c */
void pl_engine_queue_push_(eng_queue *q, eng_msg *m);
eng_msg *pl_engine_msg_get_(pl_engine *e);           /* engine thread */
void pl_engine_msg_clear_(eng_msg *m);
void pl_engine_msg_free_(eng_msg *m);
void pl_engine_post_(pl_engine *e);                  /* flush pending_out */
void pl_engine_inbox_push_(pl_engine *e, eng_msg *m); /* main thread */
/* m, then (may be NULL) right after it: the engine thread takes both in
 * one drain, before it schedules anything (main thread). */
void pl_engine_inbox_push2_(pl_engine *e, eng_msg *m, eng_msg *then);
int pl_engine_wake_init_(pl_engine *e);
void pl_engine_wake_free_(pl_engine *e);
void pl_engine_queue_free_(eng_queue *q);

/* engine.c: the main-thread registry, and control messages */
int pl_engine_sub_add_(pl_engine *e, uint64_t id, pl_sink sink);
eng_sub *pl_engine_sub_find_(pl_engine *e, uint64_t id);
void pl_engine_sub_remove_(pl_engine *e, uint64_t id);
void pl_engine_control_(pl_engine *e, uint64_t id, eng_msg_type type);
/* Token ids from a client: 0, or a 400 naming param when one is outside
 * the vocabulary (any thread). */
int pl_engine_check_ids_(pl_engine *e, const int32_t *ids, int n, const char *param,
                         pl_err *err);

/* engine_prep.c: submit, and the prepare workers (main thread) */
int pl_engine_submit_(pl_backend *b, const pl_gen_request *req, pl_sink sink, uint64_t *id,
                      pl_err *err);
/* The prompt's ids: copied from prompt_tokens or encoded (any thread). */
int pl_engine_prompt_ids_(pl_engine *e, const pl_gen_request *req, int32_t **ids, int *n,
                          pl_err *err);
/* threads <= 0: none. Sets ops.late_errors when there are workers. */
int pl_engine_prep_init_(pl_engine *e, int threads);
/* Waits for the workers; what they prepared is dropped (no sink called). */
void pl_engine_prep_free_(pl_engine *e);

/* engine_loop.c */
void *pl_engine_thread_main_(void *arg);
void pl_engine_req_free_(eng_req *r);
void pl_engine_emit_done_(pl_engine *e, eng_req *r, pl_finish f,
                          const pl_err *err);

/* engine_kv.c: the KV view for admission */
/** Main thread, at submit: count r's blocks until the engine sees it. */
void pl_engine_kv_submit_(pl_engine *e, eng_req *r);
/** Main thread: a request handed to a prepare worker (its prompt not
 *  tokenised yet) is counted until it lands (pl_engine_kv_submit_) or
 *  fails, for prompt_bound tokens (an upper bound of a text prompt's, from
 *  its bytes) or, with 0, the running prompt estimate; returns the blocks
 *  counted, to give back to pl_engine_kv_unhold_ either way. */
int pl_engine_kv_hold_(pl_engine *e, int prompt_bound, int max_tokens);
void pl_engine_kv_unhold_(pl_engine *e, int blocks);
/** Engine thread, as r leaves the inbox (before anything may free it). */
void pl_engine_kv_seen_(pl_engine *e, const eng_req *r);
/** Engine thread: a reply of n tokens ended (stop or length). */
void pl_engine_kv_reply_(pl_engine *e, int n);
/** Engine thread: publish the figures (before posting DONEs, so that a
 *  completion's blocks are free in the view its DONE pumps). */
void pl_engine_kv_publish_(pl_engine *e);
/** ops->kv. */
bool pl_engine_kv_view_(pl_backend *b, pl_dispatch_kv *out);

/* engine_text.c: outputs of one step, per sequence */
/** The request failed for lack of memory on the engine thread: it ends
 *  with a 500 its client sees. */
void pl_engine_fail_oom_(pl_engine *e, eng_req *r, pl_batch_seq *s);
void pl_engine_on_token_(pl_engine *e, pl_batch_seq *s, int32_t tok,
                         const pl_step_output *out, int k);
/* engine_text.c: prompt logprobs of a step's rows into their requests */
void pl_engine_prompt_rows_(pl_engine *e, const pl_batch_step *st,
                            const pl_step_output *out);
/* engine_text.c: queue r's echoed prompt (once, before its first token) */
/** The echoed prompt as one delta. -1 on out of memory. */
int pl_engine_emit_prompt_(pl_engine *e, eng_req *r, const pl_batch_seq *s);

#endif
