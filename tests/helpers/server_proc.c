/* server_proc.c - run parley as a child process for integration tests. */
#include "tests/helpers/server_proc.h"

#include <poll.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

const char *pl_test_bin(void)
{
    const char *b = getenv("PARLEY_BIN");
    return b ? b : "build/parley";
}

static int server_start_(pl_test_server *s, const char *const *args, bool bind_any)
{
    int fds[2];
    if (pipe(fds) < 0)
        return -1;
    const char *argv[64] = {pl_test_bin(), "serve", "--host", "127.0.0.1", "--port", "0"};
    int n = bind_any ? 6 : 2;
    for (int i = 0; args && args[i] && n < 63; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    s->pid = pid;
    char buf[512];
    size_t len = 0;
    struct pollfd p = {.fd = fds[0], .events = POLLIN};
    while (len < sizeof buf - 1 && poll(&p, 1, 30000) > 0) {
        ssize_t k = read(fds[0], buf + len, sizeof buf - 1 - len);
        if (k <= 0)
            break;
        len += (size_t)k;
        buf[len] = '\0';
        char *u = strstr(buf, "http://");
        if (u && strchr(u, '\n')) {
            *strchr(u, '\n') = '\0';
            snprintf(s->url, sizeof s->url, "%s", u);
            close(fds[0]);
            return 0;
        }
    }
    close(fds[0]);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

int pl_test_server_start(pl_test_server *s, const char *const *args)
{
    return server_start_(s, args, true);
}

int pl_test_server_start_raw(pl_test_server *s, const char *const *args)
{
    return server_start_(s, args, false);
}

int pl_test_server_port(const pl_test_server *s)
{
    const char *c = strrchr(s->url, ':');
    return c ? atoi(c + 1) : -1;
}

int pl_test_server_stop(pl_test_server *s)
{
    int st;
    kill(s->pid, SIGTERM);
    for (int i = 0; i < 200; i++) {
        if (waitpid(s->pid, &st, WNOHANG) == s->pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        usleep(25000);
    }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, &st, 0);
    return -1;
}

static size_t collect(char *p, size_t sz, size_t n, void *ud)
{
    pl_test_resp *r = ud;
    size_t add = sz * n;
    r->body = realloc(r->body, r->len + add + 1);
    memcpy(r->body + r->len, p, add);
    r->len += add;
    r->body[r->len] = '\0';
    return add;
}

int pl_test_http(const char *method, const char *url, const char *body, size_t body_len,
                 pl_test_resp *r)
{
    memset(r, 0, sizeof *r);
    r->body = calloc(1, 1);
    CURL *c = curl_easy_init();
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    }
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    char *ct = NULL;
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
    if (ct)
        snprintf(r->content_type, sizeof r->content_type, "%s", ct);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return rc == CURLE_OK ? 0 : -1;
}

int pl_test_post_many(const char *url, char *const *bodies, int n, pl_test_resp *resp)
{
    CURLM *m = curl_multi_init();
    CURL **h = calloc((size_t)n, sizeof *h);
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    for (int i = 0; i < n; i++) {
        memset(&resp[i], 0, sizeof resp[i]);
        resp[i].body = calloc(1, 1);
        h[i] = curl_easy_init();
        curl_easy_setopt(h[i], CURLOPT_URL, url);
        curl_easy_setopt(h[i], CURLOPT_POSTFIELDS, bodies[i]);
        curl_easy_setopt(h[i], CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(h[i], CURLOPT_WRITEFUNCTION, collect);
        curl_easy_setopt(h[i], CURLOPT_WRITEDATA, &resp[i]);
        curl_easy_setopt(h[i], CURLOPT_TIMEOUT, 300L);
        curl_multi_add_handle(m, h[i]);
    }
    int running = 1;
    while (running) {
        curl_multi_perform(m, &running);
        curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    int rc = 0;
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(m, &left)))
        if (msg->msg == CURLMSG_DONE && msg->data.result != CURLE_OK)
            rc = -1;
    for (int i = 0; i < n; i++) {
        curl_easy_getinfo(h[i], CURLINFO_RESPONSE_CODE, &resp[i].status);
        curl_multi_remove_handle(m, h[i]);
        curl_easy_cleanup(h[i]);
    }
    free(h);
    curl_slist_free_all(hdr);
    curl_multi_cleanup(m);
    return rc;
}

void pl_test_resp_free(pl_test_resp *r)
{
    free(r->body);
    r->body = NULL;
}

int pl_test_sse_split(const char *body, char ***events, int *n)
{
    *events = NULL;
    *n = 0;
    const char *p = body;
    while (*p) {
        if (strncmp(p, "data: ", 6) != 0)
            return -1;
        const char *end = strstr(p, "\n\n");
        if (!end)
            return -1;
        const char *nl = strchr(p, '\n');
        if (nl != end)
            return -1;   /* one data line per event */
        *events = realloc(*events, (size_t)(*n + 1) * sizeof **events);
        (*events)[(*n)++] = strndup(p + 6, (size_t)(end - p - 6));
        p = end + 2;
    }
    return 0;
}

void pl_test_sse_free(char **events, int n)
{
    for (int i = 0; i < n; i++)
        free(events[i]);
    free(events);
}
