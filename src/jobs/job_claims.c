/* job_claims.c - which of its questions a job runs when several processes
 * share the experiment: each step (job_save.c) claims more under the
 * experiment's lock and tells what the others did (persist.h); a question
 * runs here only once claimed here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "src/base/log.h"
#include "src/jobs/jobs_internal.h"

/* While others hold claims and we have nothing to run: how often to look
 * for what they finished and for claims to take over. */
#define JOB_POLL_MS 2000

/* "engine:NAME", "mock:NAME", "remote:NAME" from the backend itself. */
static char *served_of(pl_backend *b)
{
    const char *k = b->ops->kind ? b->ops->kind : "?";
    if (!strcmp(k, "cpu") || !strcmp(k, "cuda"))
        k = "engine";                /* the same weights give the same model */
    size_t n = strlen(k) + strlen(b->model ? b->model : "") + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s:%s", k, b->model ? b->model : "");
    return s;
}

/* Enough conversations to keep every model busy several times over, and a
 * 16th of a big job (each claim step rewrites the manifest: O(questions));
 * a second process sharing the experiment claims from the rest. */
static int claim_window(const pl_job *j)
{
    long cap = 0;
    for (int m = 0; m < j->n_models; m++) {
        int c = pl_backend_capacity(j->backends[m]);
        if (j->spec.models[m].max_num_seqs > 0 && j->spec.models[m].max_num_seqs < c)
            c = j->spec.models[m].max_num_seqs;
        cap += c > 0 ? c : 1;
    }
    long w = 4 * cap < 64 ? 64 : 4 * cap;
    if (w < j->spec.n_questions / 16)
        w = j->spec.n_questions / 16;
    return w > j->spec.n_questions ? j->spec.n_questions : (int)w;
}

static int fingerprints(pl_job *j, const pl_job_opts *o)
{
    for (int m = 0; m < j->n_models; m++) {
        j->served[m] = o->served && o->served[m] ? strdup(o->served[m])
                                                 : served_of(j->backends[m]);
        if (!j->served[m])
            return -1;
    }
    j->canonical = pl_job_spec_canonical(&j->spec, (const char *const *)j->served);
    if (!j->canonical || pl_job_spec_fingerprint(j->canonical, j->spec_fp) < 0)
        return -1;
    for (int q = 0; q < j->spec.n_questions; q++) {
        j->ids[q] = j->spec.questions[q].id;
        if (pl_job_question_fingerprint(&j->spec.questions[q], j->qfp[q]) < 0)
            return -1;
    }
    return 0;
}

int job_claims_init(pl_job *j, const pl_job_opts *o)
{
    size_t n = (size_t)j->spec.n_questions + 1;
    j->qstate = calloc(n, 1);
    j->step_states = calloc(n, 1);
    j->ids = calloc(n, sizeof *j->ids);
    j->qfp = calloc(n, sizeof *j->qfp);
    j->served = calloc((size_t)j->n_models, sizeof *j->served);
    if (!j->qstate || !j->step_states || !j->ids || !j->qfp || !j->served)
        return -1;
    j->qcount[JOB_Q_OPEN] = j->spec.n_questions;
    j->claim_window = claim_window(j);
    j->resume_changed = o->resume_changed;
    return fingerprints(j, o);
}

void job_claims_free(pl_job *j)
{
    if (j->poll_ev)
        event_free(j->poll_ev);
    j->poll_ev = NULL;
    free(j->qstate);
    free(j->step_states);
    free(j->ids);
    free(j->qfp);
    for (int m = 0; j->served && m < j->n_models; m++)
        free(j->served[m]);
    free(j->served);
    json_decref(j->canonical);
}

void job_qstate_set(pl_job *j, int q, int st)
{
    j->qcount[j->qstate[q]]--;
    j->qstate[q] = (uint8_t)st;
    j->qcount[st]++;
}

void job_claims_apply(pl_job *j, const uint8_t *states, bool first)
{
    for (int q = 0; q < j->spec.n_questions; q++) {
        int cur = j->qstate[q];
        if (cur != JOB_Q_OPEN && cur != JOB_Q_ELSEWHERE)
            continue;                /* ours, or settled */
        switch (states[q]) {
        case PL_CLAIM_MINE:
            job_qstate_set(j, q, JOB_Q_MINE);
            j->n_mine_live++;
            job_start_conv(j, q);
            break;
        case PL_CLAIM_SUCCEEDED:
            job_qstate_set(j, q, first ? JOB_Q_SKIPPED : JOB_Q_ELSE_OK);
            break;
        case PL_CLAIM_FAILED_ELSEWHERE: job_qstate_set(j, q, JOB_Q_ELSE_FAIL); break;
        case PL_CLAIM_ELSEWHERE: job_qstate_set(j, q, JOB_Q_ELSEWHERE); break;
        default: job_qstate_set(j, q, JOB_Q_OPEN); break;
        }
    }
}

int job_claims_want(const pl_job *j)
{
    if (j->state != PL_JOB_RUNNING || j->qcount[JOB_Q_OPEN] + j->qcount[JOB_Q_ELSEWHERE] == 0)
        return 0;
    int want = j->claim_window - j->n_mine_live;
    return want > 0 ? want : 0;
}

/* Claim in chunks (a quarter of the window), or at once when idle. */
bool job_claims_due(const pl_job *j)
{
    int want = job_claims_want(j), chunk = j->claim_window / 4;
    return j->claim_now || (j->qcount[JOB_Q_OPEN] > 0 && want > 0 &&
                            (j->n_mine_live == 0 || want >= (chunk > 0 ? chunk : 1)));
}

static void poll_cb(evutil_socket_t fd, short what, void *ud)
{
    pl_job *j = ud;
    j->poll_pending = false;
    j->claim_now = true;
    job_flush(j);
}

void job_claims_poll(pl_job *j)
{
    if (j->state != PL_JOB_RUNNING || j->poll_pending || j->qcount[JOB_Q_ELSEWHERE] == 0)
        return;
    if (!j->poll_ev && !(j->poll_ev = evtimer_new(j->base, poll_cb, j)))
        return;
    struct timeval tv = {JOB_POLL_MS / 1000, (JOB_POLL_MS % 1000) * 1000};
    if (evtimer_add(j->poll_ev, &tv) == 0)
        j->poll_pending = true;
}

bool job_claims_all_done(const pl_job *j)
{
    return j->qcount[JOB_Q_DONE] + j->qcount[JOB_Q_SKIPPED] + j->qcount[JOB_Q_ELSE_OK] +
           j->qcount[JOB_Q_ELSE_FAIL] >= j->spec.n_questions;
}
