/* persist.c - the experiment's files under its lock: the index, the task
 * manifest, repair on open, and the commit step (persist.h). Claims and
 * the claimer are in persist_claim.c, the spec check in persist_spec.c,
 * file primitives in persist_io.c. */
#include "src/jobs/persist.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "src/base/json_pack.h"
#include "src/jobs/persist_internal.h"

/* ---- the index ---- */

static json_t *correct_of(json_t *line)
{
    json_t *c = json_object_get(line, "correct");
    return json_is_boolean(c) ? json_incref(c) : json_null();
}

/* Parse index bytes [0, len): complete lines only. Adds ids to indexed;
 * returns the number of bad or duplicate lines; *good gets the length of
 * the prefix that ends with the last newline. */
static int index_scan(pl_persist *p, const char *buf, size_t len, size_t *good)
{
    int bad = 0;
    size_t pos = 0;
    while (pos < len) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        if (!nl)
            break;
        size_t n = (size_t)(nl - (buf + pos));
        json_t *o = json_loadb(buf + pos, n, 0, NULL);
        const char *id = json_string_value(json_object_get(o, "question_id"));
        if (!id || json_object_get(p->indexed, id))
            bad++;
        else
            json_object_set_new(p->indexed, id, correct_of(o));
        json_decref(o);
        pos += n + 1;
    }
    *good = pos;
    return bad;
}

/* The line: id, status, path, then what the stub carries: the summary's
 * keys, the question's metadata, the spec fingerprint and the run. */
static json_t *index_line_of(const char *qid, json_t *t)
{
    json_t *o = pl_json_pack("{s:s, s:s, s:o}", "question_id", qid, "status", "succeeded",
                          "transcript", json_sprintf("transcripts/%s.json", qid));
    if (!o)
        return NULL;
    json_t *md = json_object_get(json_object_get(t, "question"), "metadata");
    if (json_is_object(md) && json_object_size(md) > 0)
        json_object_set(o, "metadata", md);
    json_t *fp = json_object_get(t, "spec_fingerprint"), *run = json_object_get(t, "run_id");
    if (json_is_string(fp))
        json_object_set(o, "spec_fingerprint", fp);
    if (json_is_string(run))
        json_object_set(o, "run_id", run);
    json_t *sum = json_object_get(t, "summary");
    if (json_is_object(sum))
        json_object_update_missing(o, sum);
    return o;
}

/* Rewrite the index keeping only its first valid line per question. */
static int index_rewrite(pl_persist *p, const char *buf, size_t len)
{
    json_t *seen = json_object();
    char *out = malloc(len + 1);
    size_t n = 0, pos = 0;
    while (out && pos < len) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        if (!nl)
            break;
        size_t ln = (size_t)(nl - (buf + pos));
        json_t *o = json_loadb(buf + pos, ln, 0, NULL);
        const char *id = json_string_value(json_object_get(o, "question_id"));
        if (id && !json_object_get(seen, id)) {
            json_object_set_new(seen, id, json_true());
            memcpy(out + n, buf + pos, ln + 1);
            n += ln + 1;
        }
        json_decref(o);
        pos += ln + 1;
    }
    char tmp[4300];
    persist_tmp_name(p, p->index_path, "tmp", tmp, sizeof tmp);
    int rc = out ? persist_write_via(tmp, p->index_path, out, n, false) : -1;
    p->index_size = (off_t)n;
    free(out);
    json_decref(seen);
    return rc;
}

/* Load the whole index, cutting a torn last line and dropping duplicates. */
static int index_load(pl_persist *p)
{
    size_t len = 0, good = 0;
    char *buf = persist_read_file(p->index_path, &len);
    json_object_clear(p->indexed);
    p->index_size = 0;
    if (!buf)
        return errno == ENOENT ? 0 : -1;
    int bad = index_scan(p, buf, len, &good);
    int rc = 0;
    if (bad > 0 || good < len)
        rc = index_rewrite(p, buf, good);
    else
        p->index_size = (off_t)len;
    free(buf);
    return rc;
}

/* Append one line; on a failed write the index is cut back to where it
 * was, so no torn line stays behind a full disk. */
int persist_index_append(pl_persist *p, const char *qid, json_t *transcript)
{
    json_t *o = index_line_of(qid, transcript);
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_t *correct = correct_of(o);
    json_decref(o);
    if (!s) {
        json_decref(correct);
        errno = ENOMEM;
        return -1;
    }
    size_t n = strlen(s);
    s[n] = '\n';
    int fd = open(p->index_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    int rc = fd < 0 ? -1 : persist_write_all(fd, s, n + 1);
    if (rc == 0)
        rc = fsync(fd);
    int e = errno;
    if (rc < 0 && fd >= 0 && ftruncate(fd, p->index_size) == 0)
        fsync(fd);
    if (fd >= 0)
        close(fd);
    free(s);
    if (rc == 0) {
        json_object_set_new(p->indexed, qid, correct);
        p->index_size += (off_t)(n + 1);
    } else {
        json_decref(correct);
        errno = e;
    }
    return rc;
}

/* ---- the manifest ---- */

static json_t *manifest_new(const char *experiment)
{
    return pl_json_pack("{s:s, s:{}}", "experiment", experiment, "questions");
}

json_t *persist_questions(pl_persist *p)
{
    json_t *q = json_object_get(p->manifest, "questions");
    if (!json_is_object(q)) {
        q = json_object();
        json_object_set_new(p->manifest, "questions", q);
    }
    return q;
}

const char *persist_status(pl_persist *p, const char *qid)
{
    json_t *e = json_object_get(persist_questions(p), qid);
    return json_string_value(json_object_get(e, "status"));
}

/* A terminal status, keeping the entry's other fields (its fingerprint). */
void persist_manifest_set(pl_persist *p, const char *qid, const char *status,
                          const char *error)
{
    json_t *qs = persist_questions(p), *e = json_object_get(qs, qid);
    if (!json_is_object(e)) {
        e = json_object();
        json_object_set_new(qs, qid, e);
    }
    json_object_set_new(e, "status", json_string(status));
    json_object_del(e, "claim");
    json_object_del(e, "error");
    json_object_del(e, "gen");
    json_object_del(e, "by");
    if (error)
        json_object_set_new(e, "error", json_string(error));
    if (strcmp(status, "pending") != 0)       /* who made it, for claims */
        json_object_set_new(e, "by", json_string(p->claimer));
    if (!strcmp(status, "failed"))            /* when: this session's or older */
        json_object_set_new(e, "gen", json_integer(p->generation + 1));
}

/* Re-read the manifest; called under the lock before every update, so no
 * writer ever rewrites a copy that another process has since replaced. (An
 * inode or mtime check is not enough: ext4 reuses the inode of a file
 * renamed over, and mtime has a coarse clock.) A missing or unreadable file
 * keeps what we have. Returns true when another writer changed it since we
 * last looked (its generation moved). */
static bool manifest_reload(pl_persist *p)
{
    json_t *m = json_load_file(p->manifest_path, 0, NULL);
    if (!json_is_object(m)) {
        json_decref(m);
        return false;
    }
    json_int_t g = json_integer_value(json_object_get(m, "generation"));
    bool moved = g != p->generation;
    json_decref(p->manifest);
    p->manifest = m;
    p->generation = g;
    return moved;
}

int persist_manifest_write(pl_persist *p)
{
    int counts[3] = {0, 0, 0};
    const char *k;
    json_t *v;
    json_object_foreach(persist_questions(p), k, v) {
        const char *s = json_string_value(json_object_get(v, "status"));
        counts[s && !strcmp(s, "succeeded") ? 1 : s && !strcmp(s, "failed") ? 2 : 0]++;
    }
    json_object_set_new(p->manifest, "counts",
                        pl_json_pack("{s:i, s:i, s:i}", "pending", counts[0],
                                  "succeeded", counts[1], "failed", counts[2]));
    json_object_set_new(p->manifest, "updated_at", json_integer((json_int_t)time(NULL)));
    /* Every write moves the generation, so a reader under the lock knows
     * whether anyone wrote since it last looked. */
    json_object_set_new(p->manifest, "generation", json_integer(p->generation + 1));
    if (persist_write_json(p, p->manifest_path, p->manifest) < 0)
        return -1;
    p->generation++;
    return 0;
}

static bool transcript_exists(pl_persist *p, const char *qid)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.json", p->tdir, qid);
    return access(path, R_OK) == 0;
}

/* Make manifest and index agree after a crash between their writes. */
static int reconcile(pl_persist *p)
{
    bool dirty = false;
    const char *k;
    json_t *v;
    json_object_foreach(p->indexed, k, v) {
        const char *s = persist_status(p, k);
        if (!s || strcmp(s, "succeeded")) {
            persist_manifest_set(p, k, "succeeded", NULL);
            dirty = true;
        }
    }
    void *tmp;
    json_object_foreach_safe(persist_questions(p), tmp, k, v) {
        const char *s = json_string_value(json_object_get(v, "status"));
        if (!s || strcmp(s, "succeeded") || json_object_get(p->indexed, k))
            continue;
        json_t *t = transcript_exists(p, k) ? pl_persist_read_transcript(p->dir, k) : NULL;
        if (t) {
            /* The manifest says so and the transcript is there: index it. */
            if (persist_index_append(p, k, t) < 0) {
                json_decref(t);
                return -1;
            }
        } else {
            persist_manifest_set(p, k, "pending", NULL);
            dirty = true;
        }
        json_decref(t);
    }
    return dirty ? persist_manifest_write(p) : 0;
}

/* ---- the lock ---- */

int persist_lock(pl_persist *p, bool wait)
{
    while (flock(p->lock_fd, wait ? LOCK_EX : LOCK_EX | LOCK_NB) < 0) {
        if (!wait && errno == EWOULDBLOCK)
            return PL_PERSIST_BUSY;
        if (errno != EINTR)
            return -1;
    }
    persist_alive_reset(p);
    return 0;
}

void persist_unlock(pl_persist *p)
{
    flock(p->lock_fd, LOCK_UN);
}

/* Under the lock: bring the manifest and the index up to date with what
 * other writers did. The manifest is always re-read; the index (which only
 * grows, except when an opener rewrites it) is re-read when its size moved
 * or another writer wrote since we looked. */
int persist_sync_locked(pl_persist *p)
{
    bool moved = manifest_reload(p);
    struct stat st;
    if (stat(p->index_path, &st) < 0) {
        if (errno != ENOENT)
            return -1;
        json_object_clear(p->indexed);
        p->index_size = 0;
        return 0;
    }
    if (moved || st.st_size != p->index_size)
        return index_load(p);
    return 0;
}

/* ---- open and close ---- */

/* Load index and manifest. A manifest that exists but does not parse is
 * refused, never replaced: it may hold the only record of failed
 * questions. Returns -1 with a message in err. */
static int persist_load(pl_persist *p, char *err, size_t errlen)
{
    if (index_load(p) < 0) {
        snprintf(err, errlen, "cannot repair %s: %s", p->index_path, strerror(errno));
        return -1;
    }
    json_error_t je;
    json_t *m = json_load_file(p->manifest_path, 0, &je);
    if (!m && access(p->manifest_path, F_OK) == 0) {
        snprintf(err, errlen, "%s:%d: not a valid task manifest (%s); parley will not "
                 "replace it: fix it or move it away", p->manifest_path, je.line, je.text);
        return -1;
    }
    if (m && !json_is_object(m)) {
        snprintf(err, errlen, "%s: not a valid task manifest (not a JSON object); parley "
                 "will not replace it: fix it or move it away", p->manifest_path);
        json_decref(m);
        return -1;
    }
    p->manifest = m ? m : manifest_new(p->experiment);
    p->generation = json_integer_value(json_object_get(p->manifest, "generation"));
    if (reconcile(p) < 0) {
        snprintf(err, errlen, "cannot repair %s: %s", p->dir, strerror(errno));
        return -1;
    }
    return 0;
}

static int open_paths(pl_persist *p, const char *root, const char *experiment)
{
    char name[300];
    snprintf(name, sizeof name, "%s_index.jsonl", experiment);
    p->experiment = strdup(experiment);
    p->dir = persist_path_join(root, experiment);
    p->tdir = p->dir ? persist_path_join(p->dir, "transcripts") : NULL;
    p->cdir = p->dir ? persist_path_join(p->dir, ".claims") : NULL;
    p->manifest_path = p->dir ? persist_path_join(p->dir, "task_manifest.json") : NULL;
    p->index_path = p->dir ? persist_path_join(p->dir, name) : NULL;
    p->indexed = json_object();
    p->alive = json_object();
    if (!p->experiment || !p->tdir || !p->cdir || !p->manifest_path || !p->index_path ||
        !p->indexed || !p->alive) {
        errno = ENOMEM;
        return -1;
    }
    return persist_mkdir_p(p->tdir) < 0 || persist_mkdir_p(p->cdir) < 0 ? -1 : 0;
}

pl_persist *pl_persist_open(const char *root, const char *experiment,
                            char *err, size_t errlen)
{
    pl_persist *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->lock_fd = -1;
    if (open_paths(p, root, experiment) < 0) {
        snprintf(err, errlen, "cannot create %s/%s/transcripts: %s", root, experiment,
                 strerror(errno));
        goto fail;
    }
    char *lock = persist_path_join(p->dir, ".lock");
    p->lock_fd = lock ? open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644) : -1;
    free(lock);
    if (p->lock_fd < 0 || persist_lock(p, true) < 0) {
        snprintf(err, errlen, "cannot lock %s/.lock: %s", p->dir, strerror(errno));
        goto fail;
    }
    int rc = persist_claimer_init(p, err, errlen);
    if (rc == 0) {
        persist_sweep_locked(p);
        rc = persist_load(p, err, errlen);
    }
    persist_unlock(p);
    if (rc < 0)
        goto fail;
    return p;
fail:
    pl_persist_close(p);
    return NULL;
}

void pl_persist_close(pl_persist *p)
{
    if (!p)
        return;
    persist_claimer_end(p);
    if (p->lock_fd >= 0)
        close(p->lock_fd);
    json_decref(p->manifest);
    json_decref(p->indexed);
    json_decref(p->alive);
    free(p->experiment);
    free(p->dir);
    free(p->tdir);
    free(p->cdir);
    free(p->manifest_path);
    free(p->index_path);
    free(p);
}

bool pl_persist_succeeded(const pl_persist *p, const char *qid)
{
    return json_object_get(p->indexed, qid) != NULL;
}

int pl_persist_n_succeeded(const pl_persist *p)
{
    return (int)json_object_size(p->indexed);
}

void pl_persist_accuracy(const pl_persist *p, int *answered, int *correct)
{
    const char *k;
    json_t *v;
    *answered = *correct = 0;
    json_object_foreach(p->indexed, k, v) {
        *answered += json_is_boolean(v);
        *correct += json_is_true(v);
    }
}

const char *pl_persist_dir(const pl_persist *p)
{
    return p->dir;
}

const char *pl_persist_claimer(const pl_persist *p)
{
    return p->claimer;
}

json_t *pl_persist_read_transcript(const char *dir, const char *qid)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/transcripts/%s.json", dir, qid);
    return json_load_file(path, 0, NULL);
}
