/* conn.h - the connection guard: what parley checks on a socket before
 * evhttp parses a byte of it.
 *
 * libevent 2.1's evhttp answers malformed requests with its own HTML pages
 * and is lenient where leniency is a vulnerability (two Content-Length
 * headers, Content-Length with Transfer-Encoding, unbounded headers). So
 * every accepted connection gets a socket bufferevent of ours (via
 * evhttp_set_bevcb) whose input buffer we watch: new bytes are staged, a
 * small framer validates each request head and follows its body framing,
 * and only validated bytes reach evhttp. A request we refuse is replaced by
 * a synthetic one that routes to our JSON error (pl_conn_take_reject), so
 * the error is ordered after earlier pipelined replies, then the connection
 * closes. The guard also sets TCP_NODELAY, the idle and write timeouts,
 * deadlines for a request's head and body, and the connection limit.
 *
 * Everything runs on the main thread.
 */
#ifndef PL_API_CONN_H
#define PL_API_CONN_H

#include <stdbool.h>
#include <stdint.h>

#include <event2/http.h>

typedef struct pl_conns pl_conns;

typedef struct pl_conns_opts {
    long max_header_bytes;       /**< 431 above (request line + headers) */
    long max_upload_bytes;       /**< 413 above a declared or chunked body */
    int idle_timeout_s;          /**< close keep-alive connections idle this long */
    int header_timeout_s;        /**< a request head must arrive within this */
    int body_timeout_s;          /**< a request body must arrive within this */
    int write_timeout_s;         /**< no write progress this long: close */
    int max_connections;         /**< 503 for requests on connections past it */
} pl_conns_opts;

/** Counters, for GET /status. */
typedef struct pl_conns_stats {
    int open;                    /**< connections now */
    uint64_t accepted, refused_busy, rejected, header_timeouts, body_timeouts;
} pl_conns_stats;

/** Install the guard on http (evhttp_set_bevcb, timeouts, size caps). */
pl_conns *pl_conns_new(struct evhttp *http, struct event_base *base,
                       const pl_conns_opts *o);
/** Free the table; call after evhttp_free (which closes every connection). */
void pl_conns_free(pl_conns *t);
pl_conns_stats pl_conns_get_stats(const pl_conns *t);
/** Does any connection hold reply bytes not yet written to its socket? */
bool pl_conns_output_pending(const pl_conns *t);

/** The path of the synthetic request that carries a refusal. */
#define PL_CONN_REJECT_PATH "/.parley-rejected-request"

/**
 * If req is the synthetic request standing for a refused one, fill the
 * error (status, code, message) and return true; the caller replies with it
 * and "Connection: close".
 */
bool pl_conn_take_reject(pl_conns *t, struct evhttp_request *req, int *status,
                         const char **code, char *msg, size_t msglen);

/**
 * Call fn(ud) once when req's connection closes before
 * pl_conn_unwatch. One watch per connection (a connection serves one
 * request at a time). Returns 0, or -1 when the connection is unknown.
 */
int pl_conn_watch(struct evhttp_request *req, void (*fn)(void *), void *ud);
void pl_conn_unwatch(struct evhttp_request *req);

#endif
