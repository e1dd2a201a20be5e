/* sse.c - the SSE writer: chunked replies, backpressure, stall detection,
 * close watching. */
#include "api/sse.h"

#include "api/access_log.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>

#include "api/conn.h"
#include "src/base/log.h"

struct pl_sse {
    struct evhttp_request *req;
    pl_close_watch *watch;
    struct evbuffer *buf;
    long cap;
    bool paused;
    pl_sse_cbs cbs;
    pl_server *srv;
    struct event *stall;         /* armed while paused */
    /* The reader's progress, from the kernel: while bytes are outstanding
     * (ours or the socket's), check every STALL_CHECK_MS that the peer
     * acknowledges some; none for the stall timeout means it stopped
     * reading, however slowly tokens come. */
    struct event *check;
    evutil_socket_t fd;
    uint64_t acked;              /* tcpi_bytes_acked at the last progress */
    double since;                /* monotonic s: last progress (or arming) */
    bool measured;               /* acked holds a reading for this episode */
};

#define STALL_CHECK_MS 250

struct pl_close_watch {
    struct evhttp_request *req;  /* the access log's key; the guard finds the connection by it */
    struct evhttp_connection *conn;
    bool via_guard;              /* registered with the connection guard */
    struct event *ev;            /* first a delay timer, then the EOF poll */
    evutil_socket_t fd;
    void (*fn)(void *);
    void *ud;
};

/* Most requests finish within milliseconds; polling their socket would
 * cost two epoll_ctl calls each. Arm the poll only after this delay. */
static const struct timeval watch_delay = {0, 20000};

static void watch_free(pl_close_watch *w, bool closing)
{
    if (!w->via_guard)
        evhttp_connection_set_closecb(w->conn, NULL, NULL);
    else if (!closing)
        pl_conn_unwatch(w->req);
    if (w->ev)
        event_free(w->ev);
    free(w);
}

static void watch_fire(void *arg)
{
    pl_close_watch *w = arg;
    void (*fn)(void *) = w->fn;
    void *ud = w->ud;
    struct evhttp_request *req = w->req;
    pl_access_end(req, 499);     /* nginx's "client closed request" */
    watch_free(w, true);
    fn(ud);
    /* When the client leaves before the reply ended, evhttp detaches the
     * request from the dying connection instead of freeing it (its reply is
     * still the user's); nobody replies to it now, so it is ours to free.
     * A request still attached is freed with its connection. */
    if (!evhttp_request_get_connection(req))
        evhttp_request_free(req);
}

static void watch_closed(struct evhttp_connection *conn, void *arg)
{
    watch_fire(arg);
}

/* The socket is readable while a request is in progress: EOF or an error
 * means the client left; data means a pipelined request, so stop looking. */
static void watch_readable(evutil_socket_t fd, short what, void *arg)
{
    pl_close_watch *w = arg;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        event_add(w->ev, NULL);
        return;
    }
    if (n > 0)
        return;
    /* Freeing the connection runs its close callback (watch_closed),
     * which frees w and tells the owner; evhttp frees the request. */
    evhttp_connection_free(w->conn);
}

static void watch_arm(evutil_socket_t unused, short what, void *arg)
{
    pl_close_watch *w = arg;
    event_assign(w->ev, event_get_base(w->ev), w->fd, EV_READ, watch_readable, w);
    event_add(w->ev, NULL);
}

pl_close_watch *pl_watch_close(struct evhttp_request *req, void (*fn)(void *), void *ud)
{
    struct evhttp_connection *conn = evhttp_request_get_connection(req);
    pl_close_watch *w = conn ? calloc(1, sizeof *w) : NULL;
    if (!w)
        return NULL;
    w->req = req;
    w->conn = conn;
    w->fn = fn;
    w->ud = ud;
    struct bufferevent *bev = evhttp_connection_get_bufferevent(conn);
    w->fd = bev ? bufferevent_getfd(bev) : -1;
    if (w->fd >= 0) {
        w->ev = evtimer_new(bufferevent_get_base(bev), watch_arm, w);
        evtimer_add(w->ev, &watch_delay);
    }
    w->via_guard = pl_conn_watch(req, watch_fire, w) == 0;
    if (!w->via_guard)
        evhttp_connection_set_closecb(conn, watch_closed, w);
    return w;
}

void pl_unwatch_close(struct evhttp_request *req, pl_close_watch *w)
{
    if (w)
        watch_free(w, false);
}

static void sse_closed(void *arg)
{
    pl_sse *s = arg;
    evtimer_del(s->stall);
    evtimer_del(s->check);
    s->req = NULL;
    s->watch = NULL;
    s->cbs.on_close(s->cbs.ud);
}

size_t pl_sse_pending(const pl_sse *s)
{
    if (!s->req)
        return 0;
    struct evhttp_connection *conn = evhttp_request_get_connection(s->req);
    struct bufferevent *bev = conn ? evhttp_connection_get_bufferevent(conn) : NULL;
    return bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
}

/* Called by evhttp once the connection's output has drained. */
static void sse_drained(struct evhttp_connection *conn, void *arg)
{
    pl_sse *s = arg;
    if (s->paused) {
        s->paused = false;
        evtimer_del(s->stall);
        if (s->cbs.on_pause)
            s->cbs.on_pause(s->cbs.ud, false);
    }
}

/* The client is not reading: close the connection; the close watch tells
 * the owner, which aborts its work and so frees its slot. */
static void sse_abort_stalled(pl_sse *s, const char *why)
{
    pl_server_count_stall(s->srv);
    pl_info("stream aborted: %s for %d s", why,
            pl_server_get_opts(s->srv)->stream_stall_timeout_s);
    evhttp_connection_free(evhttp_request_get_connection(s->req));
}

/* Paused for the whole stall timeout (our buffer never drained). */
static void sse_stalled(evutil_socket_t fd, short what, void *arg)
{
    pl_sse *s = arg;
    if (!s->req || !s->paused)
        return;
    sse_abort_stalled(s, "the client read nothing while delivery was paused");
}

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Bytes the peer has acknowledged so far, and bytes the socket holds that
 * it has not (sent or not). False where the socket is no TCP socket. */
static bool tcp_progress(evutil_socket_t fd, uint64_t *acked, size_t *unacked)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    int q = 0;
    if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_acked) + sizeof ti.tcpi_bytes_acked ||
        ioctl(fd, SIOCOUTQ, &q) < 0)
        return false;
    *acked = ti.tcpi_bytes_acked;
    *unacked = q > 0 ? (size_t)q : 0;
    return true;
}

static void sse_check_arm(pl_sse *s)
{
    static const struct timeval tv = {0, STALL_CHECK_MS * 1000};
    evtimer_add(s->check, &tv);
}

static void sse_check(evutil_socket_t unused, short what, void *arg)
{
    pl_sse *s = arg;
    uint64_t acked;
    size_t unacked;
    if (!s->req || !tcp_progress(s->fd, &acked, &unacked))
        return;
    if (unacked + pl_sse_pending(s) == 0) {
        s->measured = false;     /* all delivered: stop until the next write */
        return;
    }
    double now = mono_s();
    if (!s->measured || acked != s->acked) {
        if (s->measured)
            s->since = now;
        s->acked = acked;
        s->measured = true;
    } else if (now - s->since >= pl_server_get_opts(s->srv)->stream_stall_timeout_s) {
        sse_abort_stalled(s, "the client acknowledged nothing sent to it");
        return;
    }
    sse_check_arm(s);
}

pl_sse *pl_sse_start(pl_server *srv, struct evhttp_request *req, long cap, pl_sse_cbs cbs)
{
    pl_sse *s = calloc(1, sizeof *s);
    if (!s)
        goto fail;
    s->req = req;
    s->cap = cap;
    s->cbs = cbs;
    s->srv = srv;
    s->buf = evbuffer_new();
    s->stall = evtimer_new(pl_server_base(srv), sse_stalled, s);
    s->check = evtimer_new(pl_server_base(srv), sse_check, s);
    if (!s->buf || !s->stall || !s->check)
        goto fail;
    /* Without the watch a client close would leave s->req dangling. */
    s->watch = pl_watch_close(req, sse_closed, s);
    if (!s->watch)
        goto fail;
    struct bufferevent *bev = evhttp_connection_get_bufferevent(evhttp_request_get_connection(req));
    s->fd = bev ? bufferevent_getfd(bev) : -1;
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", "text/event-stream");
    evhttp_add_header(h, "Cache-Control", "no-cache");
    evhttp_add_header(h, "X-Accel-Buffering", "no");
    evhttp_send_reply_start(req, 200, "OK");
    return s;
fail:
    if (s && s->buf)
        evbuffer_free(s->buf);
    if (s && s->stall)
        event_free(s->stall);
    if (s && s->check)
        event_free(s->check);
    free(s);
    return NULL;
}

struct evbuffer *pl_sse_buf(pl_sse *s)
{
    return s->buf;
}

void pl_sse_flush(pl_sse *s)
{
    if (!s->req) {
        evbuffer_drain(s->buf, evbuffer_get_length(s->buf));
        return;
    }
    evhttp_send_reply_chunk_with_cb(s->req, s->buf, sse_drained, s);
    if (!evtimer_pending(s->check, NULL)) {
        s->since = mono_s();
        sse_check_arm(s);
    }
    if (!s->paused && (long)pl_sse_pending(s) > s->cap) {
        s->paused = true;
        struct timeval tv = {pl_server_get_opts(s->srv)->stream_stall_timeout_s, 0};
        evtimer_add(s->stall, &tv);
        if (s->cbs.on_pause)
            s->cbs.on_pause(s->cbs.ud, true);
    }
}

void pl_sse_send_data(pl_sse *s, const char *json, size_t len)
{
    evbuffer_add(s->buf, "data: ", 6);
    evbuffer_add(s->buf, json, len);
    evbuffer_add(s->buf, "\n\n", 2);
    pl_sse_flush(s);
}

void pl_sse_end(pl_sse *s)
{
    if (s->req) {
        pl_unwatch_close(s->req, s->watch);
        pl_access_end(s->req, evhttp_request_get_response_code(s->req));
        evhttp_send_reply_end(s->req);
    }
    event_free(s->stall);
    event_free(s->check);
    evbuffer_free(s->buf);
    free(s);
}

void pl_sse_free_closed(pl_sse *s)
{
    event_free(s->stall);
    event_free(s->check);
    evbuffer_free(s->buf);
    free(s);
}
