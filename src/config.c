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

/* vllm_config: only max_num_seqs_upper_bound is meaningful to parley. */
static int cfg_vllm(cfg_ctx *c, pl_opts *o, const char *base, json_t *v)
{
    char kp[512];
    snprintf(kp, sizeof kp, "%s.vllm_config", base);
    if (!json_is_object(v))
        return cfg_fail(c, kp, "must be a mapping");
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        snprintf(kp, sizeof kp, "%s.vllm_config.%s", base, k);
        if (!strcmp(k, "max_num_seqs_upper_bound")) {
            if (cfg_set(c, o, kp, "max_num_seqs", x, PL_OPT_MODEL) < 0)
                return -1;
        } else if (strcmp(k, "attention_backend") != 0) {
            return cfg_fail(c, kp, "unknown key (parley reads max_num_seqs_upper_bound)");
        }
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
        if (!strcmp(k, "vllm_config"))
            rc = cfg_vllm(c, o, base, v);
        else if (!strcmp(k, "options")) {
            if (!json_is_object(v))
                return cfg_fail(c, kp, "must be a mapping");
            rc = cfg_model_keys(c, o, kp, v);
        } else if (!strcmp(k, "path"))
            rc = cfg_set(c, o, kp, "model", v, PL_OPT_MODEL);
        else
            rc = cfg_set(c, o, kp, k, v, PL_OPT_MODEL);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* A remote model needs its upstream's URL. */
static int cfg_remote_check(cfg_ctx *c, const char *base, const pl_opts *o)
{
    static const char *remote = "|vllm|sglang|llamacpp|ollama|openai|parley|";
    char kp[600], pat[160];
    snprintf(pat, sizeof pat, "|%s|", o->backend);
    if (!strstr(remote, pat) || o->base_url[0])
        return 0;
    snprintf(kp, sizeof kp, "%s.backend", base);
    snprintf(pat, sizeof pat, "backend %s needs base_url (the upstream's URL with /v1)",
             o->backend);
    return cfg_fail(c, kp, pat);
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
        if (cfg_model_keys(c, &mc->opts, base, m) < 0 || cfg_remote_check(c, base, &mc->opts) < 0)
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
