/* models_init.c - backend construction from options. */
#include "src/models_init.h"

#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include "backends/engine_open.h"
#include "backends/mock/mock.h"
#include "backends/remote/remote.h"
#include "backends/text/reasoning_format.h"
#include "backends/text/tool_format.h"
#include "src/base/log.h"
#include "src/base/redact.h"

#define DEFAULT_MODEL_FILE "SmolLM2-135M-Instruct.Q4_1.gguf"

/* --model, else the default model in the cache scripts/fetch_model.sh fills. */
static void model_path(const pl_opts *o, char *out, size_t n)
{
    if (o->model[0]) {
        snprintf(out, n, "%s", o->model);
        return;
    }
    const char *home = getenv("HOME");
    if (o->model_dir && o->model_dir[0])
        snprintf(out, n, "%s/%s", o->model_dir, DEFAULT_MODEL_FILE);
    else
        snprintf(out, n, "%s/.cache/parley/models/%s", home ? home : ".", DEFAULT_MODEL_FILE);
}

static pl_backend *open_engine(struct event_base *base, const pl_opts *o, const char *device,
                               bool picked, const char *name, char *err, size_t errlen)
{
    char path[4096];
    model_path(o, path, sizeof path);
    pl_engine_open_opts eo = {
        .model_path = path,
        .served_name = name ? name : o->served_model_name,
        .device = device,
        .cpu_fallback = picked,
        .cfg = &o->engine,
    };
    pl_backend *b = pl_engine_open(base, &eo, err, errlen);
    if (!b && !o->model[0])
        snprintf(err + strlen(err), errlen - strlen(err),
                 " (fetch the default model with scripts/fetch_model.sh, or give --model)");
    return b;
}

static pl_backend *open_mock(struct event_base *base, const pl_opts *o, const char *name)
{
    pl_mock_opts mo = {
        .model = name ? name : (o->served_model_name[0] ? o->served_model_name : "mock"),
        .token_delay_ms = o->mock_token_delay_ms,
        .capacity = o->mock_capacity,
        .seed = (uint64_t)o->mock_seed,
        .echo = strcmp(o->mock_mode, "echo") == 0,
        /* gpt-oss's harmony is both a reasoning and a tool format */
        .reasoning = pl_reasoning_format_find(o->mock_reasoning),
        .tools = pl_tool_format_find(o->mock_reasoning),
        .max_model_len = o->engine.max_model_len,
        .json_ws = (pl_json_ws)o->engine.core.json_ws,
    };
    return pl_mock_new(base, &mo);
}

/* Split a comma-separated list in place into at most max pointers. */
static int split_urls(char *s, char **out, int max)
{
    int n = 0;
    for (char *p = strtok(s, ","); p && n < max; p = strtok(NULL, ","))
        out[n++] = p;
    return n;
}

int pl_models_api_key(const pl_opts *o, const char **key, char *err, size_t errlen)
{
    *key = o->upstream_api_key;
    if (!o->upstream_api_key_env[0])
        return 0;
    const char *v = getenv(o->upstream_api_key_env);
    if (!v || !*v) {
        snprintf(err, errlen, "api_key_env: the environment variable %s is not set",
                 o->upstream_api_key_env);
        return -1;
    }
    *key = v;
    return 0;
}

pl_backend *pl_models_open_remote(struct event_base *base, const pl_opts *o, int kind,
                                  const char *name, const char *urls, const char *upstream_model,
                                  char *err, size_t errlen)
{
    char *list = strdup(urls ? urls : "");
    char *u[64];
    const char *key;
    if (!list || pl_models_api_key(o, &key, err, errlen) < 0) {
        free(list);
        return NULL;
    }
    pl_remote_opts ro = {
        .model = name ? name : (o->served_model_name[0] ? o->served_model_name : "remote"),
        .kind = (pl_remote_kind)kind,
        .urls = (const char *const *)u,
        .n_urls = split_urls(list, u, 64),
        .api_key = key,
        .upstream_model = upstream_model ? upstream_model : o->upstream_model,
        .upper_bound = o->engine.core.max_num_seqs,
        .worst_case_capacity = o->engine.core.capacity_rule == PL_CAPACITY_WORST_CASE,
        .max_model_len = o->engine.max_model_len,
        .connect_timeout_ms = o->upstream_connect_timeout_ms,
        .first_token_timeout_ms = o->upstream_first_token_timeout_ms,
        .token_timeout_ms = o->upstream_token_timeout_ms,
        .max_attempts = o->upstream_attempts,
        .health_interval_ms = o->upstream_health_interval_ms,
        .affinity = o->upstream_affinity,
        .probe_timeout_ms = o->upstream_probe_timeout_ms,
        .embed_dim = o->upstream_embed_dim,
    };
    if (ro.n_urls == 0) {
        snprintf(err, errlen, "backend %s needs base_url (the upstream's URL with /v1)",
                 o->backend);
        free(list);
        return NULL;
    }
    pl_backend *b = pl_remote_new(base, &ro, err, errlen);
    free(list);
    return b;
}

pl_backend *pl_models_open(struct event_base *base, const pl_opts *o, const char *name,
                           char *err, size_t errlen)
{
    int kind = pl_remote_kind_parse(o->backend);
    /* Seed 000's `backend: vllm` without base_url: parley's engine serves
     * the model (model_name) itself, on the GPU when there is one. */
    bool local_vllm = kind == PL_REMOTE_VLLM && !o->base_url[0] && o->model[0];
    if (kind == PL_REMOTE_VLLM && !o->base_url[0] && !o->model[0]) {
        snprintf(err, errlen, "backend vllm needs --model or --base-url: --model (a GGUF file, "
                 "a Hugging Face checkpoint folder, or ORG/NAME in the local Hugging Face "
                 "cache) runs it on parley's own engine; --base-url (a vLLM server's URL with "
                 "/v1) sends its requests to that server");
        return NULL;
    }
    if (kind > 0 && !local_vllm)
        return pl_models_open_remote(base, o, kind, name, o->base_url, NULL, err, errlen);
    if (!strcmp(o->backend, "mock"))
        return open_mock(base, o, name);
    if (!strcmp(o->backend, "cpu"))
        return open_engine(base, o, "cpu", false, name, err, errlen);
    char why[256];
    int gpu = pl_engine_gpu_available(why, sizeof why);
    if (!strcmp(o->backend, "cuda")) {
        if (!gpu) {
            snprintf(err, errlen, "--backend cuda: %s", why);
            return NULL;
        }
        return open_engine(base, o, "cuda", false, name, err, errlen);
    }
    if (!strcmp(o->backend, "auto") || local_vllm) {
        pl_info("backend %s%s: %s", o->backend, local_vllm ? " without base_url" : "",
                gpu ? "parley's engine on the GPU (cuda)" : "no GPU, parley's engine on the CPU");
        if (!gpu)
            pl_debug("no GPU: %s", why);
        return open_engine(base, o, gpu ? "cuda" : "cpu", gpu, name, err, errlen);
    }
    snprintf(err, errlen, "backend '%s' is not available in this build", o->backend);
    return NULL;
}

void pl_upstreams_free(pl_upstream_model *m, int n)
{
    for (int i = 0; i < n; i++) {
        free(m[i].name);
        free(m[i].urls);
    }
    free(m);
}

/* Add url to the group of model id (a new group when id is new). */
static int group_add(pl_upstream_model **m, int *n, const char *id, const char *url)
{
    for (int i = 0; i < *n; i++) {
        if (strcmp((*m)[i].name, id) != 0)
            continue;
        size_t len = strlen((*m)[i].urls) + strlen(url) + 2;
        char *s = malloc(len);
        if (!s)
            return -1;
        snprintf(s, len, "%s,%s", (*m)[i].urls, url);
        free((*m)[i].urls);
        (*m)[i].urls = s;
        return 0;
    }
    pl_upstream_model *g = realloc(*m, (size_t)(*n + 1) * sizeof *g);
    if (!g)
        return -1;
    *m = g;
    g[*n].name = strdup(id);
    g[*n].urls = strdup(url);
    (*n)++;
    return 0;
}

int pl_upstreams_discover(const pl_opts *o, pl_upstream_model **out, int *n, char *err,
                          size_t errlen)
{
    char *list = strdup(o->upstream), *u[64];
    const char *key;
    *out = NULL;
    *n = 0;
    if (!list || pl_models_api_key(o, &key, err, errlen) < 0)
        goto fail;
    int nu = split_urls(list, u, 64);
    for (int i = 0; i < nu; i++) {
        char **ids, e[400], shown[1024];
        int k, used = 0;
        pl_redact_url(u[i], shown, sizeof shown);
        if (pl_remote_list_models(u[i], key, o->upstream_connect_timeout_ms + 5000, &ids, &k,
                                  e, sizeof e) < 0) {
            snprintf(err, errlen, "--upstream %s: cannot list its models: %s", shown, e);
            goto fail;
        }
        int rc = 0;
        for (int j = 0; j < k; j++) {
            const char *why = pl_remote_model_id_problem(ids[j]);
            if (why)
                pl_warn("--upstream %s: not serving the model id '%s': %s", shown, ids[j], why);
            else if (rc == 0 && (rc = group_add(out, n, ids[j], u[i])) == 0)
                used++;
            free(ids[j]);
        }
        free(ids);
        if (used == 0) {
            snprintf(err, errlen, "--upstream %s lists no models parley can serve", shown);
            goto fail;
        }
    }
    free(list);
    return 0;
fail:
    free(list);
    pl_upstreams_free(*out, *n);
    *out = NULL;
    *n = 0;
    return -1;
}
