/* persist.h - a job's output on disk, compatible with seed 000:
 *
 *   OUTPUT/<experiment>/transcripts/<question_id>.json
 *   OUTPUT/<experiment>/task_manifest.json      every question's status
 *   OUTPUT/<experiment>/<experiment>_index.jsonl one line per succeeded question
 *
 * Every update holds an exclusive flock on OUTPUT/<experiment>/.lock and
 * writes through a temp file, fsync, rename, then fsyncs the directory; the
 * index is appended with O_APPEND and fsync. Order: transcript, index,
 * manifest. Opening repairs what a crash can leave: a torn last index line is
 * cut, duplicate index lines are dropped, and manifest and index are made to
 * agree (a question is succeeded when its transcript exists and either
 * file says so). Several processes may share an experiment directory.
 *
 * Blocking: every function here does file I/O. Call them on an I/O thread,
 * except open (once, at job start). One pl_persist is used by one thread at
 * a time (the job keeps one write in flight).
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

/**
 * Write a batch: each transcript file, then under the lock the index lines
 * of the succeeded ones not already indexed, then the manifest once.
 * A succeeded question is never downgraded to failed. Returns 0 or -1.
 */
int pl_persist_write(pl_persist *p, const pl_persist_record *recs, int n);

/** The experiment directory (owned by p). */
const char *pl_persist_dir(const pl_persist *p);

/** Read a transcript file as JSON (new reference) or NULL. */
json_t *pl_persist_read_transcript(const char *dir, const char *question_id);

/** Write data to path atomically: temp file, fsync, rename, fsync dir. */
int pl_persist_atomic_write(const char *path, const char *data, size_t len);

#endif
