#define _GNU_SOURCE
/* sse_hold.c - open N concurrent streaming chat completions against a
 * parley server and read them to the end, with epoll; prints how many
 * finished with [DONE], the events seen, and the wall time.
 *   sse_hold HOST PORT N MAX_TOKENS */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct conn {
    int fd;
    int done;
    long events;
    char tail[16];
} conn;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int open_stream(const char *host, int port, int max_tokens)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, host, &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        perror("connect");
        exit(1);
    }
    char body[256], req[512];
    int bl = snprintf(body, sizeof body,
                      "{\"model\":\"mock\",\"stream\":true,\"max_tokens\":%d,"
                      "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", max_tokens);
    int n = snprintf(req, sizeof req,
                     "POST /v1/chat/completions HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: "
                     "application/json\r\nContent-Length: %d\r\n\r\n%s", host, port, bl, body);
    if (write(fd, req, (size_t)n) != n) {
        perror("write");
        exit(1);
    }
    fcntl(fd, F_SETFL, O_NONBLOCK);
    return fd;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: sse_hold HOST PORT N MAX_TOKENS\n");
        return 2;
    }
    int port = atoi(argv[2]), n = atoi(argv[3]), mt = atoi(argv[4]);
    conn *c = calloc((size_t)n, sizeof *c);
    int ep = epoll_create1(0);
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        c[i].fd = open_stream(argv[1], port, mt);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &c[i]};
        epoll_ctl(ep, EPOLL_CTL_ADD, c[i].fd, &ev);
    }
    int left = n;
    char buf[65536];
    struct epoll_event evs[256];
    while (left > 0) {
        int k = epoll_wait(ep, evs, 256, 30000);
        if (k <= 0)
            break;
        for (int j = 0; j < k; j++) {
            conn *x = evs[j].data.ptr;
            ssize_t r = read(x->fd, buf, sizeof buf);
            if (r <= 0) {
                if (r < 0 && errno == EAGAIN)
                    continue;
                epoll_ctl(ep, EPOLL_CTL_DEL, x->fd, NULL);
                close(x->fd);
                left--;
                continue;
            }
            for (ssize_t q = 0; q + 5 < r; q++)
                if (!memcmp(buf + q, "data:", 5))
                    x->events++;
            if (memmem(buf, (size_t)r, "[DONE]", 6)) {
                x->done = 1;
                epoll_ctl(ep, EPOLL_CTL_DEL, x->fd, NULL);
                close(x->fd);
                left--;
            }
        }
    }
    int done = 0;
    long events = 0;
    for (int i = 0; i < n; i++) {
        done += c[i].done;
        events += c[i].events;
    }
    printf("RESULT streams=%d done=%d events=%ld seconds=%.2f\n", n, done, events, now_s() - t0);
    return done == n ? 0 : 1;
}
