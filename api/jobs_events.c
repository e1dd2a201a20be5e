/* jobs_events.c - GET /v1/jobs/{id}/events: a job's events over SSE.
 *
 * A late joiner first gets a `state` event (the job's status now), then the
 * live events. Backpressure: while the client's connection is over its
 * output cap, token deltas are dropped (they are optional, and the message
 * arrives whole in message_completed); past 8 times the cap the stream is
 * closed with an `error` event, and the client may reconnect to resume from
 * the current state. */
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "api/jobs_api_internal.h"
#include "api/respond.h"
#include "src/base/json_dump.h"
#include "src/base/json_pack.h"

struct job_stream {
    pl_jobs_api *a;
    api_job *aj;
    pl_sse *sse;
    int sub;
    bool tokens, paused;
    long cap;
    uint64_t dropped;
    job_stream *prev, *next;
};

static void stream_unlink(job_stream *st)
{
    if (st->prev)
        st->prev->next = st->next;
    else
        st->aj->streams = st->next;
    if (st->next)
        st->next->prev = st->prev;
}

static void stream_end(job_stream *st)
{
    if (st->sub > 0)
        pl_job_unsubscribe(st->aj->job, st->sub);
    stream_unlink(st);
    pl_sse_end(st->sse);
    free(st);
}

static void on_close(void *ud)
{
    job_stream *st = ud;
    if (st->sub > 0)
        pl_job_unsubscribe(st->aj->job, st->sub);
    stream_unlink(st);
    pl_sse_free_closed(st->sse);
    free(st);
}

static void on_pause(void *ud, bool paused)
{
    ((job_stream *)ud)->paused = paused;
}

/* Send data (stolen) as event name. Returns -1 on out-of-memory (data may
 * be NULL: a failed json_pack), with nothing sent. */
static int send_event(job_stream *st, const char *name, json_t *data)
{
    char *s = data ? pl_json_dumps(data, NULL) : NULL;
    json_decref(data);
    if (!s)
        return -1;
    struct evbuffer *b = pl_sse_buf(st->sse);
    evbuffer_add_printf(b, "event: %s\ndata: %s\n\n", name, s);
    free(s);
    pl_sse_flush(st->sse);
    return 0;
}

/* An event could not be built: say so with a static text, and close (the
 * client reconnects and resumes from the state event), as for a slow one. */
static void stream_fail(job_stream *st)
{
    static const char ev[] = "event: error\ndata: {\"type\":\"error\",\"message\":"
                             "\"out of memory: stream closed; reconnect to resume from the "
                             "current state\"}\n\n";
    evbuffer_add(pl_sse_buf(st->sse), ev, sizeof ev - 1);
    pl_sse_flush(st->sse);
    stream_end(st);
}

/* Token deltas are composed straight into the buffer: no JSON tree. */
static void send_token(job_stream *st, const pl_job_event *ev)
{
    struct evbuffer *b = pl_sse_buf(st->sse);
    evbuffer_add_printf(b, "event: token\ndata: {\"type\":\"token\",\"question_id\":\"");
    pl_json_escape(b, ev->question_id, strlen(ev->question_id));
    evbuffer_add_printf(b, "\",\"round\":%d,\"agent_id\":\"", ev->round);
    pl_json_escape(b, ev->agent_id, strlen(ev->agent_id));
    evbuffer_add_printf(b, "\",\"attempt\":%d,\"delta\":\"", ev->attempt);
    pl_json_escape(b, ev->text, ev->len);
    evbuffer_add(b, "\"}\n\n", 4);
    pl_sse_flush(st->sse);
}

static json_t *event_json(pl_job *job, const pl_job_event *ev)
{
    json_t *o = pl_json_pack("{s:s}", "type", pl_job_event_name(ev->kind));
    int rc = o ? 0 : -1;   /* json_object_set_new is NULL-safe: check once */
    if (ev->question_id)
        rc |= json_object_set_new(o, "question_id", json_string(ev->question_id));
    if (ev->agent_id) {
        rc |= json_object_set_new(o, "agent_id", json_string(ev->agent_id));
        rc |= json_object_set_new(o, "round", json_integer(ev->round));
        rc |= json_object_set_new(o, "attempt", json_integer(ev->attempt));
    }
    if (ev->kind == PL_JOB_EV_MESSAGE_COMPLETED) {
        rc |= json_object_set_new(o, "content", pl_json_string_lossy(ev->text, ev->len));
        rc |= json_object_set_new(o, "valid", json_boolean(ev->valid));
    }
    if (ev->answer >= 0)
        rc |= json_object_set_new(o, "answer",
                                  json_sprintf("%c", pl_job_choice_label(ev->answer)));
    if (ev->error)
        rc |= json_object_set_new(o, "error", json_string(ev->error));
    if (ev->kind == PL_JOB_EV_JOB_COMPLETED)
        rc |= json_object_set_new(o, "status", pl_job_status_json(job, 0));
    if (rc) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static void on_event(void *ud, const pl_job_event *ev)
{
    job_stream *st = ud;
    if (ev->kind == PL_JOB_EV_TOKEN) {
        if (st->paused)
            st->dropped++;
        else
            send_token(st, ev);
        return;
    }
    if ((long)pl_sse_pending(st->sse) > 8 * st->cap) {
        send_event(st, "error", pl_json_pack("{s:s, s:s}", "type", "error", "message",
                   "client too slow: stream closed; reconnect to resume from the current state"));
        stream_end(st);
        return;
    }
    if (send_event(st, pl_job_event_name(ev->kind), event_json(st->aj->job, ev)) < 0)
        stream_fail(st);
    else if (ev->kind == PL_JOB_EV_JOB_COMPLETED)
        stream_end(st);
}

static bool want_tokens(struct evhttp_request *req)
{
    const char *q = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    struct evkeyvalq kv;
    if (!q || evhttp_parse_query_str(q, &kv) < 0)
        return false;
    const char *v = evhttp_find_header(&kv, "tokens");
    bool on = v && (!strcmp(v, "1") || !strcmp(v, "true"));
    evhttp_clear_headers(&kv);
    return on;
}

void jobs_api_stream(pl_jobs_api *a, api_job *aj, struct evhttp_request *req)
{
    job_stream *st = calloc(1, sizeof *st);
    if (!st)
        goto fail;
    st->a = a;
    st->aj = aj;
    st->tokens = want_tokens(req);
    st->cap = pl_server_get_opts(a->srv)->stream_buffer_bytes;
    if (st->cap <= 0)
        st->cap = 1 << 20;
    st->sse = pl_sse_start(a->srv, req, st->cap, (pl_sse_cbs){on_close, on_pause, st});
    if (!st->sse)
        goto fail;
    st->next = aj->streams;
    if (aj->streams)
        aj->streams->prev = st;
    aj->streams = st;
    /* The headers are out: from here a failure is an error event. */
    pl_job_state s = pl_job_get_state(aj->job);
    if (send_event(st, "state", pl_job_status_json(aj->job, 10)) < 0) {
        stream_fail(st);
        return;
    }
    if (s != PL_JOB_RUNNING && s != PL_JOB_STARTING) {
        if (send_event(st, "job_completed",
                       pl_json_pack("{s:s, s:o}", "type", "job_completed", "status",
                                 pl_job_status_json(aj->job, 0))) < 0)
            stream_fail(st);
        else
            stream_end(st);
        return;
    }
    st->sub = pl_job_subscribe(aj->job, on_event, st, st->tokens);
    if (st->sub < 0)
        stream_fail(st);
    return;
fail:
    free(st);
    pl_reply_errorf(req, 500, "server_error", NULL, NULL, "out of memory");
}

void jobs_api_end_streams(pl_jobs_api *a, api_job *aj)
{
    while (aj->streams)
        stream_end(aj->streams);
}
