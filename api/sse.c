/* sse.c - the SSE writer: chunked replies, backpressure, close watching. */
#include "api/sse.h"

#include <stdlib.h>
#include <string.h>

#include <event2/bufferevent.h>
#include <event2/http.h>

struct pl_sse {
    struct evhttp_request *req;
    struct evbuffer *buf;
    long cap;
    bool paused;
    pl_sse_cbs cbs;
};

void pl_watch_close(struct evhttp_request *req,
                    void (*fn)(struct evhttp_connection *, void *), void *ud)
{
    struct evhttp_connection *conn = evhttp_request_get_connection(req);
    if (conn)
        evhttp_connection_set_closecb(conn, fn, ud);
}

void pl_unwatch_close(struct evhttp_request *req)
{
    struct evhttp_connection *conn = evhttp_request_get_connection(req);
    if (conn)
        evhttp_connection_set_closecb(conn, NULL, NULL);
}

static void sse_closed(struct evhttp_connection *conn, void *arg)
{
    pl_sse *s = arg;
    evhttp_connection_set_closecb(conn, NULL, NULL);
    s->req = NULL;
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
        if (s->cbs.on_pause)
            s->cbs.on_pause(s->cbs.ud, false);
    }
}

pl_sse *pl_sse_start(struct evhttp_request *req, long cap, pl_sse_cbs cbs)
{
    pl_sse *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->req = req;
    s->buf = evbuffer_new();
    s->cap = cap;
    s->cbs = cbs;
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", "text/event-stream");
    evhttp_add_header(h, "Cache-Control", "no-cache");
    evhttp_add_header(h, "X-Accel-Buffering", "no");
    evhttp_send_reply_start(req, 200, "OK");
    pl_watch_close(req, sse_closed, s);
    return s;
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
    if (!s->paused && (long)pl_sse_pending(s) > s->cap) {
        s->paused = true;
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
        pl_unwatch_close(s->req);
        evhttp_send_reply_end(s->req);
    }
    evbuffer_free(s->buf);
    free(s);
}

void pl_sse_free_closed(pl_sse *s)
{
    evbuffer_free(s->buf);
    free(s);
}
