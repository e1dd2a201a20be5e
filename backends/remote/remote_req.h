/* remote_req.h - one request to an upstream: its transfer, its stream
 * parsing, its retries and timeouts (remote_req.c, remote_stream.c). */
#ifndef PL_REMOTE_REQ_H
#define PL_REMOTE_REQ_H

#include "backends/remote/chunk_scan.h"
#include "backends/remote/remote_internal.h"

typedef enum rreq_fail {
    RREQ_OK = 0,
    RREQ_MALFORMED,              /* bad SSE or JSON from the upstream */
    RREQ_UPSTREAM_ERROR,         /* an error event inside the stream */
} rreq_fail;

typedef struct remote_req {
    uint64_t id;
    remote_backend *rb;
    pl_sink sink;
    char *body;                  /* upstream JSON body */
    size_t body_len;
    bool chat;
    uint64_t key;
    remote_replica *rep;         /* the current attempt's replica */
    pl_curl_xfer x;              /* x.easy != NULL while a transfer runs */
    pl_sse_reader sse;
    pl_chunk_scan scan;          /* the token path's non-allocating reader */
    struct event *timer;         /* backoff, first-token and gap timeouts */
    struct event *resume;        /* unpause outside of any callback */
    int attempt;
    long status;                 /* HTTP status of this attempt */
    long retry_after_ms;         /* -1: none */
    struct evbuffer *errbody;    /* a non-2xx reply's body */
    rreq_fail fail;
    pl_err err;                  /* set with RREQ_UPSTREAM_ERROR */
    bool got_token, saw_done, paused, in_cb, aborted, waiting_retry;
    pl_finish finish;
    bool tool_calls_finish;      /* the upstream's finish_reason was "tool_calls" */
    int prompt_tokens, completion_tokens, cached_tokens, chunks;
    double t_submit, ttft_ms;
    /* logprob scratch, reused across deltas */
    pl_token_logprob *lp;
    int lp_cap;
    pl_top_logprob *top;
    int top_cap;
    pl_tool_call_delta *tc;      /* tool-call fragments scratch */
    int tc_cap;
} remote_req;

double pl_remote_now_ms(void);
/** Start (or restart) an attempt on a replica the router picks. Returns
 *  0, or -1 when no transfer could be started (nothing was called). */
int pl_remote_req_start(remote_req *r);
/** The request timer's callback (backoff over, or a timeout). */
void pl_remote_req_on_timer(evutil_socket_t fd, short what, void *arg);
/** Free r (its transfer must be gone). */
void pl_remote_req_free(remote_req *r);
/** Stop r's transfer now, from outside libcurl callbacks. */
void pl_remote_req_stop_transfer(remote_req *r);
/** Arm r's timer for ms (0 < ms), or disarm it (ms <= 0). */
void pl_remote_req_arm(remote_req *r, int ms);

/* remote_stream.c */
/** The libcurl write callback of request transfers. */
size_t pl_remote_on_write(char *p, size_t sz, size_t n, void *ud);
/** The libcurl header callback (status line, Retry-After). */
size_t pl_remote_on_header(char *p, size_t sz, size_t n, void *ud);
/** Turn an error body into *e (upstream message and status). */
void pl_remote_error_from_body(pl_err *e, long status, const char *body, size_t len);

#endif
