/* jobs_metrics.c - the jobs API's part of GET /metrics: jobs by state,
 * questions by status, re-prompts, the three pools of the jobs'
 * conversations (pending, pre-departure, in flight) summed over running
 * jobs, and each served model's slots as its dispatch shares them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/jobs_api_internal.h"
#include "api/metrics.h"

/* elsewhere: claimed by another process sharing the experiment */
static const char *question_status[] = {"succeeded", "failed", "cancelled", "active",
                                        "waiting", "elsewhere"};
#define N_STATUS (int)(sizeof question_status / sizeof *question_status)

static void question_counts(pl_jobs_api *a, double out[N_STATUS], double *persisted)
{
    memset(out, 0, N_STATUS * sizeof *out);
    *persisted = 0;
    for (int i = 0; i < a->n_jobs; i++) {
        pl_job_progress p;
        pl_job_get_progress(a->jobs[i]->job, &p);
        out[0] += p.succeeded;
        out[1] += p.failed;
        out[2] += p.cancelled;
        out[3] += p.active;
        out[4] += p.waiting;
        out[5] += p.elsewhere;
        *persisted += p.persisted;
    }
}

static void jobs_by_state(pl_jobs_api *a, struct evbuffer *b)
{
    static const pl_job_state states[] = {PL_JOB_STARTING, PL_JOB_RUNNING, PL_JOB_COMPLETED,
                                          PL_JOB_CANCELLED, PL_JOB_ERROR};
    pl_prom_family(b, "parley:jobs", "gauge", "Jobs by state.");
    for (size_t s = 0; s < sizeof states / sizeof *states; s++) {
        int n = 0;
        for (int i = 0; i < a->n_jobs; i++)
            n += pl_job_get_state(a->jobs[i]->job) == states[s];
        char l[64];
        snprintf(l, sizeof l, "state=\"%s\"", pl_job_state_name(states[s]));
        pl_prom_sample(b, "parley:jobs", "", l, n);
    }
}

static void questions(pl_jobs_api *a, struct evbuffer *b)
{
    double c[N_STATUS], persisted;
    question_counts(a, c, &persisted);
    pl_prom_family(b, "parley:job_questions", "gauge",
                   "Questions (conversations) of all jobs by status.");
    for (int s = 0; s < N_STATUS; s++) {
        char l[64];
        snprintf(l, sizeof l, "status=\"%s\"", question_status[s]);
        pl_prom_sample(b, "parley:job_questions", "", l, c[s]);
    }
    pl_prom_family(b, "parley:job_questions_persisted", "gauge",
                   "Questions finished and written to disk.");
    pl_prom_sample(b, "parley:job_questions_persisted", "", NULL, persisted);
    long rp = 0;
    for (int i = 0; i < a->n_jobs; i++)
        rp += a->jobs[i]->reprompts;
    pl_prom_family(b, "parley:job_reprompts", "counter",
                   "Agent requests sent again after a reply failed validation.");
    pl_prom_sample(b, "parley:job_reprompts", "_total", NULL, (double)rp);
}

/* Sum the running jobs' pools: totals, and per model (pre-departure and in
 * flight are per model; pending is not). */
static void pools(pl_jobs_api *a, struct evbuffer *b)
{
    double tot[3] = {0, 0, 0};
    json_t *per_model = json_object();    /* name -> [pre_departure, in_flight] */
    for (int i = 0; i < a->n_jobs; i++) {
        if (pl_job_get_state(a->jobs[i]->job) != PL_JOB_RUNNING)
            continue;
        json_t *st = pl_job_status_json(a->jobs[i]->job, 0);
        json_t *p = json_object_get(st, "pools");
        if (!p) {
            json_decref(st);
            continue;
        }
        tot[0] += (double)json_integer_value(json_object_get(p, "pending"));
        tot[1] += (double)json_integer_value(json_object_get(p, "pre_departure"));
        tot[2] += (double)json_integer_value(json_object_get(p, "in_flight"));
        size_t k;
        json_t *m;
        json_array_foreach(json_object_get(p, "models"), k, m) {
            const char *name = json_string_value(json_object_get(m, "model"));
            json_t *acc = json_object_get(per_model, name ? name : "");
            if (!acc) {
                acc = json_pack("[i,i]", 0, 0);
                json_object_set_new(per_model, name ? name : "", acc);
            }
            json_array_set_new(acc, 0, json_integer(
                json_integer_value(json_array_get(acc, 0)) +
                json_integer_value(json_object_get(m, "pre_departure"))));
            json_array_set_new(acc, 1, json_integer(
                json_integer_value(json_array_get(acc, 1)) +
                json_integer_value(json_object_get(m, "in_flight"))));
        }
        json_decref(st);
    }
    static const char *names[3] = {"pending", "pre_departure", "in_flight"};
    pl_prom_family(b, "parley:conversation_pool_requests", "gauge",
                   "Agent requests in the conversation scheduler's pools (running jobs).");
    for (int i = 0; i < 3; i++) {
        char l[64];
        snprintf(l, sizeof l, "pool=\"%s\"", names[i]);
        pl_prom_sample(b, "parley:conversation_pool_requests", "", l, tot[i]);
    }
    pl_prom_family(b, "parley:conversation_pool_model_requests", "gauge",
                   "Agent requests per model in pre-departure and in flight (running jobs).");
    const char *name;
    json_t *acc;
    json_object_foreach(per_model, name, acc) {
        char esc[256], l[384];
        pl_prom_escape(esc, sizeof esc, name);
        for (int i = 0; i < 2; i++) {
            snprintf(l, sizeof l, "model_name=\"%s\",pool=\"%s\"", esc, names[i + 1]);
            pl_prom_sample(b, "parley:conversation_pool_model_requests", "", l,
                           (double)json_integer_value(json_array_get(acc, i)));
        }
    }
    json_decref(per_model);
}

/* Each served model's slots as jobs and OpenAI clients share them. */
static void slots(pl_jobs_api *a, struct evbuffer *b)
{
    static const char *names[3] = {"parley:model_slots_in_flight",
                                   "parley:model_slots_in_flight",
                                   "parley:model_slots_interactive_reserve"};
    static const char *keys[3] = {"jobs_in_flight", "interactive_in_flight",
                                  "interactive_reserve"};
    pl_prom_family(b, names[0], "gauge",
                   "Requests in flight on the model, by client: jobs or interactive (OpenAI API).");
    int n = pl_server_n_models(a->srv);
    json_t **g = calloc((size_t)(n ? n : 1), sizeof *g);
    for (int i = 0; g && i < n; i++)
        g[i] = jobs_api_model_slots(pl_server_model(a->srv, i));
    for (int k = 0; k < 3 && g; k++) {
        if (k == 2)
            pl_prom_family(b, names[2], "gauge", "Slots jobs leave free for OpenAI requests.");
        for (int i = 0; i < n; i++) {
            char esc[256], l[384];
            const char *m = json_string_value(json_object_get(g[i], "model"));
            pl_prom_escape(esc, sizeof esc, m ? m : "");
            if (k < 2)
                snprintf(l, sizeof l, "model_name=\"%s\",client=\"%s\"", esc,
                         k ? "interactive" : "jobs");
            else
                snprintf(l, sizeof l, "model_name=\"%s\"", esc);
            pl_prom_sample(b, names[k], "", l,
                           (double)json_integer_value(json_object_get(g[i], keys[k])));
        }
    }
    for (int i = 0; g && i < n; i++)
        json_decref(g[i]);
    free(g);
}

void jobs_api_metrics(pl_server *s, struct evbuffer *out, void *ud)
{
    pl_jobs_api *a = ud;
    jobs_by_state(a, out);
    questions(a, out);
    pools(a, out);
    slots(a, out);
}
