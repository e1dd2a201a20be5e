/* job_save.c - a job's persistence: each transcript is written as soon as
 * its conversation finishes, without the experiment lock; only the manifest
 * and index step is batched under the lock.
 *
 * finish -> save (I/O pool, any number at once, no lock) -> the record,
 * now only {question, status, error, summary}, joins the commit queue ->
 * one commit in flight per job, trying the lock without blocking. When
 * another process holds the lock, the commit comes back busy and is retried
 * on a timer (20 ms, doubling to 500 ms): no I/O thread waits on the lock,
 * so transcripts keep reaching disk and a held lock keeps none in memory.
 * The job stops dispatching while JOB_MAX_UNSAVED transcripts or
 * JOB_MAX_UNCOMMITTED summaries wait (jobs_internal.h): memory stays
 * bounded however far the backend runs ahead of the disk. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "src/base/log.h"
#include "src/jobs/jobs_internal.h"

typedef struct save_ctx {
    pl_job *j;
    job_rec rec;
    int rc;
    struct save_ctx *prev, *next;    /* the job's saves in flight */
} save_ctx;

static void rec_free(job_rec *r)
{
    free(r->error);
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
                            s->rec.error, s->rec.transcript};
    s->rc = pl_persist_save_transcript(s->j->persist, &pr);
}

/* The transcript is on disk: keep only what the index line needs. */
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
    j->saved++;
    if (s->rc < 0) {
        pl_error("job %s: writing the transcript of %s to %s failed", j->id,
                 j->spec.questions[s->rec.conv].id, j->dir);
        if (!j->error)
            j->error = strdup("writing transcripts failed");
    }
    json_t *sum = json_object_get(s->rec.transcript, "summary");
    json_t *stub = json_pack("{s:O?}", "summary", sum);
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
    s->j = j;
    s->rec = (job_rec){q, ok, error ? strdup(error) : NULL, t};
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

json_t *job_saving_transcript(pl_job *j, int q)
{
    for (save_ctx *s = j->saves; s; s = s->next)
        if (s->rec.conv == q)
            return json_incref(s->rec.transcript);
    return NULL;
}

/* ---- the manifest and index step: one commit in flight per job ---- */

typedef struct commit_ctx {
    pl_job *j;
    job_rec *recs;
    int n, rc;
    bool wait;
} commit_ctx;

static void commit_work(void *ud)
{
    commit_ctx *w = ud;
    pl_persist_record *pr = calloc((size_t)w->n, sizeof *pr);
    if (!pr) {
        w->rc = -1;
        return;
    }
    for (int i = 0; i < w->n; i++)
        pr[i] = (pl_persist_record){w->j->spec.questions[w->recs[i].conv].id,
                                    w->recs[i].succeeded, w->recs[i].error,
                                    w->recs[i].transcript};
    w->rc = pl_persist_commit(w->j->persist, pr, w->n, w->wait);
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
static void commit_busy(pl_job *j, commit_ctx *w)
{
    job_rec *all = malloc(((size_t)w->n + (size_t)j->n_queue) * sizeof *all);
    if (all) {
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
    j->retry_ms = j->retry_ms ? j->retry_ms * 2 : 20;
    if (j->retry_ms > 500)
        j->retry_ms = 500;
    if (!j->retry_ev)
        j->retry_ev = evtimer_new(j->base, retry_cb, j);
    struct timeval tv = {0, j->retry_ms * 1000};
    if (j->retry_ev && evtimer_add(j->retry_ev, &tv) == 0)
        j->retry_pending = true;
}

static void commit_done(void *ud)
{
    commit_ctx *w = ud;
    pl_job *j = w->j;
    j->writing = false;
    j->n_batch = 0;
    if (w->rc == PL_PERSIST_BUSY) {
        commit_busy(j, w);
        free(w);
        if (!j->retry_pending)
            job_flush(j);
        return;
    }
    j->retry_ms = 0;
    if (w->rc < 0) {
        pl_error("job %s: updating the manifest of %s failed (%d questions)", j->id,
                 j->dir, w->n);
        if (!j->error)
            j->error = strdup("writing the task manifest failed");
    } else {
        j->persisted += w->n;
    }
    for (int i = 0; i < w->n; i++)
        rec_free(&w->recs[i]);
    free(w->recs);
    free(w);
    job_flush(j);
    job_pump(j);
    job_check_finished(j);
}

/* Every commit rewrites the whole manifest (O(questions)), so while
 * transcripts are still being written the summaries wait for a batch: a
 * 64th of the job (256 at least), or one second. With no write in flight
 * (a slow backend, the end of the job) they go at once. */
static bool commit_due(const pl_job *j)
{
    int batch = j->spec.n_questions / 64;
    batch = batch < 256 ? 256 : batch > JOB_MAX_UNCOMMITTED / 2 ? JOB_MAX_UNCOMMITTED / 2
                                                                : batch;
    return j->freeing || j->n_saving == 0 || j->n_queue >= batch ||
           mono_s() - j->queue_since >= 1.0;
}

void job_flush(pl_job *j)
{
    if (j->writing || j->retry_pending || j->n_queue == 0 || !j->persist || !commit_due(j))
        return;
    commit_ctx *w = calloc(1, sizeof *w);
    if (!w)
        return;
    /* While freeing there is no loop to retry on: wait for the lock. */
    *w = (commit_ctx){j, j->queue, j->n_queue, 0, j->freeing};
    j->n_batch = j->n_queue;
    j->queue = NULL;
    j->n_queue = j->cap_queue = 0;
    j->writing = true;
    if (pl_io_pool_post(j->io, commit_work, commit_done, w) < 0) {
        w->wait = true;
        commit_work(w);
        commit_done(w);
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
    for (int i = 0; i < j->n_queue; i++)
        rec_free(&j->queue[i]);
    free(j->queue);
    j->queue = NULL;
    j->n_queue = 0;
    if (j->retry_ev)
        event_free(j->retry_ev);
    j->retry_ev = NULL;
}
