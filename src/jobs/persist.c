/* persist.c - transcripts, task_manifest.json and the index, written
 * atomically under an exclusive flock; repair and reconcile on open. */
#include "src/jobs/persist.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct pl_persist {
    char *dir, *tdir;            /* experiment and transcripts directories */
    char *experiment;
    char *manifest_path, *index_path;
    int lock_fd;
    json_t *manifest;            /* as read under the lock, then written */
    json_int_t generation;       /* the manifest's, as we last saw it */
    json_t *indexed;             /* question_id -> true */
    off_t index_size;            /* bytes of the index we have read */
};

static char *path_join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s/%s", a, b);
    return s;
}

static int mkdir_p(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *s = buf + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            return -1;
        *s = '/';
    }
    return mkdir(buf, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

static int fsync_dir_of(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    int fd = open(dirname(buf), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

static int write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, data, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        data += w;
        len -= (size_t)w;
    }
    return 0;
}

int pl_persist_atomic_write(const char *path, const char *data, size_t len)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d.%lx", path, (int)getpid(),
             (unsigned long)pthread_self());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    if (write_all(fd, data, len) < 0 || fsync(fd) < 0) {
        close(fd);
        unlink(tmp);
        return -1;
    }
    close(fd);
    if (rename(tmp, path) < 0) {
        unlink(tmp);
        return -1;
    }
    return fsync_dir_of(path);
}

static int write_json_atomic(const char *path, json_t *j)
{
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (!s)
        return -1;
    int rc = pl_persist_atomic_write(path, s, strlen(s));
    free(s);
    return rc;
}

/* ---- the index ---- */

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
            json_object_set_new(p->indexed, id, json_true());
        json_decref(o);
        pos += n + 1;
    }
    *good = pos;
    return bad;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0, r;
    do {
        if (n + 65536 + 1 > cap) {
            cap = (n + 65536 + 1) * 2;
            char *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = b;
        }
        r = fread(buf + n, 1, 65536, f);
        n += r;
    } while (r > 0);
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

static json_t *index_line_of(const char *qid, json_t *transcript)
{
    json_t *o = json_pack("{s:s, s:s, s:o}", "question_id", qid, "status",
                          "succeeded", "transcript",
                          json_sprintf("transcripts/%s.json", qid));
    if (!o)
        return NULL;
    json_t *sum = json_object_get(transcript, "summary");
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
    int rc = out ? pl_persist_atomic_write(p->index_path, out, n) : -1;
    p->index_size = (off_t)n;
    free(out);
    json_decref(seen);
    return rc;
}

/* Load the whole index, cutting a torn last line and dropping duplicates. */
static int index_load(pl_persist *p)
{
    size_t len = 0, good = 0;
    char *buf = read_file(p->index_path, &len);
    json_object_clear(p->indexed);
    p->index_size = 0;
    if (!buf)
        return 0;
    int bad = index_scan(p, buf, len, &good);
    int rc = 0;
    if (bad > 0 || good < len)
        rc = index_rewrite(p, buf, good);
    else
        p->index_size = (off_t)len;
    free(buf);
    return rc;
}

static int index_append(pl_persist *p, const char *qid, json_t *transcript)
{
    json_t *o = index_line_of(qid, transcript);
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(o);
    if (!s)
        return -1;
    size_t n = strlen(s);
    s[n] = '\n';
    int fd = open(p->index_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    int rc = fd < 0 ? -1 : write_all(fd, s, n + 1);
    if (rc == 0)
        rc = fsync(fd);
    if (fd >= 0)
        close(fd);
    free(s);
    if (rc == 0) {
        json_object_set_new(p->indexed, qid, json_true());
        p->index_size += (off_t)(n + 1);
    }
    return rc;
}

/* ---- the manifest ---- */

static json_t *manifest_new(const char *experiment)
{
    return json_pack("{s:s, s:{}}", "experiment", experiment, "questions");
}

static json_t *manifest_questions(pl_persist *p)
{
    json_t *q = json_object_get(p->manifest, "questions");
    if (!json_is_object(q)) {
        q = json_object();
        json_object_set_new(p->manifest, "questions", q);
    }
    return q;
}

static const char *manifest_status(pl_persist *p, const char *qid)
{
    json_t *e = json_object_get(manifest_questions(p), qid);
    return json_string_value(json_object_get(e, "status"));
}

static void manifest_set(pl_persist *p, const char *qid, const char *status,
                         const char *error)
{
    json_t *e = json_pack("{s:s}", "status", status);
    if (error)
        json_object_set_new(e, "error", json_string(error));
    json_object_set_new(manifest_questions(p), qid, e);
}

/* Re-read the manifest; called under the lock before every update, so no
 * writer ever rewrites a copy that another process has since replaced. (An
 * inode or mtime check is not enough: ext4 reuses the inode of a file
 * renamed over, and mtime has a coarse clock.) The manifest is small. A
 * missing or unreadable file keeps what we have. Returns true when another
 * writer changed it since we last looked (its generation moved). */
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

static int manifest_write(pl_persist *p)
{
    int counts[3] = {0, 0, 0};
    const char *k;
    json_t *v;
    json_object_foreach(manifest_questions(p), k, v) {
        const char *s = json_string_value(json_object_get(v, "status"));
        counts[s && !strcmp(s, "succeeded") ? 1 : s && !strcmp(s, "failed") ? 2 : 0]++;
    }
    json_object_set_new(p->manifest, "counts",
                        json_pack("{s:i, s:i, s:i}", "pending", counts[0],
                                  "succeeded", counts[1], "failed", counts[2]));
    json_object_set_new(p->manifest, "updated_at", json_integer((json_int_t)time(NULL)));
    /* Every write moves the generation, so a reader under the lock knows
     * whether anyone wrote since it last looked. */
    json_object_set_new(p->manifest, "generation", json_integer(p->generation + 1));
    if (write_json_atomic(p->manifest_path, p->manifest) < 0)
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
        const char *s = manifest_status(p, k);
        if (!s || strcmp(s, "succeeded")) {
            manifest_set(p, k, "succeeded", NULL);
            dirty = true;
        }
    }
    void *tmp;
    json_object_foreach_safe(manifest_questions(p), tmp, k, v) {
        const char *s = json_string_value(json_object_get(v, "status"));
        if (!s || strcmp(s, "succeeded") || json_object_get(p->indexed, k))
            continue;
        json_t *t = transcript_exists(p, k) ? pl_persist_read_transcript(p->dir, k) : NULL;
        if (t) {
            /* The crash hit between the manifest and the index: index it. */
            if (index_append(p, k, t) < 0) {
                json_decref(t);
                return -1;
            }
        } else {
            manifest_set(p, k, "pending", NULL);
            dirty = true;
        }
        json_decref(t);
    }
    return dirty ? manifest_write(p) : 0;
}

/* ---- public ---- */

static int sync_locked(pl_persist *p);

static int lock_ex(pl_persist *p)
{
    while (flock(p->lock_fd, LOCK_EX) < 0)
        if (errno != EINTR)
            return -1;
    return 0;
}

static void unlock(pl_persist *p)
{
    flock(p->lock_fd, LOCK_UN);
}

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

pl_persist *pl_persist_open(const char *root, const char *experiment,
                            char *err, size_t errlen)
{
    pl_persist *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->lock_fd = -1;
    char name[300];
    snprintf(name, sizeof name, "%s_index.jsonl", experiment);
    p->experiment = strdup(experiment);
    p->dir = path_join(root, experiment);
    p->tdir = p->dir ? path_join(p->dir, "transcripts") : NULL;
    p->manifest_path = p->dir ? path_join(p->dir, "task_manifest.json") : NULL;
    p->index_path = p->dir ? path_join(p->dir, name) : NULL;
    p->indexed = json_object();
    if (!p->experiment || !p->tdir || !p->manifest_path || !p->index_path ||
        mkdir_p(p->tdir) < 0) {
        snprintf(err, errlen, "cannot create %s/%s/transcripts: %s", root, experiment,
                 strerror(errno));
        goto fail;
    }
    char *lock = path_join(p->dir, ".lock");
    p->lock_fd = lock ? open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644) : -1;
    free(lock);
    if (p->lock_fd < 0 || lock_ex(p) < 0) {
        snprintf(err, errlen, "cannot lock %s/.lock: %s", p->dir, strerror(errno));
        goto fail;
    }
    int rc = persist_load(p, err, errlen);
    unlock(p);
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
    if (p->lock_fd >= 0)
        close(p->lock_fd);
    json_decref(p->manifest);
    json_decref(p->indexed);
    free(p->experiment);
    free(p->dir);
    free(p->tdir);
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

const char *pl_persist_dir(const pl_persist *p)
{
    return p->dir;
}

int pl_persist_register(pl_persist *p, const char *const *ids, int n)
{
    if (lock_ex(p) < 0)
        return -1;
    int rc = sync_locked(p);
    bool dirty = false;
    for (int i = 0; i < n; i++) {
        if (!manifest_status(p, ids[i])) {
            manifest_set(p, ids[i], "pending", NULL);
            dirty = true;
        }
    }
    if (rc == 0 && (dirty || access(p->manifest_path, F_OK) != 0))
        rc = manifest_write(p);
    unlock(p);
    return rc;
}

/* Never replace a succeeded transcript with a failed one. Looks at the
 * file, not at our state, so it is safe on any thread; two processes racing
 * on the same question can still both write (the manifest never downgrades
 * a success either way). */
static bool keeps_success(const char *path)
{
    json_t *t = json_load_file(path, 0, NULL);
    const char *st = json_string_value(json_object_get(t, "status"));
    bool ok = st && !strcmp(st, "succeeded");
    json_decref(t);
    return ok;
}

int pl_persist_save_transcript(const pl_persist *p, const pl_persist_record *r)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.json", p->tdir, r->question_id);
    if (!r->succeeded && keeps_success(path))
        return 0;
    return write_json_atomic(path, r->transcript);
}

/* Under the lock: bring the manifest and the index up to date with what
 * other writers did. The manifest is always re-read; the index (which only
 * grows, except when an opener rewrites it) is re-read when its size moved
 * or another writer wrote since we looked. */
static int sync_locked(pl_persist *p)
{
    bool moved = manifest_reload(p);
    struct stat st;
    if (stat(p->index_path, &st) < 0)
        return errno == ENOENT ? (json_object_clear(p->indexed), p->index_size = 0, 0) : -1;
    if (moved || st.st_size != p->index_size)
        return index_load(p);
    return 0;
}

static int commit_locked(pl_persist *p, const pl_persist_record *recs, int n)
{
    int rc = sync_locked(p);
    for (int i = 0; i < n && rc == 0; i++) {
        const pl_persist_record *r = &recs[i];
        if (r->succeeded && !json_object_get(p->indexed, r->question_id))
            rc = index_append(p, r->question_id, r->transcript);
        const char *s = manifest_status(p, r->question_id);
        if (r->succeeded)
            manifest_set(p, r->question_id, "succeeded", NULL);
        else if (!s || strcmp(s, "succeeded"))
            manifest_set(p, r->question_id, "failed", r->error);
    }
    if (rc == 0)
        rc = manifest_write(p);
    return rc;
}

int pl_persist_commit(pl_persist *p, const pl_persist_record *recs, int n, bool wait)
{
    if (wait) {
        if (lock_ex(p) < 0)
            return -1;
    } else {
        while (flock(p->lock_fd, LOCK_EX | LOCK_NB) < 0) {
            if (errno == EWOULDBLOCK)
                return PL_PERSIST_BUSY;
            if (errno != EINTR)
                return -1;
        }
    }
    int rc = commit_locked(p, recs, n);
    unlock(p);
    return rc;
}

int pl_persist_write(pl_persist *p, const pl_persist_record *recs, int n)
{
    for (int i = 0; i < n; i++)
        if (pl_persist_save_transcript(p, &recs[i]) < 0)
            return -1;
    return pl_persist_commit(p, recs, n, true);
}

json_t *pl_persist_read_transcript(const char *dir, const char *qid)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/transcripts/%s.json", dir, qid);
    return json_load_file(path, 0, NULL);
}
