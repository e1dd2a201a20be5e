/* jobs_api.h - the jobs endpoints:
 *
 *   POST   /v1/jobs                              201 {id, ...}; 400 lists every
 *                                                spec problem
 *   GET    /v1/jobs                              all jobs with their progress
 *   GET    /v1/jobs/{id}                         progress, counts, pool sizes
 *   GET    /v1/jobs/{id}/events[?tokens=1]       SSE: current state first, then
 *                                                events; tokens=1 adds deltas
 *   GET    /v1/jobs/{id}/transcripts/{question}  a transcript
 *   DELETE /v1/jobs/{id}                         cancel (finished transcripts stay)
 *
 * and the jobs' per-model slots and pools in GET /status. A job's models
 * are the server's models, by name. Output goes to OUTPUT_ROOT/<experiment>/
 * (clients cannot choose paths), so submitting an experiment again resumes
 * it; while one job of an experiment runs, another gets 409.
 */
#ifndef PL_API_JOBS_API_H
#define PL_API_JOBS_API_H

#include "api/server.h"

typedef struct pl_jobs_api pl_jobs_api;

/** Register the routes and the status hook. output_root: where jobs write
 *  (NULL or "": ./parley-jobs; `parley serve` passes --jobs-dir, whose
 *  environment variable is PARLEY_JOBS_DIR). Free it before the server. */
pl_jobs_api *pl_jobs_api_register(pl_server *s, const char *output_root);
typedef struct pl_jobs_api_limits {
    int retention_s;             /**< a finished job is forgotten after this */
    int max_questions;           /**< 413 above (0: no limit) */
    long max_bytes;              /**< largest POST /v1/jobs body (413 above) */
} pl_jobs_api_limits;

/** Set the limits (defaults: keep finished jobs 1 h, 100,000 questions,
 *  the server's max_body_bytes). */
void pl_jobs_api_set_limits(pl_jobs_api *a, const pl_jobs_api_limits *l);
/** Cancel and free every job, end their event streams. NULL is ignored. */
void pl_jobs_api_free(pl_jobs_api *a);

#endif
