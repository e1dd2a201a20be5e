/* fake_upstream.c - the scriptable libmicrohttpd upstream. */
#include "tests/helpers/fake_upstream.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "backends/remote/remote.h"

#define FAKE_MAX_STEPS 64

struct pl_fake_upstream {
    struct MHD_Daemon *d;
    char url[64];
    char model[64];
    pthread_mutex_t mu;
    pl_fake_step steps[FAKE_MAX_STEPS];
    char *bodies[FAKE_MAX_STEPS];
    int n_steps, next_step;
    int requests, client_closed, probes;
    char *last_body;
    pl_fake_flavour flavour;
    char *probe_regex, *probe_json;  /* the last probe bodies */
    int probe_delays, probe_delay_ms;
    char *probe_text, *probe_finish;  /* set: every probe's answer */
};

typedef struct fake_conn {
    char *body;
    size_t len;
} fake_conn;

typedef struct fake_stream {
    pl_fake_upstream *f;
    pl_fake_step s;
    bool chat;
    int sent;                    /* tokens sent */
    int phase;                   /* 0 tokens, 1 finish, 2 usage, 3 done, 4 end */
    bool ended;
} fake_stream;

static int take_step(pl_fake_upstream *f, pl_fake_step *out)
{
    pthread_mutex_lock(&f->mu);
    f->requests++;
    memset(out, 0, sizeof *out);
    if (f->next_step < f->n_steps)
        *out = f->steps[f->next_step++];
    pthread_mutex_unlock(&f->mu);
    return 0;
}

static ssize_t put(char *buf, size_t max, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ssize_t put(char *buf, size_t max, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, max, fmt, ap);
    va_end(ap);
    return n < 0 || (size_t)n >= max ? MHD_CONTENT_READER_END_WITH_ERROR : n;
}

/* The fragments of PL_FAKE_TOOL_CALLS, as vLLM streams them: a call's id
 * and name first, then pieces of its arguments. */
static const char *const TOOL_EVENTS[PL_FAKE_TOOL_EVENTS] = {
    "{\"index\":0,\"id\":\"call_w1\",\"type\":\"function\",\"function\":{\"name\":"
    "\"get_weather\",\"arguments\":\"\"}}",
    "{\"index\":0,\"function\":{\"arguments\":\"{\\\"city\\\": \"}}",
    "{\"index\":0,\"function\":{\"arguments\":\"\\\"Paris\\\"}\"}}",
    "{\"index\":1,\"id\":\"call_t2\",\"type\":\"function\",\"function\":{\"name\":"
    "\"get_time\",\"arguments\":\"{}\"}}",
};

static ssize_t token_event(fake_stream *st, char *buf, size_t max)
{
    const pl_fake_step *s = &st->s;
    if (s->drop_after > 0 && st->sent >= s->drop_after) {
        st->ended = true;        /* our own drop, not the client's */
        return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    if (s->token_delay_ms > 0)
        usleep((useconds_t)s->token_delay_ms * 1000);
    st->sent++;
    if (st->chat && s->tool_calls)
        return put(buf, max, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":"
                   "0,\"delta\":{\"tool_calls\":[%s]},\"finish_reason\":null}]}\n\n",
                   TOOL_EVENTS[st->sent - 1]);
    if (st->chat)
        return put(buf, max, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":"
                   "0,\"delta\":{\"content\":\"tok%d \"},\"finish_reason\":null}]}\n\n", st->sent);
    return put(buf, max, "data: {\"object\":\"text_completion\",\"choices\":[{\"index\":0,"
               "\"text\":\"tok%d \",\"finish_reason\":null}]}\n\n", st->sent);
}

/* The stream, one event per call. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    fake_stream *st = cls;
    const pl_fake_step *s = &st->s;
    int n_tokens = s->tool_calls && st->chat ? PL_FAKE_TOOL_EVENTS
                 : s->n_tokens > 0 ? s->n_tokens : 3;
    switch (st->phase) {
    case 0:
        if (s->malformed) {
            st->phase = 3;
            return put(buf, max, "data: {\"choices\": [ oops\n\n");
        }
        if (s->never_end || st->sent < n_tokens)
            return token_event(st, buf, max);
        st->phase = 1;
        if (s->end_early) {
            st->ended = true;
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (s->error_event) {
            st->phase = 3;
            return put(buf, max, "data: {\"error\":{\"message\":\"engine died\",\"type\":"
                       "\"server_error\",\"code\":500}}\n\n");
        }
        return put(buf, max, "data: {\"choices\":[{\"index\":0,%s,\"finish_reason\":\"%s\"}]}"
                   "\n\n", st->chat ? "\"delta\":{}" : "\"text\":\"\"",
                   s->tool_calls && st->chat ? "tool_calls" : "length");
    case 1:
        st->phase = 2;
        if (!s->no_usage)
            return put(buf, max, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,"
                       "\"completion_tokens\":%d,\"total_tokens\":%d,"
                       "\"prompt_tokens_details\":{\"cached_tokens\":5}}}\n\n", st->sent,
                       7 + st->sent);
        /* fall through */
    case 2:
        st->phase = 3;
        return put(buf, max, "data: [DONE]\n\n");
    default:
        st->ended = true;
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
}

static void stream_free(void *cls)
{
    fake_stream *st = cls;
    if (!st->ended) {
        pthread_mutex_lock(&st->f->mu);
        st->f->client_closed++;
        pthread_mutex_unlock(&st->f->mu);
    }
    free(st);
}

static enum MHD_Result reply_text(struct MHD_Connection *c, int status, const char *body,
                                  int retry_after)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), (void *)body,
                                                             MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (retry_after > 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", retry_after);
        MHD_add_response_header(r, "Retry-After", v);
    }
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

/* ---- flavours: what each enforces when probed ---- */

static const char *const owners[] = {"fake", "vllm", "vllm", "vllm", "vllm", "sglang",
                                     "llamacpp", "library"};
static const char *const versions[] = {NULL, "0.11.0", "0.9.2", "0.12.0", NULL, NULL, NULL, NULL};

static bool has_rf(json_t *b, const char *type)
{
    const char *t = json_string_value(json_object_get(json_object_get(b, "response_format"),
                                                      "type"));
    return t && !strcmp(t, type);
}

/* Whether flavour fl would enforce a regex (json false) or a JSON schema
 * (json true) sent in body b. */
static bool enforces(pl_fake_flavour fl, json_t *b, bool json)
{
    json_t *so = json_object_get(b, "structured_outputs");
    bool so_ok = fl == PL_FAKE_VLLM || fl == PL_FAKE_VLLM_NEW;
    bool guided_ok = fl == PL_FAKE_VLLM || fl == PL_FAKE_VLLM_OLD || fl == PL_FAKE_VLLM_NOVERSION;
    bool rf = has_rf(b, "json_schema") && fl != PL_FAKE_PLAIN;
    if (json)
        return rf || (so_ok && json_object_get(so, "json")) ||
               (guided_ok && json_object_get(b, "guided_json")) ||
               (fl == PL_FAKE_LLAMACPP && json_object_get(b, "json_schema"));
    return (so_ok && json_object_get(so, "regex")) ||
           (guided_ok && json_object_get(b, "guided_regex")) ||
           (fl == PL_FAKE_SGLANG && json_object_get(b, "regex")) ||
           (fl == PL_FAKE_LLAMACPP && json_object_get(b, "grammar"));
}

static enum MHD_Result answer_probe(pl_fake_upstream *f, struct MHD_Connection *c,
                                    const char *body)
{
    json_t *b = json_loads(body, 0, NULL);
    bool json = body && strstr(body, "boolean") != NULL;   /* the {"ok": boolean} probe */
    pthread_mutex_lock(&f->mu);
    f->probes++;
    char **slot = json ? &f->probe_json : &f->probe_regex;
    free(*slot);
    *slot = strdup(body);
    bool ok = enforces(f->flavour, b, json);
    int delay = f->probe_delays > 0 ? f->probe_delay_ms : 0;
    f->probe_delays -= f->probe_delays > 0;
    pthread_mutex_unlock(&f->mu);
    if (delay)
        usleep((useconds_t)delay * 1000);
    json_decref(b);
    const char *text = !ok ? "Hello there" : json ? "{\"ok\": true}" : "123";
    pthread_mutex_lock(&f->mu);
    json_t *r = json_pack("{s:s, s:[{s:i, s:{s:s, s:s}, s:s}]}", "object", "chat.completion",
                          "choices", "index", 0, "message", "role", "assistant", "content",
                          f->probe_text ? f->probe_text : text, "finish_reason",
                          f->probe_finish ? f->probe_finish : "stop");
    pthread_mutex_unlock(&f->mu);
    char *reply = json_dumps(r, JSON_COMPACT);
    json_decref(r);
    enum MHD_Result rc = reply_text(c, 200, reply, 0);
    free(reply);
    return rc;
}

static enum MHD_Result answer_post(pl_fake_upstream *f, struct MHD_Connection *c,
                                   const char *url, fake_conn *fc)
{
    if (fc->body && strstr(fc->body, PL_REMOTE_PROBE_MARK))
        return answer_probe(f, c, fc->body);
    pl_fake_step s;
    take_step(f, &s);
    pthread_mutex_lock(&f->mu);
    free(f->last_body);
    f->last_body = strndup(fc->body ? fc->body : "", fc->len);
    pthread_mutex_unlock(&f->mu);
    if (s.header_delay_ms > 0)
        usleep((useconds_t)s.header_delay_ms * 1000);
    if (s.status && s.status != 200)
        return reply_text(c, s.status, s.body ? s.body : "{}", s.retry_after_s);
    fake_stream *st = calloc(1, sizeof *st);
    st->f = f;
    st->s = s;
    st->chat = strstr(url, "chat") != NULL;
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096,
                                                               stream_read, st, stream_free);
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    enum MHD_Result rc = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls)
{
    pl_fake_upstream *f = cls;
    if (!strcmp(method, "GET")) {
        char body[256];
        pthread_mutex_lock(&f->mu);
        pl_fake_flavour fl = f->flavour;
        pthread_mutex_unlock(&f->mu);
        snprintf(body, sizeof body, "{\"object\":\"list\",\"data\":[{\"id\":\"%s\",\"object\":"
                 "\"model\",\"owned_by\":\"%s\",\"max_model_len\":2048}]}", f->model,
                 owners[fl]);
        if (!strcmp(url, "/v1/models"))
            return reply_text(c, 200, body, 0);
        if (!strcmp(url, "/version") && versions[fl]) {
            snprintf(body, sizeof body, "{\"version\":\"%s\"}", versions[fl]);
            return reply_text(c, 200, body, 0);
        }
        return reply_text(c, 404, "{\"error\":{\"message\":\"not found\"}}", 0);
    }
    fake_conn *fc = *con_cls;
    if (!fc) {
        *con_cls = calloc(1, sizeof *fc);
        return MHD_YES;
    }
    if (*upload_size) {
        char *b = realloc(fc->body, fc->len + *upload_size + 1);
        if (!b)
            return MHD_NO;
        memcpy(b + fc->len, upload, *upload_size);
        fc->body = b;
        fc->len += *upload_size;
        b[fc->len] = '\0';
        *upload_size = 0;
        return MHD_YES;
    }
    return answer_post(f, c, url, fc);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    fake_conn *fc = *con_cls;
    if (fc) {
        free(fc->body);
        free(fc);
        *con_cls = NULL;
    }
}

pl_fake_upstream *pl_fake_start(const char *model)
{
    pl_fake_upstream *f = calloc(1, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    snprintf(f->model, sizeof f->model, "%s", model);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    f->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                            MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, f,
                            MHD_OPTION_SOCK_ADDR, &a, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
                            NULL, MHD_OPTION_CONNECTION_TIMEOUT, 60u, MHD_OPTION_END);
    if (!f->d) {
        free(f);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(f->d, MHD_DAEMON_INFO_BIND_PORT);
    snprintf(f->url, sizeof f->url, "http://127.0.0.1:%u/v1", (unsigned)di->port);
    return f;
}

void pl_fake_stop(pl_fake_upstream *f)
{
    if (!f)
        return;
    MHD_stop_daemon(f->d);
    for (int i = 0; i < f->n_steps; i++)
        free(f->bodies[i]);
    free(f->last_body);
    free(f->probe_regex);
    free(f->probe_json);
    free(f->probe_text);
    free(f->probe_finish);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

const char *pl_fake_url(pl_fake_upstream *f)
{
    return f->url;
}

void pl_fake_push(pl_fake_upstream *f, const pl_fake_step *s)
{
    pthread_mutex_lock(&f->mu);
    if (f->n_steps < FAKE_MAX_STEPS) {
        f->steps[f->n_steps] = *s;
        if (s->body) {
            f->bodies[f->n_steps] = strdup(s->body);
            f->steps[f->n_steps].body = f->bodies[f->n_steps];
        }
        f->n_steps++;
    }
    pthread_mutex_unlock(&f->mu);
}

int pl_fake_requests(pl_fake_upstream *f)
{
    pthread_mutex_lock(&f->mu);
    int n = f->requests;
    pthread_mutex_unlock(&f->mu);
    return n;
}

int pl_fake_client_closed(pl_fake_upstream *f)
{
    pthread_mutex_lock(&f->mu);
    int n = f->client_closed;
    pthread_mutex_unlock(&f->mu);
    return n;
}

char *pl_fake_last_body(pl_fake_upstream *f)
{
    pthread_mutex_lock(&f->mu);
    char *b = f->last_body ? strdup(f->last_body) : NULL;
    pthread_mutex_unlock(&f->mu);
    return b;
}

void pl_fake_set_flavour(pl_fake_upstream *f, pl_fake_flavour fl)
{
    pthread_mutex_lock(&f->mu);
    f->flavour = fl;
    pthread_mutex_unlock(&f->mu);
}

int pl_fake_probes(pl_fake_upstream *f)
{
    pthread_mutex_lock(&f->mu);
    int n = f->probes;
    pthread_mutex_unlock(&f->mu);
    return n;
}

char *pl_fake_probe_body(pl_fake_upstream *f, const char *family)
{
    pthread_mutex_lock(&f->mu);
    const char *b = strcmp(family, "json") ? f->probe_regex : f->probe_json;
    char *s = b ? strdup(b) : NULL;
    pthread_mutex_unlock(&f->mu);
    return s;
}

void pl_fake_delay_probes(pl_fake_upstream *f, int n, int ms)
{
    pthread_mutex_lock(&f->mu);
    f->probe_delays = n;
    f->probe_delay_ms = ms;
    pthread_mutex_unlock(&f->mu);
}

void pl_fake_set_probe_reply(pl_fake_upstream *f, const char *text, const char *finish)
{
    pthread_mutex_lock(&f->mu);
    free(f->probe_text);
    free(f->probe_finish);
    f->probe_text = text ? strdup(text) : NULL;
    f->probe_finish = finish ? strdup(finish) : NULL;
    pthread_mutex_unlock(&f->mu);
}
