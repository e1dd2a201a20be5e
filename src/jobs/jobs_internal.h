/* jobs_internal.h - the job's private state, shared by jobs*.c only. */
#ifndef PL_JOBS_INTERNAL_H
#define PL_JOBS_INTERNAL_H

#include "schedulers/conversation.h"
#include "src/jobs/jobs.h"
#include "src/jobs/persist.h"

/* One agent's append-only message list in one conversation. */
typedef struct job_hist {
    pl_chat_message *m;          /* role literal, content owned */
    int n, cap;
} job_hist;

/* Live state of a started conversation; freed once its transcript is
 * handed to persistence. */
typedef struct job_conv {
    job_hist *hist;              /* n_agents */
    char **finals;               /* [round * n_agents + agent], owned */
    int8_t *answers;             /* same index; -1 none */
    json_t *attempts;            /* every reply, valid or not */
    char *error;
} job_conv;

/* A finished reply's reasoning set apart (job_reasoning.c), by the model's
 * reasoning format (backend.h, reasoning_format; NULL: none), as the
 * format splits a whole reply (backends/text/reasoning_format.h,
 * split_whole): qwen3 moves the <think> block's text to *reasoning and
 * keeps what follows it in *text (as vLLM's parser splits a whole reply);
 * harmony (gpt-oss) keeps the final channel's text and moves analysis (and
 * any call: jobs offer no tools) to *reasoning; else nothing changes.
 * *text (malloc'd) may be replaced, *len follows it; *reasoning is
 * malloc'd or NULL (none). The answer is then read, and other agents see,
 * only the text. 0, or -1 on out of memory (*text unchanged). */
int pl_job_reply_split(const struct pl_reasoning_format *format, char **text, size_t *len,
                       char **reasoning);

/* An in-flight request: the backend's sink context. */
typedef struct job_req {
    struct pl_job *job;
    pl_conv_req *cr;
    uint64_t backend_id;
    char *text;                  /* the reply so far */
    size_t len, cap;
    bool oom;                    /* the reply outgrew memory: it fails */
    int completion_tokens, prompt_tokens, cached_tokens;
    int transport_retries;       /* resubmissions after upstream failures */
} job_req;

typedef struct job_sub {
    int id;
    pl_job_event_fn fn;
    void *ud;
    bool tokens;
} job_sub;

/* A finished conversation: its transcript being saved, or (saved) only
 * the summary, waiting for (or in) a manifest commit. */
typedef struct job_rec {
    int conv;
    bool succeeded;
    int8_t correct;              /* summary.correct: -1 none, 0, 1 */
    char *error;
    json_t *transcript;
    char *staged;                /* the staged file; NULL: its write failed */
} job_rec;

/* A question's state in this job (job_claims.c). */
enum {
    JOB_Q_OPEN = 0,              /* not claimed by anyone (yet) */
    JOB_Q_MINE,                  /* claimed here: its conversation runs here */
    JOB_Q_DONE,                  /* finished here (succeeded or failed) */
    JOB_Q_SKIPPED,               /* had succeeded when the job started */
    JOB_Q_ELSEWHERE,             /* claimed by another live process */
    JOB_Q_ELSE_OK,               /* succeeded in another process during the job */
    JOB_Q_ELSE_FAIL,             /* failed in another process during the job */
    JOB_Q_N,
};

struct pl_job {
    char *id;
    pl_job_spec spec;
    pl_job_state state;
    char *error;
    struct event_base *base;
    pl_io_pool *io;
    pl_backend **backends;
    pl_dispatch **dispatch;      /* one per model: shared, or own_dispatch */
    bool own_dispatch;
    int n_models;
    char *output_root;
    void (*on_finished)(void *, pl_job *);
    void *fin_ud;
    pl_convs *convs;             /* its conversations (on the dispatches) */
    int policy;                  /* pl_dispatch_policy */
    job_conv **conv;             /* n_questions; NULL when not live */
    pl_persist *persist;
    char *dir;
    struct save_ctx *saves;      /* transcripts being written (no lock) */
    int n_saving, saved;
    job_rec *queue;              /* saved, waiting for a manifest commit */
    int n_queue, cap_queue;
    double queue_since;          /* monotonic s when the queue last filled */
    job_rec *batch;              /* in the step in flight */
    int n_batch;
    struct event *retry_ev;      /* commit retry while the lock is held */
    int retry_ms;
    bool retry_pending, freeing;
    bool writing, opening, finished_called;
    int persisted, n_terminal, n_cancelled;
    int n_answered, n_correct;   /* this run's succeeded conversations with a
                                    final answer and a known truth; right */
    int exp_answered, exp_correct;   /* the experiment's index at the last step */
    int pend_answered, pend_correct; /* this run's, not yet in the index */
    int n_write_failed;          /* transcripts whose write failed */
    int n_lost;                  /* results dropped: claim taken over */
    char *error_code;            /* "spec_changed", "write_failed", ... */
    /* claims (job_claims.c) */
    uint8_t *qstate;             /* (n_questions) JOB_Q_* */
    int qcount[JOB_Q_N];
    int n_mine_live;             /* JOB_Q_MINE not yet finished */
    int claim_window;            /* questions claimed here at most at once */
    const char **ids;            /* (n_questions) borrowed from the spec */
    uint8_t *step_states;        /* (n_questions) the step's answer */
    struct event *poll_ev;       /* re-look at others' claims while idle */
    bool poll_pending, claim_now;
    char (*qfp)[17];             /* (n_questions) question fingerprints */
    char spec_fp[65];
    json_t *canonical;           /* the spec's canonical JSON */
    char **served;               /* (n_models) what serves each model */
    bool resume_changed;
    int n_reprompts;             /* validation re-prompts sent */
    char *answer_rx[PL_JOB_MAX_CHOICES + 1]; /* constrained mode, by choices */
    int transport_retries;       /* requests resubmitted after a transport failure
                                    (apart from validation re-prompts) */
    job_sub *subs;
    int n_subs, next_sub, token_subs;
    pl_chat_message *scratch;    /* prompt array for submit */
    int scratch_cap;
    /* retention hints (job_hints.c) */
    bool no_hints;               /* --kv-eviction lru: send none */
    int *hint_sent;              /* (n_models, n_questions) last sent */
    int *hint_need;              /* (n_questions) scratch */
    uint64_t hints_sent;
    /* prompt tokens of round >= 2 (1-based) requests, and of them cached */
    uint64_t r2_prompt_tokens, r2_cached_tokens;
};

/* A job's memory must not grow with the questions it has finished: a
 * backend faster than the disk (the mock, a big engine) would otherwise
 * pile finished transcripts up in memory, waiting for their write. Past
 * these, the job dispatches nothing until the I/O catches up. */
#define JOB_MAX_UNSAVED 256      /* transcripts handed to the I/O pool */
#define JOB_MAX_UNCOMMITTED 4096 /* summaries waiting for a manifest commit */

/* jobs_state.c */
job_conv *job_conv_new(const pl_job_spec *s);
void job_conv_free(job_conv *c, const pl_job_spec *s);
int job_hist_push(job_hist *h, const char *role, char *content);
json_t *job_transcript_json(pl_job *j, int conv, const char *status,
                            const char *error);
void job_emit(pl_job *j, const pl_job_event *ev);

/* job_save.c */
/** Hand a finished conversation's transcript (owned) to the I/O pool now;
 *  once on disk, its record joins the manifest commit queue. */
void job_save(pl_job *j, int q, bool ok, const char *error, json_t *t);
/** The transcript of q while it is being written (new ref), or NULL. */
json_t *job_saving_transcript(pl_job *j, int q);
/** Start a manifest commit if none is in flight and records wait. */
void job_flush(pl_job *j);
/** At free: finish every save and commit (waiting for the lock). */
void job_save_drain(pl_job *j);
/* job_claims.c */
/** Fingerprints, ids and question states before the output opens. */
int job_claims_init(pl_job *j, const pl_job_opts *o);
void job_claims_free(pl_job *j);
void job_qstate_set(pl_job *j, int q, int st);
/** Apply a step's states: start what was claimed here, note what others
 *  did. first: the job's opening step (succeeded ones are "skipped"). */
void job_claims_apply(pl_job *j, const uint8_t *states, bool first);
/** How many more to claim in the next step (0: none wanted now). */
int job_claims_want(const pl_job *j);
/** A step should run now for claims alone. */
bool job_claims_due(const pl_job *j);
/** Nothing to do but wait for other processes: look again later. */
void job_claims_poll(pl_job *j);
/** Every question is finished here, before, or elsewhere. */
bool job_claims_all_done(const pl_job *j);

/* jobs.c */
void job_check_finished(pl_job *j);
/** Stop: abort what runs (unfinished questions stay pending, claimable by
 *  a re-run), then finish in state `final` (cancelled or error). */
void job_stop(pl_job *j, pl_job_state final);
/** A write failed: record why (first failure wins) and stop the job. */
void job_fail_io(pl_job *j, const char *code, const char *msg);
/** Conversation q was claimed here: run it. */
void job_start_conv(pl_job *j, int q);
/** Pump the dispatch of every model the job uses (after its I/O caught
 *  up, after a completion). */
void job_pump(pl_job *j);

/* job_hints.c */
/** The conversation key of question q (the requests' affinity key). */
uint64_t job_conv_key(const pl_job *j, int q);
/** Tell each backend with a cache what changed in the next needs. */
void job_send_hints(pl_job *j);
/** Conversation q was just dispatched on model m: needed now. */
void job_hint_now(pl_job *j, int m, int q);

#endif
