/* persist.h - a job's output on disk, compatible with seed 000:
 *
 *   OUTPUT/<experiment>/transcripts/<question_id>.json
 *   OUTPUT/<experiment>/task_manifest.json      every question's status
 *   OUTPUT/<experiment>/<experiment>_index.jsonl one line per succeeded question
 *
 * A transcript is written on its own, without the lock, as soon as its
 * conversation finishes. The manifest and index step holds an exclusive
 * flock on OUTPUT/<experiment>/.lock, re-reads the manifest (and the index
 * when it moved) under it, then writes through a temp file, fsync, rename,
 * and fsyncs the directory; the index is appended with O_APPEND and fsync.
 * The manifest carries a "generation" that every write moves. Order:
 * transcript, index, manifest. Opening repairs what a crash can leave: a torn last index line is
 * cut, duplicate index lines are dropped, and manifest and index are made to
 * agree (a question is succeeded when its transcript exists and either
 * file says so). Several processes may share an experiment directory.
 *
 * Blocking: every function here does file I/O. Call them on an I/O thread,
 * except open (once, at job start). pl_persist_save_transcript may run on
 * any number of threads at once (it reads only p's paths); the other
 * functions are used by one thread at a time (the job keeps one commit in
 * flight).
 */
#ifndef PL_PERSIST_H
#define PL_PERSIST_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

typedef struct pl_persist pl_persist;

/**
 * Open (creating directories) root/experiment, repair and load it.
 * Returns NULL with err set on failure. Caller frees with pl_persist_close.
 */
pl_persist *pl_persist_open(const char *root, const char *experiment,
                            char *err, size_t errlen);
void pl_persist_close(pl_persist *p);

/** true when question_id is recorded as succeeded. */
bool pl_persist_succeeded(const pl_persist *p, const char *question_id);
/** Number of succeeded questions. */
int pl_persist_n_succeeded(const pl_persist *p);

/** Register questions as "pending" in the manifest (those not yet known),
 *  and write it. Returns 0 or -1. */
int pl_persist_register(pl_persist *p, const char *const *question_ids, int n);

/** One finished question. transcript is borrowed; it must hold
 *  "question_id" and "status" ("succeeded" or "failed"). */
typedef struct pl_persist_record {
    const char *question_id;
    bool succeeded;
    const char *error;           /**< failed: why (may be NULL) */
    json_t *transcript;
} pl_persist_record;

/** Write one transcript file (atomically, no lock). A failed transcript
 *  never replaces a succeeded one. Returns 0 or -1. */
int pl_persist_save_transcript(const pl_persist *p, const pl_persist_record *r);

/** pl_persist_commit's answer when wait is false and the lock is held. */
#define PL_PERSIST_BUSY 1

/**
 * The manifest and index step for a batch whose transcripts are on disk:
 * under the lock, re-read the manifest (and the index if it moved), append
 * the index lines of the succeeded ones not already indexed (from
 * transcript's "summary"; a stub holding only the summary will do), then
 * write the manifest once. A succeeded question is never downgraded to
 * failed. wait false: return PL_PERSIST_BUSY at once if another holds the
 * lock. Returns 0, PL_PERSIST_BUSY or -1.
 */
int pl_persist_commit(pl_persist *p, const pl_persist_record *recs, int n, bool wait);

/** pl_persist_save_transcript for each, then pl_persist_commit (waiting).
 *  Returns 0 or -1. */
int pl_persist_write(pl_persist *p, const pl_persist_record *recs, int n);

/** The experiment directory (owned by p). */
const char *pl_persist_dir(const pl_persist *p);

/** Read a transcript file as JSON (new reference) or NULL. */
json_t *pl_persist_read_transcript(const char *dir, const char *question_id);

/** Write data to path atomically: temp file, fsync, rename, fsync dir. */
int pl_persist_atomic_write(const char *path, const char *data, size_t len);

#endif
