/* persist.h - a job's output on disk, compatible with seed 000:
 *
 *   OUTPUT/<experiment>/transcripts/<question_id>.json
 *   OUTPUT/<experiment>/task_manifest.json      every question's status
 *   OUTPUT/<experiment>/<experiment>_index.jsonl one line per succeeded question
 *   OUTPUT/<experiment>/.lock, .claims/          the lock; who works on it
 *
 * Several processes may share an experiment. Each opener is a *claimer*
 * (.claims/<claimer>.json: pid, host, and a heartbeat, the file's mtime,
 * touched every 2 s by a thread). Under the exclusive flock on .lock a job
 * claims questions in the manifest ("claim": <claimer>) before it generates
 * them, so each question is generated once; a claim whose process is gone
 * (same host: at once; another host: no heartbeat for 30 s) is taken over.
 *
 * A transcript is first *staged* without the lock (written to a file of
 * its own, fsynced), then, under the lock, renamed into place if its claim
 * still holds, then indexed, then the manifest is written (temp file,
 * fsync, rename, directory fsync). So the manifest and the index never name
 * a transcript that is not on disk, and an index line always describes the
 * transcript it names. A staged transcript whose write failed (a full disk)
 * is recorded as failed with the error; a re-run redoes it.
 *
 * The manifest records the job's spec (canonical JSON and fingerprint,
 * job_spec.h) and each question's fingerprint; a re-run with another spec
 * is refused with the differing keys, unless resume_changed. Opening
 * repairs what a crash can leave: temp and staged files of writers that are
 * gone are removed, a torn last index line is cut, duplicate index lines
 * are dropped, and manifest and index are made to agree.
 *
 * Blocking: every function here does file I/O. Call them on an I/O thread,
 * except open (once, at job start). pl_persist_stage may run on any number
 * of threads at once; the other functions are used by one thread at a time
 * (the job keeps one step in flight).
 */
#ifndef PL_PERSIST_H
#define PL_PERSIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

typedef struct pl_persist pl_persist;

/**
 * Open (creating directories) root/experiment as a new claimer, then under
 * the lock: sweep files of writers that are gone, repair and load. Returns
 * NULL with err set on failure. Caller frees with pl_persist_close.
 */
pl_persist *pl_persist_open(const char *root, const char *experiment,
                            char *err, size_t errlen);
/** Stop the heartbeat, remove the claimer file (claims left become free). */
void pl_persist_close(pl_persist *p);

/** This process's claimer id ("<host>-<pid>-<hex>"): each transcript and
 *  index line carries it as "run_id". */
const char *pl_persist_claimer(const pl_persist *p);

/** true when question_id is recorded as succeeded. */
bool pl_persist_succeeded(const pl_persist *p, const char *question_id);
/** Number of succeeded questions. */
int pl_persist_n_succeeded(const pl_persist *p);
/** Accuracy over the experiment's index as last read: lines with a
 *  boolean "correct", and of them true. */
void pl_persist_accuracy(const pl_persist *p, int *answered, int *correct);

/** What the job is: recorded in the manifest on first use, compared after. */
typedef struct pl_persist_spec {
    const char *fingerprint;     /**< the spec's (job_spec.h) */
    json_t *canonical;           /**< its canonical JSON (borrowed) */
    const char *const *question_fps; /**< per question (may be NULL) */
    bool resume_changed;         /**< a different spec resumes anyway */
} pl_persist_spec;

/** pl_persist_register's answer when the experiment holds another spec. */
#define PL_PERSIST_SPEC_CHANGED 2

/**
 * Under the lock: compare spec (may be NULL: no check) with the one the
 * manifest records (a spec differs in its canonical JSON, or in a
 * succeeded question's fingerprint); register the questions not yet known
 * as "pending"; write the manifest. Returns 0; PL_PERSIST_SPEC_CHANGED
 * with the differing keys in err (and nothing written); or -1 with err.
 */
int pl_persist_register(pl_persist *p, const char *const *question_ids, int n,
                        const pl_persist_spec *spec, char *err, size_t errlen);

/** A question's state for a claimer (pl_persist_step's states). */
enum {
    PL_CLAIM_OPEN = 0,           /**< free: claimable by the next step */
    PL_CLAIM_MINE,               /**< claimed by this process */
    PL_CLAIM_ELSEWHERE,          /**< claimed by another live process */
    PL_CLAIM_SUCCEEDED,          /**< succeeded (by anyone, any time) */
    PL_CLAIM_FAILED_ELSEWHERE,   /**< failed by another process during this
                                      session: final for this run */
};

/** One finished question. */
typedef struct pl_persist_record {
    const char *question_id;
    bool succeeded;
    const char *error;           /**< failed: why (may be NULL) */
    /** The transcript, or (at commit) a stub with what its index line
     *  needs: "summary", "question.metadata", "spec_fingerprint", "run_id". */
    json_t *transcript;
    /** The staged transcript (pl_persist_stage); NULL: its write failed,
     *  and the question is recorded as failed with error. */
    const char *staged;
} pl_persist_record;

/**
 * Write r's transcript to a staged file of its own (no lock; fsynced).
 * Returns the staged path (malloc'd; the caller frees it after the commit),
 * or NULL with the reason ("No space left on device") in err.
 */
char *pl_persist_stage(pl_persist *p, const pl_persist_record *r, char *err,
                       size_t errlen);

/** One locked step: commit finished questions, then claim more. */
typedef struct pl_persist_step {
    const pl_persist_record *recs;   /**< to commit (staged) */
    int n_recs;
    const char *const *ids;          /**< the job's questions, for claims */
    int n_ids;
    int want;                        /**< claim up to this many more */
    uint8_t *states;                 /**< out: n_ids PL_CLAIM_* (or NULL) */
    int claimed;                     /**< out: newly claimed */
    int lost;                        /**< out: records dropped: another
                                          process took their claim over */
    int answered, correct;           /**< out: pl_persist_accuracy after */
    char error[160];                 /**< out: on -1, what failed */
} pl_persist_step;

/** pl_persist_step's answer when wait is false and the lock is held. */
#define PL_PERSIST_BUSY 1

/**
 * Under the lock: re-read manifest and index; for each record whose claim
 * still holds (ours, or none), rename its staged file into place (a failed
 * transcript never replaces a succeeded one), index the succeeded ones (a
 * line from the stub, once per question), and mark them; then claim up to
 * want questions among ids that are neither succeeded nor claimed by a live
 * process nor failed by another one this session, and fill states; then
 * write the manifest once. wait false: PL_PERSIST_BUSY at once if another
 * holds the lock. Returns 0, PL_PERSIST_BUSY or -1 (s->error says why; the
 * files are then as the last successful write left them).
 */
int pl_persist_step_run(pl_persist *p, pl_persist_step *s, bool wait);

/** A commit-only step. Returns 0, PL_PERSIST_BUSY or -1. */
int pl_persist_commit(pl_persist *p, const pl_persist_record *recs, int n, bool wait);

/** Stage each record's transcript, then commit them (waiting). For tests
 *  and tools; recs[i].staged is ignored. Returns 0 or -1. */
int pl_persist_write(pl_persist *p, const pl_persist_record *recs, int n);

/** The experiment directory (owned by p). */
const char *pl_persist_dir(const pl_persist *p);

/** Read a transcript file as JSON (new reference) or NULL. */
json_t *pl_persist_read_transcript(const char *dir, const char *question_id);

/** Write data to path atomically: temp file, fsync, rename, fsync dir. */
int pl_persist_atomic_write(const char *path, const char *data, size_t len);

#endif
