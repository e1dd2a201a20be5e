/* persist_commit.c - staging transcripts (no lock) and the locked step:
 * rename the staged transcripts whose claim holds, index the succeeded,
 * claim more, write the manifest (persist.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/jobs/persist_internal.h"

char *pl_persist_stage(pl_persist *p, const pl_persist_record *r, char *err, size_t errlen)
{
    char path[4200], staged[4400];
    snprintf(path, sizeof path, "%s/%s.json", p->tdir, r->question_id);
    persist_tmp_name(p, path, "staged", staged, sizeof staged);
    char *s = json_dumps(r->transcript, JSON_INDENT(2) | JSON_SORT_KEYS);
    int rc = s ? persist_write_via(staged, NULL, s, strlen(s), true) : -1;
    int e = s ? errno : ENOMEM;
    free(s);
    if (rc < 0) {
        snprintf(err, errlen, "%s", strerror(e));
        return NULL;
    }
    char *out = strdup(staged);
    if (!out) {
        unlink(staged);
        snprintf(err, errlen, "out of memory");
    }
    return out;
}

static void step_error(pl_persist_step *s, const char *what)
{
    if (!s->error[0])
        snprintf(s->error, sizeof s->error, "%s: %s", what, strerror(errno));
}

/* Move r's staged transcript into place, or drop it. Returns 1 when it is
 * in place and succeeded (to index), 0 when done with, -1 when dropped
 * because another process holds its claim or finished it. */
static int place_one(pl_persist *p, const pl_persist_record *r)
{
    json_t *e = json_object_get(persist_questions(p), r->question_id);
    const char *claim = json_string_value(json_object_get(e, "claim"));
    const char *st = json_string_value(json_object_get(e, "status"));
    const char *by = json_string_value(json_object_get(e, "by"));
    bool was_ok = (st && !strcmp(st, "succeeded")) ||
                  json_object_get(p->indexed, r->question_id);
    if (claim && strcmp(claim, p->claimer) != 0) {
        if (r->staged)
            unlink(r->staged);
        return -1;
    }
    if (!r->staged) {                /* its write failed: nothing on disk */
        if (!was_ok)
            persist_manifest_set(p, r->question_id, "failed", r->error);
        return 0;
    }
    if (was_ok) {                    /* never replace (or re-index) a success */
        unlink(r->staged);
        return by && strcmp(by, p->claimer) ? -1 : 0;
    }
    char path[4200], msg[300];
    snprintf(path, sizeof path, "%s/%s.json", p->tdir, r->question_id);
    if (rename(r->staged, path) < 0) {
        snprintf(msg, sizeof msg, "moving the transcript into place failed: %s",
                 strerror(errno));
        unlink(r->staged);
        persist_manifest_set(p, r->question_id, "failed", msg);
        return 0;
    }
    /* Succeeded now, so a second record of it in this batch is dropped; if
     * its index line cannot be written it becomes failed again. */
    persist_manifest_set(p, r->question_id, r->succeeded ? "succeeded" : "failed", r->error);
    return r->succeeded ? 1 : 0;
}

/* Under the lock: the records' transcripts, then their index lines. */
static int commit_locked(pl_persist *p, pl_persist_step *s)
{
    int *todo = s->n_recs ? malloc((size_t)s->n_recs * sizeof *todo) : NULL;
    int n_todo = 0, rc = 0;
    if (s->n_recs && !todo) {
        errno = ENOMEM;
        step_error(s, "committing");
        return -1;
    }
    for (int i = 0; i < s->n_recs; i++) {
        int k = place_one(p, &s->recs[i]);
        s->lost += k < 0;
        if (k > 0)
            todo[n_todo++] = i;
    }
    if (n_todo > 0 && persist_fsync_dir(p->tdir) < 0) {
        step_error(s, "syncing the transcripts directory failed");
        rc = -1;
    }
    for (int t = 0; t < n_todo; t++) {
        const pl_persist_record *r = &s->recs[todo[t]];
        if (rc == 0 && persist_index_append(p, r->question_id, r->transcript) < 0) {
            step_error(s, "writing the index failed");
            rc = -1;
        }
        /* Not indexed: failed with the error, so a re-run redoes it (the
         * transcript on disk is then written again). */
        persist_manifest_set(p, r->question_id, rc == 0 ? "succeeded" : "failed",
                             rc == 0 ? NULL : s->error);
    }
    free(todo);
    return rc;
}

int pl_persist_step_run(pl_persist *p, pl_persist_step *s, bool wait)
{
    s->error[0] = '\0';
    s->claimed = s->lost = 0;
    int rc = persist_lock(p, wait);
    if (rc != 0) {
        if (rc < 0)
            step_error(s, "locking the experiment failed");
        return rc;
    }
    if (persist_sync_locked(p) < 0) {
        step_error(s, "reading the index failed");
        persist_unlock(p);
        return -1;
    }
    rc = commit_locked(p, s);
    bool dirty = s->n_recs > 0;
    if (s->ids)
        dirty |= persist_claim_locked(p, s);
    if (dirty && persist_manifest_write(p) < 0) {
        step_error(s, "writing the task manifest failed");
        rc = -1;
    }
    persist_unlock(p);
    pl_persist_accuracy(p, &s->answered, &s->correct);
    return rc;
}

int pl_persist_commit(pl_persist *p, const pl_persist_record *recs, int n, bool wait)
{
    pl_persist_step s = {.recs = recs, .n_recs = n};
    return pl_persist_step_run(p, &s, wait);
}

int pl_persist_write(pl_persist *p, const pl_persist_record *recs, int n)
{
    pl_persist_record *v = calloc((size_t)n + 1, sizeof *v);
    char **staged = calloc((size_t)n + 1, sizeof *staged);
    int rc = v && staged ? 0 : -1;
    for (int i = 0; rc == 0 && i < n; i++) {
        char err[160];
        v[i] = recs[i];
        v[i].staged = staged[i] = pl_persist_stage(p, &recs[i], err, sizeof err);
        if (!staged[i])
            rc = -1;
    }
    if (rc == 0)
        rc = pl_persist_commit(p, v, n, true);
    for (int i = 0; staged && i < n; i++) {
        if (staged[i] && rc < 0)
            unlink(staged[i]);
        free(staged[i]);
    }
    free(staged);
    free(v);
    return rc;
}
