/* persist_spec.c - registering a job's questions and spec in the manifest,
 * and refusing a spec that differs from the one the experiment was made
 * with (persist.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/base/json_pack.h"
#include "src/jobs/persist_internal.h"

typedef struct diff_buf {
    char *s;
    size_t n, len;
    int count;
} diff_buf;

static void diff_add(diff_buf *d, const char *path, json_t *a, json_t *b)
{
    d->count++;
    if (d->len + 4 >= d->n)
        return;
    char *x = json_is_string(a) || json_is_number(a) || json_is_boolean(a) || json_is_null(a)
            ? json_dumps(a, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    char *y = x && (json_is_string(b) || json_is_number(b) || json_is_boolean(b) ||
                    json_is_null(b)) ? json_dumps(b, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    bool short_ = x && y && strlen(x) + strlen(y) < 60;
    int w = snprintf(d->s + d->len, d->n - d->len, "%s%s", d->len ? ", " : "",
                     path[0] ? path : "(the whole spec)");
    if (w > 0)
        d->len += (size_t)w;
    if (short_ && d->len < d->n) {
        w = snprintf(d->s + d->len, d->n - d->len, " (%s -> %s)", x, y);
        if (w > 0)
            d->len += (size_t)w;
    }
    if (d->len >= d->n)
        d->len = d->n - 1;
    free(x);
    free(y);
}

static void diff_json(diff_buf *d, const char *path, json_t *a, json_t *b);

/* Lists of objects with an "id" (the agents) pair up by id. */
static bool diff_by_id(diff_buf *d, const char *path, json_t *a, json_t *b)
{
    size_t i;
    json_t *x;
    json_array_foreach(a, i, x) {
        if (!json_is_string(json_object_get(x, "id")))
            return false;
    }
    json_array_foreach(b, i, x) {
        if (!json_is_string(json_object_get(x, "id")))
            return false;
    }
    json_t *seen = json_object();
    int before = d->count;
    json_array_foreach(a, i, x) {
        const char *id = json_string_value(json_object_get(x, "id"));
        json_t *y = NULL, *z;
        size_t j;
        json_array_foreach(b, j, z) {
            if (!strcmp(json_string_value(json_object_get(z, "id")), id))
                y = z;
        }
        char sub[300];
        snprintf(sub, sizeof sub, "%s.%s", path, id);
        json_object_set_new(seen, id, json_true());
        diff_json(d, sub, x, y);
    }
    json_array_foreach(b, i, x) {
        const char *id = json_string_value(json_object_get(x, "id"));
        char sub[300];
        snprintf(sub, sizeof sub, "%s.%s", path, id);
        if (!json_object_get(seen, id))
            diff_json(d, sub, NULL, x);
    }
    if (d->count == before)
        diff_add(d, path, NULL, NULL);           /* the same agents, reordered */
    json_decref(seen);
    return true;
}

static void diff_json(diff_buf *d, const char *path, json_t *a, json_t *b)
{
    if (json_equal(a, b))
        return;
    char sub[300];
    if (json_is_object(a) && json_is_object(b)) {
        const char *k;
        json_t *v;
        json_object_foreach(a, k, v) {
            snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", k);
            diff_json(d, sub, v, json_object_get(b, k));
        }
        json_object_foreach(b, k, v) {
            snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", k);
            if (!json_object_get(a, k))
                diff_json(d, sub, NULL, v);
        }
        return;
    }
    if (json_is_array(a) && json_is_array(b) && diff_by_id(d, path, a, b))
        return;
    diff_add(d, path, a, b);
}

/* The differing keys of the recorded spec and the new one, and of the
 * succeeded questions whose text, choices or answer changed. */
static int spec_diff(pl_persist *p, json_t *old, const pl_persist_spec *spec,
                     const char *const *ids, int n, char *out, size_t outlen)
{
    diff_buf d = {out, outlen, 0, 0};
    out[0] = '\0';
    diff_json(&d, "", old, spec->canonical);
    for (int i = 0; spec->question_fps && i < n; i++) {
        json_t *e = json_object_get(persist_questions(p), ids[i]);
        const char *fp = json_string_value(json_object_get(e, "fingerprint"));
        char sub[200];
        snprintf(sub, sizeof sub, "questions.%s", ids[i]);
        if (fp && pl_persist_succeeded(p, ids[i]) && strcmp(fp, spec->question_fps[i]))
            diff_add(&d, sub, NULL, NULL);
    }
    return d.count;
}

/* A manifest from before fingerprints, holding results: unknown origin. */
static bool has_results(pl_persist *p)
{
    const char *k;
    json_t *v;
    json_object_foreach(persist_questions(p), k, v) {
        const char *st = json_string_value(json_object_get(v, "status"));
        if (st && strcmp(st, "pending"))
            return true;
    }
    return false;
}

/* Compare; on a difference, refuse or (resume_changed) keep the old spec
 * under "earlier_specs". Returns 0, or PL_PERSIST_SPEC_CHANGED with err. */
static int check_spec(pl_persist *p, const pl_persist_spec *spec, const char *const *ids,
                      int n, char *err, size_t errlen)
{
    json_t *m = p->manifest;
    const char *old_fp = json_string_value(json_object_get(m, "spec_fingerprint"));
    json_t *old = json_object_get(m, "spec");
    char diff[700] = "";
    int count = old_fp && old ? spec_diff(p, old, spec, ids, n, diff, sizeof diff) : 0;
    bool legacy = !old_fp && has_results(p);
    if ((count > 0 || legacy) && !spec->resume_changed) {
        if (legacy)
            snprintf(err, errlen, "experiment '%s' in %s has results but no spec fingerprint "
                     "(made by an older parley), so parley cannot tell whether this job "
                     "matches it", p->experiment, p->dir);
        else
            snprintf(err, errlen, "experiment '%s' in %s was run with a different job spec "
                     "(fingerprint %.12s, this one %.12s); %d difference%s: %s",
                     p->experiment, p->dir, old_fp, spec->fingerprint, count,
                     count == 1 ? "" : "s", diff);
        return PL_PERSIST_SPEC_CHANGED;
    }
    if (old_fp && strcmp(old_fp, spec->fingerprint)) {
        json_t *earlier = json_object_get(m, "earlier_specs");
        if (!json_is_array(earlier)) {
            earlier = json_array();
            json_object_set_new(m, "earlier_specs", earlier);
        }
        json_array_append_new(earlier, pl_json_pack("{s:s, s:O, s:I, s:I}", "fingerprint", old_fp,
                                                 "spec", old, "until_generation",
                                                 (json_int_t)p->generation, "replaced_at",
                                                 (json_int_t)time(NULL)));
    }
    json_object_set_new(m, "spec_fingerprint", json_string(spec->fingerprint));
    json_object_set(m, "spec", spec->canonical);
    return 0;
}

/* Questions not yet known become pending; every one gets its fingerprint
 * (a succeeded one keeps the one it was made with unless resumed on
 * purpose). */
static void register_questions(pl_persist *p, const char *const *ids, int n,
                               const pl_persist_spec *spec)
{
    json_t *qs = persist_questions(p);
    for (int i = 0; i < n; i++) {
        json_t *e = json_object_get(qs, ids[i]);
        if (!json_is_object(e)) {
            e = pl_json_pack("{s:s}", "status", "pending");
            json_object_set_new(qs, ids[i], e);
        }
        if (spec && spec->question_fps)
            json_object_set_new(e, "fingerprint", json_string(spec->question_fps[i]));
    }
}

int pl_persist_register(pl_persist *p, const char *const *ids, int n,
                        const pl_persist_spec *spec, char *err, size_t errlen)
{
    if (persist_lock(p, true) < 0) {
        snprintf(err, errlen, "cannot lock %s/.lock: %s", p->dir, strerror(errno));
        return -1;
    }
    int rc = persist_sync_locked(p);
    if (rc < 0)
        snprintf(err, errlen, "cannot read %s: %s", p->dir, strerror(errno));
    if (rc == 0 && spec)
        rc = check_spec(p, spec, ids, n, err, errlen);
    if (rc == 0) {
        p->gen0 = p->generation;
        register_questions(p, ids, n, spec);
        if (persist_manifest_write(p) < 0) {
            snprintf(err, errlen, "cannot write %s: %s", p->manifest_path, strerror(errno));
            rc = -1;
        }
    }
    persist_unlock(p);
    return rc;
}
