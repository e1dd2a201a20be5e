/* models_init.c - backend construction from options. */
#include "src/models_init.h"

#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include "backends/engine/engine_open.h"
#include "backends/mock/mock.h"
#include "src/base/log.h"

#define DEFAULT_MODEL_FILE "SmolLM2-135M-Instruct.Q4_1.gguf"

/* --model, else the default model in the cache scripts/fetch_model.sh fills. */
static void model_path(const pl_opts *o, char *out, size_t n)
{
    if (o->model[0]) {
        snprintf(out, n, "%s", o->model);
        return;
    }
    const char *dir = getenv("PARLEY_MODEL_DIR"), *home = getenv("HOME");
    if (dir && *dir)
        snprintf(out, n, "%s/%s", dir, DEFAULT_MODEL_FILE);
    else
        snprintf(out, n, "%s/.cache/parley/models/%s", home ? home : ".", DEFAULT_MODEL_FILE);
}

static pl_backend *open_engine(struct event_base *base, const pl_opts *o, const char *device,
                               const char *name, char *err, size_t errlen)
{
    char path[4096];
    model_path(o, path, sizeof path);
    pl_engine_open_opts eo = {
        .model_path = path,
        .served_name = name ? name : o->served_model_name,
        .device = device,
        .chat_template = o->chat_template,
        .chat_template_strict = o->chat_template_strict,
        .threads = o->threads,
        .max_num_seqs = o->max_num_seqs,
        .max_num_batched_tokens = o->max_num_batched_tokens,
        .block_size = o->block_size,
        .kv_cache_mb = o->kv_cache_mb,
        .max_model_len = o->max_model_len,
        .async_scheduling = o->async_scheduling,
        .prefix_caching = o->prefix_caching,
        .batch_invariant = o->batch_invariant,
        .gpu_memory_utilization = o->gpu_memory_utilization,
        .cuda_graphs = o->cuda_graphs,
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
        .max_model_len = o->max_model_len,
    };
    return pl_mock_new(base, &mo);
}

pl_backend *pl_models_open(struct event_base *base, const pl_opts *o, const char *name,
                           char *err, size_t errlen)
{
    if (!strcmp(o->backend, "mock"))
        return open_mock(base, o, name);
    if (!strcmp(o->backend, "cpu"))
        return open_engine(base, o, "cpu", name, err, errlen);
    char why[256];
    int gpu = pl_engine_gpu_available(why, sizeof why);
    if (!strcmp(o->backend, "cuda")) {
        if (!gpu) {
            snprintf(err, errlen, "--backend cuda: %s", why);
            return NULL;
        }
        return open_engine(base, o, "cuda", name, err, errlen);
    }
    if (!strcmp(o->backend, "auto")) {
        pl_info("backend auto: %s", gpu ? "using the GPU (cuda)" : "no GPU, using the CPU");
        if (!gpu)
            pl_debug("no GPU: %s", why);
        return open_engine(base, o, gpu ? "cuda" : "cpu", name, err, errlen);
    }
    snprintf(err, errlen, "backend '%s' is not available in this build", o->backend);
    return NULL;
}
