/* remote_embed.c - POST /v1/embeddings passed to an upstream that serves
 * it. Whether the upstream model embeds, and its shape, comes from its
 * GET /models entry (parley's capabilities: embeddings, dimensions,
 * pooling, normalized, matryoshka_dimensions), or from
 * --upstream-embed-dimensions for upstreams whose listing does not say
 * (vLLM, llama-server, Ollama); the request goes to a
 * replica the router picks as one JSON POST (base64 vectors), and the
 * reply's vectors, or its error, come back to the sink. No retries: an
 * embedding request is cheap to repeat for the client. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "backends/remote/remote_internal.h"
#include "backends/remote/remote_req.h"

typedef struct remote_embed {
    struct remote_embed *next;   /* rb->embeds: live requests */
    remote_backend *rb;
    remote_replica *rep;
    uint64_t id;
    pl_embed_sink sink;
    char *body;
    int n;                       /* inputs sent */
    pl_curl_xfer x;
    struct evbuffer *reply;
    long status;
} remote_embed;

static const char *pooling_(const char *s)
{
    static const char *const names[] = {"mean", "cls", "last"};
    for (int i = 0; s && i < 3; i++)
        if (!strcmp(s, names[i]))
            return names[i];
    return "upstream";
}

void pl_remote_embed_declare(remote_backend *rb, int dim)
{
    rb->embeds = rb->declared = true;
    rb->einfo = (pl_embed_info){.dim = dim, .pooling = "upstream"};
}

void pl_remote_embed_apply_models(remote_backend *rb, const char *body, size_t len)
{
    if (!rb->upstream_model || rb->declared)
        return;
    json_t *root = json_loadb(body, len, 0, NULL), *m;
    size_t i;
    json_array_foreach(json_object_get(root, "data"), i, m) {
        const char *id = json_string_value(json_object_get(m, "id"));
        json_t *caps = json_object_get(m, "capabilities");
        if (!id || strcmp(id, rb->upstream_model) || !json_is_object(caps))
            continue;
        json_t *d = json_object_get(caps, "dimensions"), *md, *v;
        bool on = json_is_true(json_object_get(caps, "embeddings"));
        if (!on || !json_is_integer(d) || json_integer_value(d) < 1 ||
            json_integer_value(d) > 1 << 20)
            break;
        rb->embeds = true;
        rb->einfo = (pl_embed_info){
            .dim = (int)json_integer_value(d),
            .max_len = (int)json_integer_value(json_object_get(m, "max_model_len")),
            .normalized = json_is_true(json_object_get(caps, "normalized")),
            .pooling = pooling_(json_string_value(json_object_get(caps, "pooling")))};
        md = json_object_get(caps, "matryoshka_dimensions");
        rb->einfo.matryoshka = json_object_get(caps, "matryoshka_dimensions") != NULL;
        rb->n_edims = 0;
        size_t k;
        json_array_foreach(md, k, v)
            if (json_is_integer(v) && rb->n_edims < REMOTE_MAX_EDIMS)
                rb->edims[rb->n_edims++] = (int)json_integer_value(v);
        rb->einfo.dims = rb->edims;
        rb->einfo.n_dims = rb->n_edims;
        break;
    }
    json_decref(root);
}

int pl_remote_embed_info(pl_backend *b, pl_embed_info *out)
{
    remote_backend *rb = (remote_backend *)b;
    if (!rb->embeds)
        return -1;
    *out = rb->einfo;
    return 0;
}

static void unlink_(remote_embed *r)
{
    for (remote_embed **p = &r->rb->embeds_live; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            return;
        }
}

static void free_(remote_embed *r)
{
    if (r->x.easy)
        curl_easy_cleanup(r->x.easy);
    if (r->rep)
        r->rep->outstanding--;
    r->rb->active--;
    if (r->reply)
        evbuffer_free(r->reply);
    free(r->body);
    free(r);
}

static size_t on_write_(char *p, size_t sz, size_t n, void *ud)
{
    remote_embed *r = ud;
    return evbuffer_add(r->reply, p, sz * n) == 0 ? sz * n : 0;
}

/* Base64 of little-endian floats into v (dim of them); 0 or -1. */
static int unbase64_(const char *s, float *v, int dim)
{
    static signed char tbl[256];
    if (!tbl['B'])
        for (int i = 0; i < 256; i++) {
            const char *a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            const char *p = i ? strchr(a, i) : NULL;
            tbl[i] = (signed char)(p ? p - a : -1);
        }
    size_t len = strlen(s), need = (size_t)dim * 4, o = 0;
    unsigned char *b = (unsigned char *)v;
    size_t pad = len >= 2 && s[len - 1] == '=' ? (s[len - 2] == '=' ? 2 : 1) : 0;
    if (len % 4 || len / 4 * 3 - pad != need)
        return -1;
    for (size_t i = 0; i < len && o < need; i += 4) {
        int q[4];
        for (int k = 0; k < 4; k++)
            q[k] = s[i + k] == '=' ? 0 : tbl[(unsigned char)s[i + k]];
        if (q[0] < 0 || q[1] < 0 || q[2] < 0 || q[3] < 0)
            return -1;
        uint32_t w = (uint32_t)q[0] << 18 | (uint32_t)q[1] << 12 | (uint32_t)q[2] << 6 |
                     (uint32_t)q[3];
        for (int k = 0; k < 3 && o < need; k++)
            b[o++] = (unsigned char)(w >> (16 - 8 * k));
    }
    return o == need ? 0 : -1;
}

/* An embedding as the upstream sent it (base64, or floats where it
 * ignores encoding_format) into v; 0, or -1 when it is not dim floats. */
static int floats_(json_t *em, float *v, int dim)
{
    if (json_is_string(em))
        return unbase64_(json_string_value(em), v, dim);
    if (!json_is_array(em) || json_array_size(em) != (size_t)dim)
        return -1;
    for (int k = 0; k < dim; k++) {
        json_t *x = json_array_get(em, (size_t)k);
        if (!json_is_number(x))
            return -1;
        v[k] = (float)json_number_value(x);
    }
    return 0;
}

/* The upstream's reply as the sink's result. */
static void deliver_(remote_embed *r, CURLcode rc)
{
    pl_err err = {0};
    const char *body = (const char *)evbuffer_pullup(r->reply, -1);
    size_t len = evbuffer_get_length(r->reply);
    float *vecs = NULL;
    int dim = r->rb->einfo.dim, tokens = 0;
    json_t *root = NULL;
    if (rc != CURLE_OK) {
        pl_err_set(&err, 502, "server_error", NULL, "upstream_unavailable", "the upstream "
                   "%s did not answer: %s", r->rep->shown_url, curl_easy_strerror(rc));
        pl_remote_replica_failed(r->rep, true, curl_easy_strerror(rc));
    } else if (r->status != 200) {
        pl_remote_error_from_body(&err, r->status >= 400 && r->status < 600 ? r->status : 502,
                                  body, len);
    } else {
        root = json_loadb(body, len, 0, NULL);
        json_t *data = json_object_get(root, "data"), *d;
        size_t i;
        vecs = json_array_size(data) == (size_t)r->n
               ? malloc(sizeof(float) * (size_t)r->n * dim) : NULL;
        bool ok = vecs != NULL;
        json_array_foreach(ok ? data : NULL, i, d) {
            json_int_t at = json_integer_value(json_object_get(d, "index"));
            json_t *em = json_object_get(d, "embedding");
            if (!json_is_integer(json_object_get(d, "index")) || at < 0 || at >= r->n ||
                floats_(em, vecs + (size_t)at * dim, dim) < 0) {
                ok = false;
                break;
            }
        }
        tokens = (int)json_integer_value(json_object_get(json_object_get(root, "usage"),
                                                         "prompt_tokens"));
        if (!ok) {
            pl_err_set(&err, 502, "server_error", NULL, "upstream_malformed", "the upstream "
                       "%s answered /v1/embeddings with no %d vectors of %d dimensions",
                       r->rep->shown_url, r->n, dim);
            free(vecs);
            vecs = NULL;
        } else {
            pl_remote_replica_ok(r->rep);
        }
    }
    pl_embed_result res = {.vectors = vecs, .n = r->n, .dim = dim, .prompt_tokens = tokens,
                           .error = vecs ? NULL : &err};
    r->sink.on_done(r->sink.ud, &res);
    free(vecs);
    json_decref(root);
}

static void on_done_(pl_curl_xfer *x, CURLcode rc)
{
    remote_embed *r = x->ud;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &r->status);
    unlink_(r);
    deliver_(r, rc);
    if (rc == CURLE_OK)
        r->rb->completed++;
    else
        r->rb->failed++;
    free_(r);
}

static char *body_(remote_backend *rb, const pl_embed_request *q)
{
    json_t *in = json_array();
    for (int i = 0; in && i < q->n; i++) {
        const pl_embed_input *x = &q->inputs[i];
        json_t *v;
        if (x->text) {
            v = json_stringn(x->text, x->len);
        } else {
            v = json_array();
            for (int k = 0; v && k < x->n_ids; k++)
                json_array_append_new(v, json_integer(x->ids[k]));
        }
        if (!v || json_array_append_new(in, v) < 0) {
            json_decref(in);
            in = NULL;
        }
    }
    json_t *j = in ? json_pack("{s:s, s:o, s:s}", "model", rb->upstream_model, "input", in,
                               "encoding_format", "base64") : NULL;
    if (j && q->truncate)
        json_object_set_new(j, "truncate_prompt_tokens", json_integer(q->truncate));
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

int pl_remote_embed(pl_backend *b, const pl_embed_request *q, pl_embed_sink sink,
                    uint64_t *id, pl_err *err)
{
    remote_backend *rb = (remote_backend *)b;
    remote_replica *rep = pl_remote_route(rb, 0, NULL);
    if (!rep)
        return pl_err_set(err, 503, "server_error", NULL, "upstream_unavailable", "no healthy "
                          "upstream for the model '%s'", b->model);
    remote_embed *r = calloc(1, sizeof *r);
    if (!r)
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    r->rb = rb;
    r->sink = sink;
    r->n = q->n;
    r->id = ++rb->embed_ids | (uint64_t)1 << 62;   /* apart from generation ids */
    r->reply = evbuffer_new();
    r->body = body_(rb, q);
    r->x.easy = curl_easy_init();
    rb->active++;
    if (!r->reply || !r->body || !r->x.easy) {
        free_(r);
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    char url[2100];
    snprintf(url, sizeof url, "%s/embeddings", rep->base_url);
    CURL *e = r->x.easy;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(r->body));
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, rb->headers);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    if (rb->o.connect_timeout_ms > 0)
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)rb->o.connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write_);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    r->x.done = on_done_;
    r->x.ud = r;
    if (pl_curl_loop_add(rb->loop, &r->x) < 0) {
        free_(r);
        return pl_err_set(err, 502, "server_error", NULL, NULL, "cannot start a transfer");
    }
    r->rep = rep;
    rep->outstanding++;
    rep->requests++;
    rb->submitted++;
    r->next = rb->embeds_live;
    rb->embeds_live = r;
    *id = r->id;
    return 0;
}

bool pl_remote_embed_abort(remote_backend *rb, uint64_t id)
{
    for (remote_embed *r = rb->embeds_live; r; r = r->next)
        if (r->id == id) {
            unlink_(r);
            pl_curl_loop_remove(rb->loop, &r->x);
            rb->aborted++;
            free_(r);
            return true;
        }
    return false;
}

void pl_remote_embed_free_all(remote_backend *rb)
{
    while (rb->embeds_live) {
        remote_embed *r = rb->embeds_live;
        rb->embeds_live = r->next;
        pl_curl_loop_remove(rb->loop, &r->x);
        free_(r);
    }
}
