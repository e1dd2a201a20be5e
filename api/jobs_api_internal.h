/* jobs_api_internal.h - shared by jobs_api.c and jobs_events.c only. */
#ifndef PL_API_JOBS_API_INTERNAL_H
#define PL_API_JOBS_API_INTERNAL_H

#include "api/jobs_api.h"
#include "api/sse.h"
#include "src/base/io_pool.h"
#include "src/jobs/jobs.h"

typedef struct job_stream job_stream;

#define API_JOB_FAILURES 5

/* A job the API owns, with its open event streams, and what the API keeps
 * from its events for /metrics and /status. */
typedef struct api_job {
    pl_job *job;
    struct pl_jobs_api *a;
    struct event *forget;        /* armed when the job finishes (retention) */
    job_stream *streams;         /* doubly linked */
    int sub;                     /* the API's own subscription */
    long reprompts;
    long n_failures;             /* conversations failed */
    struct {                     /* the last API_JOB_FAILURES, a ring */
        char question_id[64];
        char error[192];
    } failures[API_JOB_FAILURES];
} api_job;

/* A forgotten job: enough to serve its transcripts from disk. */
typedef struct forgotten_job {
    char *id, *dir;
} forgotten_job;

struct pl_jobs_api {
    pl_server *srv;
    pl_io_pool *io;
    char *root;
    api_job **jobs;
    int n_jobs;
    pl_jobs_api_limits lim;
    forgotten_job *forgotten;    /* a ring of FORGOTTEN_MAX */
    long n_forgotten;
};

/** GET /v1/jobs/{id}/events: start an SSE stream on req. */
void jobs_api_stream(pl_jobs_api *a, api_job *aj, struct evhttp_request *req);
/** The jobs' part of GET /metrics (jobs_metrics.c), a metrics hook. */
void jobs_api_metrics(pl_server *s, struct evbuffer *out, void *ud);
/** A served model's slots as its dispatch shares them (new ref): capacity,
 *  reserve, in-flight of jobs and of interactive requests, and per job its
 *  weight, in-flight, requests dispatched and completed, attained service
 *  (tokens) and share of the jobs' dispatched requests. */
json_t *jobs_api_model_slots(const pl_model_entry *e);
/** End every stream of a job (shutdown). */
void jobs_api_end_streams(pl_jobs_api *a, api_job *aj);

#endif
