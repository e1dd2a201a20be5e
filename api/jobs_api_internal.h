/* jobs_api_internal.h - shared by jobs_api.c and jobs_events.c only. */
#ifndef PL_API_JOBS_API_INTERNAL_H
#define PL_API_JOBS_API_INTERNAL_H

#include "api/jobs_api.h"
#include "api/sse.h"
#include "src/base/io_pool.h"
#include "src/jobs/jobs.h"

typedef struct job_stream job_stream;

/* A job the API owns, with its open event streams. */
typedef struct api_job {
    pl_job *job;
    job_stream *streams;         /* doubly linked */
} api_job;

struct pl_jobs_api {
    pl_server *srv;
    pl_io_pool *io;
    char *root;
    api_job **jobs;
    int n_jobs;
};

/** GET /v1/jobs/{id}/events: start an SSE stream on req. */
void jobs_api_stream(pl_jobs_api *a, api_job *aj, struct evhttp_request *req);
/** End every stream of a job (shutdown). */
void jobs_api_end_streams(pl_jobs_api *a, api_job *aj);

#endif
