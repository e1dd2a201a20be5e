/* curl_loop.h - libcurl's multi interface driven by a libevent loop.
 *
 * libcurl tells us which sockets to watch (CURLMOPT_SOCKETFUNCTION) and
 * when to wake it (CURLMOPT_TIMERFUNCTION); each becomes a libevent event on
 * the main loop, so transfers progress without threads and nothing blocks.
 * One multi handle keeps the connection cache, so keep-alive connections to
 * an upstream are reused by later transfers.
 */
#ifndef PL_CURL_LOOP_H
#define PL_CURL_LOOP_H

#include <curl/curl.h>

struct event_base;

typedef struct pl_curl_loop pl_curl_loop;

/** A transfer: the caller owns it and its easy handle. done is called on
 *  the loop when the transfer ends (rc: CURLE_OK or the failure), after it
 *  was removed from the multi handle; the caller may then free it. */
typedef struct pl_curl_xfer {
    CURL *easy;
    void (*done)(struct pl_curl_xfer *x, CURLcode rc);
    void *ud;
    int in_multi;                /**< set while the multi handle holds it */
} pl_curl_xfer;

/** A loop on base. Returns NULL on failure. */
pl_curl_loop *pl_curl_loop_new(struct event_base *base);
/** Remove every transfer (without calling done) and free. */
void pl_curl_loop_free(pl_curl_loop *l);

/** Start x (x->easy set up by the caller). Returns 0 or -1. */
int pl_curl_loop_add(pl_curl_loop *l, pl_curl_xfer *x);
/** Stop x now without calling done: its connection is closed, so the
 *  upstream sees the client leave. Not from inside x's own callbacks. */
void pl_curl_loop_remove(pl_curl_loop *l, pl_curl_xfer *x);
/** Transfers in progress. */
int pl_curl_loop_active(const pl_curl_loop *l);

#endif
