/* jobs_api.c - the /v1/jobs endpoints and the jobs part of GET /status.
 * Event streams are in jobs_events.c. */
#include "api/jobs_api.h"

#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "api/jobs_api_internal.h"
#include "api/respond.h"
#include "schedulers/dispatch.h"
#include "src/base/json_pack.h"
#include "src/base/log.h"
#include "src/jobs/job_constraints.h"
#include "src/jobs/persist.h"

static api_job *find_job(pl_jobs_api *a, const char *id, size_t len)
{
    for (int i = 0; i < a->n_jobs; i++)
        if (strlen(pl_job_id(a->jobs[i]->job)) == len &&
            !strncmp(pl_job_id(a->jobs[i]->job), id, len))
            return a->jobs[i];
    return NULL;
}

static void reply_problems(struct evhttp_request *req, const pl_spec_problems *p)
{
    char msg[512];
    snprintf(msg, sizeof msg, "the job spec has %d problem%s; first: %s: %s", p->n,
             p->n == 1 ? "" : "s", p->v[0].path, p->v[0].message);
    json_t *err = pl_json_pack("{s:s, s:s, s:s, s:s, s:o}", "message", msg, "type",
                            "invalid_request_error", "param", p->v[0].path, "code",
                            "invalid_job_spec", "problems", pl_spec_problems_json(p));
    pl_reply_json(req, 400, pl_json_pack("{s:o}", "error", err));
}

/* Map the spec's models onto served models and their dispatches; reports
 * unknown names. */
static int resolve_models(pl_jobs_api *a, const pl_job_spec *s, pl_backend **bs,
                          pl_dispatch **ds, pl_spec_problems *p)
{
    for (int m = 0; m < s->n_models; m++) {
        pl_model_entry *e = pl_server_find_model(a->srv, s->models[m].name);
        char path[160];
        snprintf(path, sizeof path, "models.%s", s->models[m].name);
        if (!e) {
            pl_spec_problems_add(p, path, "model '%s' is not served here (see GET /v1/models)",
                                 s->models[m].name);
            continue;
        }
        if (pl_job_spec_check_served(s, m, e->backend->ops->kind, p) < 0)
            continue;                    /* its definition asks what is not applied */
        bs[m] = e->backend;
        ds[m] = e->dispatch;
    }
    if (!p->n)
        pl_job_check_constraints(s, bs, p);
    return p->n ? -1 : 0;
}

static bool experiment_running(pl_jobs_api *a, const char *experiment)
{
    for (int i = 0; i < a->n_jobs; i++) {
        pl_job_state st = pl_job_get_state(a->jobs[i]->job);
        if ((st == PL_JOB_RUNNING || st == PL_JOB_STARTING) &&
            !strcmp(pl_job_get_spec(a->jobs[i]->job)->experiment, experiment))
            return true;
    }
    return false;
}

static bool job_live(const api_job *aj);

#define FORGOTTEN_MAX 100000

/* Drop a finished job from memory; its files stay, and its id keeps
 * serving transcripts from disk. */
static void forget_job(pl_jobs_api *a, api_job *aj)
{
    const char *dir = pl_job_dir(aj->job);
    if (dir) {
        if (!a->forgotten)
            a->forgotten = calloc(FORGOTTEN_MAX, sizeof *a->forgotten);
        if (a->forgotten) {
            forgotten_job *f = &a->forgotten[a->n_forgotten++ % FORGOTTEN_MAX];
            free(f->id);
            free(f->dir);
            f->id = strdup(pl_job_id(aj->job));
            f->dir = strdup(dir);
        }
    }
    for (int i = 0; i < a->n_jobs; i++) {
        if (a->jobs[i] == aj) {
            memmove(&a->jobs[i], &a->jobs[i + 1], (size_t)(a->n_jobs - i - 1) * sizeof *a->jobs);
            a->n_jobs--;
            break;
        }
    }
    pl_info("job %s: forgotten (files stay in %s)", pl_job_id(aj->job), dir ? dir : "-");
    jobs_api_end_streams(a, aj);
    if (aj->forget)
        event_free(aj->forget);
    pl_job_free(aj->job);
    free(aj);
}

static void forget_timer(evutil_socket_t fd, short what, void *arg)
{
    api_job *aj = arg;
    forget_job(aj->a, aj);
}

static void on_job_finished(void *ud, pl_job *j)
{
    pl_jobs_api *a = ud;
    pl_info("job %s: %s", pl_job_id(j), pl_job_state_name(pl_job_get_state(j)));
    for (int i = 0; i < a->n_jobs; i++) {
        api_job *aj = a->jobs[i];
        if (aj->job != j || aj->forget)
            continue;
        /* Never free the job from inside its own callback: a timer. */
        aj->forget = evtimer_new(pl_server_base(a->srv), forget_timer, aj);
        struct timeval tv = {a->lim.retention_s, 0};
        if (aj->forget)
            evtimer_add(aj->forget, &tv);
    }
}

static const char *forgotten_dir(pl_jobs_api *a, const char *id, size_t len)
{
    long n = a->n_forgotten < FORGOTTEN_MAX ? a->n_forgotten : FORGOTTEN_MAX;
    for (long i = 0; i < n; i++) {
        forgotten_job *f = &a->forgotten[i];
        if (f->id && strlen(f->id) == len && !strncmp(f->id, id, len))
            return f->dir;
    }
    return NULL;
}

static json_t *job_created_json(pl_job *j)
{
    json_t *o = pl_job_status_json(j, 0);
    if (json_object_set_new(o, "object", json_string("job")) < 0 ||
        json_object_set_new(o, "events_url",
                            json_sprintf("/v1/jobs/%s/events", pl_job_id(j))) < 0) {
        json_decref(o);
        return NULL;   /* out of memory: pl_reply_json sends a 500 */
    }
    return o;
}

/* The API's own subscriber: re-prompts and failures for /metrics and
 * /status (the job keeps no history of them once persisted). */
static void api_job_event(void *ud, const pl_job_event *ev)
{
    api_job *aj = ud;
    if (ev->kind == PL_JOB_EV_REPROMPT) {
        aj->reprompts++;
    } else if (ev->kind == PL_JOB_EV_CONVERSATION_FAILED) {
        int slot = (int)(aj->n_failures++ % API_JOB_FAILURES);
        snprintf(aj->failures[slot].question_id, sizeof aj->failures[slot].question_id,
                 "%s", ev->question_id ? ev->question_id : "");
        snprintf(aj->failures[slot].error, sizeof aj->failures[slot].error, "%s",
                 ev->error ? ev->error : "failed");
    }
}

static int add_job(pl_jobs_api *a, pl_job *j)
{
    api_job **v = realloc(a->jobs, (size_t)(a->n_jobs + 1) * sizeof *v);
    api_job *aj = calloc(1, sizeof *aj);
    if (!v || !aj) {
        free(aj);
        if (v)
            a->jobs = v;
        return -1;
    }
    a->jobs = v;
    aj->job = j;
    aj->a = a;
    aj->sub = pl_job_subscribe(j, api_job_event, aj, false);
    a->jobs[a->n_jobs++] = aj;
    return 0;
}

/* POST /v1/jobs?resume_changed=true: resume an experiment made with
 * another spec on purpose. Returns 0 or 1, or -1 after a 400. */
static int resume_changed(struct evhttp_request *req)
{
    const char *q = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    struct evkeyvalq kv;
    if (!q || evhttp_parse_query_str(q, &kv) < 0)
        return 0;
    const char *v = evhttp_find_header(&kv, "resume_changed");
    int on = !v ? 0 : !strcmp(v, "true") || !strcmp(v, "1") ? 1
           : !strcmp(v, "false") || !strcmp(v, "0") ? 0 : -1;
    evhttp_clear_headers(&kv);
    if (on < 0)
        pl_reply_errorf(req, 400, "invalid_request_error", "resume_changed", "invalid_value",
                        "resume_changed must be true or false");
    return on;
}

static pl_job *create_job(pl_jobs_api *a, struct evhttp_request *req, pl_job_spec *spec)
{
    pl_spec_problems p = {0};
    pl_backend **bs = calloc((size_t)spec->n_models, sizeof *bs);
    pl_dispatch **ds = calloc((size_t)spec->n_models, sizeof *ds);
    pl_job *j = NULL;
    if (!bs || !ds || resolve_models(a, spec, bs, ds, &p) < 0) {
        if (p.n)
            reply_problems(req, &p);
        else
            pl_reply_errorf(req, 500, "server_error", NULL, NULL, "out of memory");
        goto done;
    }
    int resume = resume_changed(req);
    if (resume < 0)
        goto done;       /* replied */
    if (experiment_running(a, spec->experiment)) {
        pl_reply_errorf(req, 409, "invalid_request_error", "experiment", "job_running",
                        "a job of experiment '%s' is running", spec->experiment);
        goto done;
    }
    char id[64], err[256];
    pl_server_new_id(a->srv, "job-", id, sizeof id);
    pl_job_opts o = {.base = pl_server_base(a->srv), .io = a->io, .id = id,
                     .output_root = a->root, .backends = bs, .dispatch = ds,
                     .resume_changed = resume, .on_finished = on_job_finished, .ud = a};
    j = pl_job_new(spec, &o, err, sizeof err);
    if (j && add_job(a, j) < 0) {
        pl_job_free(j);
        j = NULL;
        snprintf(err, sizeof err, "out of memory");
    }
    if (!j || pl_job_start(j) < 0) {
        /* A job in the list stays there (state "error") until shutdown. */
        pl_reply_errorf(req, 500, "server_error", NULL, NULL, "cannot start the job: %s",
                        j ? pl_job_error(j) : err);
        j = NULL;
    }
done:
    free(bs);
    free(ds);
    pl_spec_problems_free(&p);
    pl_job_spec_free(spec);
    return j;
}

/* Count before parsing: a huge spec must not expand in memory first. */
static bool too_many_questions(pl_jobs_api *a, struct evhttp_request *req, json_t *body)
{
    json_t *q = json_object_get(body, "questions");
    size_t n = json_is_array(q) ? json_array_size(q) : 0;
    if (!a->lim.max_questions || n <= (size_t)a->lim.max_questions)
        return false;
    pl_reply_errorf(req, 413, "invalid_request_error", "questions", "too_many_questions",
                    "the job has %zu questions; the limit is %d (--max-job-questions): "
                    "split it into several jobs", n, a->lim.max_questions);
    return true;
}

static void post_job(pl_jobs_api *a, struct evhttp_request *req)
{
    json_t *body = pl_read_json_body(req, a->lim.max_bytes);
    if (!body)
        return;   /* replied */
    pl_job_spec spec;
    pl_spec_problems p = {0};
    if (too_many_questions(a, req, body))
        goto done;       /* replied */
    if (pl_job_spec_parse(body, NULL, &spec, &p) < 0)
        goto fail;
    pl_job *j = create_job(a, req, &spec);   /* replies itself on failure */
    if (j)
        pl_reply_json(req, 201, job_created_json(j));
    goto done;
fail:
    reply_problems(req, &p);
done:
    pl_spec_problems_free(&p);
    json_decref(body);
}

static void list_jobs(pl_jobs_api *a, struct evhttp_request *req)
{
    json_t *data = json_array();
    for (int i = 0; data && i < a->n_jobs; i++) {
        if (json_array_append_new(data, pl_job_status_json(a->jobs[i]->job, 0)) < 0) {
            json_decref(data);
            data = NULL;   /* out of memory: pl_reply_json sends a 500 */
        }
    }
    pl_reply_json(req, 200, pl_json_pack("{s:s, s:o}", "object", "list", "data", data));
}

static void jobs_root(pl_server *s, struct evhttp_request *req, const char *path, void *ud)
{
    if (evhttp_request_get_command(req) == EVHTTP_REQ_POST)
        post_job(ud, req);
    else
        list_jobs(ud, req);
}

static void job_transcript(pl_jobs_api *a, struct evhttp_request *req, api_job *aj,
                           const char *dir, const char *qid)
{
    /* From disk, the id names a file: no path separators, no dot files. */
    bool safe = aj || (!strchr(qid, '/') && qid[0] != '.');
    json_t *t = !safe ? NULL
              : aj    ? pl_job_transcript(aj->job, qid)
                      : pl_persist_read_transcript(dir, qid);
    if (!t) {
        pl_reply_errorf(req, 404, "invalid_request_error", "question_id", "not_found",
                        "no transcript for question '%s' yet", qid);
        return;
    }
    pl_reply_json(req, 200, t);
}

/* /v1/jobs/{id}[/events | /transcripts/{qid}] */
static void jobs_item(pl_server *s, struct evhttp_request *req, const char *path, void *ud)
{
    pl_jobs_api *a = ud;
    const char *id = path + strlen("/v1/jobs/");
    size_t idlen = strcspn(id, "/");
    const char *rest = id + idlen;
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    bool item = !*rest || !strcmp(rest, "/");
    if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD && (cmd != EVHTTP_REQ_DELETE || !item)) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                          item ? "GET, HEAD, DELETE" : "GET, HEAD");
        pl_reply_errorf(req, 405, "invalid_request_error", NULL, "method_not_allowed",
                        "method not allowed for %s", path);
        return;
    }
    api_job *aj = find_job(a, id, idlen);
    const char *gone = aj ? NULL : forgotten_dir(a, id, idlen);
    if (gone && cmd != EVHTTP_REQ_DELETE && !strncmp(rest, "/transcripts/", 13) && rest[13]) {
        job_transcript(a, req, NULL, gone, rest + 13);
        return;
    }
    if (!aj) {
        pl_reply_errorf(req, 404, "invalid_request_error", "job_id", "not_found",
                        gone ? "job '%.*s' finished and was forgotten; its transcripts stay "
                               "at GET /v1/jobs/{id}/transcripts/{question_id}"
                             : "no job '%.*s'", (int)idlen, id);
        return;
    }
    if (cmd == EVHTTP_REQ_DELETE && !*rest && job_live(aj)) {
        pl_job_cancel(aj->job);
        pl_reply_json(req, 200, pl_job_status_json(aj->job, 0));
    } else if (cmd == EVHTTP_REQ_DELETE && !*rest) {
        json_t *o = pl_json_pack("{s:s, s:s, s:b}", "id", pl_job_id(aj->job), "object",
                              "job.deleted", "deleted", 1);
        forget_job(a, aj);
        pl_reply_json(req, 200, o);
    } else if (!*rest || !strcmp(rest, "/")) {
        pl_reply_json(req, 200, pl_job_status_json(aj->job, 10));
    } else if (!strcmp(rest, "/events")) {
        jobs_api_stream(a, aj, req);
    } else if (!strncmp(rest, "/transcripts/", 13) && rest[13]) {
        job_transcript(a, req, aj, NULL, rest + 13);
    } else {
        pl_reply_errorf(req, 404, "invalid_request_error", NULL, "not_found",
                        "unknown path %s", path);
    }
}

/* The job's status plus what the API kept from its events: re-prompts
 * and the last failures, newest first. */
static json_t *api_job_json(api_job *aj, int k)
{
    json_t *o = pl_job_status_json(aj->job, k);
    json_t *fails = json_array();
    long n = aj->n_failures < API_JOB_FAILURES ? aj->n_failures : API_JOB_FAILURES;
    for (long i = 0; i < n; i++) {
        int slot = (int)((aj->n_failures - 1 - i) % API_JOB_FAILURES);
        json_array_append_new(fails, pl_json_pack("{s:s, s:s}", "question_id",
                                               aj->failures[slot].question_id, "error",
                                               aj->failures[slot].error));
    }
    json_object_set_new(o, "reprompts", json_integer(aj->reprompts));
    json_object_set_new(o, "failed_conversations", json_integer(aj->n_failures));
    json_object_set_new(o, "recent_failures", fails);
    return o;
}

#define FINISHED_SHOWN 10

static bool job_live(const api_job *aj)
{
    pl_job_state st = pl_job_get_state(aj->job);
    return st == PL_JOB_RUNNING || st == PL_JOB_STARTING;
}

/* "jobs": the running ones with their pools; "finished_jobs": the last
 * FINISHED_SHOWN that ended (completed, cancelled or error), newest first. */
static void status_hook(pl_server *s, json_t *status, void *ud)
{
    pl_jobs_api *a = ud;
    json_t *jobs = json_array(), *done = json_array();
    for (int i = 0; i < a->n_jobs; i++)
        if (job_live(a->jobs[i]))
            json_array_append_new(jobs, api_job_json(a->jobs[i], 5));
    for (int i = a->n_jobs - 1; i >= 0 && json_array_size(done) < FINISHED_SHOWN; i--)
        if (!job_live(a->jobs[i]))
            json_array_append_new(done, api_job_json(a->jobs[i], 0));
    json_object_set_new(status, "jobs", jobs);
    json_object_set_new(status, "finished_jobs", done);
    json_t *slots = json_array();
    for (int i = 0; i < pl_server_n_models(s); i++)
        json_array_append_new(slots, jobs_api_model_slots(pl_server_model(s, i)));
    json_object_set_new(status, "model_slots", slots);
}

json_t *jobs_api_model_slots(const pl_model_entry *e)
{
    pl_dispatch_counts c;
    pl_dispatch_counts_get(e->dispatch, &c);
    json_t *jobs = json_array();
    uint64_t total = 0;
    pl_dispatch_client k;
    int top = pl_dispatch_max_client(e->dispatch);
    for (int i = 1; i <= top; i++)
        if (pl_dispatch_client_get(e->dispatch, i, &k))
            total += k.dispatched;
    for (int i = 1; i <= top; i++) {
        if (!pl_dispatch_client_get(e->dispatch, i, &k))
            continue;
        json_array_append_new(jobs, pl_json_pack("{s:s, s:f, s:i, s:I, s:I, s:f, s:f}",
            "job", k.name ? k.name : "", "weight", k.weight, "in_flight", k.inflight,
            "dispatched", (json_int_t)k.dispatched, "completed", (json_int_t)k.completed,
            "attained_tokens", k.attained,
            "share", total ? (double)k.dispatched / (double)total : 0.0));
    }
    return pl_json_pack("{s:s, s:i, s:i, s:i, s:i, s:o}", "model", e->name,
                     "capacity", c.capacity, "interactive_reserve", c.reserve,
                     "jobs_in_flight", c.jobs_inflight,
                     "interactive_in_flight", c.interactive_inflight, "jobs", jobs);
}

pl_jobs_api *pl_jobs_api_register(pl_server *s, const char *output_root)
{
    pl_jobs_api *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->srv = s;
    a->lim = (pl_jobs_api_limits){.retention_s = 3600, .max_questions = 100000,
                                  .max_bytes = pl_server_get_opts(s)->max_body_bytes};
    a->root = strdup(output_root && *output_root ? output_root : "parley-jobs");
    a->io = pl_io_pool_new(pl_server_base(s), 2);
    if (!a->root || !a->io) {
        pl_jobs_api_free(a);
        return NULL;
    }
    pl_server_add_route(s, "/v1/jobs", PL_HTTP_GET | PL_HTTP_POST, jobs_root, a);
    pl_server_add_route(s, "/v1/jobs/*", PL_HTTP_GET | PL_HTTP_DELETE | PL_HTTP_OTHER,
                        jobs_item, a);
    pl_server_add_status_hook(s, status_hook, a);
    pl_server_add_metrics_hook(s, jobs_api_metrics, a);
    return a;
}

void pl_jobs_api_free(pl_jobs_api *a)
{
    if (!a)
        return;
    for (int i = 0; i < a->n_jobs; i++) {
        jobs_api_end_streams(a, a->jobs[i]);
        if (a->jobs[i]->forget)
            event_free(a->jobs[i]->forget);
        pl_job_free(a->jobs[i]->job);
        free(a->jobs[i]);
    }
    free(a->jobs);
    for (long i = 0; a->forgotten && i < FORGOTTEN_MAX; i++) {
        free(a->forgotten[i].id);
        free(a->forgotten[i].dir);
    }
    free(a->forgotten);
    pl_io_pool_free(a->io);
    free(a->root);
    free(a);
}

void pl_jobs_api_set_limits(pl_jobs_api *a, const pl_jobs_api_limits *l)
{
    a->lim = *l;
}
