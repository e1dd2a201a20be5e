/* persist_internal.h - shared by persist*.c only. */
#ifndef PL_PERSIST_INTERNAL_H
#define PL_PERSIST_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>

#include "src/jobs/persist.h"

/* A claimer's heartbeat: its file's mtime, touched this often. A claim is
 * taken over when its process is gone (same host: at once, from /proc) or
 * its heartbeat is older than PERSIST_STALE_S (another host). */
#define PERSIST_HEARTBEAT_MS 2000
#define PERSIST_STALE_S 30

struct pl_persist {
    char *dir, *tdir, *cdir;     /* experiment, transcripts/, .claims/ */
    char *experiment;
    char *manifest_path, *index_path;
    int lock_fd;
    json_t *manifest;            /* as read under the lock, then written */
    json_int_t generation;       /* the manifest's, as we last saw it */
    json_int_t gen0;             /* at registration: later failures are this
                                    session's */
    json_t *indexed;             /* question_id -> its "correct" (bool/null) */
    off_t index_size;            /* bytes of the index we have read */
    /* this process in the experiment (persist_claim.c) */
    char claimer[96];            /* "<host>-<pid>-<hex>": [A-Za-z0-9_-] */
    char host[64];
    char pidns[64];              /* pid namespace: same host and namespace,
                                    so /proc tells whether a pid lives */
    unsigned long long proc_start;
    char *claimer_path;
    unsigned long seq;           /* temp and staged file names */
    json_t *alive;               /* claimer -> bool, cached for one step */
    pthread_t hb;
    pthread_mutex_t hb_mu;
    pthread_cond_t hb_cv;
    bool hb_running, hb_stop;
};

/* persist_io.c */
char *persist_path_join(const char *a, const char *b);
int persist_mkdir_p(const char *path);
int persist_fsync_dir(const char *dir);
int persist_write_all(int fd, const char *data, size_t len);
/** data into tmp (created, fsynced), then renamed to path (dir fsynced
 *  unless no_dir_sync). Returns 0, or -1 with errno (tmp removed). */
int persist_write_via(const char *tmp, const char *path, const char *data, size_t len,
                      bool no_dir_sync);
/** A temp name for path owned by this process: "<path>.tmp.<claimer>.<n>". */
void persist_tmp_name(pl_persist *p, const char *path, const char *kind, char *out,
                      size_t n);
int persist_write_json(pl_persist *p, const char *path, json_t *j);
char *persist_read_file(const char *path, size_t *len);

/* persist.c */
json_t *persist_questions(pl_persist *p);
const char *persist_status(pl_persist *p, const char *qid);
/** A status ("pending", "succeeded", "failed"), dropping any claim; a
 *  terminal one records who (by), a failure also when (gen: the next
 *  generation, so a failure of this session is told from an older one). */
void persist_manifest_set(pl_persist *p, const char *qid, const char *status,
                          const char *error);
/** Append qid's index line (from the transcript or its stub). -1 with
 *  errno, the index cut back to its size before. */
int persist_index_append(pl_persist *p, const char *qid, json_t *transcript);
int persist_manifest_write(pl_persist *p);
/** Under the lock: re-read what other writers changed. */
int persist_sync_locked(pl_persist *p);
int persist_lock(pl_persist *p, bool wait);
void persist_unlock(pl_persist *p);

/* persist_claim.c */
int persist_claimer_init(pl_persist *p, char *err, size_t errlen);
void persist_claimer_end(pl_persist *p);
/** Is the claimer with this id alive? Cached until persist_alive_reset. */
bool persist_alive(pl_persist *p, const char *claimer);
void persist_alive_reset(pl_persist *p);
/** Under the lock: remove the temp and staged files of writers that are
 *  gone, and their claimer files. */
void persist_sweep_locked(pl_persist *p);
/** Under the lock: claim up to s->want of s->ids and fill s->states
 *  (pl_persist_step_run). Returns true when the manifest changed. */
bool persist_claim_locked(pl_persist *p, pl_persist_step *s);

#endif
