/* st_config.c - sentence-transformers' modules.json, Pooling config and
 * sentence_bert_config.json (st_config.h). */
#include "backends/engine/model/st_config.h"

#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "backends/formats/hf_json.h"

static bool ends_with_(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

/* The Pooling module's config: exactly one mode parley implements. */
static int pooling_(const char *dir, const char *sub, pl_st_config *o, char *err, size_t n)
{
    static const struct { const char *key; pl_pooling p; } modes[] = {
        {"pooling_mode_mean_tokens", PL_POOLING_MEAN}, {"pooling_mode_cls_token", PL_POOLING_CLS},
        {"pooling_mode_lasttoken", PL_POOLING_LAST}, {"pooling_mode_max_tokens", PL_POOLING_NONE},
        {"pooling_mode_mean_sqrt_len_tokens", PL_POOLING_NONE},
        {"pooling_mode_weightedmean_tokens", PL_POOLING_NONE}};
    char path[4096];
    pl_hf_json j;
    long long dim = 0;
    bool prompt = true;
    int rc = -1;
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    if (pl_hf_json_load(&j, path, "config.json", true, err, n) < 0)
        return -1;
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        bool on = false;
        if (pl_hf_json_bool(&j, modes[i].key, false, &on, err, n) < 0)
            goto done;
        if (on && modes[i].p == PL_POOLING_NONE) {
            pl_hf_json_fail(&j, modes[i].key, err, n, "this pooling is not implemented "
                            "(mean, cls and last token are)");
            goto done;
        }
        if (on && o->pooling) {
            pl_hf_json_fail(&j, modes[i].key, err, n, "a second pooling mode (one is "
                            "supported at a time)");
            goto done;
        }
        if (on)
            o->pooling = modes[i].p;
    }
    if (pl_hf_json_int(&j, "word_embedding_dimension", false, 1, 1 << 20, &dim, err, n) < 0 ||
        pl_hf_json_bool(&j, "include_prompt", false, &prompt, err, n) < 0)
        goto done;
    if (!prompt) {
        pl_hf_json_fail(&j, "include_prompt", err, n, "false is not supported");
        goto done;
    }
    if (!o->pooling) {
        pl_hf_json_fail(&j, "pooling_mode_mean_tokens", err, n, "no pooling mode is on");
        goto done;
    }
    o->dim = (int)dim;
    rc = 0;
done:
    pl_hf_json_free(&j);
    return rc;
}

/* One module of modules.json, in order: Transformer (the folder itself),
 * Pooling, Normalize. */
static int module_(const char *dir, const char *file, size_t i, json_t *m, pl_st_config *o,
                   char *err, size_t n)
{
    const char *type = json_string_value(json_object_get(m, "type"));
    const char *path = json_string_value(json_object_get(m, "path"));
    if (!type || !path)
        return snprintf(err, n, "%s: [%zu]: needs a \"type\" and a \"path\"", file, i), -1;
    if (ends_with_(type, ".Transformer") && i == 0) {
        if (path[0])
            return snprintf(err, n, "%s: [0].path: '%s': only a model at the folder's "
                            "root is supported", file, path), -1;
        return 0;
    }
    if (ends_with_(type, ".Pooling") && !o->pooling && !o->normalize)
        return pooling_(dir, path, o, err, n);
    if (ends_with_(type, ".Normalize") && o->pooling && !o->normalize) {
        o->normalize = true;
        return 0;
    }
    return snprintf(err, n, "%s: [%zu].type: '%s' here is not supported (parley runs "
                    "Transformer, Pooling, Normalize)", file, i, type), -1;
}

static int seq_len_(const char *dir, pl_st_config *o, char *err, size_t n)
{
    pl_hf_json j;
    long long len = 0;
    bool lower = false;
    int rc = -1;
    if (pl_hf_json_load(&j, dir, "sentence_bert_config.json", false, err, n) < 0)
        return -1;
    if (pl_hf_json_int(&j, "max_seq_length", false, 1, 1 << 20, &len, err, n) < 0 ||
        pl_hf_json_bool(&j, "do_lower_case", false, &lower, err, n) < 0)
        goto done;
    if (lower) {
        pl_hf_json_fail(&j, "do_lower_case", err, n, "true is not supported (the "
                        "tokenizer's own normalizer lower-cases)");
        goto done;
    }
    o->max_seq_length = (int)len;
    rc = 0;
done:
    pl_hf_json_free(&j);
    return rc;
}

int pl_st_config_read(const char *dir, pl_st_config *o, char *err, size_t n)
{
    char file[4096];
    json_error_t je;
    memset(o, 0, sizeof *o);
    snprintf(file, sizeof file, "%s/modules.json", dir);
    json_t *mods = json_load_file(file, 0, &je), *m;
    if (!mods) {
        FILE *f = fopen(file, "r");
        if (!f)
            return 0;            /* a plain transformers folder */
        fclose(f);
        return snprintf(err, n, "%s:%d: %s", file, je.line, je.text), -1;
    }
    size_t i;
    int rc = json_is_array(mods) ? 0 : (snprintf(err, n, "%s: not a list of modules", file), -1);
    json_array_foreach(json_is_array(mods) ? mods : NULL, i, m)
        if (!rc && module_(dir, file, i, m, o, err, n) < 0)
            rc = -1;
    json_decref(mods);
    o->present = true;
    return rc ? rc : seq_len_(dir, o, err, n);
}
