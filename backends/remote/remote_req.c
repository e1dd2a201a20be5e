/* remote_req.c - one request's attempts: start a streaming transfer on a
 * replica, end it, and decide between success, a retry before the first
 * token (connection refused, 5xx, 429, timeouts: on another replica, with
 * backoff or the upstream's Retry-After) and a clean error.
 *
 * Errors sent to clients name the model and the replica's number, never
 * its URL (which may carry credentials, and is internal anyway). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/remote/remote_req.h"

#define BACKOFF_BASE_MS 100
#define BACKOFF_MAX_MS 5000
#define RETRY_AFTER_MAX_MS 30000

double pl_remote_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void pl_remote_req_arm(remote_req *r, int ms)
{
    if (ms <= 0) {
        evtimer_del(r->timer);
        return;
    }
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(r->timer, &tv);
}

/* Detach from the replica and free the easy handle. */
static void end_transfer(remote_req *r)
{
    if (!r->x.easy)
        return;
    curl_easy_cleanup(r->x.easy);
    r->x.easy = NULL;
    r->rep->outstanding--;
}

void pl_remote_req_stop_transfer(remote_req *r)
{
    if (!r->x.easy)
        return;
    pl_curl_loop_remove(r->rb->loop, &r->x);
    end_transfer(r);
}

void pl_remote_req_free(remote_req *r)
{
    remote_backend *rb = r->rb;
    uint32_t s = (uint32_t)(r->id & 0xFFFFFF);
    rb->slots[s] = NULL;
    rb->gen[s]++;
    rb->free_slots[rb->n_free++] = s;
    rb->active--;
    if (r->timer)
        event_free(r->timer);
    if (r->resume)
        event_free(r->resume);
    if (r->errbody)
        evbuffer_free(r->errbody);
    pl_sse_reader_free(&r->sse);
    pl_chunk_scan_free(&r->scan);
    free(r->lp);
    free(r->top);
    free(r->tc);
    free(r->body);
    free(r);
}

/* Free r, then call its sink once (the sink may submit or abort others). */
static void finish(remote_req *r, pl_finish f, const pl_err *e)
{
    remote_backend *rb = r->rb;
    pl_err err = e ? *e : (pl_err){0};
    pl_result res = {.finish = f, .prompt_tokens = r->prompt_tokens,
                     .completion_tokens = r->completion_tokens ? r->completion_tokens : r->chunks,
                     .cached_tokens = r->cached_tokens, .ttft_ms = r->ttft_ms,
                     .error = e ? &err : NULL,
                     .tool_calls = r->tool_calls_finish && f == PL_FINISH_STOP};
    pl_sink sink = r->sink;
    if (f == PL_FINISH_ERROR)
        rb->failed++;
    else
        rb->completed++;
    pl_remote_req_free(r);
    sink.on_done(sink.ud, &res);
}

/* Before the first token: try again, or give up with e. */
static void retry_or_fail(remote_req *r, long delay_ms, const pl_err *e)
{
    remote_backend *rb = r->rb;
    if (r->got_token || r->attempt + 1 >= rb->o.max_attempts) {
        finish(r, PL_FINISH_ERROR, e);
        return;
    }
    r->attempt++;
    rb->retries++;
    r->rep->retries++;
    if (delay_ms < 0) {
        long b = BACKOFF_BASE_MS << (r->attempt - 1 < 6 ? r->attempt - 1 : 6);
        delay_ms = b > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : b;
        delay_ms += rand() % (delay_ms / 2 + 1);   /* jitter */
    }
    if (delay_ms > RETRY_AFTER_MAX_MS)
        delay_ms = RETRY_AFTER_MAX_MS;
    r->waiting_retry = true;
    if (delay_ms == 0)
        delay_ms = 1;
    pl_remote_req_arm(r, (int)delay_ms);
}

/* "model 'm', upstream replica 2 of 3" into out, for messages to clients. */
static const char *who(const remote_req *r, char *out, size_t n)
{
    snprintf(out, n, "model '%s', upstream replica %d of %d", r->rb->base.model,
             r->rep->index + 1, r->rb->n_reps);
    return out;
}

static void attempt_failed_transport(remote_req *r, CURLcode rc, const char *why)
{
    bool refused = rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
                   rc == CURLE_OPERATION_TIMEDOUT;
    pl_remote_replica_failed(r->rep, refused && !r->got_token, why);
    pl_err e;
    char w[160];
    int st = rc == CURLE_OPERATION_TIMEDOUT ? 504 : 502;
    if (r->got_token) {
        pl_err_set(&e, st, "server_error", NULL, "upstream_stream_broken",
                   "%s failed mid-stream: %s", who(r, w, sizeof w), why);
        finish(r, PL_FINISH_ERROR, &e);
        return;
    }
    pl_err_set(&e, st, "server_error", NULL, "upstream_unavailable", "%s: %s",
               who(r, w, sizeof w), why);
    retry_or_fail(r, -1, &e);
}

/* Is there a healthy replica besides r's? */
static bool other_replica(const remote_req *r)
{
    for (int i = 0; i < r->rb->n_reps; i++)
        if (&r->rb->reps[i] != r->rep && r->rb->reps[i].healthy)
            return true;
    return false;
}

/* The longest Retry-After worth waiting for now: what is left of the
 * request's first-token budget, and no more than RETRY_AFTER_MAX_MS. */
static long retry_budget_ms(const remote_req *r)
{
    long left = RETRY_AFTER_MAX_MS;
    int ftt = r->rb->o.first_token_timeout_ms;
    if (ftt > 0) {
        long rest = ftt - (long)(pl_remote_now_ms() - r->t_submit);
        left = rest < left ? rest : left;
    }
    return left;
}

static void attempt_http_error(remote_req *r)
{
    pl_err e;
    size_t len = evbuffer_get_length(r->errbody);
    pl_remote_error_from_body(&e, r->status, (const char *)evbuffer_pullup(r->errbody, -1), len);
    bool retryable = r->status == 429 || r->status >= 500;
    if (r->status >= 500)
        pl_remote_replica_failed(r->rep, false, e.message);
    long wait = r->retry_after_ms;
    if (wait > 0)                /* passed on if the client gets this error */
        e.retry_after_s = (int)((wait + 999) / 1000);
    if (retryable && wait > retry_budget_ms(r)) {
        /* Waiting that long would outlast the request: try another replica
         * at once, or hand the client the upstream's answer and its wait. */
        if (!other_replica(r))
            retryable = false;
        wait = -1;
    }
    if (!retryable) {
        finish(r, PL_FINISH_ERROR, &e);
        return;
    }
    retry_or_fail(r, wait, &e);
}

static void on_transfer_done(pl_curl_xfer *x, CURLcode rc)
{
    remote_req *r = x->ud;
    end_transfer(r);
    if (r->aborted) {
        pl_remote_req_free(r);
        return;
    }
    evtimer_del(r->timer);
    if (r->fail == RREQ_UPSTREAM_ERROR) {
        finish(r, PL_FINISH_ERROR, &r->err);
    } else if (r->fail == RREQ_MALFORMED) {
        pl_remote_replica_failed(r->rep, false, "malformed stream");
        pl_err e;
        char w[160];
        pl_err_set(&e, 502, "server_error", NULL, "upstream_bad_response",
                   "%s sent a malformed event stream", who(r, w, sizeof w));
        if (r->got_token)
            finish(r, PL_FINISH_ERROR, &e);
        else
            retry_or_fail(r, -1, &e);
    } else if (rc != CURLE_OK) {
        attempt_failed_transport(r, rc, curl_easy_strerror(rc));
    } else if (r->status < 200 || r->status >= 300) {
        attempt_http_error(r);
    } else if (!r->saw_done && r->finish == PL_FINISH_NONE) {
        attempt_failed_transport(r, CURLE_PARTIAL_FILE,
                                 "the stream ended before the reply was complete");
    } else {
        pl_remote_replica_ok(r->rep);
        finish(r, r->finish != PL_FINISH_NONE ? r->finish : PL_FINISH_STOP, NULL);
    }
}

static CURL *make_easy(remote_req *r)
{
    remote_backend *rb = r->rb;
    CURL *e = curl_easy_init();
    if (!e)
        return NULL;
    char url[2048];
    snprintf(url, sizeof url, "%s%s", r->rep->base_url,
             r->chat ? "/chat/completions" : "/completions");
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, rb->headers);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    if (rb->o.connect_timeout_ms > 0)
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)rb->o.connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, pl_remote_on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, pl_remote_on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    return e;
}

int pl_remote_req_start(remote_req *r)
{
    remote_backend *rb = r->rb;
    remote_replica *prev = r->attempt > 0 ? r->rep : NULL;
    r->waiting_retry = false;
    r->rep = pl_remote_route(rb, r->key, prev);
    r->status = 0;
    r->retry_after_ms = -1;
    r->fail = RREQ_OK;
    r->saw_done = false;
    r->finish = PL_FINISH_NONE;
    r->tool_calls_finish = false;
    evbuffer_drain(r->errbody, evbuffer_get_length(r->errbody));
    pl_sse_reader_reset(&r->sse);
    r->x.easy = make_easy(r);
    r->x.done = on_transfer_done;
    r->x.ud = r;
    if (!r->x.easy || pl_curl_loop_add(rb->loop, &r->x) < 0) {
        if (r->x.easy)
            curl_easy_cleanup(r->x.easy);
        r->x.easy = NULL;
        return -1;
    }
    r->rep->outstanding++;
    r->rep->requests++;
    if (r->paused)
        curl_easy_pause(r->x.easy, CURLPAUSE_RECV);
    else
        pl_remote_req_arm(r, rb->o.first_token_timeout_ms);
    return 0;
}

/* The request's one timer: a retry's backoff ended, or a timeout. */
void pl_remote_req_on_timer(evutil_socket_t fd, short what, void *arg)
{
    remote_req *r = arg;
    pl_err e;
    if (r->waiting_retry) {
        if (pl_remote_req_start(r) < 0) {
            pl_err_set(&e, 500, "server_error", NULL, NULL, "cannot start an upstream transfer");
            retry_or_fail(r, -1, &e);
        }
        return;
    }
    if (!r->x.easy || r->paused)
        return;
    pl_remote_req_stop_transfer(r);
    bool first = !r->got_token;
    int ms = first ? r->rb->o.first_token_timeout_ms : r->rb->o.token_timeout_ms;
    char why[64], w[160];
    snprintf(why, sizeof why, "no %s token within %d ms", first ? "first" : "next", ms);
    /* A replica that stops answering is ejected like one that refuses
     * connections, until a health check passes. */
    pl_remote_replica_failed(r->rep, true, why);
    pl_err_set(&e, 504, "server_error", NULL, "upstream_timeout", "%s: %s",
               who(r, w, sizeof w), why);
    if (first)
        retry_or_fail(r, -1, &e);
    else
        finish(r, PL_FINISH_ERROR, &e);
}
