/* server.c - the evhttp front: listening, the checks every request passes
 * (refusals from the connection guard, path, origin, API key, rate limit,
 * content type), routing, 404/405. */
#include "api/server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>

#include "api/access_log.h"
#include "api/metrics.h"
#include "api/auth.h"
#include "api/conn.h"
#include "api/respond.h"
#include "schedulers/dispatch.h"
#include "src/base/log.h"

#define MAX_ROUTES 64
#define MAX_STATUS_HOOKS 8

typedef struct route_t {
    char *pattern;
    size_t prefix_len;           /* > 0: prefix match of this many bytes */
    unsigned methods;
    pl_route_fn fn;
    void *ud;
    uint64_t hits;               /* requests routed to it (GET /metrics) */
} route_t;

struct pl_server {
    struct event_base *base;
    struct evhttp *http;
    pl_server_opts o;
    pl_model_entry *models;
    int n_models;
    route_t routes[MAX_ROUTES];
    int n_routes;
    struct { pl_status_fn fn; void *ud; } hooks[MAX_STATUS_HOOKS];
    int n_hooks;
    struct { pl_metrics_fn fn; void *ud; } mhooks[MAX_STATUS_HOOKS];
    int n_mhooks;
    uint64_t id_counter;
    uint64_t id_salt;
    pl_conns *conns;
    pl_auth *auth;
    int current_key;             /* key of the request being routed */
    uint64_t stalled_streams;
    struct evhttp_bound_socket *sock; /* the listening socket */
    int n_calls;                 /* generation requests not yet ended */
    struct event *accept_resume; /* accepting paused for want of descriptors */
    uint64_t accept_pauses;      /* since the last warning about them */
    time_t accept_warned;
    pl_server *next_listening;
};

/* Servers listening now: a listener's error callback gets evhttp's
 * argument, not ours, so it finds its server here. */
static pl_server *listening;

static void listening_remove(pl_server *s)
{
    for (pl_server **pp = &listening; *pp; pp = &(*pp)->next_listening)
        if (*pp == s) {
            *pp = s->next_listening;
            return;
        }
}

static unsigned method_bit(enum evhttp_cmd_type t)
{
    switch (t) {
    case EVHTTP_REQ_GET: return PL_HTTP_GET;
    case EVHTTP_REQ_HEAD: return PL_HTTP_GET;
    case EVHTTP_REQ_POST: return PL_HTTP_POST;
    case EVHTTP_REQ_DELETE: return PL_HTTP_DELETE;
    default: return PL_HTTP_OTHER;
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

static int route_matches(const route_t *r, const char *path)
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

/* A request the connection guard refused: answer it and close. */
static bool reply_refusal(pl_server *s, struct evhttp_request *req)
{
    int status;
    const char *code;
    char msg[256];
    if (!pl_conn_take_reject(s->conns, req, &status, &code, msg, sizeof msg))
        return false;
    evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
    if (status == 405)
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                          "GET, HEAD, POST, DELETE, OPTIONS");
    pl_reply_errorf(req, status, status == 503 ? "server_error" : "invalid_request_error",
                    NULL, code, "%s", msg);
    return true;
}

/* Browsers: a page from another origin gets 403 unless allowed; allowed
 * origins get CORS headers, and their preflights an answer. Returns true
 * when the request was answered. */
static bool check_origin(pl_server *s, struct evhttp_request *req)
{
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    const char *origin = evhttp_find_header(in, "Origin");
    bool preflight = evhttp_request_get_command(req) == EVHTTP_REQ_OPTIONS;
    if (origin && !pl_auth_origin_allowed(s->auth, origin, evhttp_find_header(in, "Host"))) {
        pl_reply_errorf(req, 403, "invalid_request_error", NULL, "origin_not_allowed",
                        "requests from origin '%.200s' are not allowed (see --allowed-origins)",
                        origin);
        return true;
    }
    if (origin) {
        evhttp_add_header(out, "Access-Control-Allow-Origin", origin);
        evhttp_add_header(out, "Vary", "Origin");
        evhttp_add_header(out, "Access-Control-Expose-Headers",
                          "Retry-After, x-ratelimit-limit-requests, x-ratelimit-remaining-requests, "
                          "x-ratelimit-reset-requests, x-ratelimit-limit-tokens, "
                          "x-ratelimit-remaining-tokens, x-ratelimit-reset-tokens");
    }
    if (!preflight || !origin)
        return false;            /* OPTIONS without Origin: 405 from the router */
    const char *want = evhttp_find_header(in, "Access-Control-Request-Headers");
    evhttp_add_header(out, "Access-Control-Allow-Methods", "GET, HEAD, POST, DELETE, OPTIONS");
    evhttp_add_header(out, "Access-Control-Allow-Headers",
                      want ? want : "Authorization, Content-Type");
    evhttp_add_header(out, "Access-Control-Max-Age", "600");
    pl_access_end(req, 204);
    evhttp_send_reply(req, 204, "No Content", NULL);
    return true;
}

/* Without API keys, a request must name us in its Host (auth.h: DNS
 * rebinding); /health tells nothing and load balancers probe it by any
 * name. Returns true when the request was answered. */
static bool check_host(pl_server *s, struct evhttp_request *req, const char *path)
{
    const char *host = evhttp_find_header(evhttp_request_get_input_headers(req), "Host");
    if (!strcmp(path, "/health") || pl_auth_host_allowed(s->auth, host))
        return false;
    pl_reply_errorf(req, 403, "invalid_request_error", NULL, "host_not_allowed",
                    "Host '%.200s' is not allowed: without an API key parley answers only "
                    "requests for localhost or the address it listens on (see --allowed-hosts, "
                    "--api-key)", host);
    return true;
}

/* API key and rate limit; everything but /health and the dashboard page
 * (static HTML that holds no data: it asks for the key and sends it with
 * each GET /status). */
static bool check_key(pl_server *s, struct evhttp_request *req, const char *path)
{
    s->current_key = 0;
    if (!strcmp(path, "/health") || !strcmp(path, "/dashboard"))
        return false;
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    /* Anthropic's SDKs send the key as x-api-key */
    const char *bearer = evhttp_find_header(in, "Authorization");
    const char *x_key = evhttp_find_header(in, "x-api-key");
    int key = pl_auth_check_key(s->auth, bearer);
    if (key < 0 && x_key)        /* either header may hold the key */
        key = pl_auth_check_api_key(s->auth, x_key);
    if (key < 0) {
        struct evkeyvalq *out = evhttp_request_get_output_headers(req);
        evhttp_add_header(out, "WWW-Authenticate", "Bearer");
        pl_reply_errorf(req, 401, "invalid_request_error", NULL, "invalid_api_key",
                        bearer || x_key ? "Incorrect API key provided"
                                        : "You didn't provide an API key; send "
                                          "'Authorization: Bearer KEY' or 'x-api-key: KEY'");
        return true;
    }
    s->current_key = key;
    const char *which = "requests";
    int wait = pl_auth_admit(s->auth, key, evhttp_request_get_output_headers(req), &which);
    if (wait > 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", wait);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", ra);
        pl_reply_errorf(req, 429, "requests", NULL, "rate_limit_exceeded",
                        "Rate limit reached for %s; retry in %d s", which, wait);
        return true;
    }
    return false;
}

/* Bodies must be JSON: a page cannot send application/json across origins
 * without a CORS preflight. */
static bool check_content_type(struct evhttp_request *req)
{
    if (evhttp_request_get_command(req) != EVHTTP_REQ_POST)
        return false;            /* no route takes PUT or PATCH */
    const char *ct = evhttp_find_header(evhttp_request_get_input_headers(req), "Content-Type");
    size_t n = ct ? strcspn(ct, "; \t") : 0;
    if (ct && n == 16 && !strncasecmp(ct, "application/json", 16))
        return false;
    pl_reply_errorf(req, 415, "invalid_request_error", NULL, "unsupported_media_type",
                    "request bodies must be 'Content-Type: application/json' (got '%.100s')",
                    ct ? ct : "");
    return true;
}

static void route(pl_server *s, struct evhttp_request *req, const char *path)
{
    unsigned m = method_bit(evhttp_request_get_command(req));
    unsigned allowed = 0;
    for (int i = 0; i < s->n_routes; i++) {
        route_t *r = &s->routes[i];
        if (!route_matches(r, path))
            continue;
        if (r->methods & m) {
            r->hits++;
            if (!check_content_type(req))
                r->fn(s, req, path, r->ud);
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
}

static void server_dispatch(struct evhttp_request *req, void *arg)
{
    pl_server *s = arg;
    request_id_begin(s, req);
    if (reply_refusal(s, req))
        return;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *raw = uri ? evhttp_uri_get_path(uri) : NULL;
    size_t len = 0;
    char *path = raw ? evhttp_uridecode(raw, 0, &len) : NULL;
    if (!path || strlen(path) != len) {
        pl_reply_errorf(req, 400, "invalid_request_error", NULL, "invalid_path",
                        path ? "the request path has an encoded NUL (%%00)" : "bad request path");
        free(path);
        return;
    }
    if (!check_host(s, req, path) && !check_origin(s, req) && !check_key(s, req, path))
        route(s, req, path);     /* the content type is checked once a route takes it */
    free(path);
}

static void status_hook(pl_server *s, json_t *st, void *ud)
{
    pl_conns_stats c = pl_conns_get_stats(s->conns);
    json_object_set_new(st, "http",
                        json_pack("{s:i, s:I, s:I, s:I, s:I, s:I, s:I}", "open_connections",
                                  c.open, "accepted", (json_int_t)c.accepted, "refused_busy",
                                  (json_int_t)c.refused_busy, "rejected_requests",
                                  (json_int_t)c.rejected, "header_timeouts",
                                  (json_int_t)c.header_timeouts, "body_timeouts",
                                  (json_int_t)c.body_timeouts, "streams_stalled_aborted",
                                  (json_int_t)s->stalled_streams));
}

/* parley:http_requests_total{endpoint}: requests routed to each route
 * pattern (a pattern registered twice, for other methods, is one). */
static void route_metrics(pl_server *s, struct evbuffer *out)
{
    pl_prom_family(out, "parley:http_requests", "counter",
                   "Requests routed to each endpoint (its route pattern).");
    for (int i = 0; i < s->n_routes; i++) {
        char esc[256], labels[300];
        uint64_t hits = 0;
        int j = 0;
        while (j < i && strcmp(s->routes[j].pattern, s->routes[i].pattern))
            j++;
        if (j < i)
            continue;
        for (j = i; j < s->n_routes; j++)
            if (!strcmp(s->routes[j].pattern, s->routes[i].pattern))
                hits += s->routes[j].hits;
        pl_prom_escape(esc, sizeof esc, s->routes[i].pattern);
        snprintf(labels, sizeof labels, "endpoint=\"%s\"", esc);
        pl_prom_sample(out, "parley:http_requests", "_total", labels, (double)hits);
    }
}

/* The HTTP front's counters in GET /metrics. */
static void metrics_hook(pl_server *s, struct evbuffer *out, void *ud)
{
    pl_conns_stats c = pl_conns_get_stats(s->conns);
    static const struct { const char *name, *type, *help; } f[] = {
        {"parley:http_open_connections", "gauge", "Open HTTP connections."},
        {"parley:http_connections_accepted", "counter", "HTTP connections accepted."},
        {"parley:http_connections_refused_busy", "counter",
         "Connections refused with 503 above --max-connections."},
        {"parley:http_requests_rejected", "counter", "Requests rejected before routing."},
        {"parley:http_header_timeouts", "counter", "Connections closed waiting for headers."},
        {"parley:http_body_timeouts", "counter", "Connections closed waiting for a body."},
        {"parley:http_streams_stalled_aborted", "counter",
         "Streams closed because the client stopped reading."},
    };
    double v[] = {c.open, (double)c.accepted, (double)c.refused_busy, (double)c.rejected,
                  (double)c.header_timeouts, (double)c.body_timeouts,
                  (double)s->stalled_streams};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
        pl_prom_family(out, f[i].name, f[i].type, f[i].help);
        pl_prom_sample(out, f[i].name, i ? "_total" : "", NULL, v[i]);
    }
    route_metrics(s, out);
}

static void accept_resume(evutil_socket_t fd, short what, void *arg)
{
    pl_server *s = arg;
    if (s->sock)
        evconnlistener_enable(evhttp_bound_socket_get_listener(s->sock));
}

/* accept() failed for want of descriptors or memory: the connection stays
 * queued and the socket readable, so libevent would retry at once, forever,
 * logging each failure. Pause accepting briefly instead (the queue waits in
 * the kernel), and warn at most once a minute. */
static void accept_error(struct evconnlistener *lev, void *unused)
{
    int err = EVUTIL_SOCKET_ERROR();
    pl_server *s = listening;
    while (s && (!s->sock || evhttp_bound_socket_get_listener(s->sock) != lev))
        s = s->next_listening;
    if (!s)
        return;
    static const struct timeval pause = {0, 100000};
    evconnlistener_disable(lev);
    evtimer_add(s->accept_resume, &pause);
    s->accept_pauses++;
    time_t now = time(NULL);
    if (now - s->accept_warned >= 60) {
        pl_warn("accept: %s: not accepting connections for 100 ms at a time until "
                "descriptors free up (%llu pauses since the last warning; see ulimit -n "
                "and --max-connections)", evutil_socket_error_to_string(err),
                (unsigned long long)s->accept_pauses);
        s->accept_warned = now;
        s->accept_pauses = 0;
    }
}

static void fill_defaults(pl_server_opts *o)
{
    if (o->max_header_bytes <= 0)
        o->max_header_bytes = 65536;
    if (o->max_upload_bytes < o->max_body_bytes)
        o->max_upload_bytes = o->max_body_bytes;
    if (o->idle_timeout_s <= 0)
        o->idle_timeout_s = 60;
    if (o->header_timeout_s <= 0)
        o->header_timeout_s = 20;
    if (o->body_timeout_s <= 0)
        o->body_timeout_s = 60;
    if (o->max_connections <= 0)
        o->max_connections = 1000;
    if (o->stream_stall_timeout_s <= 0)
        o->stream_stall_timeout_s = 60;
}

pl_server *pl_server_new(struct event_base *base, const pl_server_opts *o)
{
    pl_server *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->base = base;
    s->o = *o;
    fill_defaults(&s->o);
    s->o.api_keys = NULL;        /* borrowed only for the call */
    pl_auth_opts ao = {.keys = o->api_keys, .n_keys = o->n_api_keys,
                         .origins = o->allowed_origins, .hosts = o->allowed_hosts,
                         .rpm = o->rate_limit_rpm,
                         .tpm = o->rate_limit_tpm};
    s->auth = pl_auth_new(&ao);
    s->http = evhttp_new(base);
    pl_conns_opts co = {.max_header_bytes = s->o.max_header_bytes,
                        .max_upload_bytes = s->o.max_upload_bytes,
                        .idle_timeout_s = s->o.idle_timeout_s,
                        .header_timeout_s = s->o.header_timeout_s,
                        .body_timeout_s = s->o.body_timeout_s,
                        .write_timeout_s = s->o.stream_stall_timeout_s + s->o.idle_timeout_s,
                        .max_connections = s->o.max_connections};
    s->accept_resume = evtimer_new(base, accept_resume, s);
    if (!s->auth || !s->http || !s->accept_resume ||
        !(s->conns = pl_conns_new(s->http, base, &co)))
        goto fail;
    s->o.allowed_origins = NULL;
    s->o.allowed_hosts = NULL;
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST |
                                            EVHTTP_REQ_DELETE | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_OPTIONS |
                                            EVHTTP_REQ_PATCH | EVHTTP_REQ_TRACE);
    evhttp_set_gencb(s->http, server_dispatch, s);
    s->id_salt = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)s;
    pl_server_add_status_hook(s, status_hook, NULL);
    pl_server_add_metrics_hook(s, metrics_hook, NULL);
    return s;
fail:
    if (s->accept_resume)
        event_free(s->accept_resume);
    if (s->http)
        evhttp_free(s->http);
    pl_auth_free(s->auth);
    free(s);
    return NULL;
}

void pl_server_free(pl_server *s)
{
    if (!s)
        return;
    listening_remove(s);
    evhttp_free(s->http);
    event_free(s->accept_resume);
    pl_conns_free(s->conns);
    pl_auth_free(s->auth);
    for (int i = 0; i < s->n_models; i++) {
        pl_dispatch_free(s->models[i].dispatch);
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
    memset(&m[s->n_models], 0, sizeof *m);
    m[s->n_models].name = strdup(name);
    m[s->n_models].dispatch = pl_backend_dispatch_new(b, s->o.interactive_reserve);
    if (!m[s->n_models].name || !m[s->n_models].dispatch) {
        free(m[s->n_models].name);
        pl_dispatch_free(m[s->n_models].dispatch);
        return -1;
    }
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
    route_t *r = &s->routes[s->n_routes];
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
    s->sock = sock;
    pl_auth_set_bound(s->auth, host);
    evconnlistener_set_error_cb(evhttp_bound_socket_get_listener(sock), accept_error);
    s->next_listening = listening;
    listening = s;
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

void pl_server_stop_accepting(pl_server *s)
{
    if (s->sock)
        evhttp_del_accept_socket(s->http, s->sock);
    s->sock = NULL;
    listening_remove(s);
}

void pl_server_call_begin(pl_server *s)
{
    s->n_calls++;
}

void pl_server_call_end(pl_server *s)
{
    s->n_calls--;
}

int pl_server_n_calls(const pl_server *s)
{
    return s->n_calls;
}

bool pl_server_output_pending(const pl_server *s)
{
    return pl_conns_output_pending(s->conns);
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
    /* prefix, then x in 16 hex digits and the counter's low 32 bits in 8:
     * by hand, since snprintf costs more than the rest of this per request. */
    static const char hex[] = "0123456789abcdef";
    char t[24];
    for (int i = 0; i < 16; i++)
        t[i] = hex[(x >> (60 - 4 * i)) & 15];
    for (int i = 0; i < 8; i++)
        t[16 + i] = hex[(s->id_counter >> (28 - 4 * i)) & 15];
    size_t p = strlen(prefix);
    if (n == 0)
        return;
    size_t k = p < n - 1 ? p : n - 1;
    memcpy(out, prefix, k);
    size_t m = sizeof t < n - 1 - k ? sizeof t : n - 1 - k;
    memcpy(out + k, t, m);
    out[k + m] = '\0';
}

int pl_server_current_key(const pl_server *s)
{
    return s->current_key;
}

void pl_server_charge_tokens(pl_server *s, int key, long tokens)
{
    pl_auth_charge(s->auth, key, tokens);
}

void pl_server_count_stall(pl_server *s)
{
    s->stalled_streams++;
}
