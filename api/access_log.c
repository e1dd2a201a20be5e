/* access_log.c - the access log's records and its text and JSON lines. */
#include "api/access_log.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/base/log.h"

#define BUCKETS 1024

typedef struct access_rec {
    const struct evhttp_request *req;
    double t0;                   /* monotonic seconds */
    char method[8];
    char path[192];
    char id[64];
    char remote[48];
    int prompt, completion;
    bool has_usage;
    struct access_rec *next;     /* hash chain or free list */
} access_rec;

/* Per event-loop thread: each server runs on one thread. */
static _Thread_local access_rec *table_[BUCKETS];
static _Thread_local access_rec *spare_;
static _Thread_local int open_;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static access_rec **slot_(const struct evhttp_request *req)
{
    uintptr_t h = (uintptr_t)req;
    h ^= h >> 17;
    h *= 0x9E3779B97F4A7C15ull;
    return &table_[(h >> 40) & (BUCKETS - 1)];
}

static access_rec *find_(const struct evhttp_request *req, access_rec ***where)
{
    access_rec **p = slot_(req);
    for (; *p; p = &(*p)->next)
        if ((*p)->req == req) {
            if (where)
                *where = p;
            return *p;
        }
    return NULL;
}

/* snprintf(dst, cap, "%s", src) without printf's cost on every request. */
static void copy_cut(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static void remote_of(struct evhttp_request *req, char *out, size_t n)
{
    struct evhttp_connection *c = evhttp_request_get_connection(req);
    const char *addr = NULL;
    ev_uint16_t port = 0;
    if (c)
        evhttp_connection_get_peer(c, (char **)&addr, &port);
    copy_cut(out, n, addr ? addr : "-");
}

void pl_access_begin(struct evhttp_request *req, const char *method, const char *path,
                     const char *request_id)
{
    access_rec **prev;
    access_rec *r = find_(req, &prev);
    if (r) {                     /* a stale record at a reused address */
        *prev = r->next;
        open_--;
    } else if ((r = spare_)) {
        spare_ = r->next;
    } else if (!(r = malloc(sizeof *r))) {
        return;
    }
    memset(r, 0, sizeof *r);
    r->req = req;
    r->t0 = now_s();
    copy_cut(r->method, sizeof r->method, method);
    copy_cut(r->path, sizeof r->path, path);
    copy_cut(r->id, sizeof r->id, request_id ? request_id : "-");
    remote_of(req, r->remote, sizeof r->remote);
    access_rec **s = slot_(req);
    r->next = *s;
    *s = r;
    open_++;
}

void pl_access_usage(struct evhttp_request *req, int prompt_tokens, int completion_tokens)
{
    access_rec *r = find_(req, NULL);
    if (r) {
        r->prompt = prompt_tokens;
        r->completion = completion_tokens;
        r->has_usage = true;
    }
}

static void write_line(const access_rec *r, int status, double ms)
{
    char ts[40], line[1024];
    pl_log_timestamp(ts, sizeof ts);
    if (pl_log_is_json()) {
        char path[400], id[140];
        pl_log_json_escape(path, sizeof path, r->path);
        pl_log_json_escape(id, sizeof id, r->id);
        snprintf(line, sizeof line,
                 "{\"time\":\"%s\",\"level\":\"info\",\"msg\":\"access\",\"method\":\"%s\","
                 "\"path\":\"%s\",\"status\":%d,\"duration_ms\":%.3f,\"prompt_tokens\":%d,"
                 "\"completion_tokens\":%d,\"request_id\":\"%s\",\"remote\":\"%s\"}",
                 ts, r->method, path, status, ms, r->prompt, r->completion, id, r->remote);
    } else {
        snprintf(line, sizeof line,
                 "%s info  access %s %s %d %.3fms prompt_tokens=%d completion_tokens=%d "
                 "request_id=%s remote=%s",
                 ts, r->method, r->path, status, ms, r->prompt, r->completion, r->id,
                 r->remote);
    }
    pl_log_write(line);
}

void pl_access_end(struct evhttp_request *req, int status)
{
    access_rec **prev;
    access_rec *r = find_(req, &prev);
    if (!r)
        return;
    *prev = r->next;
    open_--;
    if (pl_log_get_level() <= PL_LOG_INFO)
        write_line(r, status, (now_s() - r->t0) * 1e3);
    r->next = spare_;
    spare_ = r;
}

int pl_access_open_count(void)
{
    return open_;
}
