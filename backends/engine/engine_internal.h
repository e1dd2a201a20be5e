/* engine_internal.h - the engine backend's state: the types every file of
 * backends/engine/ shares (a request, a message, the registry's record, the
 * step statistics, pl_engine). Functions are declared by the header of the
 * file that defines them; the files call one way
 * (scripts/check_engine_calls.sh), lowest first:
 *
 *   engine_kv.c     the KV view for admission          both threads
 *   engine_req.c    messages and requests: new, free,   any, engine thread
 *                   deferred free, DONE; the clock
 *   engine_chan.c   inbox, outbox, the registry of      main, engine thread
 *                   live requests, delivery to sinks
 *   engine_stats.c  the statistics snapshot             engine thread, any
 *   engine_text.c   what a sampled token does           engine thread
 *   engine_prep.c   submit and preparation              main, prepare workers
 *   engine_loop.c   the step loop                       engine thread
 *   engine.c        the pl_backend: ops, new, free      main thread
 *
 * Which thread owns a field is written below and checked: functions that
 * may run only on the main or the engine thread assert it
 * (PL_ASSERT_ON_THREAD(&e->main_role) / (&e->engine_role)). */
#ifndef PL_ENGINE_INTERNAL_H
#define PL_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "backends/constrain/constraint.h"
#include "backends/engine/engine.h"
#include "schedulers/batch.h"
#include "schedulers/dispatch.h"
#include "schedulers/kv_blocks.h"
#include "src/base/thread_role.h"

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
    int stop_index;               /* pl_result.stop_index: set when a stop
                                     string matched */
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
    pl_kv_ckpt_stats ckpt;        /* recurrent-state checkpoints (slots 0:
                                     none) */
    pl_kv_group_stats kv_kinds[PL_KV_MAX_KINDS]; /* kv_layout's kinds, each
                                     the sum of its groups */
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
    int max_len;                  /* effective context: the longest
                                     sequence (<= max_model_len) whose
                                     blocks in every group fit the pool */

    /* Thread roles: the main thread is the one that made the engine
     * (pl_engine_backend_new), the engine thread takes its role as it
     * starts and drops it as it ends (thread_role.h). */
    pl_thread_role main_role, engine_role;

    /* engine thread only */
    pl_kv_blocks *kv;
    pl_kv_ckpt *ckpt;             /* hybrids' recurrent-state checkpoints,
                                     or NULL */
    pl_kv_layout kv_layout;       /* the cache groups (one full group when
                                     the runner has none) */
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

#endif
