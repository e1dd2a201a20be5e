/* test_api_streaming.c - streaming safety: client disconnect aborts the
 * backend request, slow readers get backpressure, many concurrent streams. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/helpers/server_proc.h"

static pl_test_server srv;

static int server_port(void)
{
    return atoi(strrchr(srv.url, ':') + 1);
}

static json_t *mock_stats(void)
{
    char url[256];
    snprintf(url, sizeof url, "%s/status", srv.url);
    pl_test_resp r;
    cr_assert_eq(pl_test_http("GET", url, NULL, 0, &r), 0);
    json_t *j = json_loads(r.body, 0, NULL);
    pl_test_resp_free(&r);
    cr_assert_not_null(j);
    json_t *m = json_incref(json_object_get(json_object_get(j, "models"), "mock"));
    json_decref(j);
    return m;
}

static long mock_stat(const char *key)
{
    json_t *m = mock_stats();
    long v = (long)json_integer_value(json_object_get(m, key));
    json_decref(m);
    return v;
}

/* Open a raw connection and send a POST; returns the socket. */
static int raw_post(const char *path, const char *body, int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)server_port())};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    char req[4096];
    int n = snprintf(req, sizeof req,
                     "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s", path, strlen(body), body);
    cr_assert_eq(write(fd, req, (size_t)n), n);
    return fd;
}

static size_t read_some(int fd, char *buf, size_t cap, int timeout_ms)
{
    size_t len = 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (len < cap && poll(&p, 1, timeout_ms) > 0) {
        ssize_t k = read(fd, buf + len, cap - len);
        if (k <= 0)
            break;
        len += (size_t)k;
    }
    return len;
}

/* Read until needle shows up or deadline_ms pass; NUL-terminates buf. */
static size_t read_until(int fd, char *buf, size_t cap, const char *needle, int deadline_ms)
{
    size_t len = 0;
    buf[0] = '\0';
    struct pollfd p = {.fd = fd, .events = POLLIN};
    for (int waited = 0; len + 1 < cap && !strstr(buf, needle) && waited < deadline_ms;
         waited += 100) {
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t k = read(fd, buf + len, cap - 1 - len);
        if (k <= 0)
            break;
        len += (size_t)k;
        buf[len] = '\0';
    }
    return len;
}

/* Deadlines, not windows: a loaded machine only makes these tests slower. */
#define DEADLINE_MS 20000

static void wait_stat_at_least(const char *key, long want)
{
    long v = -1;
    for (int i = 0; i < DEADLINE_MS / 50 && (v = mock_stat(key)) < want; i++)
        usleep(50000);
    cr_expect_geq(v, want, "%s = %ld, want >= %ld", key, v, want);
}

static void start_slow(void)
{
    const char *args[] = {"--backend", "mock", "--mock-token-delay-ms", "20",
                          "--log-level", "warn", NULL};
    cr_assert_eq(pl_test_server_start(&srv, args), 0);
}

/* Criterion ignores failed assertions in .fini: the exit status is checked
 * at the end of each test body; .fini only cleans up after a failure. */
static void stop(void)
{
    if (srv.pid > 0)
        pl_test_server_stop(&srv);
    srv.pid = 0;
}

static void stop_checked(void)
{
    int rc = pl_test_server_stop(&srv);
    srv.pid = 0;
    cr_expect_eq(rc, 0, "the server exits 0 on SIGTERM (got %d)", rc);
}

Test(streaming, disconnect_mid_stream_aborts, .init = start_slow, .fini = stop, .timeout = 30)
{
    int fd = raw_post("/v1/chat/completions",
                      "{\"model\":\"mock\",\"stream\":true,\"max_tokens\":5000,"
                      "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 0);
    char buf[4096];
    read_until(fd, buf, sizeof buf, "data: ", DEADLINE_MS);
    cr_assert(strstr(buf, "data: "), "no stream data: %s", buf);
    cr_expect_eq(mock_stat("aborted"), 0);
    close(fd);
    wait_stat_at_least("aborted", 1);
    cr_expect_eq(mock_stat("in_flight"), 0);
    stop_checked();
}

Test(streaming, disconnect_non_stream_aborts, .init = start_slow, .fini = stop, .timeout = 30)
{
    int fd = raw_post("/v1/completions",
                      "{\"model\":\"mock\",\"max_tokens\":5000,\"prompt\":\"hi\"}", 0);
    wait_stat_at_least("in_flight", 1);
    cr_expect_eq(mock_stat("in_flight"), 1);
    close(fd);
    wait_stat_at_least("aborted", 1);
    cr_expect_eq(mock_stat("in_flight"), 0);
    stop_checked();
}

static void start_fast_small_buffer(void)
{
    const char *args[] = {"--backend", "mock", "--stream-buffer-bytes", "8192",
                          "--log-level", "warn", NULL};
    cr_assert_eq(pl_test_server_start(&srv, args), 0);
}

static long server_rss_kb(void)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)srv.pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            kb = atol(line + 6);
    if (f)
        fclose(f);
    return kb;
}

Test(streaming, slow_reader_gets_backpressure, .init = start_fast_small_buffer, .fini = stop,
     .timeout = 60)
{
    /* 200k tokens at zero delay is ~40 MB of SSE; without backpressure the
     * server would queue it all in well under a second. */
    long rss0 = server_rss_kb();
    int fd = raw_post("/v1/chat/completions",
                      "{\"model\":\"mock\",\"stream\":true,\"max_tokens\":200000,"
                      "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 4096);
    wait_stat_at_least("paused", 1);
    /* Give an unbounded server time to show it: a window that a slow
     * machine can only make less sensitive, never failing. */
    usleep(500000);
    cr_expect_eq(mock_stat("paused"), 1, "the slow stream is paused");
    cr_expect_eq(mock_stat("completed"), 0, "production stalled while unread");
    /* Growth, not an absolute figure: under ASan the baseline is larger. */
    long grown = server_rss_kb() - rss0;
    cr_expect_lt(grown, 24 * 1024, "server RSS grew %ld kB: stays bounded", grown);
    /* Drain everything: the stream resumes and completes with [DONE]. */
    size_t total = 0;
    char *buf = malloc(1 << 20), tail[32] = "";
    for (;;) {
        size_t n = read_some(fd, buf, 1 << 20, 5000);
        if (n == 0)
            break;
        total += n;
        size_t keep = n < 31 ? n : 31;
        memcpy(tail, buf + n - keep, keep);
        tail[keep] = '\0';
        if (strstr(tail, "0\r\n\r\n"))
            break;
    }
    free(buf);
    close(fd);
    cr_expect_gt(total, (size_t)20 << 20, "read %zu bytes", total);
    cr_expect(strstr(tail, "0\r\n\r\n"), "chunked reply ended; tail '%s'", tail);
    wait_stat_at_least("completed", 1);
    cr_expect_eq(mock_stat("paused"), 0);
    stop_checked();
}

/* ---- 200 concurrent streaming clients ---- */

static void start_concurrent(void)
{
    const char *args[] = {"--backend", "mock", "--mock-token-delay-ms", "5",
                          "--mock-capacity", "1000", "--log-level", "warn", NULL};
    cr_assert_eq(pl_test_server_start(&srv, args), 0);
}

Test(streaming, two_hundred_concurrent_streams, .init = start_concurrent, .fini = stop,
     .timeout = 120)
{
    enum { N = 200 };
    char url[256];
    snprintf(url, sizeof url, "%s/v1/chat/completions", srv.url);
    char *bodies[N];
    for (int i = 0; i < N; i++)
        bodies[i] = "{\"model\":\"mock\",\"stream\":true,\"max_tokens\":20,"
                    "\"stream_options\":{\"include_usage\":true},"
                    "\"messages\":[{\"role\":\"user\",\"content\":\"go\"}]}";
    static pl_test_resp resp[N];
    cr_assert_eq(pl_test_post_many(url, bodies, N, resp), 0);
    for (int i = 0; i < N; i++) {
        cr_expect_eq(resp[i].status, 200);
        char **ev;
        int n;
        cr_expect_eq(pl_test_sse_split(resp[i].body, &ev, &n), 0, "stream %d framing", i);
        /* role + 20 content + finish + usage + [DONE] */
        cr_expect_eq(n, 24, "stream %d has %d events", i, n);
        if (n > 0)
            cr_expect_str_eq(ev[n - 1], "[DONE]");
        pl_test_sse_free(ev, n);
        pl_test_resp_free(&resp[i]);
    }
    cr_expect_eq(mock_stat("completed"), N);
    stop_checked();
}
