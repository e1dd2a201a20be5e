/* cmd_serve.c - `parley serve`: load the models and run the HTTP server. */
#include "src/cmd_serve.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/resource.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "api/anthropic.h"
#include "api/oai_embeddings.h"
#include "api/dashboard.h"
#include "api/info.h"
#include "api/jobs_api.h"
#include "api/metrics.h"
#include "api/oai_chat.h"
#include "api/oai_responses.h"
#include "api/server.h"
#include "src/config.h"
#include "src/base/log.h"
#include "src/models_init.h"

/* Graceful shutdown: the first SIGTERM/SIGINT closes the listening socket
 * and lets the requests in flight finish (their clients get whole
 * replies), for up to --shutdown-timeout seconds; a second signal, or the
 * deadline, stops the loop at once. Jobs are then cancelled by
 * pl_jobs_api_free, which writes their state out whole. */
typedef struct shutdown_ctx {
    struct event_base *base;
    pl_server *srv;
    struct event *tick;
    int timeout_s, waited_ms;
} shutdown_ctx;

static void on_drain_tick(evutil_socket_t fd, short what, void *arg)
{
    shutdown_ctx *d = arg;
    int n = pl_server_n_calls(d->srv);
    d->waited_ms += 20;
    /* Requests that have ended may still have reply bytes in the loop's
     * buffers: leaving now would cut them off (a client got nothing). */
    if ((n > 0 || pl_server_output_pending(d->srv)) && d->waited_ms < d->timeout_s * 1000)
        return;
    if (n > 0)
        pl_warn("shutdown: %d requests still running after %d s: closing them", n,
                d->timeout_s);
    event_base_loopexit(d->base, NULL);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    shutdown_ctx *d = arg;
    if (!d->srv || d->tick) {
        pl_info("signal %d: stopping now", (int)sig);
        event_base_loopexit(d->base, NULL);
        return;
    }
    pl_info("signal %d: shutting down: no new connections, %d requests to finish "
            "(up to %d s)", (int)sig, pl_server_n_calls(d->srv), d->timeout_s);
    pl_server_stop_accepting(d->srv);
    d->tick = event_new(d->base, -1, EV_PERSIST, on_drain_tick, d);
    struct timeval tv = {0, 20000};
    if (!d->tick || event_add(d->tick, &tv) < 0)
        event_base_loopexit(d->base, NULL);
}

/* Every connection takes a descriptor, and another when a remote backend
 * carries it upstream: raise the soft RLIMIT_NOFILE to the hard limit, and
 * keep --max-connections within what that leaves after the process's own
 * files (a reserve). Accepting also pauses when descriptors run out
 * (server.c); this keeps that rare. */
static void fit_descriptors(pl_opts *o)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return;
    if (rl.rlim_cur < rl.rlim_max) {
        struct rlimit want = {rl.rlim_max, rl.rlim_max};
        if (want.rlim_cur == RLIM_INFINITY || want.rlim_cur > (1u << 20))
            want.rlim_cur = 1u << 20;    /* Linux's default nr_open */
        if (setrlimit(RLIMIT_NOFILE, &want) == 0)
            rl = want;
    }
    if (rl.rlim_cur == RLIM_INFINITY)
        return;
    long lim = (long)rl.rlim_cur, reserve = lim < 256 ? lim / 4 : 64;
    long fit = (lim - reserve) / 2;
    if (o->max_connections > fit) {
        pl_warn("--max-connections %d lowered to %ld: the open-files limit is %ld (ulimit -n), "
                "and each connection may hold two", o->max_connections, fit < 1 ? 1 : fit, lim);
        o->max_connections = fit < 1 ? 1 : (int)fit;
    }
}

/* libevent's own messages, through parley's log (its format and level). */
static void libevent_log(int severity, const char *msg)
{
    pl_log(severity >= EVENT_LOG_ERR ? PL_LOG_ERROR
           : severity == EVENT_LOG_WARN ? PL_LOG_WARN : PL_LOG_DEBUG, "libevent: %s", msg);
}

/* --upstream: every model the upstreams list, their URLs as replicas. */
static int add_upstream_models(pl_server *srv, struct event_base *base, const pl_opts *o)
{
    char err[512];
    pl_upstream_model *um;
    int n;
    if (pl_upstreams_discover(o, &um, &n, err, sizeof err) < 0) {
        fprintf(stderr, "parley: %s\n", err);
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        pl_backend *b = pl_models_open_remote(base, o, 0, um[i].name, um[i].urls, um[i].name,
                                              err, sizeof err);
        if (!b || pl_server_add_model(srv, um[i].name, b) < 0) {
            fprintf(stderr, "parley: model '%s': %s\n", um[i].name, b ? "duplicate name" : err);
            pl_backend_free(b);
            rc = -1;
        }
    }
    pl_upstreams_free(um, n);
    return rc;
}

static int add_models(pl_server *srv, struct event_base *base, const pl_opts *o,
                      const pl_config *cfg)
{
    char err[512];
    if (o->upstream[0] && add_upstream_models(srv, base, o) < 0)
        return -1;
    if (cfg->n_models == 0 && o->upstream[0])
        return 0;
    if (cfg->n_models == 0) {
        const char *name = o->served_model_name[0] ? o->served_model_name : NULL;
        pl_backend *b = pl_models_open(base, o, name, err, sizeof err);
        if (!b || pl_server_add_model(srv, b->model, b) < 0) {
            fprintf(stderr, "parley: %s\n", b ? "duplicate model name" : err);
            pl_backend_free(b);
            return -1;
        }
        return 0;
    }
    for (int i = 0; i < cfg->n_models; i++) {
        const pl_model_cfg *m = &cfg->models[i];
        pl_backend *b = pl_models_open(base, &m->opts, m->name, err, sizeof err);
        if (!b || pl_server_add_model(srv, m->name, b) < 0) {
            fprintf(stderr, "parley: model '%s': %s\n", m->name, b ? "duplicate name" : err);
            pl_backend_free(b);
            return -1;
        }
    }
    return 0;
}

typedef struct key_list {
    char **v;
    int n;
} key_list;

static int keys_add(key_list *k, const char *s, size_t n)
{
    char **v = realloc(k->v, (size_t)(k->n + 1) * sizeof *v);
    if (!v)
        return -1;
    k->v = v;
    if (!(v[k->n] = strndup(s, n)))
        return -1;
    k->n++;
    return 0;
}

static void keys_free(key_list *k)
{
    for (int i = 0; i < k->n; i++)
        free(k->v[i]);
    free(k->v);
}

/* Keys from --api-key / PARLEY_API_KEY ('\n'-joined) and --api-key-file. */
static int load_keys(const pl_opts *o, key_list *k)
{
    for (const char *p = o->api_key; p && *p;) {
        size_t n = strcspn(p, "\n");
        if (n && keys_add(k, p, n) < 0)
            return -1;
        p += n + (p[n] == '\n');
    }
    if (!o->api_key_file || !*o->api_key_file)
        return 0;
    FILE *f = fopen(o->api_key_file, "r");
    if (!f) {
        fprintf(stderr, "parley: --api-key-file %s: %s\n", o->api_key_file, strerror(errno));
        return -1;
    }
    char line[4096];
    int rc = 0, lineno = 0, before = k->n;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        size_t n = strcspn(line, "\r\n");
        line[n] = '\0';
        const char *s = line + strspn(line, " \t");
        n = strlen(s);
        while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
            n--;
        if (!n || *s == '#')
            continue;
        if (memchr(s, ' ', n) || memchr(s, '\t', n)) {
            fprintf(stderr, "parley: %s:%d: an API key cannot contain spaces\n",
                    o->api_key_file, lineno);
            rc = -1;
        } else {
            rc = keys_add(k, s, n);
        }
    }
    fclose(f);
    if (rc == 0 && k->n == before) {
        fprintf(stderr, "parley: --api-key-file %s: no keys in the file\n", o->api_key_file);
        rc = -1;
    }
    return rc;
}

int pl_cmd_serve(pl_opts *o, const pl_config *cfg)
{
    int rc = 1;
    signal(SIGPIPE, SIG_IGN);
    event_set_log_callback(libevent_log);
    fit_descriptors(o);
    evthread_use_pthreads();
    struct event_base *base = event_base_new();
    key_list keys = {0};
    if (load_keys(o, &keys) < 0) {
        keys_free(&keys);
        event_base_free(base);
        return 2;
    }
    pl_server_opts so = {.max_body_bytes = o->max_body_bytes,
                         .max_embed_inputs = o->max_embed_inputs,
                         .interactive_reserve = o->interactive_reserve,
                         .stream_buffer_bytes = o->stream_buffer_bytes,
                         .access_log = o->access_log,
                         .max_header_bytes = o->max_header_bytes,
                         .max_upload_bytes = o->max_job_bytes > o->max_body_bytes
                                                 ? o->max_job_bytes : o->max_body_bytes,
                         .idle_timeout_s = o->idle_timeout,
                         .header_timeout_s = o->header_timeout,
                         .body_timeout_s = o->body_timeout,
                         .max_connections = o->max_connections,
                         .stream_stall_timeout_s = o->stream_stall_timeout,
                         .api_keys = (const char *const *)keys.v,
                         .n_api_keys = keys.n,
                         .allowed_origins = o->allowed_origins,
                         .allowed_hosts = o->allowed_hosts,
                         .rate_limit_rpm = o->rate_limit_rpm,
                         .rate_limit_tpm = o->rate_limit_tpm};
    pl_server *srv = pl_server_new(base, &so);
    keys_free(&keys);
    shutdown_ctx sd = {.base = base, .srv = srv, .timeout_s = o->shutdown_timeout};
    struct event *sigint = evsignal_new(base, SIGINT, on_signal, &sd);
    struct event *sigterm = evsignal_new(base, SIGTERM, on_signal, &sd);
    pl_jobs_api *jobs = NULL;
    pl_responses_api *responses = NULL;
    if (!srv)
        goto done;
    if (add_models(srv, base, o, cfg) < 0) {
        rc = 2;                  /* a model that cannot be served is bad input */
        goto done;
    }
    pl_info_register(srv);
    pl_metrics_register(srv);
    pl_dashboard_register(srv);
    pl_oai_chat_register(srv);
    pl_anthropic_register(srv);
    pl_oai_embeddings_register(srv);
    responses = pl_responses_register(srv);
    jobs = pl_jobs_api_register(srv, o->jobs_dir);
    if (jobs)
        pl_jobs_api_set_limits(jobs, &(pl_jobs_api_limits){
                                         .retention_s = o->job_retention,
                                         .max_questions = o->max_job_questions,
                                         .max_bytes = o->max_job_bytes});
    int port = o->port;
    if (pl_server_listen(srv, o->host, &port) < 0) {
        fprintf(stderr, "parley: cannot listen on %s:%d\n", o->host, o->port);
        goto done;
    }
    evsignal_add(sigint, NULL);
    evsignal_add(sigterm, NULL);
    printf("parley listening on http://%s:%d\n", o->host, port);
    fflush(stdout);
    event_base_dispatch(base);
    rc = 0;
done:
    if (sigint)
        event_free(sigint);
    if (sigterm)
        event_free(sigterm);
    if (sd.tick)
        event_free(sd.tick);
    pl_jobs_api_free(jobs);
    pl_server_free(srv);
    pl_responses_api_free(responses);
    event_base_free(base);
    return rc;
}
