/* model_rope.c - a model's RoPE from GGUF metadata (model_internal.h):
 * the scaling type of the global layers (none, linear, llama3, yarn, with
 * YaRN's magnitude and Ministral 3's log multiplier and query temperature),
 * the sliding layers' own base, and the frequency tables each layer points
 * to. Keys are read as model_meta.c reads every key: strictly, an error
 * naming the key. */
#include "backends/engine/model/model_internal.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The rope scaling of the global layers: type none, linear or llama3. */
static int read_rope_scaling(const pl_model *m, const pl_gguf *g, char *type, size_t n,
                             char *err, size_t len)
{
    char k[128];
    const pl_gguf_kv *kv = pl_gguf_find(g, pl_model_key_(k, sizeof k, m, "rope.scaling.type"));
    snprintf(type, n, "none");
    if (!kv)
        return 0;
    if (kv->type != PL_GGUF_TYPE_STRING)
        return pl_model_fail_(err, len, "%s: expected a string, got %s", k,
                              pl_model_type_name_(kv->type));
    pl_gguf_str s = kv->v.str;
    snprintf(type, n, "%.*s", (int)(s.len < n ? s.len : n - 1), s.ptr);
    if (s.len >= n || (strcmp(type, "none") && strcmp(type, "linear") &&
                       strcmp(type, "llama3") && strcmp(type, "yarn")))
        return pl_model_fail_(err, len, "%s: unsupported rope scaling type '%.*s' "
                              "(supported: none, linear, llama3, yarn)", k,
                              (int)(s.len > 32 ? 32 : s.len), s.ptr);
    return 0;
}

/* llama.cpp's get_mscale. */
static float yarn_mscale(float factor, float mscale)
{
    return factor <= 1.0f ? 1.0f : 0.1f * mscale * logf(factor) + 1.0f;
}

/* pl_arch.ministral_rope's keys: YaRN's log multiplier, the queries'
 * temperature (its step: the original context). */
static int ministral_rope(pl_model *m, const pl_gguf *g, const char *type, float factor,
                          int orig, char *err, size_t len)
{
    char k[128];
    float mul = 0, attn_factor = m->rope_mscale;
    if (pl_gguf_find(g, pl_model_key_(k, sizeof k, m, "rope.scaling.yarn_log_multiplier")) &&
        pl_model_meta_float_(m, g, "rope.scaling.yarn_log_multiplier", 1, &mul, err, len))
        return -1;
    if (mul > 0 && !strcmp(type, "yarn")) {
        attn_factor /= 1.0f + 0.1f * logf(factor);
        m->rope_mscale = attn_factor * yarn_mscale(factor, 1) / yarn_mscale(factor, mul);
    }
    if (pl_gguf_find(g, pl_model_key_(k, sizeof k, m, "attention.temperature_scale")) &&
        pl_model_meta_float_(m, g, "attention.temperature_scale", 1, &m->attn_temp_scale, err, len))
        return -1;
    m->attn_temp_floor = orig;
    return 0;
}

int pl_model_read_rope_(pl_model *m, const pl_gguf *g, const float *factors, char *err,
                        size_t len)
{
    char type[32], k[128];
    float factor, lo, hi, attn_factor, base_swa = m->info->swa_rope_base;
    int orig;
    if (pl_gguf_find(g, pl_model_key_(k, sizeof k, m, "rope.freq_base_swa"))) {
        if (base_swa <= 0)
            return pl_model_fail_(err, len, "%s: a sliding-layer RoPE base is not part of %s",
                                  k, m->arch_name);
        if (pl_model_meta_float_(m, g, "rope.freq_base_swa", 0, &base_swa, err, len))
            return -1;
    }
    if (read_rope_scaling(m, g, type, sizeof type, err, len) ||
        pl_model_meta_float_(m, g, "rope.scaling.factor", 1.0f, &factor, err, len) ||
        pl_model_meta_float_(m, g, "rope.scaling.low_freq_factor", 1.0f, &lo, err, len) ||
        pl_model_meta_float_(m, g, "rope.scaling.high_freq_factor", 4.0f, &hi, err, len) ||
        pl_model_meta_float_(m, g, "rope.scaling.attn_factor", 1.0f, &attn_factor, err, len) ||
        pl_model_meta_int_(m, g, "rope.scaling.original_context_length", 1, INT_MAX, m->n_ctx_train,
                 &orig, err, len))
        return -1;
    if (!strcmp(type, "llama3") && !(hi > lo))
        return pl_model_fail_(err, len, "%s.rope.scaling.high_freq_factor: %g must exceed "
                              "low_freq_factor %g", m->arch_name, hi, lo);
    /* parley's own key (hf_arch.c writes it for transformers' truncate
     * false): YaRN's ramp on its exact ends, where llama.cpp rounds them */
    const pl_gguf_kv *tk = pl_gguf_find(g, pl_model_key_(k, sizeof k, m,
                                                    "rope.scaling.yarn_truncate"));
    if (tk && (tk->type != PL_GGUF_TYPE_BOOL || strcmp(type, "yarn")))
        return pl_model_fail_(err, len, "%s: a bool, for rope scaling type yarn only", k);
    /* llama.cpp's rope_yarn scales cos and sin by this (mscale) */
    m->rope_mscale = attn_factor * (!strcmp(type, "yarn") ? 1.0f + 0.1f * logf(factor) : 1.0f);
    if (m->info->ministral_rope && ministral_rope(m, g, type, factor, orig, err, len))
        return -1;
    if (factors)
        snprintf(type, sizeof type, "none");   /* the factors carry the scaling */
    else if (tk && !tk->v.b)
        snprintf(type, sizeof type, "yarn_exact");
    size_t n = (size_t)(m->n_rot / 2);
    m->rope_inv_freq = malloc(sizeof(float) * (n ? n : 1));
    bool own = m->info->swa_rope_base > 0 && m->n_swa_layers > 0;
    size_t n_swa = (size_t)(m->n_rot_swa / 2);
    if (own)
        m->rope_inv_freq_swa = malloc(sizeof(float) * (n_swa ? n_swa : 1));
    if (!m->rope_inv_freq || (own && !m->rope_inv_freq_swa))
        return pl_model_fail_(err, len, "out of memory");
    pl_model_rope_freqs(m->rope_inv_freq, m->n_rot, m->rope_base, type, factor, lo, hi, orig,
                        factors);
    m->rope_base_swa = m->rope_base;
    if (m->rope_inv_freq_swa) {
        m->rope_base_swa = base_swa;
        pl_model_rope_freqs(m->rope_inv_freq_swa, m->n_rot_swa, m->rope_base_swa, "none", 1,
                            1, 4, orig, NULL);
    }
    for (int l = 0; l < m->n_layer; l++)
        m->layers[l].rope_inv_freq = m->layers[l].n_swa && m->rope_inv_freq_swa
                                     ? m->rope_inv_freq_swa : m->rope_inv_freq;
    return 0;
}
