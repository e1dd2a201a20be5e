/* cmd_run.c - `parley run JOB.yaml`: run a conversation job to completion
 * in-process, with a progress bar (or --live pool view) on stderr. Ctrl-C
 * cancels gracefully (finished transcripts are kept, a re-run resumes); a
 * second Ctrl-C exits at once.
 *
 * Exit status: 0 every question succeeded; 1 the run finished but some
 * conversations failed (their errors are in the manifest; a re-run retries
 * them); 2 a usage or job-file error, or the experiment holds results of
 * another spec (--resume-changed); 3 the run failed (the output could not
 * be written, e.g. a full disk, or a model could not start); 130
 * interrupted (finished work is kept; a re-run resumes). */
#include "src/cmd_run.h"

#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "schedulers/dispatch.h"
#include "src/jobs/job_constraints.h"
#include "src/jobs/job_spec.h"
#include "src/jobs/jobs.h"
#include "src/base/log.h"
#include "src/config.h"
#include "src/models_init.h"
#include "src/options.h"
#include "src/run_view.h"
#include "src/base/yaml_load.h"

typedef struct run_ctx {
    struct event_base *base;
    pl_job *job;
    struct timespec t0, t1;      /* job start and finish (makespan) */
    bool live;
    int sigints;
    pl_run_view view;            /* the progress view on stderr */
    char **served;               /* what serves each model (fingerprint) */
} run_ctx;

/* Options `parley run` takes: its own, the model options, logging. */
#define RUN_SCOPE (PL_OPT_RUN | PL_OPT_MODEL)

typedef struct run_args {
    const char *job_file;
    /** Defaults, environment and command line: run's own options (output,
     *  live, progress_interval, stats, strategy, kv_eviction, resume_changed)
     *  are read here; each model's options are read again over its
     *  definition. */
    pl_opts cli;
    int argc;
    char **argv;
    pl_linemap lines;            /* the job file's key paths -> lines */
} run_args;

static void run_usage(FILE *f)
{
    fprintf(f, "usage: parley run JOB.yaml [--backend mock] [--output DIR] [--live]\n"
               "                  [--strategy parley|fcfs|naive] [options]\n\n"
               "run options:\n");
    pl_opts_print_help(f, PL_OPT_RUN);
    fprintf(f, "\nmodel options (apply to every model of the job; the job file's per-model\n"
               "options come first, the command line wins):\n");
    pl_opts_print_help(f, PL_OPT_MODEL);
}

/* Read the command line once: run's options, the model options checked,
 * and the one positional argument, the job file. Returns 0, 1 after
 * --help, -1 on error (printed). */
static int parse_cli(run_args *ra, int argc, char **argv)
{
    char err[512];
    char *pos[4];
    int npos = 0;
    ra->argc = argc;
    ra->argv = argv;
    int rc = pl_opts_init_run(&ra->cli, err, sizeof err);
    if (rc == 0)
        rc = pl_opts_parse_scope(&ra->cli, RUN_SCOPE, argc, argv, 2, pos, 4, &npos, err,
                                 sizeof err);
    if (rc == 1) {
        run_usage(stdout);
        return 1;
    }
    if (rc < 0) {
        fprintf(stderr, "parley: %s\n", err);
        return -1;
    }
    if (npos != 1) {
        run_usage(stderr);
        return -1;
    }
    ra->job_file = pos[0];
    pl_opts_apply_log(&ra->cli);
    return 0;
}

static void print_problems(const char *file, const pl_linemap *lines,
                           const pl_spec_problems *p)
{
    for (int i = 0; i < p->n; i++) {
        int line = pl_linemap_line(lines, p->v[i].path);
        if (line > 0)
            fprintf(stderr, "%s:%d: %s: %s\n", file, line, p->v[i].path, p->v[i].message);
        else
            fprintf(stderr, "%s: %s: %s\n", file, p->v[i].path, p->v[i].message);
    }
    fprintf(stderr, "parley: %d problem%s in %s\n", p->n, p->n == 1 ? "" : "s", file);
}

/* Parse the job file; *lines (the caller frees it) maps key paths to lines
 * for the model reader's errors. */
static int load_spec(const char *file, pl_job_spec *spec, pl_linemap *lines_out)
{
    char err[512];
    pl_linemap lines = {0};
    json_t *root = pl_yaml_load_file(file, &lines, err, sizeof err);
    if (!root) {
        fprintf(stderr, "parley: %s\n", err);
        return -1;
    }
    char *dup = strdup(file);
    pl_job_spec_source src = {.base_dir = dirname(dup)};
    pl_spec_problems probs = {0};
    int rc = pl_job_spec_parse(root, &src, spec, &probs);
    if (rc < 0)
        print_problems(file, &lines, &probs);
    pl_spec_problems_free(&probs);
    free(dup);
    json_decref(root);
    *lines_out = lines;
    return rc;
}

/* A model's options: defaults and environment, the job file's model
 * definition read by the same reader as `serve`'s config (so
 * max_num_seqs_upper_bound reaches the engine, vLLM-only keys warn and a
 * misspelt key is an error with FILE:LINE), then the command line. */
static int model_opts(const run_args *ra, const pl_job_spec *s, const pl_job_model *m,
                      pl_opts *o)
{
    char err[700], base[300];
    char *pos[4];
    int npos;
    if (pl_opts_init_run(o, err, sizeof err) < 0) {
        fprintf(stderr, "parley: %s\n", err);
        return -1;
    }
    snprintf(base, sizeof base, "%s.%s",
             json_object_get(s->source, "models") ? "models" : "model_definitions", m->name);
    if (pl_config_model(ra->job_file, &ra->lines, base, m->options, NULL, o, err,
                        sizeof err) < 0)
        goto fail;
    char *file_model = strdup(o->model ? o->model : "");
    if (!file_model || pl_opts_parse_scope(o, RUN_SCOPE, ra->argc, ra->argv, 2, pos, 4, &npos,
                                           err, sizeof err) != 0) {
        free(file_model);
        goto fail;
    }
    bool cli_model = strcmp(file_model, o->model ? o->model : "") != 0;
    free(file_model);
    if (pl_config_model_check(ra->job_file, &ra->lines, base, m->options, o, cli_model, err,
                              sizeof err) < 0)
        goto fail;
    return 0;
fail:
    fprintf(stderr, "parley: %s\n", err);
    pl_opts_free(o);
    return -1;
}

/* --upstream: the job's model is served by the upstreams listing its name,
 * or by the only model the upstreams list. */
static pl_backend *open_upstream(struct event_base *base, const pl_opts *o, const char *name,
                                 char *err, size_t errlen)
{
    pl_upstream_model *um;
    int n;
    if (pl_upstreams_discover(o, &um, &n, err, errlen) < 0)
        return NULL;
    int pick = n == 1 ? 0 : -1;
    for (int i = 0; i < n; i++)
        if (!strcmp(um[i].name, name))
            pick = i;
    pl_backend *b = NULL;
    if (pick < 0)
        snprintf(err, errlen, "no --upstream lists a model named '%s' (and they list "
                 "%d models, so none is picked for it)", name, n);
    else
        b = pl_models_open_remote(base, o, 0, name, um[pick].urls, um[pick].name, err, errlen);
    pl_upstreams_free(um, n);
    return b;
}

/* What serves a model, for the spec's fingerprint: the same weights (or
 * mock mode and seed, or upstream model) give the same string. */
static char *served_name(const pl_opts *o, const pl_backend *b)
{
    const char *k = b->ops->kind ? b->ops->kind : "?";
    const char *file = o->model && o->model[0] ? strrchr(o->model, '/') : NULL;
    char buf[600];
    if (!strcmp(k, "mock"))
        snprintf(buf, sizeof buf, "mock:%s:%d", o->mock_mode ? o->mock_mode : "", o->mock_seed);
    else if (!strcmp(k, "cpu") || !strcmp(k, "cuda"))
        snprintf(buf, sizeof buf, "engine:%s", file ? file + 1
                 : o->model && o->model[0] ? o->model : "default");
    else
        snprintf(buf, sizeof buf, "%s:%s", k, b->model ? b->model : "");
    return strdup(buf);
}

static int open_backends(run_ctx *rc, const run_args *ra, const pl_job_spec *s,
                         pl_backend **bs)
{
    for (int m = 0; m < s->n_models; m++) {
        pl_opts o;
        char err[512];
        if (model_opts(ra, s, &s->models[m], &o) < 0)
            return -2;          /* a bad job file: exit 2, like spec errors */
        if (o.upstream[0])
            bs[m] = open_upstream(rc->base, &o, s->models[m].name, err, sizeof err);
        else
            bs[m] = pl_models_open(rc->base, &o, s->models[m].name, err, sizeof err);
        if (bs[m])
            rc->served[m] = served_name(&o, bs[m]);
        pl_opts_free(&o);
        if (!bs[m]) {
            fprintf(stderr, "parley: model '%s': %s\n", s->models[m].name, err);
            return -1;
        }
    }
    return 0;
}

/* A constrained job on a model that cannot enforce it stops here, with
 * the spec's other problems' format (FILE:LINE). */
static int check_constraints(const run_args *ra, const pl_job_spec *s, pl_backend **bs)
{
    pl_spec_problems p = {0};
    int rc = pl_job_check_constraints(s, bs, &p);
    if (rc < 0)
        print_problems(ra->job_file, &ra->lines, &p);
    pl_spec_problems_free(&p);
    return rc;
}

/* ---- the loop ---- */

static void on_sigint(evutil_socket_t sig, short what, void *arg)
{
    run_ctx *rc = arg;
    if (++rc->sigints > 1) {
        pl_run_view_end(&rc->view);
        fprintf(stderr, "parley: interrupted again: exiting now (re-run to resume)\n");
        _exit(130);
    }
    pl_run_view_end(&rc->view);
    fprintf(stderr, "parley: interrupted: stopping; finished transcripts are kept "
                    "(Ctrl-C again to exit at once)\n");
    pl_job_cancel(rc->job);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    run_ctx *rc = arg;
    if (rc->sigints == 0)
        pl_run_view_draw(&rc->view, rc->job);
}

static void on_finished(void *ud, pl_job *j)
{
    run_ctx *rc = ud;
    clock_gettime(CLOCK_MONOTONIC, &rc->t1);
    event_base_loopexit(rc->base, NULL);
}

static json_int_t geti(json_t *o, const char *a, const char *b)
{
    json_t *x = json_object_get(o, a);
    return json_integer_value(b ? json_object_get(x, b) : x);
}

/* The in-process engines' counters summed (issue 17's report): steps,
 * rows per step, KV evictions, preemptions, busy = execute time over the
 * makespan. null when no backend is an engine. */
static json_t *engine_summary(json_t *backends, double makespan_ms)
{
    json_int_t steps = 0, rows = 0, ev = 0, pre = 0, done = 0, needev = 0, defer = 0;
    double exec = 0;
    bool any = false;
    size_t i;
    json_t *b;
    json_array_foreach(backends, i, b) {
        if (!json_is_integer(json_object_get(b, "steps")))
            continue;
        any = true;
        steps += geti(b, "steps", NULL);
        rows += geti(b, "rows", NULL);
        pre += geti(b, "preemptions", NULL);
        ev += geti(b, "kv", "evictions");
        done += geti(b, "kv", "done_released");
        needev += geti(b, "kv", "need_evictions");
        defer += geti(b, "kv", "share_deferrals");
        exec += json_number_value(json_object_get(json_object_get(b, "timing"), "execute_ms"));
    }
    if (!any)
        return json_null();
    return json_pack("{s:I, s:f, s:I, s:I, s:I, s:I, s:I, s:f}", "steps", steps, "rows_per_step",
                     steps ? (double)rows / (double)steps : 0.0, "evictions", ev,
                     "preemptions", pre, "done_released", done, "need_evictions", needev,
                     "share_deferrals", defer,
                     "busy_fraction", makespan_ms > 0 ? exec / makespan_ms : 0.0);
}

/* --stats: what a benchmark needs to compare dispatch strategies. */
static void write_stats(const run_ctx *rc, const run_args *ra, pl_backend **bs,
                        pl_dispatch **ds, int n_models)
{
    double ms = (double)(rc->t1.tv_sec - rc->t0.tv_sec) * 1e3 +
                (double)(rc->t1.tv_nsec - rc->t0.tv_nsec) / 1e6;
    pl_job_progress p;
    pl_job_get_progress(rc->job, &p);
    json_t *o = json_pack("{s:s, s:f, s:i, s:i, s:i, s:i, s:i, s:i, s:s?}", "strategy",
                          pl_dispatch_policy_name((pl_dispatch_policy)ra->cli.strategy),
                          "makespan_ms", ms,
                          "questions", p.total, "succeeded", p.succeeded, "failed", p.failed,
                          "answered", p.answered, "correct", p.correct, "reprompts", p.reprompts,
                          "output", pl_job_dir(rc->job));
    json_t *arr = json_array();
    for (int m = 0; o && arr && m < n_models; m++)
        json_array_append_new(arr, bs[m]->ops->stats ? bs[m]->ops->stats(bs[m]) : json_null());
    if (o && arr)
        json_object_set_new(o, "backends", arr);
    json_t *adm = json_array();  /* how each model's capacity was decided */
    for (int m = 0; o && adm && m < n_models; m++)
        json_array_append_new(adm, pl_backend_admission_json(ds[m]));
    if (o && adm)
        json_object_set_new(o, "admission", adm);
    if (o) {
        /* conversations generated by this process (not earlier, not by
         * another process sharing the experiment) */
        json_object_set_new(o, "conversations_here",
                            json_integer(p.succeeded + p.failed - p.skipped - p.done_elsewhere));
        json_object_set_new(o, "cache", json_pack("{s:I, s:I}", "round2plus_prompt_tokens",
                                                  (json_int_t)p.round2plus_prompt_tokens,
                                                  "round2plus_cached_tokens",
                                                  (json_int_t)p.round2plus_cached_tokens));
        json_object_set_new(o, "engine", engine_summary(arr, ms));
        json_object_set_new(o, "kv_eviction", json_string(ra->cli.kv_eviction ? "lru"
                                                                               : "next-need"));
    }
    if (!o || json_dump_file(o, ra->cli.stats, JSON_INDENT(1)) < 0)
        fprintf(stderr, "parley: cannot write %s\n", ra->cli.stats);
    json_decref(o);
}

static void print_summary(pl_job *j)
{
    pl_job_progress p;
    pl_job_get_progress(j, &p);
    const char *dir = pl_job_dir(j);
    if (!dir) {                  /* it never started: only why */
        fprintf(stderr, "parley: %s\n", pl_job_error(j) ? pl_job_error(j) : "not started");
        return;
    }
    fprintf(stderr, "%s: %s: %d/%d succeeded (%d from an earlier run), %d failed, "
            "%d cancelled, %d not started", pl_job_get_spec(j)->experiment,
            pl_job_state_name(pl_job_get_state(j)), p.succeeded, p.total, p.skipped, p.failed,
            p.cancelled, p.total - p.succeeded - p.failed - p.cancelled - p.active);
    if (p.done_elsewhere || p.elsewhere)
        fprintf(stderr, " (%d by other processes, %d still running there)", p.done_elsewhere,
                p.elsewhere);
    if (p.write_failed)
        fprintf(stderr, "; %d results could not be recorded (a re-run redoes what is missing)",
                p.write_failed);
    fprintf(stderr, "; accuracy %d/%d correct/answered over the experiment (this run %d/%d), "
            "%d re-prompts%s%s\n", p.correct, p.answered, p.run_correct, p.run_answered,
            p.reprompts, dir ? "; output: " : "", dir ? dir : "");
    if (pl_job_error(j))
        fprintf(stderr, "parley: %s\n", pl_job_error(j));
}

/* The exit status (the file comment) and, for a changed spec, the ways on. */
static int exit_status(pl_job *j)
{
    pl_job_progress p;
    pl_job_get_progress(j, &p);
    const char *code = pl_job_error_code(j);
    switch (pl_job_get_state(j)) {
    case PL_JOB_COMPLETED:
        return p.succeeded == p.total ? 0 : 1;
    case PL_JOB_CANCELLED:
        return 130;
    default:
        break;
    }
    if (code && !strcmp(code, "spec_changed")) {
        fprintf(stderr, "parley: to keep both, start a new experiment (another `experiment:` "
                "name, or --output elsewhere); to resume this one on purpose, mixing results "
                "(index lines carry their spec_fingerprint), add --resume-changed to the "
                "command\n");
        return 2;
    }
    return 3;
}

/* Each model's admission point (no interactive reserve: no OpenAI
 * clients here); kept here so that --stats can show how it bounded the
 * job. NULL on OOM. */
static pl_dispatch **open_dispatches(pl_backend **bs, int n)
{
    pl_dispatch **ds = calloc((size_t)n, sizeof *ds);
    for (int m = 0; ds && m < n; m++) {
        if (!(ds[m] = pl_backend_dispatch_new(bs[m], 0))) {
            while (m-- > 0)
                pl_dispatch_free(ds[m]);
            free(ds);
            return NULL;
        }
    }
    return ds;
}

static void free_dispatches(pl_dispatch **ds, int n)
{
    for (int m = 0; ds && m < n; m++)
        pl_dispatch_free(ds[m]);
    free(ds);
}

static int run_job(run_ctx *rc, const run_args *ra, pl_job_spec *spec, pl_backend **bs)
{
    int n_models = spec->n_models;
    pl_dispatch **ds = open_dispatches(bs, n_models);
    pl_io_pool *io = ds ? pl_io_pool_new(rc->base, 2) : NULL;
    if (!io) {
        free_dispatches(ds, n_models);
        return 3;
    }
    const char *output = ra->cli.output[0] ? ra->cli.output : NULL;
    if (output) {
        free(spec->output_dir);
        spec->output_dir = NULL;
    }
    pl_job_opts jo = {.base = rc->base, .io = io, .id = "run", .output_root =
                      output ? output : "output", .backends = bs, .dispatch = ds,
                      .policy = ra->cli.strategy, .no_retention_hints = ra->cli.kv_eviction == 1,
                      .served = (const char *const *)rc->served,
                      .resume_changed = ra->cli.resume_changed,
                      .on_finished = on_finished, .ud = rc};
    char err[256];
    rc->job = pl_job_new(spec, &jo, err, sizeof err);
    if (!rc->job) {
        fprintf(stderr, "parley: %s\n", err);
        pl_io_pool_free(io);
        free_dispatches(ds, n_models);
        return 3;
    }
    struct event *sig = evsignal_new(rc->base, SIGINT, on_sigint, rc);
    struct event *sigt = evsignal_new(rc->base, SIGTERM, on_sigint, rc);
    struct event *tick = event_new(rc->base, -1, EV_PERSIST, on_tick, rc);
    struct timeval tv = {0, 200 * 1000};
    evsignal_add(sig, NULL);
    evsignal_add(sigt, NULL);
    event_add(tick, &tv);
    pl_run_view_begin(&rc->view, stderr, rc->live, ra->cli.progress_interval);
    int status = 3;
    clock_gettime(CLOCK_MONOTONIC, &rc->t0);
    rc->t1 = rc->t0;
    if (pl_job_start(rc->job) == 0)
        event_base_dispatch(rc->base);
    pl_run_view_end(&rc->view);
    print_summary(rc->job);
    if (ra->cli.stats[0])
        write_stats(rc, ra, bs, ds, n_models);
    status = exit_status(rc->job);
    event_free(tick);
    event_free(sig);
    event_free(sigt);
    pl_job_free(rc->job);
    pl_io_pool_free(io);
    free_dispatches(ds, n_models);
    return status;
}

int pl_cmd_run(int argc, char **argv)
{
    run_args ra = {0};
    run_ctx rc = {0};
    pl_job_spec spec = {0};
    pl_backend **bs = NULL;
    int status = 2;
    int prc = parse_cli(&ra, argc, argv);
    if (prc != 0) {
        pl_opts_free(&ra.cli);
        return prc == 1 ? 0 : 2;
    }
    if (load_spec(ra.job_file, &spec, &ra.lines) < 0)
        goto done;
    signal(SIGPIPE, SIG_IGN);
    evthread_use_pthreads();
    rc.base = event_base_new();
    rc.live = ra.cli.live;
    bs = calloc((size_t)spec.n_models, sizeof *bs);
    rc.served = calloc((size_t)spec.n_models, sizeof *rc.served);
    int n_models = spec.n_models;
    int orc = rc.base && bs && rc.served ? open_backends(&rc, &ra, &spec, bs) : -1;
    if (orc == 0 && check_constraints(&ra, &spec, bs) < 0)
        orc = -2;
    if (orc < 0) {
        pl_job_spec_free(&spec);
        status = orc == -2 ? 2 : 3;
        goto cleanup;
    }
    status = run_job(&rc, &ra, &spec, bs);
cleanup:
    for (int m = 0; bs && m < n_models; m++)
        pl_backend_free(bs[m]);
    for (int m = 0; rc.served && m < n_models; m++)
        free(rc.served[m]);
    free(rc.served);
    free(bs);
    if (rc.base)
        event_base_free(rc.base);
done:
    pl_linemap_free(&ra.lines);
    pl_opts_free(&ra.cli);
    return status;
}
