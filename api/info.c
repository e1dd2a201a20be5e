/* info.c - /health, /v1/models, /status, /tokenize, /detokenize,
 * /tokenizer_info. */
#include "api/info.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/keyvalq_struct.h>

#include "api/oai_params.h"
#include "api/oai_tools.h"
#include "api/respond.h"
#include "backends/req_metrics.h"
#include "schedulers/dispatch.h"

static void health(pl_server *s, struct evhttp_request *req, const char *path, void *ud)
{
    pl_reply_json(req, 200, json_pack("{s:s}", "status", "ok"));
}

/* The model's in-flight bound now (its dispatch's: min(upper bound, what
 * fits now)), what a parley downstream reads as this upstream's capacity. */
static int capacity_now(pl_model_entry *m)
{
    pl_dispatch_counts c;
    pl_dispatch_refresh(m->dispatch);
    pl_dispatch_counts_get(m->dispatch, &c);
    return c.capacity;
}

/* A model as /v1/models lists it; vocab_size where the backend knows it
 * (token ids a client names are checked against it). */
static json_t *model_json(pl_model_entry *m)
{
    pl_backend *b = m->backend;
    json_t *j = json_pack("{s:s, s:s, s:I, s:s, s:s, s:i, s:i}", "id", m->name, "object",
                          "model", "created", (json_int_t)m->created, "owned_by", "parley",
                          "backend", b->ops->kind, "max_model_len", b->ops->max_model_len(b),
                          "capacity", capacity_now(m));
    int nv = pl_backend_vocab_size(b);
    if (j && nv > 0 && json_object_set_new(j, "vocab_size", json_integer(nv)) < 0) {
        json_decref(j);
        j = NULL;
    }
    /* vLLM's "task" words: what the model serves, and an embedder's shape */
    pl_embed_info ei;
    bool embeds = pl_backend_embed_info(b, &ei) == 0;
    json_t *caps = embeds ? json_pack("{s:b, s:b, s:i, s:s, s:b}", "embeddings", 1,
                                      "generation", 0, "dimensions", ei.dim, "pooling",
                                      ei.pooling, "normalized", ei.normalized)
                          : json_pack("{s:b, s:b}", "embeddings", 0, "generation", 1);
    if (caps && embeds && ei.matryoshka) {   /* the dimensions a request may ask for */
        json_t *d = json_array();
        for (int i = 0; d && i < ei.n_dims; i++)
            json_array_append_new(d, json_integer(ei.dims[i]));
        json_object_set_new(caps, "matryoshka_dimensions", ei.n_dims && d ? d : json_null());
        if (!ei.n_dims)
            json_decref(d);
    }
    if (j && (!caps || json_object_set_new(j, "capabilities", caps) < 0 ||
              json_object_set_new(j, "task", json_string(embeds ? "embed" : "generate")) < 0)) {
        json_decref(j);
        j = NULL;
    }
    return j;
}

static void models(pl_server *s, struct evhttp_request *req, const char *path, void *ud)
{
    if (strcmp(path, "/v1/models") != 0) {
        const char *name = path + strlen("/v1/models/");
        pl_model_entry *m = pl_server_find_model(s, name);
        if (!m) {
            pl_reply_errorf(req, 404, "invalid_request_error", "model", "model_not_found",
                            "The model '%s' does not exist", name);
            return;
        }
        pl_reply_json(req, 200, model_json(m));
        return;
    }
    json_t *data = json_array();
    for (int i = 0; data && i < pl_server_n_models(s); i++) {
        if (json_array_append_new(data, model_json(pl_server_model(s, i))) < 0) {
            json_decref(data);
            data = NULL;
        }
    }
    /* NULL (out of memory) anywhere makes the reply a 500. */
    pl_reply_json(req, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

static void status(pl_server *s, struct evhttp_request *req, const char *path, void *ud)
{
    json_t *models = json_object();
    for (int i = 0; models && i < pl_server_n_models(s); i++) {
        pl_model_entry *m = pl_server_model(s, i);
        json_t *st = m->backend->ops->stats(m->backend);
        pl_req_metrics *rm = pl_backend_metrics(m->backend);
        if (st && rm)            /* a failed set leaves the field out */
            json_object_set_new(st, "requests", pl_req_metrics_json(rm));
        json_t *adm = pl_backend_admission_json(m->dispatch);
        if (json_object_set_new(st, "capacity", json_integer(json_integer_value(
                                    json_object_get(adm, "capacity")))) < 0 ||
            json_object_set_new(st, "admission", adm) < 0 ||
            json_object_set_new(models, m->name, st) < 0) {
            json_decref(models);
            models = NULL;
        }
    }
    json_t *root = json_pack("{s:I, s:o}", "time", (json_int_t)time(NULL), "models", models);
    if (root)
        pl_server_run_status_hooks(s, root);
    pl_reply_json(req, 200, root);
}

static void set_oom(pl_err *err)
{
    pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
}

/* vLLM's shapes: {model, prompt | messages, add_special_tokens} ->
 * {count, max_model_len, tokens}; {model, tokens} -> {prompt}. */
static pl_model_entry *token_model(pl_server *s, json_t *body, pl_err *err)
{
    json_t *m = json_object_get(body, "model");
    if (m && !json_is_string(m)) {
        pl_err_set(err, 400, "invalid_request_error", "model", NULL, "'model' must be a string");
        return NULL;
    }
    pl_model_entry *e = m ? pl_server_find_model(s, json_string_value(m))
                          : pl_server_model(s, 0);
    if (!e)
        pl_err_set(err, 404, "invalid_request_error", "model", "model_not_found",
                   "The model '%s' does not exist", m ? json_string_value(m) : "");
    return e;
}

/* {count, max_model_len, tokens}, or NULL on out-of-memory. */
static json_t *tokens_json(pl_model_entry *m, const int32_t *ids, int n)
{
    json_t *toks = json_array();
    for (int i = 0; toks && i < n; i++) {
        if (json_array_append_new(toks, json_integer(ids[i])) < 0) {
            json_decref(toks);
            toks = NULL;
        }
    }
    return json_pack("{s:i, s:i, s:o}", "count", n, "max_model_len",
                     m->backend->ops->max_model_len(m->backend), "tokens", toks);
}

static void tokenize(pl_server *s, struct evhttp_request *req, const char *path, void *ud)
{
    pl_err err;
    pl_oai_params p;
    memset(&p, 0, sizeof p);
    int32_t *ids = NULL;
    json_t *body = pl_read_json_body(req, pl_server_get_opts(s)->max_body_bytes);
    if (!body)
        return;   /* replied */
    pl_model_entry *m = token_model(s, body, &err);
    if (!m)
        goto fail;
    bool chat = json_object_get(body, "messages") != NULL;
    json_t *as = json_object_get(body, "add_special_tokens");
    if (as && !json_is_boolean(as)) {
        pl_err_set(&err, 400, "invalid_request_error", "add_special_tokens", NULL,
                   "'add_special_tokens' must be a boolean");
        goto fail;
    }
    if (!json_object_get(body, "model") &&
        json_object_set_new(body, "model", json_string(m->name)) < 0) {
        set_oom(&err);
        goto fail;
    }
    if (pl_oai_parse(body, chat, &p, &err) < 0 ||
        (chat && pl_oai_tools_prepare(&p, body, m->backend, &err) < 0))
        goto fail;   /* tools render as chat renders them */
    pl_gen_request r;
    pl_oai_to_request(&p, &r);
    r.add_generation_prompt = json_is_true(json_object_get(body, "add_generation_prompt"));
    int n = 0;
    bool add_special = as ? json_is_true(as) : !chat;
    if (m->backend->ops->tokenize(m->backend, &r, add_special, &ids, &n, &err) < 0)
        goto fail;
    pl_reply_json(req, 200, tokens_json(m, ids, n));
    goto done;
fail:
    pl_reply_error(req, &err);
done:
    free(ids);
    pl_oai_params_free(&p);
    json_decref(body);
}

/* ids[] from body's "tokens" (caller frees *out). Returns the count or -1. */
static int detok_ids(json_t *body, int32_t **out, pl_err *err)
{
    json_t *toks = json_object_get(body, "tokens"), *t;
    if (!json_is_array(toks)) {
        pl_err_set(err, 400, "invalid_request_error", "tokens", NULL,
                   "'tokens' must be an array of token ids");
        return -1;
    }
    size_t n = json_array_size(toks), i;
    int32_t *ids = *out = malloc((n + 1) * sizeof *ids);
    if (!ids) {
        set_oom(err);
        return -1;
    }
    json_array_foreach(toks, i, t) {
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX) {
            pl_err_set(err, 400, "invalid_request_error", "tokens", NULL,
                       "'tokens[%zu]' must be a token id", i);
            return -1;
        }
        ids[i] = (int32_t)json_integer_value(t);
    }
    return (int)n;
}

static void detokenize(pl_server *s, struct evhttp_request *req, const char *path, void *ud)
{
    pl_err err;
    int32_t *ids = NULL;
    char *text = NULL;
    json_t *body = pl_read_json_body(req, pl_server_get_opts(s)->max_body_bytes);
    if (!body)
        return;   /* replied */
    pl_model_entry *m = token_model(s, body, &err);
    int n = m ? detok_ids(body, &ids, &err) : -1;
    if (n < 0)
        goto fail;
    if (m->backend->ops->detokenize(m->backend, ids, n, &text, &err) < 0)
        goto fail;
    json_t *js = pl_json_string_lossy(text, text ? strlen(text) : 0);   /* a byte token alone */
    pl_reply_json(req, 200, json_pack("{s:o}", "prompt", js ? js : json_string("")));
    goto done;
fail:
    pl_reply_error(req, &err);
done:
    free(text);
    free(ids);
    json_decref(body);
}

/* The model a GET names with ?model=NAME; the first model without one.
 * NULL after replying 404 (unknown) or 400 (an unparsable query). */
static pl_model_entry *query_model(pl_server *s, struct evhttp_request *req)
{
    const char *q = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    struct evkeyvalq kv;
    if (evhttp_parse_query_str(q ? q : "", &kv) < 0) {
        pl_reply_errorf(req, 400, "invalid_request_error", NULL, NULL,
                        "the query string is not valid");
        return NULL;
    }
    const char *name = evhttp_find_header(&kv, "model");
    pl_model_entry *m = name ? pl_server_find_model(s, name) : pl_server_model(s, 0);
    if (!m)
        pl_reply_errorf(req, 404, "invalid_request_error", "model", "model_not_found",
                        "The model '%s' does not exist", name ? name : "");
    evhttp_clear_headers(&kv);
    return m;
}

/* vLLM's GET /tokenizer_info (lm-evaluation-harness's remote tokenizer
 * reads eos_token, bos_token and chat_template from it). */
static void tokenizer_info(pl_server *s, struct evhttp_request *req, const char *path,
                           void *ud)
{
    pl_model_entry *m = query_model(s, req);
    if (!m)
        return;   /* replied */
    pl_backend *b = m->backend;
    pl_err err;
    if (!b->ops->tokenizer_info) {
        pl_err_set(&err, 501, "invalid_request_error", NULL, "not_implemented",
                   "tokenizer_info is not available for the %s model '%s'", b->ops->kind,
                   m->name);
        pl_reply_error(req, &err);
        return;
    }
    json_t *j = b->ops->tokenizer_info(b, &err);
    if (!j) {
        pl_reply_error(req, &err);
        return;
    }
    pl_reply_json(req, 200, j);
}

void pl_info_register(pl_server *s)
{
    pl_server_add_route(s, "/health", PL_HTTP_GET, health, NULL);
    pl_server_add_route(s, "/v1/models", PL_HTTP_GET, models, NULL);
    pl_server_add_route(s, "/v1/models/*", PL_HTTP_GET, models, NULL);
    pl_server_add_route(s, "/status", PL_HTTP_GET, status, NULL);
    pl_server_add_route(s, "/tokenize", PL_HTTP_POST, tokenize, NULL);
    pl_server_add_route(s, "/detokenize", PL_HTTP_POST, detokenize, NULL);
    pl_server_add_route(s, "/tokenizer_info", PL_HTTP_GET, tokenizer_info, NULL);
}
