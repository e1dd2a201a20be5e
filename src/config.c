/* config.c - config files onto the option table. */
#include "src/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cfg_ctx {
    const char *path;
    pl_linemap lines;
    char *err;
    size_t errlen;
    const char *skip;            /* "|k1|k2|": keys another reader owns */
} cfg_ctx;

static int cfg_fail(cfg_ctx *c, const char *keypath, const char *msg)
{
    snprintf(c->err, c->errlen, "%s:%d: key '%s': %s", c->path,
             pl_linemap_line(&c->lines, keypath), keypath, msg);
    return -1;
}

static int cfg_set(cfg_ctx *c, pl_opts *o, const char *keypath, const char *key,
                   json_t *v, unsigned scope)
{
    char e[320];
    if (pl_opts_set_json(o, key, v, scope, e, sizeof e) < 0)
        return cfg_fail(c, keypath, e);
    return 0;
}

/* vllm_config keys with a meaning here, and the option each sets. The
 * upper bound is the engine's max_num_seqs: its capacity is then
 * min(bound, KV capacity), as in seed 000. */
static const char *const vllm_mapped[][2] = {
    {"max_num_seqs_upper_bound", "max_num_seqs"},
    {"max_num_seqs", "max_num_seqs"},
    {"gpu_memory_utilization", "gpu_memory_utilization"},  /* sizes the CUDA KV cache */
    {"max_model_len", "max_model_len"},
    {"block_size", "block_size"},
    {"max_num_batched_tokens", "max_num_batched_tokens"},
    {"enable_prefix_caching", "prefix_caching"},
    {"async_scheduling", "async_scheduling"},
    {"revision", "revision"},               /* of a model_name in the local HF cache */
};

/* vLLM engine arguments with no meaning in parley: accepted, with a warning. */
static const char *const vllm_only[] = {
    "attention_backend", "tensor_parallel_size", "pipeline_parallel_size",
    "data_parallel_size", "dtype", "quantization", "kv_cache_dtype", "enforce_eager",
    "trust_remote_code", "swap_space", "cpu_offload_gb", "enable_chunked_prefill",
    "disable_log_stats", "disable_log_requests", "download_dir", "load_format",
    "tokenizer", "tokenizer_mode", "seed", "distributed_executor_backend",
    "max_seq_len_to_capture", "disable_custom_all_reduce", "enable_lora", "max_loras",
    "max_lora_rank", "num_scheduler_steps", "speculative_config", "guided_decoding_backend",
    "limit_mm_per_prompt", "rope_scaling", "rope_theta", "max_logprobs", "hf_overrides",
    "compilation_config", "enable_expert_parallel", "scheduling_policy",
    "calculate_kv_scales", "enable_sleep_mode", "num_gpu_blocks_override",
};

static int vllm_key(cfg_ctx *c, pl_opts *o, const char *kp, const char *k, json_t *x,
                    char *ignored, size_t n)
{
    for (size_t i = 0; i < sizeof vllm_mapped / sizeof vllm_mapped[0]; i++)
        if (!strcmp(k, vllm_mapped[i][0]))
            return cfg_set(c, o, kp, vllm_mapped[i][1], x, PL_OPT_MODEL);
    for (size_t i = 0; i < sizeof vllm_only / sizeof vllm_only[0]; i++) {
        if (!strcmp(k, vllm_only[i])) {
            size_t len = strlen(ignored);
            snprintf(ignored + len, n - len, "%s%s", len ? ", " : "", k);
            return 0;
        }
    }
    return cfg_fail(c, kp, "unknown vllm_config key (parley maps max_num_seqs_upper_bound, "
                    "gpu_memory_utilization, max_model_len, block_size, "
                    "max_num_batched_tokens, enable_prefix_caching, revision; other vLLM engine "
                    "arguments are ignored with a warning)");
}

static int cfg_vllm(cfg_ctx *c, pl_opts *o, const char *base, json_t *v)
{
    char kp[512], ignored[512] = "";
    snprintf(kp, sizeof kp, "%s.vllm_config", base);
    if (!json_is_object(v))
        return cfg_fail(c, kp, "must be a mapping");
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        snprintf(kp, sizeof kp, "%s.vllm_config.%s", base, k);
        if (vllm_key(c, o, kp, k, x, ignored, sizeof ignored) < 0)
            return -1;
    }
    if (ignored[0]) {
        snprintf(kp, sizeof kp, "%s.vllm_config", base);
        fprintf(stderr, "parley: warning: %s:%d: %s: vLLM-only keys ignored (no meaning in "
                "parley): %s\n", c->path, pl_linemap_line(&c->lines, kp), kp, ignored);
    }
    return 0;
}

static int cfg_model_keys(cfg_ctx *c, pl_opts *o, const char *base, json_t *m)
{
    const char *k;
    json_t *v;
    char kp[512];
    json_object_foreach(m, k, v) {
        snprintf(kp, sizeof kp, "%s.%s", base, k);
        int rc = 0;
        char pat[300];
        snprintf(pat, sizeof pat, "|%s|", k);
        if (c->skip && strstr(c->skip, pat))
            continue;
        if (!strcmp(k, "vllm_config"))
            rc = cfg_vllm(c, o, base, v);
        else if (!strcmp(k, "options")) {
            if (!json_is_object(v))
                return cfg_fail(c, kp, "must be a mapping");
            rc = cfg_model_keys(c, o, kp, v);
        } else if (!strcmp(k, "path") || !strcmp(k, "model_name"))
            rc = cfg_set(c, o, kp, "model", v, PL_OPT_MODEL);
        else
            rc = cfg_set(c, o, kp, k, v, PL_OPT_MODEL);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* The key of m (or of its `options:`) that names a model for the engine,
 * as a key path under base into kp; false when none does. */
static bool cfg_model_key(json_t *m, const char *base, char *kp, size_t n)
{
    static const char *const keys[] = {"model_name", "model", "path"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        if (json_object_get(m, keys[i])) {
            snprintf(kp, n, "%s.%s", base, keys[i]);
            return true;
        }
    }
    json_t *opt = json_object_get(m, "options");
    char sub[512];
    snprintf(sub, sizeof sub, "%s.options", base);
    return json_is_object(opt) && cfg_model_key(opt, sub, kp, n);
}

/* A remote model needs its upstream's URL; `backend: vllm` without one is
 * served by parley's own engine and needs the model (seed 000's
 * model_definitions run as written): its own, or the command line's, not
 * one inherited from the environment or the server's options. A model on
 * a backend that loads none is a warning. */
static int cfg_backend_check(cfg_ctx *c, const char *base, json_t *m, const pl_opts *o,
                             bool cli_model)
{
    static const char *remote = "|vllm|sglang|llamacpp|ollama|openai|parley|";
    char kp[600], mk[600], pat[200];
    bool named = cfg_model_key(m, base, mk, sizeof mk);
    snprintf(pat, sizeof pat, "|%s|", o->backend);
    bool is_remote = strstr(remote, pat) != NULL;
    snprintf(kp, sizeof kp, "%s.backend", base);
    if (is_remote && !o->base_url[0] && strcmp(o->backend, "vllm") != 0) {
        snprintf(pat, sizeof pat, "backend %s needs base_url (the upstream's URL with /v1)",
                 o->backend);
        return cfg_fail(c, kp, pat);
    }
    if (is_remote && !o->base_url[0] && !named && !cli_model)
        return cfg_fail(c, kp, "backend vllm needs model_name or base_url: model_name (a GGUF "
                        "file, a Hugging Face checkpoint folder, or ORG/NAME in the local "
                        "Hugging Face cache) runs it on parley's own engine; base_url (a vLLM "
                        "server's URL with /v1) sends its requests to that server");
    const char *why = !strcmp(o->backend, "mock") ? "loads no model (its replies are generated)"
                      : is_remote ? "with base_url sends requests to the upstream, which serves "
                                    "its own model (upstream_model names it)"
                                  : NULL;
    if (named && why)
        fprintf(stderr, "parley: warning: %s:%d: %s: ignored: backend %s %s\n", c->path,
                pl_linemap_line(&c->lines, mk), mk, o->backend, why);
    return 0;
}

int pl_config_model_check(const char *path, const pl_linemap *lines, const char *base,
                          json_t *m, const pl_opts *o, bool cli_model, char *err, size_t errlen)
{
    cfg_ctx c = {.path = path, .lines = *lines, .err = err, .errlen = errlen};
    return json_is_object(m) ? cfg_backend_check(&c, base, m, o, cli_model) : 0;
}

int pl_config_model(const char *path, const pl_linemap *lines, const char *base,
                    json_t *m, const char *skip, pl_opts *o, char *err, size_t errlen)
{
    cfg_ctx c = {.path = path, .lines = *lines, .err = err, .errlen = errlen, .skip = skip};
    if (!json_is_object(m))
        return cfg_fail(&c, base, "must be a mapping");
    return cfg_model_keys(&c, o, base, m);
}

static int cfg_models(cfg_ctx *c, const char *section, json_t *models,
                      const pl_opts *o, pl_config *cfg)
{
    if (!json_is_object(models) || json_object_size(models) == 0)
        return cfg_fail(c, section, "must be a non-empty mapping of name -> model");
    cfg->models = calloc(json_object_size(models), sizeof *cfg->models);
    const char *name;
    json_t *m;
    json_object_foreach(models, name, m) {
        char base[512];
        snprintf(base, sizeof base, "%s.%s", section, name);
        if (!json_is_object(m))
            return cfg_fail(c, base, "must be a mapping with at least `backend`");
        if (!json_object_get(m, "backend"))
            return cfg_fail(c, base, "missing required key `backend`");
        pl_model_cfg *mc = &cfg->models[cfg->n_models++];
        mc->name = strdup(name);
        pl_opts_copy(&mc->opts, o);
        if (cfg_model_keys(c, &mc->opts, base, m) < 0 || cfg_backend_check(c, base, m, &mc->opts, false) < 0)
            return -1;
    }
    return 0;
}

int pl_config_load(const char *path, pl_opts *o, pl_config *cfg, char *err,
                   size_t errlen)
{
    cfg_ctx c = {.path = path, .err = err, .errlen = errlen};
    memset(cfg, 0, sizeof *cfg);
    json_t *root = pl_yaml_load_file(path, &c.lines, err, errlen);
    if (!root)
        goto fail;
    if (!json_is_object(root)) {
        snprintf(err, errlen, "%s:1: the config must be a mapping", path);
        goto fail;
    }
    const char *k;
    json_t *v, *models = NULL;
    const char *section = "models";
    json_object_foreach(root, k, v) {
        if (!strcmp(k, "models") || !strcmp(k, "model_definitions")) {
            if (models) {
                cfg_fail(&c, k, "give `models` or `model_definitions`, not both");
                goto fail;
            }
            models = v;
            section = k;
        } else if (cfg_set(&c, o, k, k, v, PL_OPT_SERVE) < 0) {
            goto fail;
        }
    }
    if (models && cfg_models(&c, section, models, o, cfg) < 0)
        goto fail;
    json_decref(root);
    pl_linemap_free(&c.lines);
    return 0;
fail:
    json_decref(root);
    pl_linemap_free(&c.lines);
    pl_config_free(cfg);
    return -1;
}

void pl_config_free(pl_config *cfg)
{
    for (int i = 0; i < cfg->n_models; i++) {
        free(cfg->models[i].name);
        pl_opts_free(&cfg->models[i].opts);
    }
    free(cfg->models);
    memset(cfg, 0, sizeof *cfg);
}
