/* cmd_serve.c - `parley serve`: load the models and run the HTTP server. */
#include "src/cmd_serve.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "api/dashboard.h"
#include "api/info.h"
#include "api/jobs_api.h"
#include "api/metrics.h"
#include "api/oai_chat.h"
#include "api/server.h"
#include "src/config.h"
#include "src/base/log.h"
#include "src/models_init.h"

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    pl_info("signal %d: shutting down", (int)sig);
    event_base_loopexit(arg, NULL);
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

int pl_cmd_serve(pl_opts *o, const pl_config *cfg)
{
    int rc = 1;
    signal(SIGPIPE, SIG_IGN);
    evthread_use_pthreads();
    struct event_base *base = event_base_new();
    pl_server_opts so = {.max_body_bytes = o->max_body_bytes,
                         .stream_buffer_bytes = o->stream_buffer_bytes,
                         .access_log = o->access_log};
    pl_server *srv = pl_server_new(base, &so);
    struct event *sigint = evsignal_new(base, SIGINT, on_signal, base);
    struct event *sigterm = evsignal_new(base, SIGTERM, on_signal, base);
    pl_jobs_api *jobs = NULL;
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
    jobs = pl_jobs_api_register(srv, o->jobs_dir);
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
    pl_jobs_api_free(jobs);
    pl_server_free(srv);
    event_base_free(base);
    return rc;
}
