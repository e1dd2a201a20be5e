/* jobs.h - a multi-agent conversation job: spec + its conversations +
 * backends + persistence, driven on the main loop.
 *
 * The job's conversations (schedulers/conversation.h) hand each ready agent
 * request to its model's admission point (schedulers/dispatch.h), shared
 * with every other job and the OpenAI endpoints on that model; what it
 * admits comes back to the job, which submits it through backend.h with a
 * sink. On each completion the job updates state and resolves dependencies
 * first, frees the model slot, dispatches more, and only then hands the
 * transcript write to the I/O pool (seed 000). Subscribers receive events.
 * Everything here runs on the main thread.
 */
#ifndef PL_JOBS_H
#define PL_JOBS_H

#include <stdbool.h>

#include <jansson.h>

#include "backends/backend.h"
#include "src/base/io_pool.h"
#include "schedulers/dispatch.h"
#include "src/jobs/job_spec.h"

struct event_base;

typedef enum pl_job_state {
    PL_JOB_STARTING = 0,         /**< opening the output directory */
    PL_JOB_RUNNING,
    PL_JOB_COMPLETED,            /**< every question finished and persisted */
    PL_JOB_CANCELLED,
    PL_JOB_ERROR,                /**< could not start (output dir, backend) */
} pl_job_state;

const char *pl_job_state_name(pl_job_state s);

typedef enum pl_job_event_kind {
    PL_JOB_EV_MESSAGE_STARTED = 0,
    PL_JOB_EV_TOKEN,             /**< only to subscribers asking for tokens */
    PL_JOB_EV_MESSAGE_COMPLETED,
    PL_JOB_EV_REPROMPT,
    PL_JOB_EV_CONVERSATION_COMPLETED,
    PL_JOB_EV_CONVERSATION_FAILED,
    PL_JOB_EV_JOB_COMPLETED,
} pl_job_event_kind;

/** Event name as sent over SSE ("message_started", ...). */
const char *pl_job_event_name(pl_job_event_kind k);

/** An event; every pointer is valid only during the callback. */
typedef struct pl_job_event {
    pl_job_event_kind kind;
    const char *question_id;     /**< NULL for job_completed */
    int round, attempt;
    const char *agent_id;        /**< message and reprompt events */
    const char *text;            /**< token delta or message content */
    size_t len;
    int answer;                  /**< choice index or -1 */
    bool valid;                  /**< message_completed: passed validation */
    const char *error;           /**< conversation_failed */
} pl_job_event;

typedef void (*pl_job_event_fn)(void *ud, const pl_job_event *ev);

typedef struct pl_job pl_job;

typedef struct pl_job_opts {
    struct event_base *base;
    pl_io_pool *io;              /**< borrowed */
    const char *id;              /**< job id (copied) */
    const char *output_root;     /**< used when the spec has no output_dir */
    pl_backend **backends;       /**< one per spec model, borrowed */
    /** One per spec model (borrowed, outlives the job): the served
     *  model's admission point, shared with every other job and the OpenAI
     *  endpoints on it. NULL: the job makes its own (no reserve). */
    pl_dispatch **dispatch;
    /** Dispatch policy (benchmark baselines); 0 is parley's scheduler. */
    int policy;                  /**< pl_dispatch_policy */
    /** No retention hints to the backends (their caches evict by LRU
     *  alone; a benchmark baseline). */
    bool no_retention_hints;
    /** What serves each spec model, for the spec's fingerprint (one per
     *  model, e.g. "mock:echo" or "engine:SmolLM2-135M-Instruct.Q4_1.gguf";
     *  borrowed). NULL: "<backend kind>:<served model name>". */
    const char *const *served;
    /** The experiment holds results of another spec: resume anyway (they
     *  mix on purpose; the index lines tell them apart by fingerprint). */
    bool resume_changed;
    /** Called once when the job leaves RUNNING/STARTING (may be NULL). */
    void (*on_finished)(void *ud, pl_job *j);
    void *ud;
} pl_job_opts;

/** Create a job; takes ownership of *spec (zeroed). NULL on OOM or an
 *  invalid scheduler config, with err set. */
pl_job *pl_job_new(pl_job_spec *spec, const pl_job_opts *o, char *err,
                   size_t errlen);
/** Open the output (on the I/O pool), skip succeeded questions, run. */
int pl_job_start(pl_job *j);
/** Abort in-flight requests; finished transcripts stay on disk and the
 *  unfinished questions stay pending (a re-run resumes them). */
void pl_job_cancel(pl_job *j);
/** Free (cancels first if running). Drains its I/O. */
void pl_job_free(pl_job *j);

/** Subscribe; returns an id > 0 for unsubscribe. tokens: also TOKEN. */
int pl_job_subscribe(pl_job *j, pl_job_event_fn fn, void *ud, bool tokens);
void pl_job_unsubscribe(pl_job *j, int id);

pl_job_state pl_job_get_state(const pl_job *j);
const char *pl_job_id(const pl_job *j);
const pl_job_spec *pl_job_get_spec(const pl_job *j);
/** The experiment output directory (NULL before it is open). */
const char *pl_job_dir(const pl_job *j);
const char *pl_job_error(const pl_job *j);
/** What kind of error (NULL without one): "spec_changed" (the experiment
 *  holds another spec), "write_failed" (a transcript, the index or the
 *  manifest could not be written), "open_failed", "start_failed". */
const char *pl_job_error_code(const pl_job *j);
/** The spec's fingerprint (64 hex digits; "" before pl_job_start). */
const char *pl_job_fingerprint(const pl_job *j);

typedef struct pl_job_progress {
    int total, skipped;          /**< skipped: had succeeded when it started */
    /** Every question of the job that succeeded / failed: here, before
     *  (skipped) or in another process during the job (done_elsewhere). */
    int succeeded, failed;
    int active;                  /**< conversations running here */
    int waiting;                 /**< not claimed by any process yet */
    int elsewhere;               /**< running in another process now */
    int done_elsewhere;          /**< finished by other processes meanwhile */
    int cancelled;               /**< stopped by a cancel (not persisted) */
    int write_failed;            /**< finished, but their transcript could not
                                      be written (counted in failed) */
    int saved;                   /**< transcripts written to disk (staged) */
    int persisted;               /**< recorded in the manifest and index */
    /** Accuracy over the whole experiment (its index, and this run's
     *  results not yet in it): questions with a final answer and a known
     *  truth, and of them right. run_*: this run's share. */
    int answered, correct;
    int run_answered, run_correct;
    int reprompts;               /**< validation re-prompts sent */
    /** Prompt tokens of the requests of rounds >= 2 (1-based) that ended,
     *  and of them served from the backend's prefix cache. */
    long long round2plus_prompt_tokens, round2plus_cached_tokens;
} pl_job_progress;

void pl_job_get_progress(const pl_job *j, pl_job_progress *p);
/** Status as JSON (new ref): id, state, progress, accuracy, pools,
 *  per-model slots, and the first k entries of each pool; NULL on OOM. */
json_t *pl_job_status_json(pl_job *j, int k);
/** The per-model and pool part only (for GET /status). */
json_t *pl_job_pools_json(pl_job *j, int k);
/** Transcript of a question: in memory if running, else from disk (new
 *  ref), or NULL. */
json_t *pl_job_transcript(pl_job *j, const char *question_id);

#endif
