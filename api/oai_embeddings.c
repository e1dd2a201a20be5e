/* oai_embeddings.c - POST /v1/embeddings (oai_embeddings.h). */
#include "api/oai_embeddings.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "api/access_log.h"
#include "api/respond.h"
#include "api/sse.h"
#include "backends/req_metrics.h"

#define DEFAULT_MAX_INPUTS 2048

/* One request from parse to reply. */
typedef struct emb_call {
    pl_server *s;
    struct evhttp_request *req;
    pl_model_entry *model;
    pl_close_watch *watch;
    uint64_t id;
    bool base64;
    int key;                     /* the API key charged */
    int dims;                    /* 0: the model's; else fewer (Matryoshka) */
    bool renorm;                 /* cut vectors back to unit norm */
} emb_call;

typedef struct parsed {
    pl_embed_input *inputs;
    int n;
    int32_t *ids;                /* every id list's ids, one after another */
    int truncate;
    bool base64;
    int dimensions;              /* 0: not given */
    bool renorm;                 /* the model's vectors are unit-norm */
} parsed;

static int bad_(pl_err *e, const char *param, const char *fmt, const char *what)
{
    return pl_err_set(e, 400, "invalid_request_error", param, NULL, fmt, what);
}

static bool is_id_(json_t *v)
{
    return json_is_integer(v) && json_integer_value(v) >= INT32_MIN &&
           json_integer_value(v) <= INT32_MAX;
}

/* input[i] as a list of ids (v an array of integers), appended to p->ids. */
static int id_list_(parsed *p, json_t *v, int i, size_t *at, pl_err *e)
{
    size_t k;
    json_t *x;
    if (json_array_size(v) == 0)
        return pl_err_set(e, 400, "invalid_request_error", "input", NULL,
                          "input[%d] is empty", i);
    p->inputs[i] = (pl_embed_input){.ids = p->ids + *at, .n_ids = (int)json_array_size(v)};
    json_array_foreach(v, k, x) {
        if (!is_id_(x))
            return pl_err_set(e, 400, "invalid_request_error", "input", NULL, "input[%d][%zu] "
                              "must be a token id (an integer)", i, k);
        p->ids[(*at)++] = (int32_t)json_integer_value(x);
    }
    return 0;
}

/* The four shapes of input. */
static int inputs_(json_t *in, int max, parsed *p, pl_err *e)
{
    if (!in)
        return bad_(e, "input", "'%s' is required", "input");
    if (json_is_string(in) || (json_is_array(in) && is_id_(json_array_get(in, 0)))) {
        json_t *one = json_array();          /* a single input: a list of one */
        if (!one || json_array_append(one, in) < 0) {
            json_decref(one);
            return pl_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        }
        int rc = inputs_(one, max, p, e);
        json_decref(one);
        return rc;
    }
    if (!json_is_array(in))
        return bad_(e, "input", "'%s' must be a string, a list of strings, a list of token "
                    "ids or a list of lists of token ids", "input");
    size_t n = json_array_size(in), i, total = 0;
    json_t *v;
    if (n == 0)
        return bad_(e, "input", "'%s' is empty", "input");
    if (n > (size_t)max)
        return pl_err_set(e, 400, "invalid_request_error", "input", NULL, "%zu inputs, more "
                          "than the %d one request may carry (--max-embed-inputs)", n, max);
    json_array_foreach(in, i, v)
        total += json_is_array(v) ? json_array_size(v) : 0;
    p->inputs = calloc(n, sizeof *p->inputs);
    p->ids = malloc(sizeof(int32_t) * (total + 1));
    if (!p->inputs || !p->ids)
        return pl_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    p->n = (int)n;
    size_t at = 0;
    json_array_foreach(in, i, v) {
        if (json_is_string(v)) {
            if (json_string_length(v) == 0)
                return pl_err_set(e, 400, "invalid_request_error", "input", NULL,
                                  "input[%zu] is empty", i);
            p->inputs[i] = (pl_embed_input){.text = json_string_value(v),
                                            .len = json_string_length(v)};
        } else if (json_is_array(v)) {
            if (id_list_(p, v, (int)i, &at, e) < 0)
                return -1;
        } else {
            return pl_err_set(e, 400, "invalid_request_error", "input", NULL, "input[%zu] must "
                              "be a string or a list of token ids", i);
        }
    }
    return 0;
}

static int options_(json_t *body, parsed *p, pl_err *e)
{
    json_t *f = json_object_get(body, "encoding_format"), *d = json_object_get(body, "dimensions"),
           *t = json_object_get(body, "truncate_prompt_tokens"), *u = json_object_get(body, "user");
    if (f && !json_is_null(f)) {
        const char *s = json_string_value(f);
        if (!s || (strcmp(s, "float") && strcmp(s, "base64")))
            return bad_(e, "encoding_format", "'%s' must be \"float\" or \"base64\"",
                        "encoding_format");
        p->base64 = !strcmp(s, "base64");
    }
    if (d && !json_is_null(d)) {
        if (!json_is_integer(d) || json_integer_value(d) < 1 || json_integer_value(d) > 1 << 20)
            return bad_(e, "dimensions", "'%s' must be a positive integer", "dimensions");
        p->dimensions = (int)json_integer_value(d);
    }
    if (t && !json_is_null(t)) {
        json_int_t k = json_integer_value(t);
        if (!json_is_integer(t) || k < -1 || k == 0 || k > 1 << 24)
            return bad_(e, "truncate_prompt_tokens", "'%s' must be a positive integer or -1 "
                        "(the model's limit)", "truncate_prompt_tokens");
        p->truncate = (int)k;
    }
    if (u && !json_is_null(u) && !json_is_string(u))
        return bad_(e, "user", "'%s' must be a string", "user");
    return 0;
}

/* A float32 vector as base64 of its little-endian bytes. */
static json_t *base64_(const float *v, int n)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t len = (size_t)n * 4, out = (len + 2) / 3 * 4, o = 0;
    unsigned char *b = malloc(len);
    char *s = malloc(out + 1);
    json_t *j = NULL;
    if (b && s) {
        for (int i = 0; i < n; i++) {
            uint32_t x;
            memcpy(&x, &v[i], 4);
            for (int k = 0; k < 4; k++)
                b[i * 4 + k] = (unsigned char)(x >> (8 * k));
        }
        for (size_t i = 0; i < len; i += 3) {
            uint32_t w = (uint32_t)b[i] << 16 | (i + 1 < len ? (uint32_t)b[i + 1] << 8 : 0) |
                         (i + 2 < len ? b[i + 2] : 0);
            s[o++] = tbl[w >> 18 & 63];
            s[o++] = tbl[w >> 12 & 63];
            s[o++] = i + 1 < len ? tbl[w >> 6 & 63] : '=';
            s[o++] = i + 2 < len ? tbl[w & 63] : '=';
        }
        s[o] = '\0';
        j = json_stringn(s, o);
    }
    free(b);
    free(s);
    return j;
}

static json_t *vector_(const float *v, int n, bool b64)
{
    if (b64)
        return base64_(v, n);
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_real(v[i])) < 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* Vector i of r as the reply gives it: its first c->dims dimensions
 * (Matryoshka), renormalised, into buf; else r's own. */
static const float *cut_(const emb_call *c, const pl_embed_result *r, int i, float *buf)
{
    const float *v = r->vectors + (size_t)i * r->dim;
    if (!c->dims || c->dims >= r->dim)
        return v;
    double n2 = 0;
    for (int k = 0; k < c->dims; k++)
        n2 += (double)v[k] * v[k];
    float s = c->renorm && n2 > 0 ? (float)(1.0 / sqrt(n2)) : 1.0f;
    for (int k = 0; k < c->dims; k++)
        buf[k] = v[k] * s;
    return buf;
}

static json_t *reply_json_(const emb_call *c, const pl_embed_result *r)
{
    json_t *data = json_array();
    int dim = c->dims && c->dims < r->dim ? c->dims : r->dim;
    float *buf = malloc(sizeof(float) * (size_t)dim);
    if (!buf) {
        json_decref(data);
        data = NULL;
    }
    for (int i = 0; data && i < r->n; i++) {
        json_t *vec = vector_(cut_(c, r, i, buf), dim, c->base64);
        if (!vec || json_array_append_new(data, json_pack("{s:s, s:i, s:o}", "object",
                                                          "embedding", "index", i,
                                                          "embedding", vec)) < 0) {
            json_decref(data);
            data = NULL;
        }
    }
    free(buf);
    return json_pack("{s:s, s:o, s:s, s:{s:i, s:i}}", "object", "list", "data", data, "model",
                     c->model->name, "usage", "prompt_tokens", r->prompt_tokens,
                     "total_tokens", r->prompt_tokens);
}

static void call_free_(emb_call *c)
{
    pl_server_call_end(c->s);
    free(c);
}

/* /metrics' parley:embedding_* counters (main thread, as the sink is). */
static void count_(pl_backend *b, const pl_embed_result *r)
{
    pl_req_metrics *m = pl_backend_metrics(b);
    if (!m)
        return;
    if (r->error) {
        m->embed_failed++;
        return;
    }
    m->embed_requests++;
    m->embed_inputs += (uint64_t)r->n;
    m->embed_tokens += (uint64_t)r->prompt_tokens;
}

static void on_done_(void *ud, const pl_embed_result *r)
{
    emb_call *c = ud;
    pl_unwatch_close(c->req, c->watch);
    pl_access_usage(c->req, r->error ? 0 : r->prompt_tokens, 0);
    count_(c->model->backend, r);
    if (r->error) {
        pl_reply_error(c->req, r->error);
    } else {
        pl_server_charge_tokens(c->s, c->key, r->prompt_tokens);
        pl_reply_json(c->req, 200, reply_json_(c, r));   /* NULL: a 500 */
    }
    call_free_(c);
}

/* The client went away: the backend forgets the request. */
static void on_close_(void *ud)
{
    emb_call *c = ud;
    c->model->backend->ops->abort(c->model->backend, c->id);
    call_free_(c);
}

/* The model named, which must embed; its facts in *info. */
static pl_model_entry *model_(pl_server *s, json_t *body, pl_embed_info *info, pl_err *e)
{
    const char *name = json_string_value(json_object_get(body, "model"));
    if (!name)
        return bad_(e, "model", "'%s' is required (a string)", "model"), NULL;
    pl_model_entry *m = pl_server_find_model(s, name);
    if (!m)
        return pl_err_set(e, 404, "invalid_request_error", "model", "model_not_found",
                          "The model '%s' does not exist", name), NULL;
    if (pl_backend_embed_info(m->backend, info) < 0)
        return pl_err_set(e, 400, "invalid_request_error", "model", "model_not_embedding",
                          "The model '%s' does not embed: it is a generative model (serve an "
                          "embedding model, e.g. a BERT checkpoint, or this decoder with "
                          "--pooling last|mean|cls, for /v1/embeddings)",
                          name), NULL;
    return m;
}

static int start_(pl_server *s, struct evhttp_request *req, pl_model_entry *m,
                  const parsed *p, pl_err *e)
{
    emb_call *c = calloc(1, sizeof *c);
    if (!c)
        return pl_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    *c = (emb_call){.s = s, .req = req, .model = m, .base64 = p->base64,
                    .key = pl_server_current_key(s), .dims = p->dimensions,
                    .renorm = p->renorm};
    pl_embed_request r = {.inputs = p->inputs, .n = p->n, .truncate = p->truncate};
    pl_embed_sink sink = {.on_done = on_done_, .ud = c};
    if (m->backend->ops->embed(m->backend, &r, sink, &c->id, e) < 0) {
        free(c);
        return -1;
    }
    pl_server_call_begin(s);
    c->watch = pl_watch_close(req, on_close_, c);
    return 0;
}

/* dimensions asked of the model: its own length, or with a Matryoshka
 * model (config.json's is_matryoshka / matryoshka_dimensions, as vLLM
 * reads them) a shorter one it allows; else a 400 as OpenAI's for models
 * without it. */
static int dimensions_(const char *name, const pl_embed_info *info, int d, pl_err *e)
{
    if (d == info->dim)
        return 0;
    if (!info->matryoshka)
        return pl_err_set(e, 400, "invalid_request_error", "dimensions", NULL, "The model '%s' "
                          "gives %d dimensions and does not support others (it is not a "
                          "Matryoshka model: config.json has no is_matryoshka or "
                          "matryoshka_dimensions)", name, info->dim);
    if (d > info->dim)
        return pl_err_set(e, 400, "invalid_request_error", "dimensions", NULL, "The model '%s' "
                          "gives at most %d dimensions (asked for %d)", name, info->dim, d);
    if (info->n_dims == 0)
        return 0;
    char list[512];
    size_t o = 0;
    for (int i = 0; i < info->n_dims; i++) {
        if (info->dims[i] == d)
            return 0;
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%d", i ? ", " : "", info->dims[i]);
        if (o >= sizeof list)
            o = sizeof list - 1;
    }
    return pl_err_set(e, 400, "invalid_request_error", "dimensions", NULL, "The model '%s' "
                      "only supports the Matryoshka dimensions [%s] (asked for %d)", name, list,
                      d);
}

static void route_(pl_server *s, struct evhttp_request *req, const char *path, void *ud)
{
    (void)path, (void)ud;
    pl_err e;
    parsed p = {0};
    pl_embed_info info;
    const pl_server_opts *o = pl_server_get_opts(s);
    /* texts are read by length: a \\u0000 in one is a character like another */
    json_t *body = pl_read_json_body_flags(req, o->max_body_bytes, JSON_ALLOW_NUL);
    if (!body)
        return;   /* replied */
    pl_model_entry *m = model_(s, body, &info, &e);
    if (!m || options_(body, &p, &e) < 0 ||
        inputs_(json_object_get(body, "input"), o->max_embed_inputs > 0 ? o->max_embed_inputs
                : DEFAULT_MAX_INPUTS, &p, &e) < 0)
        goto fail;
    if (p.dimensions && dimensions_(m->name, &info, p.dimensions, &e) < 0)
        goto fail;
    p.renorm = info.normalized;
    if (start_(s, req, m, &p, &e) < 0)
        goto fail;
    goto done;
fail:
    pl_reply_error(req, &e);
done:
    free(p.inputs);
    free(p.ids);
    json_decref(body);
}

void pl_oai_embeddings_register(pl_server *s)
{
    pl_server_add_route(s, "/v1/embeddings", PL_HTTP_POST, route_, NULL);
}
