/* job_save.c - a job's persistence: each transcript is staged (written to
 * a file of its own, fsynced) as soon as its conversation finishes, without
 * the experiment lock; only the step (rename into place, index, manifest,
 * claims) is batched under the lock.
 *
 * finish -> stage (I/O pool, any number at once, no lock) -> the record,
 * now only {question, status, error, staged file, stub}, joins the queue ->
 * one step in flight per job, trying the lock without blocking. When
 * another process holds the lock, the step comes back busy and is retried
 * on a timer (20 ms, doubling to 500 ms): no I/O thread waits on the lock,
 * so transcripts keep reaching disk and a held lock keeps none in memory.
 * The job stops dispatching while JOB_MAX_UNSAVED transcripts or
 * JOB_MAX_UNCOMMITTED summaries wait (jobs_internal.h): memory stays
 * bounded however far the backend runs ahead of the disk. A transcript
 * that cannot be written (a full disk) is recorded as failed with the
 * error, and the job stops: nothing claims it succeeded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "src/base/json_pack.h"
#include "src/base/log.h"
#include "src/jobs/jobs_internal.h"

typedef struct save_ctx {
    pl_job *j;
    job_rec rec;
    char err[160];
    struct save_ctx *prev, *next;    /* the job's saves in flight */
} save_ctx;

static void rec_free(job_rec *r)
{
    free(r->error);
    free(r->staged);
    json_decref(r->transcript);
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int queue_push(pl_job *j, job_rec r)
{
    if (j->n_queue == j->cap_queue) {
        int cap = j->cap_queue ? 2 * j->cap_queue : 64;
        job_rec *v = realloc(j->queue, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        j->queue = v;
        j->cap_queue = cap;
    }
    if (j->n_queue == 0)
        j->queue_since = mono_s();
    j->queue[j->n_queue++] = r;
    return 0;
}

static void save_work(void *ud)
{
    save_ctx *s = ud;
    pl_persist_record pr = {s->j->spec.questions[s->rec.conv].id, s->rec.succeeded,
                            s->rec.error, s->rec.transcript, NULL};
    s->rec.staged = pl_persist_stage(s->j->persist, &pr, s->err, sizeof s->err);
}

/* What the index line needs: the summary, the question's metadata, the
 * spec fingerprint and the run. */
static json_t *stub_of(json_t *t)
{
    json_t *md = json_object_get(json_object_get(t, "question"), "metadata");
    return pl_json_pack("{s:O?, s:{s:O?}, s:O?, s:O?}", "summary",
                     json_object_get(t, "summary"), "question", "metadata", md,
                     "spec_fingerprint", json_object_get(t, "spec_fingerprint"),
                     "run_id", json_object_get(t, "run_id"));
}

/* The transcript could not be written: the question is failed, with the
 * error, and its result does not count. */
static void save_failed(pl_job *j, save_ctx *s)
{
    char msg[400];
    snprintf(msg, sizeof msg, "writing the transcript to %s failed: %s", j->dir, s->err);
    pl_error("job %s: %s: %s", j->id, j->spec.questions[s->rec.conv].id, msg);
    if (s->rec.succeeded) {
        j->n_write_failed++;
        if (s->rec.correct >= 0) {
            j->n_answered--;
            j->pend_answered--;
            j->n_correct -= s->rec.correct;
            j->pend_correct -= s->rec.correct;
        }
    }
    char *e = s->rec.error;
    size_t n = strlen(msg) + (e ? strlen(e) + 8 : 0) + 1;
    s->rec.error = malloc(n);
    if (s->rec.error)
        snprintf(s->rec.error, n, "%s%s%s", e ? e : "", e ? "; then " : "", msg);
    free(e);
    s->rec.succeeded = false;
    job_fail_io(j, "write_failed", msg);
}

/* The transcript is staged: keep only what the step needs. */
static void save_done(void *ud)
{
    save_ctx *s = ud;
    pl_job *j = s->j;
    if (s->prev)
        s->prev->next = s->next;
    else
        j->saves = s->next;
    if (s->next)
        s->next->prev = s->prev;
    j->n_saving--;
    if (s->rec.staged)
        j->saved++;
    else
        save_failed(j, s);
    json_t *stub = stub_of(s->rec.transcript);
    json_decref(s->rec.transcript);
    s->rec.transcript = stub;
    if (queue_push(j, s->rec) < 0) {
        pl_error("job %s: out of memory: %s not recorded in the manifest", j->id,
                 j->spec.questions[s->rec.conv].id);
        rec_free(&s->rec);
    }
    free(s);
    job_flush(j);
    job_pump(j);                     /* dispatch paused while I/O lagged */
    job_check_finished(j);
}

void job_save(pl_job *j, int q, bool ok, const char *error, json_t *t)
{
    save_ctx *s = calloc(1, sizeof *s);
    if (!s) {
        pl_error("job %s: out of memory: transcript of %s not saved", j->id,
                 j->spec.questions[q].id);
        json_decref(t);
        return;
    }
    json_t *c = json_object_get(json_object_get(t, "summary"), "correct");
    s->j = j;
    s->rec = (job_rec){q, ok, json_is_boolean(c) ? (int8_t)json_is_true(c) : (int8_t)-1,
                       error ? strdup(error) : NULL, t, NULL};
    s->next = j->saves;
    if (j->saves)
        j->saves->prev = s;
    j->saves = s;
    j->n_saving++;
    if (pl_io_pool_post(j->io, save_work, save_done, s) < 0) {
        /* Shutting down: write here rather than lose completed work. */
        save_work(s);
        save_done(s);
    }
}

static json_t *staged_of(const job_rec *v, int n, int q)
{
    for (int i = 0; i < n; i++)
        if (v[i].conv == q)
            return v[i].staged ? json_load_file(v[i].staged, 0, NULL) : NULL;
    return NULL;
}

json_t *job_saving_transcript(pl_job *j, int q)
{
    for (save_ctx *s = j->saves; s; s = s->next)
        if (s->rec.conv == q)
            return json_incref(s->rec.transcript);
    json_t *t = staged_of(j->queue, j->n_queue, q);
    return t ? t : staged_of(j->batch, j->n_batch, q);
}

/* ---- the step: one in flight per job ---- */

typedef struct step_ctx {
    pl_job *j;
    job_rec *recs;
    int n;
    int rc;
    bool wait, claims;
    pl_persist_step s;
} step_ctx;

static void step_work(void *ud)
{
    step_ctx *w = ud;
    pl_persist_record *pr = calloc((size_t)w->n + 1, sizeof *pr);
    if (!pr) {
        w->rc = -1;
        snprintf(w->s.error, sizeof w->s.error, "out of memory");
        return;
    }
    for (int i = 0; i < w->n; i++)
        pr[i] = (pl_persist_record){w->j->spec.questions[w->recs[i].conv].id,
                                    w->recs[i].succeeded, w->recs[i].error,
                                    w->recs[i].transcript, w->recs[i].staged};
    w->s.recs = pr;
    w->s.n_recs = w->n;
    w->rc = pl_persist_step_run(w->j->persist, &w->s, w->wait);
    free(pr);
#ifdef __GLIBC__
    /* The manifest was just parsed and dropped in this thread's arena:
     * give its pages back rather than let each I/O thread keep its peak. */
    malloc_trim(0);
#endif
}

static void retry_cb(evutil_socket_t fd, short what, void *ud)
{
    pl_job *j = ud;
    j->retry_pending = false;
    job_flush(j);
    job_check_finished(j);
}

/* The lock is held elsewhere: put the batch back in front and retry. */
static void step_busy(pl_job *j, step_ctx *w)
{
    job_rec *all = malloc(((size_t)w->n + (size_t)j->n_queue + 1) * sizeof *all);
    if (all) {
        if (w->n > 0)
            memcpy(all, w->recs, (size_t)w->n * sizeof *all);
        if (j->n_queue > 0)
            memcpy(all + w->n, j->queue, (size_t)j->n_queue * sizeof *all);
        free(j->queue);
        free(w->recs);
        j->queue = all;
        j->n_queue = j->cap_queue = w->n + j->n_queue;
        j->queue_since = 0;          /* due: only the lock holds it back */
    } else {
        for (int i = 0; i < w->n; i++)
            if (queue_push(j, w->recs[i]) < 0)
                rec_free(&w->recs[i]);
        free(w->recs);
    }
    j->claim_now |= w->claims;
    j->retry_ms = j->retry_ms ? j->retry_ms * 2 : 20;
    if (j->retry_ms > 500)
        j->retry_ms = 500;
    if (!j->retry_ev)
        j->retry_ev = evtimer_new(j->base, retry_cb, j);
    struct timeval tv = {0, j->retry_ms * 1000};
    if (j->retry_ev && evtimer_add(j->retry_ev, &tv) == 0)
        j->retry_pending = true;
}

/* The step is done: its records are on disk (or failed with the error). */
static void step_applied(pl_job *j, step_ctx *w)
{
    j->persisted += w->n;
    j->exp_answered = w->s.answered;
    j->exp_correct = w->s.correct;
    for (int i = 0; i < w->n; i++) {
        if (w->recs[i].succeeded && w->recs[i].correct >= 0) {
            j->pend_answered--;
            j->pend_correct -= w->recs[i].correct;
        }
    }
    if (w->s.lost > 0) {
        j->n_lost += w->s.lost;
        pl_warn("job %s: %d result%s dropped: another process took over their claim "
                "(this one looked gone)", j->id, w->s.lost, w->s.lost == 1 ? "" : "s");
    }
    if (w->claims)
        job_claims_apply(j, j->step_states, false);
}

/* The step could not be written: its questions are not recorded, so none
 * of them counts as succeeded (a re-run redoes them). */
static void step_lost(pl_job *j, step_ctx *w)
{
    for (int i = 0; i < w->n; i++) {
        job_rec *r = &w->recs[i];
        if (!r->succeeded)
            continue;
        j->n_write_failed++;
        if (r->correct >= 0) {
            j->n_answered--;
            j->n_correct -= r->correct;
            j->pend_answered--;
            j->pend_correct -= r->correct;
        }
    }
}

static void step_done(void *ud)
{
    step_ctx *w = ud;
    pl_job *j = w->j;
    j->writing = false;
    j->batch = NULL;
    j->n_batch = 0;
    if (w->rc == PL_PERSIST_BUSY) {
        step_busy(j, w);
        free(w);
        if (!j->retry_pending)
            job_flush(j);
        return;
    }
    j->retry_ms = 0;
    if (w->rc < 0) {
        pl_error("job %s: the step on %s failed (%d questions): %s", j->id, j->dir, w->n,
                 w->s.error);
        step_lost(j, w);
        job_fail_io(j, "write_failed", w->s.error);
    } else {
        step_applied(j, w);
    }
    for (int i = 0; i < w->n; i++)
        rec_free(&w->recs[i]);
    free(w->recs);
    free(w);
    job_flush(j);
    job_pump(j);
    job_check_finished(j);
}

/* Every step rewrites the whole manifest (O(questions)), so while
 * transcripts are still being written the summaries wait for a batch: a
 * 64th of the job (256 at least), or one second. With no write in flight
 * (a slow backend, the end of the job) they go at once. */
static bool commit_due(const pl_job *j)
{
    int batch = j->spec.n_questions / 64;
    batch = batch < 256 ? 256 : batch > JOB_MAX_UNCOMMITTED / 2 ? JOB_MAX_UNCOMMITTED / 2
                                                                : batch;
    return j->n_queue > 0 && (j->freeing || j->n_saving == 0 || j->n_queue >= batch ||
                              mono_s() - j->queue_since >= 1.0);
}

void job_flush(pl_job *j)
{
    if (j->writing || j->retry_pending || !j->persist)
        return;
    bool recs = commit_due(j);
    bool claims = !j->freeing && j->state == PL_JOB_RUNNING && job_claims_due(j);
    if (!recs && !claims) {
        job_claims_poll(j);
        return;
    }
    step_ctx *w = calloc(1, sizeof *w);
    if (!w)
        return;
    /* While freeing there is no loop to retry on: wait for the lock. */
    w->j = j;
    w->wait = j->freeing;
    w->claims = j->state == PL_JOB_RUNNING;
    if (recs) {
        w->recs = j->queue;
        w->n = j->n_queue;
        j->queue = NULL;
        j->n_queue = j->cap_queue = 0;
    }
    if (w->claims)
        w->s = (pl_persist_step){.ids = j->ids, .n_ids = j->spec.n_questions,
                                 .want = job_claims_want(j), .states = j->step_states};
    j->claim_now = false;
    j->batch = w->recs;
    j->n_batch = w->n;
    j->writing = true;
    if (pl_io_pool_post(j->io, step_work, step_done, w) < 0) {
        w->wait = true;
        step_work(w);
        step_done(w);
    }
}

/* Free: finish what is in flight, then commit the rest, waiting for the
 * lock (the job is going away; nothing finished is dropped). */
void job_save_drain(pl_job *j)
{
    j->freeing = true;
    if (j->retry_pending) {
        evtimer_del(j->retry_ev);
        j->retry_pending = false;
    }
    if (j->poll_pending) {
        evtimer_del(j->poll_ev);
        j->poll_pending = false;
    }
    while (j->writing || j->n_saving > 0 || j->opening) {
        pl_io_pool_drain(j->io);
        if (j->retry_pending) {
            evtimer_del(j->retry_ev);
            j->retry_pending = false;
        }
        job_flush(j);
    }
    job_flush(j);
    while (j->writing)
        pl_io_pool_drain(j->io);
    for (int i = 0; i < j->n_queue; i++) {
        if (j->queue[i].staged)
            unlink(j->queue[i].staged);
        rec_free(&j->queue[i]);
    }
    free(j->queue);
    j->queue = NULL;
    j->n_queue = 0;
    if (j->retry_ev)
        event_free(j->retry_ev);
    j->retry_ev = NULL;
}
