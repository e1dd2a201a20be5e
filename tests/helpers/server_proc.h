/* server_proc.h - integration-test helpers: run `parley serve` as a child
 * on port 0, read its URL from stdout, and talk HTTP to it with libcurl. */
#ifndef PL_TEST_SERVER_PROC_H
#define PL_TEST_SERVER_PROC_H

#include <stddef.h>
#include <sys/types.h>

#include "tests/helpers/model_path.h"

typedef struct pl_test_server {
    pid_t pid;
    char url[128];               /**< "http://127.0.0.1:PORT" */
} pl_test_server;

/** Start PARLEY_BIN serve --host 127.0.0.1 --port 0 <args...> (NULL-ended).
 *  Returns 0, or -1 when it did not print its URL within 30 s. */
int pl_test_server_start(pl_test_server *s, const char *const *args);
/** Like pl_test_server_start without --host and --port: args say where
 *  (or the environment and config file do). */
int pl_test_server_start_raw(pl_test_server *s, const char *const *args);
/** The port in s->url. */
int pl_test_server_port(const pl_test_server *s);
/** SIGTERM, wait; returns the exit status (or -1 when it had to be killed). */
int pl_test_server_stop(pl_test_server *s);

typedef struct pl_test_resp {
    long status;
    char *body;                  /**< NUL-terminated, malloc'd */
    size_t len;
    char content_type[128];
} pl_test_resp;

/** method: "GET", "POST", ... body may be NULL. Returns 0 on transport
 *  success. Free with pl_test_resp_free. */
int pl_test_http(const char *method, const char *url, const char *body, size_t body_len,
                 pl_test_resp *r);
void pl_test_resp_free(pl_test_resp *r);

/** Path of the parley binary (env PARLEY_BIN). */
const char *pl_test_bin(void);


/** POST bodies[i] to url, all n at once (libcurl multi); fills resp[i]
 *  (free each with pl_test_resp_free). Returns 0 when every transfer
 *  completed at the transport level. */
int pl_test_post_many(const char *url, char *const *bodies, int n, pl_test_resp *resp);



/** Split an SSE body into its events' data payloads. Returns -1 if the
 *  framing is wrong (a line not "data: ...", an event not ended by a blank
 *  line). Free with pl_test_sse_free. */
int pl_test_sse_split(const char *body, char ***events, int *n);
void pl_test_sse_free(char **events, int n);
#endif
