/* remote.c - the remote backend's table of operations and its set-up. */
#include "backends/remote/remote.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/remote/remote_req.h"
#include "src/base/log.h"
#include "src/base/redact.h"

static const char *kind_names[] = {"auto", "openai", "vllm", "sglang", "llamacpp", "ollama",
                                   "parley"};

int pl_remote_kind_parse(const char *s)
{
    for (int i = 0; i < (int)(sizeof kind_names / sizeof *kind_names); i++)
        if (s && !strcmp(s, kind_names[i]))
            return i;
    return -1;
}

const char *pl_remote_kind_name(pl_remote_kind k)
{
    return (unsigned)k < sizeof kind_names / sizeof *kind_names ? kind_names[k] : "?";
}

const char *pl_remote_model_id_problem(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0)
        return "it is empty";
    if (n > 256)
        return "it is longer than 256 bytes";
    if (id[0] == '/' || strchr(id, '\\'))
        return "it starts with '/' or has a backslash";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)id[i];
        if (c < 0x20 || c == 0x7f || (c == 0xc2 && (unsigned char)id[i + 1] < 0xa0))
            return "it has a control character";
        if (c == '.' && id[i + 1] == '.' && (i == 0 || id[i - 1] == '/') &&
            (id[i + 2] == '/' || id[i + 2] == '\0'))
            return "it has a '..' path segment";
    }
    return NULL;
}

/* ---- request ids: O(1) lookup that stays safe after a request is freed ---- */

static int slot_alloc(remote_backend *rb, remote_req *r)
{
    if (rb->n_free == 0) {
        uint32_t n = rb->n_slots ? rb->n_slots * 2 : 64;
        remote_req **s = n < (1u << 24) ? realloc(rb->slots, n * sizeof *s) : NULL;
        if (!s)
            return -1;
        rb->slots = s;
        uint32_t *g = realloc(rb->gen, n * sizeof *g), *f;
        if (!g)
            return -1;
        rb->gen = g;
        if (!(f = realloc(rb->free_slots, n * sizeof *f)))
            return -1;
        rb->free_slots = f;
        for (uint32_t i = rb->n_slots; i < n; i++) {
            rb->slots[i] = NULL;
            rb->gen[i] = 0;
            rb->free_slots[rb->n_free++] = n - 1 - (i - rb->n_slots);
        }
        rb->n_slots = n;
    }
    uint32_t s = rb->free_slots[--rb->n_free];
    rb->slots[s] = r;
    rb->gen[s]++;
    r->id = ((uint64_t)rb->gen[s] << 24) | s;
    rb->active++;
    return 0;
}

static remote_req *lookup(remote_backend *rb, uint64_t id)
{
    uint32_t s = (uint32_t)(id & 0xFFFFFF);
    if (s >= rb->n_slots || rb->gen[s] != (uint32_t)(id >> 24))
        return NULL;
    return rb->slots[s];
}

/* ---- operations ---- */

static int remote_submit(pl_backend *b, const pl_gen_request *req, pl_sink sink,
                         uint64_t *id, pl_err *err)
{
    remote_backend *rb = (remote_backend *)b;
    char *body = pl_remote_body(req, rb, err);   /* 400: a constraint it cannot enforce */
    remote_req *r = body ? calloc(1, sizeof *r) : NULL;
    if (!r) {
        free(body);
        return body ? pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory") : -1;
    }
    r->rb = rb;
    r->sink = sink;
    r->chat = req->messages != NULL;
    r->key = req->affinity_key ? req->affinity_key : req->conversation_key;
    r->t_submit = pl_remote_now_ms();
    r->body = body;
    r->body_len = strlen(body);
    r->timer = evtimer_new(b->base, pl_remote_req_on_timer, r);
    r->errbody = evbuffer_new();
    pl_sse_reader_init(&r->sse, 0);
    if (!r->body || !r->timer || !r->errbody || slot_alloc(rb, r) < 0)
        goto oom;
    if (pl_remote_req_start(r) < 0) {
        pl_remote_req_free(r);
        return pl_err_set(err, 500, "server_error", NULL, NULL,
                          "cannot start an upstream transfer");
    }
    rb->submitted++;
    *id = r->id;
    return 0;
oom:
    if (r->timer)
        event_free(r->timer);
    if (r->errbody)
        evbuffer_free(r->errbody);
    pl_sse_reader_free(&r->sse);
    free(r->body);
    free(r);
    return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
}

/* Closing the transfer closes its connection, and vLLM, SGLang,
 * llama-server and parley all abort a request whose client left. Inside
 * one of r's own callbacks the transfer is failed from there instead. */
static void remote_abort(pl_backend *b, uint64_t id)
{
    remote_backend *rb = (remote_backend *)b;
    if (pl_remote_embed_abort(rb, id))
        return;
    remote_req *r = lookup(rb, id);
    if (!r || r->aborted)
        return;
    rb->aborted++;
    if (r->in_cb) {
        r->aborted = true;
        return;
    }
    pl_remote_req_stop_transfer(r);
    pl_remote_req_free(r);
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    remote_req *r = arg;
    if (r->paused || !r->x.easy)
        return;
    pl_remote_req_arm(r, r->got_token ? r->rb->o.token_timeout_ms
                                      : r->rb->o.first_token_timeout_ms);
    curl_easy_pause(r->x.easy, CURLPAUSE_CONT);
}

/* Pausing stops reading the socket (TCP backpressure reaches the upstream);
 * resuming is deferred to its own event because libcurl may deliver the
 * held data from inside curl_easy_pause. */
static void remote_set_paused(pl_backend *b, uint64_t id, bool paused)
{
    remote_req *r = lookup((remote_backend *)b, id);
    if (!r || r->paused == paused || r->aborted)
        return;
    r->paused = paused;
    if (!r->x.easy)
        return;
    if (paused) {
        evtimer_del(r->timer);
        curl_easy_pause(r->x.easy, CURLPAUSE_RECV);
        return;
    }
    if (!r->resume)
        r->resume = event_new(b->base, -1, 0, on_resume, r);
    if (r->resume)
        event_active(r->resume, 0, 0);
}

static int remote_capacity(pl_backend *b)
{
    return pl_remote_capacity_sum((remote_backend *)b);
}

static json_t *remote_stats(pl_backend *b)
{
    remote_backend *rb = (remote_backend *)b;
    return json_pack("{s:s, s:s, s:s, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:o}",
                     "backend", "remote", "kind", pl_remote_kind_name(rb->o.kind),
                     "upstream_model", rb->upstream_model, "in_flight", rb->active,
                     "submitted", (json_int_t)rb->submitted, "completed",
                     (json_int_t)rb->completed, "failed", (json_int_t)rb->failed, "aborted",
                     (json_int_t)rb->aborted, "retries", (json_int_t)rb->retries,
                     "affinity_hits", (json_int_t)rb->affinity_hits, "affinity_moves",
                     (json_int_t)rb->affinity_moves, "affinity", rb->o.affinity, "replicas",
                     pl_remote_replicas_json(rb));
}

static int remote_tokenize(pl_backend *b, const pl_gen_request *req, bool add_special,
                           int32_t **ids, int *n, pl_err *err)
{
    return pl_err_set(err, 501, "invalid_request_error", NULL, "not_implemented",
                      "tokenize is not available for the remote model '%s'; ask its upstream",
                      b->model);
}

static int remote_detokenize(pl_backend *b, const int32_t *ids, int n, char **text,
                             pl_err *err)
{
    return pl_err_set(err, 501, "invalid_request_error", NULL, "not_implemented",
                      "detokenize is not available for the remote model '%s'", b->model);
}

static json_t *remote_tokenizer_info(pl_backend *b, pl_err *err)
{
    pl_err_set(err, 501, "invalid_request_error", NULL, "not_implemented",
               "tokenizer_info is not available for the remote model '%s'; ask its upstream",
               b->model);
    return NULL;
}

static int remote_max_model_len(pl_backend *b)
{
    remote_backend *rb = (remote_backend *)b;
    if (rb->o.max_model_len > 0)
        return rb->o.max_model_len;
    int ml = 0;
    for (int i = 0; i < rb->n_reps; i++)
        if (rb->reps[i].max_model_len > 0 && (!ml || rb->reps[i].max_model_len < ml))
            ml = rb->reps[i].max_model_len;
    return ml;
}

static int remote_check_constraint(pl_backend *b, pl_constraint_kind k, pl_err *err)
{
    return pl_remote_check_constraint((remote_backend *)b, k, true, NULL, NULL, err);
}

static void remote_free(pl_backend *b)
{
    remote_backend *rb = (remote_backend *)b;
    for (uint32_t i = 0; i < rb->n_slots; i++) {
        remote_req *r = rb->slots[i];
        if (r) {
            pl_remote_req_stop_transfer(r);
            pl_remote_req_free(r);
        }
    }
    pl_remote_embed_free_all(rb);
    pl_remote_health_stop(rb);
    pl_remote_cprobe_stop(rb);
    pl_curl_loop_free(rb->loop);
    for (int i = 0; i < rb->n_reps; i++) {
        free(rb->reps[i].base_url);
        free(rb->reps[i].root_url);
        free(rb->reps[i].shown_url);
    }
    free(rb->reps);
    curl_slist_free_all(rb->headers);
    free(rb->slots);
    free(rb->gen);
    free(rb->free_slots);
    free(rb->api_key);
    free(rb->upstream_model);
    free(rb->base.model);
    free(rb);
}

static const pl_backend_ops remote_ops = {
    .kind = "remote",
    .late_errors = true,
    .upstream_tools = true,
    .submit = remote_submit,
    .abort = remote_abort,
    .set_paused = remote_set_paused,
    .capacity = remote_capacity,
    .stats = remote_stats,
    .tokenize = remote_tokenize,
    .detokenize = remote_detokenize,
    .tokenizer_info = remote_tokenizer_info,
    .max_model_len = remote_max_model_len,
    .check_constraint = remote_check_constraint,
    .embed_info = pl_remote_embed_info,
    .embed = pl_remote_embed,
    .free = remote_free,
};

/* ---- set-up ---- */

static int init_replica(remote_backend *rb, int i, const char *url, char *err, size_t errlen)
{
    remote_replica *rep = &rb->reps[i];
    rep->rb = rb;
    rep->index = i;
    rep->kind = rb->o.kind;
    char shown[2048];
    pl_redact_url(url, shown, sizeof shown);
    if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) {
        snprintf(err, errlen, "base_url '%s' must start with http:// or https://", shown);
        return -1;
    }
    size_t n = strlen(url);
    while (n > 0 && url[n - 1] == '/')
        n--;
    rep->base_url = strndup(url, n);
    size_t rn = n >= 3 && !strncmp(url + n - 3, "/v1", 3) ? n - 3 : n;
    rep->root_url = strndup(url, rn);
    pl_redact_url(rep->base_url ? rep->base_url : "", shown, sizeof shown);
    rep->shown_url = strdup(shown);
    return rep->base_url && rep->root_url && rep->shown_url ? 0 : -1;
}

/* Which upstream model this backend asks for, from a replica's listing. */
static int pick_upstream_model(remote_backend *rb, const char *body, size_t len, char *err,
                               size_t errlen)
{
    bool found;
    int ml, cap;
    char *only = NULL;
    if (pl_remote_parse_models(body, len, rb->base.model, &found, &ml, &cap, &only, NULL) < 0)
        return 0;
    if (!found && only && pl_remote_model_id_problem(only)) {
        snprintf(err, errlen, "the only model the upstream lists has an id parley will not "
                 "use (%s); set upstream_model", pl_remote_model_id_problem(only));
        free(only);
        return -1;
    }
    if (!found && only) {
        rb->upstream_model = only;
        return 0;
    }
    free(only);
    if (!found) {
        snprintf(err, errlen, "the upstream does not list a model '%s'; set upstream_model "
                 "to one of the ids its /v1/models lists", rb->base.model);
        return -1;
    }
    rb->upstream_model = strdup(rb->base.model);
    return 0;
}

/* Start-up probe of one replica: its models, then its capacity. Blocking. */
static int probe_replica(remote_replica *rep, char *err, size_t errlen)
{
    remote_backend *rb = rep->rb;
    char url[2048], why[2300] = "";
    int t = rb->o.connect_timeout_ms > 0 ? rb->o.connect_timeout_ms + 3000 : 5000;
    struct evbuffer *b = evbuffer_new();
    snprintf(url, sizeof url, "%s/models", rep->base_url);
    long st = pl_remote_get_blocking(url, rb->api_key, t, b, why, sizeof why);
    const char *body = (const char *)evbuffer_pullup(b, -1);
    size_t len = evbuffer_get_length(b);
    int rc = 0;
    if (st == 200 && !rb->upstream_model && (rc = pick_upstream_model(rb, body, len, err, errlen)) < 0)
        goto done;
    if (st != 200 || pl_remote_apply_models(rep, body, len) < 0) {
        if (st > 0)
            snprintf(why, sizeof why, "GET %s/models: HTTP %ld", rep->shown_url, st);
        pl_warn("upstream %s is not answering (%s): ejected until a health check passes",
                rep->shown_url, why);
        snprintf(rep->last_error, sizeof rep->last_error, "%s", why);
        rep->healthy = false;
        goto done;
    }
    rep->healthy = true;
    const char *path = pl_remote_capacity_path(rep->kind);
    if (path) {
        snprintf(url, sizeof url, "%s%s", rep->root_url, path);
        evbuffer_drain(b, len);
        if (pl_remote_get_blocking(url, rb->api_key, t, b, why, sizeof why) == 200)
            pl_remote_apply_capacity(rep, (const char *)evbuffer_pullup(b, -1),
                                     evbuffer_get_length(b));
    }
done:
    evbuffer_free(b);
    return rc;
}

static int make_headers(remote_backend *rb)
{
    char auth[1100];
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    h = h ? curl_slist_append(h, "Accept: text/event-stream") : NULL;
    h = h ? curl_slist_append(h, "Expect:") : NULL;
    if (h && rb->api_key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", rb->api_key);
        h = curl_slist_append(h, auth);
    }
    rb->headers = h;
    return h ? 0 : -1;
}

pl_backend *pl_remote_new(struct event_base *base, const pl_remote_opts *o, char *err,
                          size_t errlen)
{
    remote_backend *rb = calloc(1, sizeof *rb);
    if (!rb || o->n_urls < 1) {
        snprintf(err, errlen, "a remote model needs base_url (one URL or a list)");
        free(rb);
        return NULL;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    rb->base.ops = &remote_ops;
    rb->base.base = base;
    rb->base.model = strdup(o->model);
    rb->o = *o;
    rb->o.urls = NULL;
    if (rb->o.max_attempts < 1)
        rb->o.max_attempts = 1;
    if (rb->o.upper_bound < 1)
        rb->o.upper_bound = 1;
    if (rb->o.health_interval_ms < 50)
        rb->o.health_interval_ms = 50;
    rb->api_key = o->api_key && *o->api_key ? strdup(o->api_key) : NULL;
    rb->upstream_model = o->upstream_model && *o->upstream_model ? strdup(o->upstream_model) : NULL;
    rb->reps = calloc((size_t)o->n_urls, sizeof *rb->reps);
    rb->loop = pl_curl_loop_new(base);
    if (!rb->base.model || !rb->reps || !rb->loop || make_headers(rb) < 0) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    rb->n_reps = o->n_urls;
    for (int i = 0; i < o->n_urls; i++)
        if (init_replica(rb, i, o->urls[i], err, errlen) < 0)
            goto fail;
    for (int i = 0; i < rb->n_reps; i++)
        if (probe_replica(&rb->reps[i], err, errlen) < 0)
            goto fail;
    if (!rb->upstream_model)
        rb->upstream_model = strdup(rb->base.model);
    if (o->embed_dim > 0)
        pl_remote_embed_declare(rb, o->embed_dim);
    if (rb->o.kind == PL_REMOTE_AUTO)
        rb->o.kind = rb->reps[0].kind != PL_REMOTE_AUTO ? rb->reps[0].kind : PL_REMOTE_OPENAI;
    pl_remote_cprobe_startup(rb, rb->o.probe_timeout_ms);
    pl_remote_health_start(rb);
    for (int i = 0; i < rb->n_reps; i++)
        pl_info("model '%s': upstream %s (%s, %s model '%s', capacity %d)", rb->base.model,
                rb->reps[i].shown_url, pl_remote_kind_name(rb->reps[i].kind),
                rb->reps[i].healthy ? "healthy" : "down", rb->upstream_model,
                pl_remote_replica_capacity(&rb->reps[i]));
    return &rb->base;
fail:
    remote_free(&rb->base);
    return NULL;
}
