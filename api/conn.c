/* conn.c - the connection guard (see conn.h): staging and framing of the
 * input, refusals, deadlines, TCP_NODELAY and the connection limit. */
#include "api/conn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "api/conn_internal.h"

enum fstate { F_HEAD, F_BODY, F_CHUNK_SIZE, F_CHUNK_DATA, F_CHUNK_END, F_TRAILER, F_REJECTED };
enum tkind { T_NONE, T_ATTACH, T_HEAD, T_BODY, T_KILL };

typedef struct conn {
    pl_conns *t;
    struct bufferevent *bev;
    struct evhttp_connection *evcon;   /* NULL until attached */
    struct evbuffer_cb_entry *cbe;
    struct evbuffer *stage;            /* input not yet validated */
    struct event *timer;
    enum tkind tkind;
    enum fstate st;
    long long remaining, body_total;
    size_t scanned;                    /* F_HEAD/F_TRAILER: stage bytes of whole lines */
    bool in_cb, over_limit, counted;
    int status;                        /* refusal */
    const char *code;
    char msg[200];
    void (*watch_fn)(void *);
    void *watch_ud;
    struct conn *prev, *next;
} conn;

struct pl_conns {
    struct event_base *base;
    struct evhttp *http;
    pl_conns_opts o;
    conn *list;
    pl_conns_stats st;
    struct evbuffer *scratch;
    pl_conns *next_table;
};

/* Every live table, so that close watches find a request's connection. */
static pl_conns *tables;

static const char reject_request[] =
    "GET " PL_CONN_REJECT_PATH " HTTP/1.1\r\nConnection: close\r\n\r\n";

static void conn_timer_cb(evutil_socket_t fd, short what, void *arg);

static void conn_unlink_free(conn *c)
{
    pl_conns *t = c->t;
    if (c->prev)
        c->prev->next = c->next;
    else
        t->list = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->counted)
        t->st.open--;
    if (c->cbe)
        evbuffer_remove_cb_entry(bufferevent_get_input(c->bev), c->cbe);
    event_free(c->timer);
    evbuffer_free(c->stage);
    free(c);
}

static void arm(conn *c, enum tkind k, int secs)
{
    struct timeval tv = {secs, 0};
    c->tkind = k;
    evtimer_add(c->timer, &tv);
}

static void disarm(conn *c)
{
    c->tkind = T_NONE;
    evtimer_del(c->timer);
}

/* evhttp's read timeout closes idle keep-alive connections silently; while
 * a request is arriving our own head and body deadlines apply instead. */
static void idle_timeout_on(conn *c, bool on)
{
    struct timeval rd = {c->t->o.idle_timeout_s, 0}, wr = {c->t->o.write_timeout_s, 0};
    bufferevent_set_timeouts(c->bev, on ? &rd : NULL, &wr);
}

/* ---- refusals ---- */

static void set_refusal(conn *c, int status, const char *code, const char *msg)
{
    c->status = status;
    c->code = code;
    snprintf(c->msg, sizeof c->msg, "%s", msg);
    c->st = F_REJECTED;
    c->t->st.rejected++;
    evbuffer_drain(c->stage, evbuffer_get_length(c->stage));
}

/* At a request boundary: evhttp will parse the synthetic request after
 * whatever it has not consumed yet, and our router answers it. */
static void reject_at_boundary(conn *c, struct evbuffer *in, int status, const char *code,
                               const char *msg)
{
    set_refusal(c, status, code, msg);
    evbuffer_add(in, reject_request, sizeof reject_request - 1);
}

/* Inside a body evhttp is reading: answer directly and close, from a
 * timer (never from inside evhttp's read path). */
static void reject_in_body(conn *c, int status, const char *code, const char *msg)
{
    set_refusal(c, status, code, msg);
    disarm(c);
    arm(c, T_KILL, 0);
}

static const char *reason(int status)
{
    switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    default: return "Error";
    }
}

/* Write the refusal straight to the socket (nothing else is pending on it:
 * evhttp reads a request only after its previous reply went out), then
 * free the connection. */
static void conn_kill(conn *c)
{
    evutil_socket_t fd = bufferevent_getfd(c->bev);
    if (fd >= 0 && c->status) {
        char body[400], msg[300];
        size_t j = 0;
        for (const char *p = c->msg; *p && j + 2 < sizeof msg; p++)
            if (*p != '"' && *p != '\\')
                msg[j++] = *p;
        msg[j] = '\0';
        int bl = snprintf(body, sizeof body,
                          "{\"error\":{\"message\":\"%s\",\"type\":\"invalid_request_error\","
                          "\"param\":null,\"code\":\"%s\"}}\n", msg, c->code);
        char head[200];
        int hl = snprintf(head, sizeof head,
                          "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                          "Content-Length: %d\r\nConnection: close\r\n\r\n",
                          c->status, reason(c->status), bl);
        (void)!send(fd, head, (size_t)hl, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)!send(fd, body, (size_t)bl, MSG_NOSIGNAL | MSG_DONTWAIT);
        shutdown(fd, SHUT_WR);
        /* Unread input makes close() send a reset that can destroy the
         * reply before the client reads it: drain what is there. */
        char sink[4096];
        for (int i = 0; i < 64 && recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; i++)
            ;
    }
    evhttp_connection_free(c->evcon);      /* runs conn_closed, which frees c */
}

/* ---- framing ---- */

static void move(conn *c, struct evbuffer *in, size_t n)
{
    evbuffer_remove_buffer(c->stage, in, n);
}

static char stage_byte(conn *c, size_t pos)
{
    struct evbuffer_ptr p;
    char ch = 0;
    if (evbuffer_ptr_set(c->stage, &p, pos, EVBUFFER_PTR_SET) == 0)
        evbuffer_copyout_from(c->stage, &p, &ch, 1);
    return ch;
}

/* Find the next LF at or after c->scanned; returns its offset or -1. */
static long next_lf(conn *c)
{
    struct evbuffer_ptr p;
    if (evbuffer_ptr_set(c->stage, &p, c->scanned, EVBUFFER_PTR_SET) < 0)
        return -1;
    size_t eol;
    struct evbuffer_ptr e = evbuffer_search_eol(c->stage, &p, &eol, EVBUFFER_EOL_LF);
    return (long)e.pos;
}

/* Returns the head's length, 0 when incomplete. */
static size_t find_head_end(conn *c)
{
    for (;;) {
        long lf = next_lf(c);
        if (lf < 0)
            return 0;
        size_t start = c->scanned, len = (size_t)lf - start;
        bool blank = len == 0 || (len == 1 && stage_byte(c, start) == '\r');
        c->scanned = (size_t)lf + 1;
        if (blank && start == 0) {         /* stray CRLF between requests */
            evbuffer_drain(c->stage, c->scanned);
            c->scanned = 0;
            continue;
        }
        if (blank)
            return c->scanned;
    }
}

static void start_body(conn *c, const pl_head_info *hi)
{
    c->body_total = 0;
    if (hi->chunked)
        c->st = F_CHUNK_SIZE;
    else if (hi->has_length && hi->length > 0 && !hi->is_head) {
        c->st = F_BODY;
        c->remaining = hi->length;
    } else {
        c->st = F_HEAD;
        idle_timeout_on(c, true);
        return;
    }
    disarm(c);
    arm(c, T_BODY, c->t->o.body_timeout_s);
}

static void end_body(conn *c)
{
    c->st = F_HEAD;
    disarm(c);
    idle_timeout_on(c, true);
}

/* F_HEAD: returns true when a head went through. */
static bool frame_head(conn *c, struct evbuffer *in)
{
    pl_conns *t = c->t;
    if (c->over_limit) {
        char m[160];
        snprintf(m, sizeof m, "server busy: %d connections are open; the limit is %d",
                 t->st.open, t->o.max_connections);
        t->st.refused_busy++;
        reject_at_boundary(c, in, 503, "too_many_connections", m);
        return false;
    }
    size_t h = find_head_end(c);
    if (!h || (long)h > t->o.max_header_bytes) {
        if ((long)(h ? h : evbuffer_get_length(c->stage)) > t->o.max_header_bytes) {
            char m[160];
            snprintf(m, sizeof m, "request headers exceed %ld bytes", t->o.max_header_bytes);
            reject_at_boundary(c, in, 431, "request_header_fields_too_large", m);
        } else if (evbuffer_get_length(c->stage) && c->tkind == T_NONE) {
            arm(c, T_HEAD, t->o.header_timeout_s);
            idle_timeout_on(c, false);
        }
        return false;
    }
    pl_head_info hi;
    const char *data = (const char *)evbuffer_pullup(c->stage, (ev_ssize_t)h);
    if (pl_head_parse(data, h, t->o.max_upload_bytes, &hi) < 0) {
        reject_at_boundary(c, in, hi.status, hi.code, hi.msg);
        return false;
    }
    c->scanned = 0;
    move(c, in, h);
    if (c->tkind == T_HEAD)
        disarm(c);
    else
        idle_timeout_on(c, false);
    start_body(c, &hi);
    return true;
}

static bool frame_chunk_size(conn *c, struct evbuffer *in)
{
    long lf = next_lf(c);
    if (lf > 1024 || (lf < 0 && evbuffer_get_length(c->stage) > 1024)) {
        reject_in_body(c, 400, "bad_request", "chunk size line too long");
        return false;
    }
    if (lf < 0)
        return false;
    char line[1100];
    size_t n = (size_t)lf + 1 < sizeof line ? (size_t)lf + 1 : sizeof line - 1;
    evbuffer_copyout(c->stage, line, n);
    line[n] = '\0';
    char *end;
    errno = 0;
    long long sz = strtoll(line, &end, 16);
    bool hexstart = (line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f') ||
                    (line[0] >= 'A' && line[0] <= 'F');
    /* evhttp reads no chunk extensions: refuse them rather than let it
     * fail with its own page. */
    if (!hexstart || errno || sz < 0 || (*end != '\r' && *end != '\n')) {
        reject_in_body(c, 400, "bad_request",
                       *end == ';' ? "chunk extensions are not supported" : "malformed chunk size");
        return false;
    }
    /* body_total never passes the limit, so this cannot overflow (a size
     * near LLONG_MAX after a first chunk used to). */
    if (sz > c->t->o.max_upload_bytes - c->body_total) {
        char m[160];
        snprintf(m, sizeof m, "request body exceeds the limit of %ld bytes",
                 c->t->o.max_upload_bytes);
        reject_in_body(c, 413, "request_too_large", m);
        return false;
    }
    c->body_total += sz;
    move(c, in, (size_t)lf + 1);
    c->scanned = 0;
    c->remaining = sz;
    c->st = sz ? F_CHUNK_DATA : F_TRAILER;
    return true;
}

/* After chunk data: exactly CRLF (or LF). Trailer lines: until blank. */
static bool frame_line_state(conn *c, struct evbuffer *in)
{
    long lf = next_lf(c);
    if (lf < 0) {
        if ((long)evbuffer_get_length(c->stage) > c->t->o.max_header_bytes)
            reject_in_body(c, 400, "bad_request", "chunked body trailer too long");
        return false;
    }
    size_t start = c->scanned, len = (size_t)lf - start;
    bool blank = len == 0 || (len == 1 && stage_byte(c, start) == '\r');
    if (c->st == F_CHUNK_END) {
        if (!blank) {
            reject_in_body(c, 400, "bad_request", "chunk data longer than its size");
            return false;
        }
        move(c, in, (size_t)lf + 1);
        c->st = F_CHUNK_SIZE;
        return true;
    }
    if (!blank) {
        pl_head_info hi;
        memset(&hi, 0, sizeof hi);
        char *l = (char *)evbuffer_pullup(c->stage, lf + 1) + start;
        size_t ll = len && l[len - 1] == '\r' ? len - 1 : len;
        if (pl_head_header_line(l, ll, &hi, true) < 0) {
            reject_in_body(c, 400, "bad_request", "malformed trailer line");
            return false;
        }
        c->scanned = (size_t)lf + 1;
        return true;
    }
    move(c, in, (size_t)lf + 1);
    c->scanned = 0;
    end_body(c);
    return true;
}

/* Move every validated byte of the stage to evhttp's input. */
static void frame(conn *c, struct evbuffer *in)
{
    bool progress = true;
    while (progress && evbuffer_get_length(c->stage)) {
        size_t n;
        switch (c->st) {
        case F_HEAD:
            progress = frame_head(c, in);
            break;
        case F_BODY:
        case F_CHUNK_DATA:
            n = evbuffer_get_length(c->stage);
            if ((long long)n > c->remaining)
                n = (size_t)c->remaining;
            move(c, in, n);
            c->remaining -= (long long)n;
            if (c->remaining == 0) {
                if (c->st == F_BODY)
                    end_body(c);
                else
                    c->st = F_CHUNK_END;
            }
            break;
        case F_CHUNK_SIZE:
            progress = frame_chunk_size(c, in);
            break;
        case F_CHUNK_END:
        case F_TRAILER:
            progress = frame_line_state(c, in);
            break;
        case F_REJECTED:
            evbuffer_drain(c->stage, evbuffer_get_length(c->stage));
            progress = false;
            break;
        }
    }
}

/* ---- connection lifetime ---- */

static void conn_closed(struct evhttp_connection *evcon, void *arg)
{
    conn *c = arg;
    if (c->watch_fn) {
        void (*fn)(void *) = c->watch_fn;
        c->watch_fn = NULL;
        fn(c->watch_ud);
    }
    conn_unlink_free(c);
}

/* Once evhttp has set the socket and its callbacks on our bufferevent. */
static bool conn_attach(conn *c)
{
    if (c->evcon)
        return true;
    void *arg = NULL;
    bufferevent_getcb(c->bev, NULL, NULL, NULL, &arg);
    bufferevent_decref(c->bev);            /* the reference taken in conn_bevcb */
    if (!arg)
        return false;                      /* evhttp gave up on it */
    pl_conns *t = c->t;
    c->evcon = arg;
    evhttp_connection_set_closecb(c->evcon, conn_closed, c);
    evutil_socket_t fd = bufferevent_getfd(c->bev);
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    idle_timeout_on(c, true);
    c->counted = true;
    t->st.open++;
    t->st.accepted++;
    c->over_limit = t->st.open > t->o.max_connections;
    return true;
}

static void conn_input_cb(struct evbuffer *in, const struct evbuffer_cb_info *info, void *arg)
{
    conn *c = arg;
    if (c->in_cb || info->n_added == 0)
        return;
    c->in_cb = true;
    if (!c->evcon) {
        disarm(c);
        conn_attach(c);
    }
    size_t len = evbuffer_get_length(in), old = len - info->n_added;
    struct evbuffer *keep = c->t->scratch;
    if (old)
        evbuffer_remove_buffer(in, keep, old);
    evbuffer_add_buffer(c->stage, in);
    if (old)
        evbuffer_add_buffer(in, keep);
    frame(c, in);
    c->in_cb = false;
}

static void conn_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    conn *c = arg;
    enum tkind k = c->tkind;
    c->tkind = T_NONE;
    switch (k) {
    case T_ATTACH:
        if (!conn_attach(c))
            conn_unlink_free(c);
        break;
    case T_HEAD:
        if (!(bufferevent_get_enabled(c->bev) & EV_READ)) {
            arm(c, T_HEAD, 1);             /* evhttp is busy with a reply */
            break;
        }
        c->t->st.header_timeouts++;
        set_refusal(c, 408, "request_timeout", "the request head did not arrive in time");
        conn_kill(c);
        break;
    case T_BODY:
        c->t->st.body_timeouts++;
        set_refusal(c, 408, "request_timeout", "the request body did not arrive in time");
        conn_kill(c);
        break;
    case T_KILL:
        conn_kill(c);
        break;
    case T_NONE:
        break;
    }
}

static struct bufferevent *conn_bevcb(struct event_base *base, void *arg)
{
    pl_conns *t = arg;
    conn *c = calloc(1, sizeof *c);
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (c) {
        c->stage = evbuffer_new();
        c->timer = evtimer_new(base, conn_timer_cb, c);
    }
    if (!c || !bev || !c->stage || !c->timer) {
        if (c && c->stage)
            evbuffer_free(c->stage);
        if (c && c->timer)
            event_free(c->timer);
        free(c);
        return bev;                        /* unguarded, but served */
    }
    c->t = t;
    c->bev = bev;
    c->cbe = evbuffer_add_cb(bufferevent_get_input(bev), conn_input_cb, c);
    /* Keep bev alive until we attach, even if evhttp drops it at once. */
    bufferevent_incref(bev);
    c->next = t->list;
    if (t->list)
        t->list->prev = c;
    t->list = c;
    arm(c, T_ATTACH, 0);
    return bev;
}

/* ---- public ---- */

pl_conns *pl_conns_new(struct evhttp *http, struct event_base *base, const pl_conns_opts *o)
{
    pl_conns *t = calloc(1, sizeof *t);
    if (!t || !(t->scratch = evbuffer_new())) {
        free(t);
        return NULL;
    }
    t->base = base;
    t->http = http;
    t->o = *o;
    evhttp_set_bevcb(http, conn_bevcb, t);
    evhttp_set_timeout(http, o->idle_timeout_s);
    /* Backstops only: the framer refuses first, with JSON. */
    evhttp_set_max_headers_size(http, o->max_header_bytes + 4096);
    evhttp_set_max_body_size(http, o->max_upload_bytes + 65536);
    t->next_table = tables;
    tables = t;
    return t;
}

void pl_conns_free(pl_conns *t)
{
    if (!t)
        return;
    for (pl_conns **pp = &tables; *pp; pp = &(*pp)->next_table) {
        if (*pp == t) {
            *pp = t->next_table;
            break;
        }
    }
    while (t->list) {                      /* never attached */
        conn *c = t->list;
        if (!c->evcon)
            bufferevent_decref(c->bev);
        conn_unlink_free(c);
    }
    evbuffer_free(t->scratch);
    free(t);
}

pl_conns_stats pl_conns_get_stats(const pl_conns *t)
{
    return t->st;
}

static conn *find_conn(pl_conns *t, struct evhttp_request *req)
{
    struct evhttp_connection *evcon = req ? evhttp_request_get_connection(req) : NULL;
    for (pl_conns *x = t ? t : tables; evcon && x; x = t ? NULL : x->next_table)
        for (conn *c = x->list; c; c = c->next)
            if (c->evcon == evcon)
                return c;
    return NULL;
}

bool pl_conns_output_pending(const pl_conns *t)
{
    for (const conn *c = t->list; c; c = c->next)
        if (c->evcon && evbuffer_get_length(bufferevent_get_output(c->bev)))
            return true;
    return false;
}

bool pl_conn_take_reject(pl_conns *t, struct evhttp_request *req, int *status,
                         const char **code, char *msg, size_t msglen)
{
    const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
    const char *p = u ? evhttp_uri_get_path(u) : NULL;
    if (!p || strcmp(p, PL_CONN_REJECT_PATH))
        return false;
    conn *c = find_conn(t, req);
    if (!c || c->st != F_REJECTED || !c->status)
        return false;
    *status = c->status;
    *code = c->code;
    snprintf(msg, msglen, "%s", c->msg);
    return true;
}

int pl_conn_watch(struct evhttp_request *req, void (*fn)(void *), void *ud)
{
    conn *c = find_conn(NULL, req);
    if (!c)
        return -1;
    c->watch_fn = fn;
    c->watch_ud = ud;
    return 0;
}

void pl_conn_unwatch(struct evhttp_request *req)
{
    conn *c = find_conn(NULL, req);
    if (c)
        c->watch_fn = NULL;
}
