/* server.c - the evhttp front: listening, routing, 404/405, limits. */
#include "api/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "api/access_log.h"
#include "api/respond.h"
#include "src/base/log.h"

#define MAX_ROUTES 64
#define MAX_STATUS_HOOKS 8

typedef struct route {
    char *pattern;
    size_t prefix_len;           /* > 0: prefix match of this many bytes */
    unsigned methods;
    pl_route_fn fn;
    void *ud;
} route;

struct pl_server {
    struct event_base *base;
    struct evhttp *http;
    pl_server_opts o;
    pl_model_entry *models;
    int n_models;
    route routes[MAX_ROUTES];
    int n_routes;
    struct { pl_status_fn fn; void *ud; } hooks[MAX_STATUS_HOOKS];
    int n_hooks;
    struct { pl_metrics_fn fn; void *ud; } mhooks[MAX_STATUS_HOOKS];
    int n_mhooks;
    uint64_t id_counter;
    uint64_t id_salt;
};

static unsigned method_bit(enum evhttp_cmd_type t)
{
    switch (t) {
    case EVHTTP_REQ_GET: return PL_HTTP_GET;
    case EVHTTP_REQ_HEAD: return PL_HTTP_GET;
    case EVHTTP_REQ_POST: return PL_HTTP_POST;
    case EVHTTP_REQ_DELETE: return PL_HTTP_DELETE;
    default: return 0x80000000u;
    }
}

static void allow_header(struct evhttp_request *req, unsigned methods)
{
    char allow[64] = "";
    if (methods & PL_HTTP_GET)
        strcat(allow, "GET, HEAD, ");
    if (methods & PL_HTTP_POST)
        strcat(allow, "POST, ");
    if (methods & PL_HTTP_DELETE)
        strcat(allow, "DELETE, ");
    size_t n = strlen(allow);
    if (n >= 2)
        allow[n - 2] = '\0';
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allow);
}

static int route_matches(const route *r, const char *path)
{
    if (r->prefix_len)
        return strncmp(path, r->pattern, r->prefix_len) == 0;
    return strcmp(path, r->pattern) == 0;
}

static const char *method_name(enum evhttp_cmd_type t)
{
    switch (t) {
    case EVHTTP_REQ_GET: return "GET";
    case EVHTTP_REQ_HEAD: return "HEAD";
    case EVHTTP_REQ_POST: return "POST";
    case EVHTTP_REQ_DELETE: return "DELETE";
    case EVHTTP_REQ_PUT: return "PUT";
    case EVHTTP_REQ_OPTIONS: return "OPTIONS";
    case EVHTTP_REQ_PATCH: return "PATCH";
    default: return "OTHER";
    }
}

/* A client's X-Request-Id is kept when it is a plain token; else one is
 * made. Either way the reply carries it and the access log names it. */
static void request_id_begin(pl_server *s, struct evhttp_request *req)
{
    char id[64];
    const char *in = evhttp_find_header(evhttp_request_get_input_headers(req), "X-Request-Id");
    size_t n = in ? strlen(in) : 0;
    if (n == 0 || n >= sizeof id || strspn(in, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnop"
                                               "qrstuvwxyz0123456789._-:") != n)
        pl_server_new_id(s, "req-", id, sizeof id);
    else
        memcpy(id, in, n + 1);
    evhttp_add_header(evhttp_request_get_output_headers(req), "X-Request-Id", id);
    if (s->o.access_log)
        pl_access_begin(req, method_name(evhttp_request_get_command(req)),
                        evhttp_request_get_uri(req), id);
}

static void server_dispatch(struct evhttp_request *req, void *arg)
{
    pl_server *s = arg;
    request_id_begin(s, req);
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *raw = uri ? evhttp_uri_get_path(uri) : NULL;
    char *path = raw ? evhttp_uridecode(raw, 0, NULL) : NULL;
    if (!path) {
        pl_reply_errorf(req, 400, "invalid_request_error", NULL, NULL, "bad request path");
        return;
    }
    unsigned m = method_bit(evhttp_request_get_command(req));
    unsigned allowed = 0;
    for (int i = 0; i < s->n_routes; i++) {
        route *r = &s->routes[i];
        if (!route_matches(r, path))
            continue;
        if (r->methods & m) {
            r->fn(s, req, path, r->ud);
            free(path);
            return;
        }
        allowed |= r->methods;
    }
    if (allowed) {
        allow_header(req, allowed);
        pl_reply_errorf(req, 405, "invalid_request_error", NULL, "method_not_allowed",
                        "method not allowed for %s", path);
    } else {
        pl_reply_errorf(req, 404, "invalid_request_error", NULL, "not_found",
                        "no such endpoint: %s", path);
    }
    free(path);
}

pl_server *pl_server_new(struct event_base *base, const pl_server_opts *o)
{
    pl_server *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->base = base;
    s->o = *o;
    s->http = evhttp_new(base);
    if (!s->http) {
        free(s);
        return NULL;
    }
    /* evhttp's own 413 is HTML; ours is OpenAI JSON. Let evhttp read a bit
     * past our limit so bodies just over it get our error, while its hard
     * cap still bounds memory against hostile uploads. */
    long cap = o->max_body_bytes * 2 + 65536;
    evhttp_set_max_body_size(s->http, (ev_ssize_t)cap);
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST |
                                            EVHTTP_REQ_DELETE | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_OPTIONS |
                                            EVHTTP_REQ_PATCH);
    evhttp_set_gencb(s->http, server_dispatch, s);
    evhttp_set_timeout(s->http, 3600);
    s->id_salt = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)s;
    return s;
}

void pl_server_free(pl_server *s)
{
    if (!s)
        return;
    evhttp_free(s->http);
    for (int i = 0; i < s->n_models; i++) {
        pl_backend_free(s->models[i].backend);
        free(s->models[i].name);
    }
    free(s->models);
    for (int i = 0; i < s->n_routes; i++)
        free(s->routes[i].pattern);
    free(s);
}

int pl_server_add_model(pl_server *s, const char *name, pl_backend *b)
{
    if (pl_server_find_model(s, name))
        return -1;
    pl_model_entry *m = realloc(s->models, (size_t)(s->n_models + 1) * sizeof *m);
    if (!m)
        return -1;
    s->models = m;
    m[s->n_models].name = strdup(name);
    if (!m[s->n_models].name)
        return -1;
    m[s->n_models].backend = b;
    m[s->n_models].created = (int64_t)time(NULL);
    s->n_models++;
    return 0;
}

pl_model_entry *pl_server_find_model(pl_server *s, const char *name)
{
    for (int i = 0; i < s->n_models; i++)
        if (strcmp(s->models[i].name, name) == 0)
            return &s->models[i];
    return NULL;
}

int pl_server_n_models(const pl_server *s)
{
    return s->n_models;
}

pl_model_entry *pl_server_model(pl_server *s, int i)
{
    return i >= 0 && i < s->n_models ? &s->models[i] : NULL;
}

int pl_server_add_route(pl_server *s, const char *pattern, unsigned methods,
                        pl_route_fn fn, void *ud)
{
    if (s->n_routes >= MAX_ROUTES)
        return -1;
    route *r = &s->routes[s->n_routes];
    size_t n = strlen(pattern);
    r->pattern = strdup(pattern);
    if (!r->pattern)
        return -1;
    s->n_routes++;
    r->prefix_len = n && pattern[n - 1] == '*' ? n - 1 : 0;
    if (r->prefix_len)
        r->pattern[n - 1] = '\0';
    r->methods = methods;
    r->fn = fn;
    r->ud = ud;
    return 0;
}

void pl_server_add_status_hook(pl_server *s, pl_status_fn fn, void *ud)
{
    if (s->n_hooks < MAX_STATUS_HOOKS) {
        s->hooks[s->n_hooks].fn = fn;
        s->hooks[s->n_hooks].ud = ud;
        s->n_hooks++;
    }
}

void pl_server_run_status_hooks(pl_server *s, json_t *st)
{
    for (int i = 0; i < s->n_hooks; i++)
        s->hooks[i].fn(s, st, s->hooks[i].ud);
}

void pl_server_add_metrics_hook(pl_server *s, pl_metrics_fn fn, void *ud)
{
    if (s->n_mhooks < MAX_STATUS_HOOKS) {
        s->mhooks[s->n_mhooks].fn = fn;
        s->mhooks[s->n_mhooks].ud = ud;
        s->n_mhooks++;
    }
}

void pl_server_run_metrics_hooks(pl_server *s, struct evbuffer *out)
{
    for (int i = 0; i < s->n_mhooks; i++)
        s->mhooks[i].fn(s, out, s->mhooks[i].ud);
}

int pl_server_listen(pl_server *s, const char *host, int *port_io)
{
    struct evhttp_bound_socket *sock =
        evhttp_bind_socket_with_handle(s->http, host, (ev_uint16_t)*port_io);
    if (!sock)
        return -1;
    evutil_socket_t fd = evhttp_bound_socket_get_fd(sock);
    /* Accepted sockets inherit TCP_NODELAY on Linux. Without it a stream's
     * small SSE writes wait for the client's delayed ACK (~40 ms each time
     * a write finds unacknowledged data in flight). */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
        return -1;
    if (ss.ss_family == AF_INET)
        *port_io = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    else if (ss.ss_family == AF_INET6)
        *port_io = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return 0;
}

struct event_base *pl_server_base(pl_server *s)
{
    return s->base;
}

const pl_server_opts *pl_server_get_opts(const pl_server *s)
{
    return &s->o;
}

void pl_server_new_id(pl_server *s, const char *prefix, char *out, size_t n)
{
    uint64_t x = ++s->id_counter * 0x9E3779B97F4A7C15ull ^ s->id_salt;
    x ^= x >> 29;
    snprintf(out, n, "%s%016llx%08llx", prefix, (unsigned long long)x,
             (unsigned long long)(s->id_counter & 0xFFFFFFFFull));
}
