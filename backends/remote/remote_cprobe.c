/* remote_cprobe.c - does an upstream enforce the constraints parley sends
 * it? One tiny request per family and replica, constrained the way
 * remote_constrain.c writes it, at start-up (blocking, every replica at
 * once, within a time budget) and on the loop for a replica that comes up
 * later:
 *
 *   regex:  "[0-9]{3}" on "Say hello." - a model left free says hello;
 *   json:   {"ok": boolean}, no other key.
 *
 * A reply that matches: enforced. A 200 that does not: the field was
 * dropped (ignored). A 4xx naming the field: refused. Anything else (a
 * timeout, 5xx, a 4xx about something else) tells nothing: unknown, and
 * the constraint is still sent, unverified. vLLM's field style comes from
 * its /version (structured_outputs from 0.10.2 on, guided_* before); with
 * no version, a second round tries guided_* when structured_outputs was
 * not enforced.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/remote/remote_req.h"
#include "src/base/log.h"

#define CPROBE_ROUNDS_MAX 4      /* rounds per replica, start-up ones included */
#define CPROBE_REGEX "[0-9]{3}"
#define CPROBE_SCHEMA "{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"}}," \
                      "\"required\":[\"ok\"],\"additionalProperties\":false}"

typedef struct cprobe_one {
    pl_curl_xfer x;
    struct remote_cprobe *owner;
    remote_cfamily f;
    char *body;
    struct evbuffer *out;
    long status;
} cprobe_one;

/* One round on one replica. */
typedef struct remote_cprobe {
    remote_replica *rep;
    cprobe_one one[REMOTE_CF_N];
    int pending;
    struct curl_slist *headers;
} remote_cprobe;

/* ---- the requests ---- */

static const char *field_of(const remote_replica *rep, remote_cfamily f)
{
    bool rx = f == REMOTE_CF_REGEX;
    switch (rep->kind) {
    case PL_REMOTE_VLLM:
        return rep->caps.guided ? (rx ? "guided_regex" : "guided_json") : "structured_outputs";
    case PL_REMOTE_SGLANG:
        return rx ? "regex" : "response_format";
    case PL_REMOTE_LLAMACPP:
        return rx ? "grammar" : "json_schema";
    default:
        return rx ? "guided_regex" : "response_format";
    }
}

static char *probe_body(const remote_replica *rep, remote_cfamily f)
{
    static const pl_chat_message msgs[] = {{"user", "Say hello. (" PL_REMOTE_PROBE_MARK ")"}};
    pl_gen_request req = {.messages = msgs, .n_messages = 1, .add_generation_prompt = true};
    pl_sampling_defaults(&req.sampling);
    req.sampling.temperature = 0;
    req.sampling.max_tokens = f == REMOTE_CF_REGEX ? 6 : 24;
    req.sampling.constraint = f == REMOTE_CF_REGEX ? PL_CONSTRAINT_REGEX : PL_CONSTRAINT_JSON_SCHEMA;
    req.sampling.constraint_text = f == REMOTE_CF_REGEX ? CPROBE_REGEX : CPROBE_SCHEMA;
    remote_target t = {.kind = rep->kind, .guided = rep->caps.guided, .version = rep->caps.version,
                       .model = rep->rb->upstream_model};
    pl_err err = {0};
    json_t *o = pl_remote_body_json(&req, &t, &err);
    char *s = NULL;
    if (o) {
        json_object_set_new(o, "stream", json_false());
        json_object_del(o, "stream_options");
        s = json_dumps(o, JSON_COMPACT);
    }
    json_decref(o);
    return s;
}

static size_t probe_write(char *p, size_t sz, size_t n, void *ud)
{
    cprobe_one *one = ud;
    if (evbuffer_get_length(one->out) + sz * n > 1u << 20)
        return 0;
    evbuffer_add(one->out, p, sz * n);
    return sz * n;
}

static int probe_easy(cprobe_one *one, remote_replica *rep, struct curl_slist *h, int timeout_ms)
{
    char url[2048];
    CURL *e = curl_easy_init();
    one->body = probe_body(rep, one->f);
    one->out = evbuffer_new();
    if (!e || !one->body || !one->out) {
        if (e)
            curl_easy_cleanup(e);
        return -1;
    }
    snprintf(url, sizeof url, "%s/chat/completions", rep->base_url);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, one->body);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, probe_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, one);
    one->x.easy = e;
    return 0;
}

/* ---- what the replies say ---- */

static void set_state(remote_replica *rep, remote_cfamily f, remote_cstate s, const char *fmt,
                      ...) __attribute__((format(printf, 4, 5)));
static void set_state(remote_replica *rep, remote_cfamily f, remote_cstate s, const char *fmt,
                      ...)
{
    va_list ap;
    rep->caps.state[f] = s;
    va_start(ap, fmt);
    vsnprintf(rep->caps.why[f], sizeof rep->caps.why[f], fmt, ap);
    va_end(ap);
}

/* How a probe's reply compares with its constraint: 2 matches, 1 is a
 * prefix of a match (a reply cut at max_tokens tells nothing), 0 cannot
 * be one. JSON is compared without its whitespace, which upstreams are
 * free to add. */
static int reply_match(remote_cfamily f, const char *text)
{
    size_t n = strlen(text);
    if (f == REMOTE_CF_REGEX)
        return strspn(text, "0123456789") != n || n > 3 ? 0 : n == 3 ? 2 : 1;
    char t[64];
    size_t k = 0;
    for (; *text && k < sizeof t - 1; text++)
        if (!strchr(" \t\r\n", *text))
            t[k++] = *text;
    t[k] = '\0';
    static const char *const want[] = {"{\"ok\":true}", "{\"ok\":false}"};
    for (int i = 0; i < 2; i++)
        if (!strncmp(t, want[i], k))
            return k == strlen(want[i]) ? 2 : 1;
    return 0;
}

static void judge_ok(remote_replica *rep, remote_cfamily f, const char *body, size_t len)
{
    const char *field = field_of(rep, f);
    json_t *root = json_loadb(body, len, 0, NULL);
    json_t *ch = json_array_get(json_object_get(root, "choices"), 0);
    const char *text = json_string_value(json_object_get(json_object_get(ch, "message"),
                                                         "content"));
    const char *fin = json_string_value(json_object_get(ch, "finish_reason"));
    int m = text ? reply_match(f, text) : -1;
    if (m < 0)
        set_state(rep, f, REMOTE_C_UNKNOWN, "the probe's reply was no chat completion");
    else if (m == 2)
        set_state(rep, f, REMOTE_C_ENFORCED, "%s", "");
    else if (m == 1 && fin && !strcmp(fin, "length"))
        set_state(rep, f, REMOTE_C_UNKNOWN, "the probe's reply was cut at max_tokens: "
                  "\"%.60s\"", text);
    else
        set_state(rep, f, REMOTE_C_IGNORED, "it ignores %s: a probe constrained by it came back "
                  "as \"%.60s\"", field, text);
    json_decref(root);
}

static void judge(cprobe_one *one, remote_replica *rep, CURLcode rc)
{
    remote_cfamily f = one->f;
    size_t len = evbuffer_get_length(one->out);
    const char *body = (const char *)evbuffer_pullup(one->out, -1);
    if (rc != CURLE_OK) {
        set_state(rep, f, REMOTE_C_UNKNOWN, "probe: %s", curl_easy_strerror(rc));
    } else if (one->status == 200) {
        judge_ok(rep, f, body ? body : "", len);
    } else {
        pl_err e;
        pl_remote_error_from_body(&e, one->status, body, len);
        bool names_field = one->status >= 400 && one->status < 500 &&
                           strstr(e.message, field_of(rep, f));
        set_state(rep, f, names_field ? REMOTE_C_REFUSED : REMOTE_C_UNKNOWN,
                  "it answered the probe HTTP %ld: %.100s", one->status, e.message);
    }
}

static void one_free(cprobe_one *one)
{
    if (one->x.easy)
        curl_easy_cleanup(one->x.easy);
    one->x.easy = NULL;
    if (one->out)
        evbuffer_free(one->out);
    one->out = NULL;
    free(one->body);
    one->body = NULL;
}

static void round_free(remote_cprobe *p)
{
    for (int f = 0; f < REMOTE_CF_N; f++)
        one_free(&p->one[f]);
    curl_slist_free_all(p->headers);
    free(p);
}

/* A round's probes, their easy handles ready. NULL when nothing to probe. */
static remote_cprobe *round_new(remote_replica *rep, int timeout_ms)
{
    remote_backend *rb = rep->rb;
    remote_cprobe *p = calloc(1, sizeof *p);
    char auth[1100];
    if (!p)
        return NULL;
    p->rep = rep;
    p->headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (p->headers && rb->api_key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", rb->api_key);
        p->headers = curl_slist_append(p->headers, auth);
    }
    for (int f = 0; p->headers && f < REMOTE_CF_N; f++) {
        cprobe_one *one = &p->one[f];
        one->owner = p;
        one->f = (remote_cfamily)f;
        if (rep->kind == PL_REMOTE_OLLAMA && f == REMOTE_CF_REGEX)
            continue;                  /* nothing to send it in */
        if (probe_easy(one, rep, p->headers, timeout_ms) < 0)
            one_free(one);
        else
            p->pending++;
    }
    if (!p->pending) {
        round_free(p);
        return NULL;
    }
    rep->caps.probes++;
    return p;
}

/* ---- start-up: blocking, every replica at once ---- */

static double now_ms(void)
{
    return pl_remote_now_ms();
}

/* vLLM's /version into rep->caps (style: structured_outputs from 0.10.2). */
static void read_version(remote_replica *rep, int timeout_ms)
{
    char url[2048], why[256];
    struct evbuffer *b = evbuffer_new();
    snprintf(url, sizeof url, "%s/version", rep->root_url);
    if (b && pl_remote_get_blocking(url, rep->rb->api_key, timeout_ms, b, why, sizeof why) == 200) {
        json_t *root = json_loadb((const char *)evbuffer_pullup(b, -1), evbuffer_get_length(b),
                                  0, NULL);
        const char *v = json_string_value(json_object_get(root, "version"));
        int maj, min, pat = 0;
        if (v && sscanf(v, "%d.%d.%d", &maj, &min, &pat) >= 2 && maj >= 0 && min >= 0 &&
            min < 100 && pat >= 0 && pat < 100) {
            rep->caps.version = maj * 10000 + min * 100 + pat;
            rep->caps.guided = rep->caps.version < 1002;
            rep->caps.style_known = true;
        }
        json_decref(root);
    }
    if (b)
        evbuffer_free(b);
}

static bool wants_probe(const remote_replica *rep)
{
    return rep->healthy && rep->kind != PL_REMOTE_AUTO;
}

/* One blocking round over the replicas marked in pick, until end_ms. */
static void run_round(remote_backend *rb, const bool *pick, double end_ms)
{
    CURLM *m = curl_multi_init();
    remote_cprobe **ps = calloc((size_t)rb->n_reps, sizeof *ps);
    int running = 0;
    for (int i = 0; m && ps && i < rb->n_reps; i++) {
        int left_ms = (int)(end_ms - now_ms());
        if (!pick[i] || !(ps[i] = round_new(&rb->reps[i], left_ms > 1 ? left_ms : 1)))
            continue;
        for (int f = 0; f < REMOTE_CF_N; f++)
            if (ps[i]->one[f].x.easy)
                curl_multi_add_handle(m, ps[i]->one[f].x.easy);
    }
    while (m && curl_multi_perform(m, &running) == CURLM_OK && running && now_ms() < end_ms)
        curl_multi_poll(m, NULL, 0, 50, NULL);
    CURLMsg *msg;
    int left;
    while (m && (msg = curl_multi_info_read(m, &left)))
        for (int i = 0; msg->msg == CURLMSG_DONE && i < rb->n_reps; i++)
            for (int f = 0; ps[i] && f < REMOTE_CF_N; f++)
                if (ps[i]->one[f].x.easy == msg->easy_handle) {
                    curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE,
                                      &ps[i]->one[f].status);
                    judge(&ps[i]->one[f], &rb->reps[i], msg->data.result);
                    ps[i]->one[f].status = -1;         /* judged */
                }
    for (int i = 0; ps && i < rb->n_reps; i++) {
        for (int f = 0; ps[i] && f < REMOTE_CF_N; f++) {
            cprobe_one *one = &ps[i]->one[f];
            if (one->x.easy && one->status != -1)
                set_state(&rb->reps[i], one->f, REMOTE_C_UNKNOWN,
                          "the probe had no reply in time");
            if (one->x.easy)
                curl_multi_remove_handle(m, one->x.easy);
        }
        if (ps[i])
            round_free(ps[i]);
    }
    free(ps);
    if (m)
        curl_multi_cleanup(m);
}

static void log_caps(const remote_replica *rep)
{
    for (int f = 0; f < REMOTE_CF_N; f++) {
        remote_cstate s = rep->caps.state[f];
        const char *what = f == REMOTE_CF_REGEX ? "regex and choice" : "JSON";
        if (s == REMOTE_C_IGNORED || s == REMOTE_C_REFUSED)
            pl_warn("model '%s': upstream %s (%s) does not enforce %s constraints (%s): "
                    "requests and jobs with one are refused", rep->rb->base.model,
                    rep->shown_url, pl_remote_kind_name(rep->kind), what, rep->caps.why[f]);
        else if (s == REMOTE_C_UNKNOWN && rep->caps.why[f][0])
            pl_warn("model '%s': upstream %s: %s constraints unverified (%s)",
                    rep->rb->base.model, rep->shown_url, what, rep->caps.why[f]);
    }
}

void pl_remote_cprobe_startup(remote_backend *rb, int timeout_ms)
{
    if (timeout_ms <= 0 || rb->n_reps < 1)
        return;
    double end = now_ms() + timeout_ms;
    bool *pick = calloc((size_t)rb->n_reps, sizeof *pick);
    bool again = false;
    if (!pick)
        return;
    for (int i = 0; i < rb->n_reps; i++) {
        pick[i] = wants_probe(&rb->reps[i]);
        if (pick[i] && rb->reps[i].kind == PL_REMOTE_VLLM)
            read_version(&rb->reps[i], timeout_ms);
    }
    run_round(rb, pick, end);
    for (int i = 0; i < rb->n_reps; i++) {    /* vLLM, no version: try guided_* */
        remote_caps *c = &rb->reps[i].caps;
        pick[i] = pick[i] && rb->reps[i].kind == PL_REMOTE_VLLM && !c->style_known &&
                  (c->state[REMOTE_CF_REGEX] == REMOTE_C_IGNORED ||
                   c->state[REMOTE_CF_REGEX] == REMOTE_C_REFUSED);
        c->style_known = c->style_known || c->state[REMOTE_CF_REGEX] == REMOTE_C_ENFORCED;
        c->guided = c->guided || pick[i];
        again = again || pick[i];
    }
    if (again)
        run_round(rb, pick, end);
    for (int i = 0; i < rb->n_reps; i++) {
        remote_caps *c = &rb->reps[i].caps;
        if (pick[i] && c->state[REMOTE_CF_REGEX] == REMOTE_C_ENFORCED)
            c->style_known = true;
        log_caps(&rb->reps[i]);
    }
    free(pick);
}

/* ---- later: on the loop ---- */

static void async_done(pl_curl_xfer *x, CURLcode rc)
{
    cprobe_one *one = x->ud;
    remote_cprobe *p = one->owner;
    remote_replica *rep = p->rep;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &one->status);
    judge(one, rep, rc);
    one_free(one);
    if (--p->pending > 0)
        return;
    rep->caps.inflight = NULL;
    round_free(p);
    log_caps(rep);
}

static bool unknown_left(const remote_replica *rep)
{
    for (int f = 0; f < REMOTE_CF_N; f++)
        if (rep->caps.state[f] == REMOTE_C_UNKNOWN &&
            !(rep->kind == PL_REMOTE_OLLAMA && f == REMOTE_CF_REGEX))
            return true;
    return false;
}

void pl_remote_cprobe_async(remote_replica *rep)
{
    remote_backend *rb = rep->rb;
    int t = rb->o.probe_timeout_ms;
    if (t <= 0 || rep->caps.inflight || rep->caps.probes >= CPROBE_ROUNDS_MAX ||
        !wants_probe(rep) || !unknown_left(rep))
        return;
    if (!rep->caps.style_known) {              /* the style other replicas showed */
        remote_target mt = pl_remote_target_of(rb);
        rep->caps.guided = mt.guided;
        rep->caps.version = mt.version;
    }
    remote_cprobe *p = round_new(rep, t);
    if (!p)
        return;
    rep->caps.inflight = p;
    for (int f = 0; f < REMOTE_CF_N; f++) {
        cprobe_one *one = &p->one[f];
        if (!one->x.easy)
            continue;
        one->x.done = async_done;
        one->x.ud = one;
        if (pl_curl_loop_add(rb->loop, &one->x) < 0) {
            one_free(one);
            p->pending--;
        }
    }
    if (!p->pending) {
        rep->caps.inflight = NULL;
        round_free(p);
    }
}

void pl_remote_cprobe_stop(remote_backend *rb)
{
    for (int i = 0; i < rb->n_reps; i++) {
        remote_cprobe *p = rb->reps[i].caps.inflight;
        if (!p)
            continue;
        for (int f = 0; f < REMOTE_CF_N; f++)
            if (p->one[f].x.easy && p->one[f].x.in_multi)
                pl_curl_loop_remove(rb->loop, &p->one[f].x);
        round_free(p);
        rb->reps[i].caps.inflight = NULL;
    }
}
