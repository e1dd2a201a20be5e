/* model_meta.c - a model's hyperparameters from GGUF metadata (model.h),
 * read the way llama.cpp reads them (src/llama-model.cpp, load_hparams),
 * strictly: a mistyped, out-of-range or contradictory value is an error
 * naming its key, and so is a key that turns on a feature parley does not
 * implement (experts, ALiBi, YaRN, ...): never a silent wrong answer. */
#include "backends/engine/model/model_internal.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/families/family.h"

#define MAX_LAYERS 4096
#define MAX_DIM (1 << 20)

int pl_model_fail_(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && len)
        vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *type_name(pl_gguf_type t)
{
    static const char *const names[] = {"uint8", "int8", "uint16", "int16", "uint32",
                                        "int32", "float32", "bool", "string", "array",
                                        "uint64", "int64", "float64"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

static bool is_int_type(pl_gguf_type t)
{
    return t <= PL_GGUF_TYPE_INT32 || t == PL_GGUF_TYPE_UINT64 || t == PL_GGUF_TYPE_INT64;
}

static bool is_signed_type(pl_gguf_type t)
{
    return t == PL_GGUF_TYPE_INT8 || t == PL_GGUF_TYPE_INT16 || t == PL_GGUF_TYPE_INT32 ||
           t == PL_GGUF_TYPE_INT64;
}

/* "<arch>.<key>" into k. */
static const char *arch_key(char *k, size_t n, const pl_model *m, const char *key)
{
    snprintf(k, n, "%s.%s", m->arch_name, key);
    return k;
}

/* The value of an integer key, or of a per-layer array of them whose
 * entries are all equal (llama.cpp's get_key_or_arr; parley keeps one
 * value for every layer). */
static int kv_int(const pl_gguf_kv *kv, const char *k, long long *out, char *err, size_t len)
{
    if (is_int_type(kv->type)) {
        *out = is_signed_type(kv->type) ? kv->v.i64
               : kv->v.u64 > LLONG_MAX ? LLONG_MAX : (long long)kv->v.u64;
        return 0;
    }
    if (kv->type != PL_GGUF_TYPE_ARRAY || !is_int_type(kv->v.arr.type))
        return pl_model_fail_(err, len, "%s: expected an integer, got %s", k,
                              kv->type == PL_GGUF_TYPE_ARRAY ? "an array of another type"
                                                             : type_name(kv->type));
    if (kv->v.arr.n == 0)
        return pl_model_fail_(err, len, "%s: empty array", k);
    *out = pl_gguf_arr_int(kv, 0);
    for (uint64_t i = 1; i < kv->v.arr.n; i++)
        if (pl_gguf_arr_int(kv, i) != *out)
            return pl_model_fail_(err, len, "%s: per-layer values that differ are not "
                                  "supported", k);
    return 0;
}

/* An integer in [lo, hi] under "<arch>.<key>". Absent: def when def >= lo,
 * else an error ("required"). */
static int meta_int(const pl_model *m, const pl_gguf *g, const char *key, long long lo,
                    long long hi, long long def, int *out, char *err, size_t len)
{
    char k[128];
    arch_key(k, sizeof k, m, key);
    const pl_gguf_kv *kv = pl_gguf_find(g, k);
    long long v = def;
    if (!kv && def < lo)
        return pl_model_fail_(err, len, "%s: missing (required by %s)", k, m->arch_name);
    if (kv && kv_int(kv, k, &v, err, len) != 0)
        return -1;
    if (v < lo || v > hi)
        return pl_model_fail_(err, len, "%s: %lld is out of range [%lld, %lld]", k, v, lo, hi);
    *out = (int)v;
    return 0;
}

/* A finite float > 0 under "<arch>.<key>"; absent: def, or an error when
 * def is 0 ("required"). */
static int meta_pos_float(const pl_model *m, const pl_gguf *g, const char *key, float def,
                          float *out, char *err, size_t len)
{
    char k[128];
    arch_key(k, sizeof k, m, key);
    const pl_gguf_kv *kv = pl_gguf_find(g, k);
    if (!kv) {
        if (def <= 0)
            return pl_model_fail_(err, len, "%s: missing (required by %s)", k, m->arch_name);
        *out = def;
        return 0;
    }
    if (kv->type != PL_GGUF_TYPE_FLOAT32 && kv->type != PL_GGUF_TYPE_FLOAT64)
        return pl_model_fail_(err, len, "%s: expected a float, got %s", k,
                              type_name(kv->type));
    if (!(kv->v.f64 > 0) || !isfinite((float)kv->v.f64))
        return pl_model_fail_(err, len, "%s: %g must be a positive finite number", k,
                              kv->v.f64);
    *out = (float)kv->v.f64;
    return 0;
}

/* Keys of features parley does not implement: present with any value but
 * `neutral` (NAN: any value at all), the file is refused. */
typedef struct unsupported_key {
    const char *key;             /* after "<arch>." */
    double neutral;
    const char *what;
} unsupported_key;

static const unsupported_key unsupported_[] = {
    {"expert_shared_count", 0, "shared experts"},
    {"expert_shared_feed_forward_length", 0, "a shared expert"},
    {"expert_weights_scale", 1, "scaled expert weights"},
    {"expert_group_count", 0, "grouped expert routing"},
    {"leading_dense_block_count", 0, "mixture-of-experts layers"},
    {"pooling_type", 0, "pooled embeddings (an embedding model)"},
    {"logit_scale", 1, "a logit scale"},
    {"embedding_scale", 1, "an embedding scale"},
    {"residual_scale", 1, "a residual scale"},
    {"attention.scale", NAN, "an explicit attention scale"},
    {"attention.causal", 1, "non-causal attention"},
    {"attention.max_alibi_bias", 0, "ALiBi"},
    {"attention.clamp_kqv", 0, "clamped q/k/v"},
    {"attention.q_lora_rank", 0, "multi-head latent attention"},
    {"attention.kv_lora_rank", 0, "multi-head latent attention"},
    {"attention.layer_norm_epsilon", NAN, "LayerNorm (parley has RMSNorm)"},
    {"rope.dimension_sections", NAN, "multimodal RoPE sections"},
    {"rope.scaling.yarn_log_multiplier", 0, "YaRN's log multiplier (DeepSeek)"},
    {"rope.scaling.yarn_ext_factor", 1, "a YaRN extrapolation factor"},
    {"rope.scaling.yarn_attn_factor", 1, "a YaRN attention factor"},
    {"rope.scaling.yarn_beta_fast", 32, "a YaRN beta_fast other than 32"},
    {"rope.scaling.yarn_beta_slow", 1, "a YaRN beta_slow other than 1"},
    {"use_parallel_residual", 0, "parallel residual blocks"},
    {"nextn_predict_layers", 0, "multi-token prediction layers"},
    {"ssm.conv_kernel", NAN, "state-space layers"},
    {"wkv.head_size", NAN, "RWKV layers"},
    {"attention.shared_kv_layers", 0, "layers sharing earlier layers' K/V"},
    {"embedding_length_per_layer_input", 0, "per-layer embeddings"},
    {"attention.temperature_scale", 0, "a query temperature by position (Llama 4)"},
};

/* The value of a scalar key as a number; NAN for strings and arrays. */
static double kv_number(const pl_gguf_kv *kv)
{
    if (kv->type == PL_GGUF_TYPE_BOOL)
        return kv->v.b;
    if (kv->type == PL_GGUF_TYPE_FLOAT32 || kv->type == PL_GGUF_TYPE_FLOAT64)
        return kv->v.f64;
    if (is_int_type(kv->type))
        return is_signed_type(kv->type) ? (double)kv->v.i64 : (double)kv->v.u64;
    return NAN;
}

/* The Gated DeltaNet keys (qwen35), refused in architectures without
 * recurrent layers. */
static const char *const ssm_keys_[] = {"ssm.conv_kernel", "ssm.inner_size", "ssm.state_size",
                                        "ssm.time_step_rank", "ssm.group_count",
                                        "attention.recurrent_layers", "full_attention_interval",
                                        NULL};

/* Keys of experts, refused in architectures without them. */
static const char *const expert_keys_[] = {"expert_count", "expert_used_count",
                                           "expert_feed_forward_length"};

/* Whether the family reads a key the table refuses for the others. */
static bool family_reads(const pl_arch *a, const char *key)
{
    return (a->recurrent && !strcmp(key, "ssm.conv_kernel")) ||
           (a->rope_sections && !strcmp(key, "rope.dimension_sections")) ||
           (a->mtp_ignored && !strcmp(key, "nextn_predict_layers")) ||
           (a->shexp && !strcmp(key, "expert_shared_feed_forward_length")) ||
           (a->kind_geometry && !strcmp(key, "attention.shared_kv_layers")) ||
           (a->per_layer_embd && !strcmp(key, "embedding_length_per_layer_input")) ||
           (a->ministral_rope && (!strcmp(key, "rope.scaling.yarn_log_multiplier") ||
                                  !strcmp(key, "attention.temperature_scale")));
}

static int refuse_unsupported(const pl_model *m, const pl_gguf *g, char *err, size_t len)
{
    char k0[128];
    if (!m->info->recurrent)
        for (const char *const *x = ssm_keys_; *x; x++)
            if (pl_gguf_find(g, arch_key(k0, sizeof k0, m, *x)))
                return pl_model_fail_(err, len, "%s: state-space layers are not part of %s",
                                      k0, m->arch_name);
    char k[128];
    for (size_t i = 0; m->info->moe == PL_MOE_NONE && i < 3; i++) {
        const pl_gguf_kv *kv = pl_gguf_find(g, arch_key(k, sizeof k, m, expert_keys_[i]));
        if (kv && kv_number(kv) != 0)
            return pl_model_fail_(err, len, "%s: mixture-of-experts layers are not part of "
                                  "%s", k, m->arch_name);
    }
    for (size_t i = 0; i < sizeof unsupported_ / sizeof unsupported_[0]; i++) {
        const unsupported_key *u = &unsupported_[i];
        const pl_gguf_kv *kv = pl_gguf_find(g, arch_key(k, sizeof k, m, u->key));
        if (!kv || family_reads(m->info, u->key))
            continue;
        double v = kv_number(kv);
        if (!isnan(u->neutral) && v == u->neutral)
            continue;
        return pl_model_fail_(err, len, "%s: %s is not supported", k, u->what);
    }
    uint64_t n;
    if (pl_gguf_find(g, "split.count") &&
        (pl_gguf_get_u64(g, "split.count", &n) != 0 || n > 1))
        return pl_model_fail_(err, len, "split.count: a model split over several files "
                              "is not supported (merge it with llama-gguf-split)");
    return 0;
}

int pl_model_read_arch_(pl_model *m, const pl_gguf *g, char *err, size_t len)
{
    const pl_gguf_kv *kv = pl_gguf_find(g, "general.architecture");
    if (!kv)
        return pl_model_fail_(err, len, "general.architecture: missing");
    if (kv->type != PL_GGUF_TYPE_STRING)
        return pl_model_fail_(err, len, "general.architecture: expected a string, got %s",
                              type_name(kv->type));
    pl_gguf_str s = kv->v.str;
    m->family = pl_family_find(s.ptr, s.len);
    if (!m->family)
        return pl_model_fail_(err, len, "general.architecture: unsupported model "
                              "architecture '%.*s' (supported: %s)",
                              (int)(s.len > 64 ? 64 : s.len), s.ptr, pl_family_names(false));
    m->info = &m->family->model;
    if (m->info->encoder)
        return pl_model_fail_(err, len, "general.architecture: '%s' is an encoder: it "
                              "embeds (POST /v1/embeddings) and does not generate",
                              m->family->name);
    snprintf(m->arch_name, sizeof m->arch_name, "%s", m->family->name);
    m->rope_neox = m->info->rope_neox;
    m->ffn_act = m->info->act;
    m->attn_out_gate = m->info->attn_out_gate;
    return 0;
}

/* Head sizes: key_length (default n_embd / n_head), value_length equal to
 * it, rotated dims (default all) even and within the head. */
/* attention.head_count_kv for kind_geometry: one value, or one per layer
 * (each in [1, n_head], dividing it); m->n_head_kv the largest. */
static int read_kv_heads(pl_model *m, const pl_gguf *g, char *err, size_t len)
{
    char k[128];
    const pl_gguf_kv *kv = pl_gguf_find(g, arch_key(k, sizeof k, m, "attention.head_count_kv"));
    if (!kv || kv->type != PL_GGUF_TYPE_ARRAY)
        return meta_int(m, g, "attention.head_count_kv", 1, m->n_head, m->n_head,
                        &m->n_head_kv, err, len);
    if (!is_int_type(kv->v.arr.type) || kv->v.arr.n == 0)
        return pl_model_fail_(err, len, "%s: expected integers (one per layer)", k);
    m->n_head_kv = 1;
    for (uint64_t i = 0; i < kv->v.arr.n; i++) {
        long long v = pl_gguf_arr_int(kv, i);
        if (v < 1 || v > m->n_head || m->n_head % v)
            return pl_model_fail_(err, len, "%s: layer %llu's %lld K/V heads do not divide "
                                  "%d query heads", k, (unsigned long long)i, v, m->n_head);
        m->n_head_kv = v > m->n_head_kv ? (int)v : m->n_head_kv;
    }
    return 0;
}

static int read_heads(pl_model *m, const pl_gguf *g, char *err, size_t len)
{
    if (meta_int(m, g, "attention.head_count", 1, MAX_DIM, -1, &m->n_head, err, len))
        return -1;
    if (m->info->kind_geometry ? read_kv_heads(m, g, err, len)
        : meta_int(m, g, "attention.head_count_kv", 1, m->n_head, m->n_head, &m->n_head_kv,
                   err, len))
        return -1;
    char k[128];
    if (m->n_head % m->n_head_kv != 0)
        return pl_model_fail_(err, len, "%s: %d query heads are not a multiple of %d",
                              arch_key(k, sizeof k, m, "attention.head_count_kv"), m->n_head,
                              m->n_head_kv);
    int hd_def = m->n_embd / m->n_head, vd;
    if (meta_int(m, g, "attention.key_length", 2, 4096, hd_def >= 2 ? hd_def : -1,
                 &m->head_dim, err, len) ||
        meta_int(m, g, "attention.value_length", 1, 4096, m->head_dim, &vd, err, len))
        return -1;
    if (vd != m->head_dim)
        return pl_model_fail_(err, len, "%s: %d differs from key_length %d (not supported)",
                              arch_key(k, sizeof k, m, "attention.value_length"), vd,
                              m->head_dim);
    if (meta_int(m, g, "rope.dimension_count", 2, m->head_dim, m->head_dim, &m->n_rot, err,
                 len))
        return -1;
    /* Newer converters may write the sliding layers' sizes apart. */
    int kd, vd2, rd, def = m->info->kind_geometry ? -1 : m->head_dim;   /* Gemma 4: required */
    if (meta_int(m, g, "attention.key_length_swa", 1, 4096, def, &kd, err, len) ||
        meta_int(m, g, "attention.value_length_swa", 1, 4096, def, &vd2, err, len) ||
        meta_int(m, g, "rope.dimension_count_swa", 1, 4096, m->n_rot, &rd, err, len))
        return -1;
    if (m->info->kind_geometry) {
        if (vd2 != kd)
            return pl_model_fail_(err, len, "%s: %d differs from key_length_swa %d (not "
                                  "supported)", arch_key(k, sizeof k, m,
                                                         "attention.value_length_swa"), vd2, kd);
        if (rd > kd || rd % 2 || kd % 2)
            return pl_model_fail_(err, len, "%s: %d rotated dims of sliding heads of %d "
                                  "(even, within the head)",
                                  arch_key(k, sizeof k, m, "rope.dimension_count_swa"), rd, kd);
        m->head_dim_swa = kd;
        m->n_rot_swa = rd;
    } else if (kd != m->head_dim || vd2 != m->head_dim || rd != m->n_rot) {
        return pl_model_fail_(err, len, "%s.*_swa: sliding layers with their own head or "
                              "rope sizes are not supported", m->arch_name);
    } else {
        m->head_dim_swa = m->head_dim;
        m->n_rot_swa = m->n_rot;
    }
    if (m->head_dim % 2 || m->n_rot % 2)
        return pl_model_fail_(err, len, "%s: head_dim %d / rope dims %d must be even",
                              arch_key(k, sizeof k, m, "rope.dimension_count"), m->head_dim,
                              m->n_rot);
    return 0;
}

/* Query scale and soft-capping (gemma): from the architecture's rule and
 * the file's keys. */
static int read_attn_scales(pl_model *m, const pl_gguf *g, char *err, size_t len)
{
    const pl_arch *a = m->info;
    bool wide = a->wide_query_scale_layers && m->n_layer == a->wide_query_scale_layers;
    m->attn_scale = a->kind_geometry ? 1.0f   /* Gemma 4: q and k are normed */
                    : 1.0f / sqrtf((float)(wide ? m->n_embd / m->n_head : m->head_dim));
    m->embd_scale = a->embd_scale ? sqrtf((float)m->n_embd) : 1.0f;
    char k[128];
    if (!a->attn_softcap && pl_gguf_find(g, arch_key(k, sizeof k, m, "attn_logit_softcapping")))
        return pl_model_fail_(err, len, "%s: attention soft-capping is not part of %s", k,
                              m->arch_name);
    if (!a->final_softcap &&
        pl_gguf_find(g, arch_key(k, sizeof k, m, "final_logit_softcapping")))
        return pl_model_fail_(err, len, "%s: final soft-capping is not part of %s", k,
                              m->arch_name);
    if (a->attn_softcap && meta_pos_float(m, g, "attn_logit_softcapping",
                                          a->attn_softcap_default, &m->attn_softcap, err, len))
        return -1;
    if (a->final_softcap && (a->final_softcap_default > 0 ||
                             pl_gguf_find(g, arch_key(k, sizeof k, m,
                                                      "final_logit_softcapping"))) &&
        meta_pos_float(m, g, "final_logit_softcapping",
                                           a->final_softcap_default, &m->final_softcap, err,
                                           len))
        return -1;
    return 0;
}

/* expert_weights_norm (a bool) and expert_gating_func (llama.cpp's enum:
 * 1 softmax, 3 softmax over the top-k), which must be the architecture's. */
static int read_moe_gating(pl_model *m, const pl_gguf *g, char *err, size_t len)
{
    char k[128];
    m->moe_gating = m->info->gating;
    m->moe_norm_w = m->info->moe_norm_w;
    const pl_gguf_kv *kv = pl_gguf_find(g, arch_key(k, sizeof k, m, "expert_weights_norm"));
    if (kv && kv->type != PL_GGUF_TYPE_BOOL)
        return pl_model_fail_(err, len, "%s: expected a bool, got %s", k, type_name(kv->type));
    if (kv)
        m->moe_norm_w = kv->v.b;
    int want = m->moe_gating == PL_MOE_SOFTMAX ? 1 : 3, f;
    if (meta_int(m, g, "expert_gating_func", 0, 16, want, &f, err, len))
        return -1;
    if (f != want)
        return pl_model_fail_(err, len, "%s: gating function %d is not supported for %s "
                              "(it routes by %s, %d)",
                              arch_key(k, sizeof k, m, "expert_gating_func"), f, m->arch_name,
                              want == 1 ? "softmax" : "a softmax over the top k", want);
    return 0;
}

/* Experts: expert_count (required where every layer has experts, else 0
 * for a dense file), expert_used_count, and an expert's width
 * (expert_feed_forward_length; its default is the family's rule). */
static int read_moe(pl_model *m, const pl_gguf *g, char *err, size_t len)
{
    const pl_arch *a = m->info;
    if (a->moe == PL_MOE_NONE)
        return 0;
    bool always = a->moe == PL_MOE_ALWAYS;
    if (meta_int(m, g, "expert_count", always ? 1 : 0, PL_MOE_MAX_EXPERTS, always ? -1 : 0,
                 &m->n_expert, err, len))
        return -1;
    int max_used = m->n_expert < PL_MOE_MAX_USED ? m->n_expert : PL_MOE_MAX_USED, ff_def;
    if (m->n_expert == 0)
        return meta_int(m, g, "expert_used_count", 0, 0, 0, &m->n_expert_used, err, len);
    if (meta_int(m, g, "expert_used_count", 1, max_used, -1, &m->n_expert_used, err, len))
        return -1;
    ff_def = a->expert_ff_default ? a->expert_ff_default(m) : -1;
    if (meta_int(m, g, "expert_feed_forward_length", 1, MAX_DIM, ff_def >= 1 ? ff_def : -1,
                 &m->n_ff_exp, err, len))
        return -1;
    /* the shared expert's width: llama.cpp's default is feed_forward_length */
    if (a->shexp && meta_int(m, g, "expert_shared_feed_forward_length", 1, MAX_DIM,
                             m->n_ff > 0 ? m->n_ff : -1, &m->n_ff_shexp, err, len))
        return -1;
    return read_moe_gating(m, g, err, len);
}

/* block_count, less the multi-token-prediction blocks where the family
 * skips them (nextn_predict_layers). */
static int read_block_count(pl_model *m, const pl_gguf *g, char *err, size_t len)
{
    int n_all;
    if (meta_int(m, g, "block_count", 1, MAX_LAYERS, -1, &n_all, err, len))
        return -1;
    m->n_layer = n_all;
    if (!m->info->mtp_ignored)
        return 0;
    if (meta_int(m, g, "nextn_predict_layers", 0, n_all - 1, 0, &m->n_layer_mtp, err, len))
        return -1;
    m->n_layer = n_all - m->n_layer_mtp;
    return 0;
}

/* rope.dimension_sections (multimodal RoPE, 4 integers): read where the
 * family has them; text positions rotate every section alike, so they need
 * only cover the rotated pairs. */
static int read_rope_sections(pl_model *m, const pl_gguf *g, char *err, size_t len)
{
    char k[128];
    const pl_gguf_kv *kv = pl_gguf_find(g, arch_key(k, sizeof k, m, "rope.dimension_sections"));
    if (!kv || !m->info->rope_sections)
        return 0;
    if (kv->type != PL_GGUF_TYPE_ARRAY || !is_int_type(kv->v.arr.type) || kv->v.arr.n > 4 ||
        kv->v.arr.n == 0)
        return pl_model_fail_(err, len, "%s: expected up to 4 integers", k);
    long long sum = 0;
    for (uint64_t i = 0; i < kv->v.arr.n; i++) {
        long long v = pl_gguf_arr_int(kv, i);
        if (v < 0)
            return pl_model_fail_(err, len, "%s: section %llu is negative", k,
                                  (unsigned long long)i);
        sum += v;
    }
    if (sum != m->n_rot / 2)
        return pl_model_fail_(err, len, "%s: sections cover %lld rotated pairs, "
                              "rope.dimension_count %d has %d", k, sum, m->n_rot, m->n_rot / 2);
    return 0;
}

/* feed_forward_length: one width, or for a family with per-kind geometry
 * (Gemma 4 E2B's double-wide shared layers) one per layer, m->n_ff then
 * the widest (each layer's is read by pl_model_read_geometry_). */
static int read_ff(pl_model *m, const pl_gguf *g, char *err, size_t len)
{
    char k[128];
    const pl_gguf_kv *kv = pl_gguf_find(g, arch_key(k, sizeof k, m, "feed_forward_length"));
    if (!kv || kv->type != PL_GGUF_TYPE_ARRAY || !m->info->kind_geometry)
        /* optional beside a shared expert (its width's default) */
        return meta_int(m, g, "feed_forward_length", m->info->shexp ? 0 : 1, MAX_DIM,
                        m->info->shexp ? 0 : -1, &m->n_ff, err, len);
    if (!is_int_type(kv->v.arr.type) || kv->v.arr.n != (uint64_t)m->n_layer)
        return pl_model_fail_(err, len, "%s: expected %d integers (one per layer)", k,
                              m->n_layer);
    m->n_ff = 0;
    for (uint64_t i = 0; i < kv->v.arr.n; i++) {
        long long v = pl_gguf_arr_int(kv, i);
        if (v < 1 || v > MAX_DIM)
            return pl_model_fail_(err, len, "%s: layer %llu: %lld is out of range [1, %d]", k,
                                  (unsigned long long)i, v, MAX_DIM);
        m->n_ff = v > m->n_ff ? (int)v : m->n_ff;
    }
    return 0;
}

int pl_model_read_hparams_(pl_model *m, const pl_gguf *g, char *err, size_t len)
{
    if (refuse_unsupported(m, g, err, len) ||
        read_block_count(m, g, err, len) ||
        meta_int(m, g, "embedding_length", 1, MAX_DIM, -1, &m->n_embd, err, len) ||
        read_ff(m, g, err, len) ||
        meta_int(m, g, "context_length", 1, INT_MAX, 2048, &m->n_ctx_train, err, len) ||
        read_heads(m, g, err, len) || read_rope_sections(m, g, err, len) ||
        meta_pos_float(m, g, "attention.layer_norm_rms_epsilon",
                       m->info->norm_eps_required ? 0 : 1e-5f, &m->rms_eps, err, len) ||
        meta_pos_float(m, g, "rope.freq_base", 10000.0f, &m->rope_base, err, len) ||
        read_attn_scales(m, g, err, len) || read_moe(m, g, err, len))
        return -1;
    uint64_t v;
    m->bos_id = pl_gguf_get_u64(g, "tokenizer.ggml.bos_token_id", &v) == 0 && v <= INT32_MAX
                ? (int32_t)v : -1;
    m->eos_id = pl_gguf_get_u64(g, "tokenizer.ggml.eos_token_id", &v) == 0 && v <= INT32_MAX
                ? (int32_t)v : -1;
    return 0;
}

/* Which layers slide, from attention.sliding_window_pattern: one bool (or
 * integer) per layer, or one integer period p (il % p < p - 1 slides, as
 * llama.cpp's set_swa_pattern). Absent: the architecture's period. */
static int swa_pattern(pl_model *m, const pl_gguf *g, bool *slides, char *err, size_t len)
{
    char k[128];
    const pl_gguf_kv *kv = pl_gguf_find(g, arch_key(k, sizeof k, m, "attention.sliding_window_pattern"));
    int p = m->info->swa_period;
    if (!kv && m->info->kind_geometry)   /* llama.cpp reads Gemma 4's pattern, no default */
        return pl_model_fail_(err, len, "%s: missing (required by %s)", k, m->arch_name);
    if (kv && kv->type == PL_GGUF_TYPE_ARRAY) {
        if ((kv->v.arr.type != PL_GGUF_TYPE_BOOL && !is_int_type(kv->v.arr.type)) ||
            kv->v.arr.n != (uint64_t)m->n_layer)
            return pl_model_fail_(err, len, "%s: expected %d booleans (one per layer)", k,
                                  m->n_layer);
        for (int l = 0; l < m->n_layer; l++)
            slides[l] = pl_gguf_arr_int(kv, (uint64_t)l) != 0;
        return 0;
    }
    if (kv) {
        long long v;
        if (kv_int(kv, k, &v, err, len) != 0)
            return -1;
        if (v < 0 || v > MAX_LAYERS)
            return pl_model_fail_(err, len, "%s: %lld is out of range", k, v);
        p = (int)v;
    }
    for (int l = 0; l < m->n_layer; l++)
        slides[l] = p == 1 || (p > 1 && l % p < p - 1);
    return 0;
}

int pl_model_read_swa_(pl_model *m, const pl_gguf *g, char *err, size_t len)
{
    char k[128];
    const pl_arch *a = m->info;
    bool has_key = pl_gguf_find(g, arch_key(k, sizeof k, m, "attention.sliding_window"));
    if (a->swa_period == 0) {
        if (has_key || pl_gguf_find(g, arch_key(k, sizeof k, m,
                                                "attention.sliding_window_pattern")))
            return pl_model_fail_(err, len, "%s: sliding-window attention is not part of %s "
                                  "(llama.cpp ignores it)", k, m->arch_name);
        return 0;
    }
    if (!has_key && a->swa_window_default == 0 && a->swa_period == 1)
        return 0;                /* a llama file without a window */
    long long def = a->swa_window_default > 0 ? a->swa_window_default : -1;
    if (meta_int(m, g, "attention.sliding_window", 0, INT_MAX, def, &m->n_swa, err, len))
        return -1;
    bool *slides = calloc((size_t)m->n_layer, sizeof *slides);
    if (!slides)
        return pl_model_fail_(err, len, "out of memory");
    int rc = swa_pattern(m, g, slides, err, len);
    for (int l = 0; rc == 0 && l < m->n_layer; l++) {
        m->layers[l].n_swa = slides[l] ? m->n_swa : 0;
        m->n_swa_layers += slides[l] && m->n_swa > 0;
    }
    free(slides);
    if (rc == 0 && m->n_swa_layers == 0)
        m->n_swa = 0;
    return rc;
}

/* Which layers are recurrent: attention.recurrent_layers (one bool per
 * block, the skipped multi-token-prediction blocks included, which must be
 * false), else every layer but each full_attention_interval-th (llama.cpp's
 * rule, default 4). */
static int read_recurrent_layers(pl_model *m, const pl_gguf *g, char *err, size_t len)
{
    char k[128];
    const pl_gguf_kv *kv = pl_gguf_find(g, arch_key(k, sizeof k, m, "attention.recurrent_layers"));
    int n_all = m->n_layer + m->n_layer_mtp, iv;
    if (kv) {
        if (kv->type != PL_GGUF_TYPE_ARRAY ||
            (kv->v.arr.type != PL_GGUF_TYPE_BOOL && !is_int_type(kv->v.arr.type)) ||
            kv->v.arr.n != (uint64_t)n_all)
            return pl_model_fail_(err, len, "%s: expected %d booleans (one per block)", k,
                                  n_all);
        for (int l = 0; l < n_all; l++) {
            bool r = pl_gguf_arr_int(kv, (uint64_t)l) != 0;
            if (l >= m->n_layer && r)
                return pl_model_fail_(err, len, "%s: multi-token-prediction block %d is "
                                      "marked recurrent", k, l);
            if (l < m->n_layer)
                m->layers[l].recurrent = r;
        }
    } else {
        if (meta_int(m, g, "full_attention_interval", 1, MAX_LAYERS, 4, &iv, err, len))
            return -1;
        for (int l = 0; l < m->n_layer; l++)
            m->layers[l].recurrent = (l + 1) % iv != 0;
    }
    for (int l = 0; l < m->n_layer; l++)
        m->n_recurrent += m->layers[l].recurrent;
    return 0;
}

int pl_model_read_ssm_(pl_model *m, const pl_gguf *g, char *err, size_t len)
{
    char k[128];
    if (!m->info->recurrent)
        return 0;
    if (meta_int(m, g, "ssm.conv_kernel", 2, 64, -1, &m->ssm_conv_kernel, err, len) ||
        meta_int(m, g, "ssm.state_size", 1, 4096, -1, &m->ssm_d_state, err, len) ||
        meta_int(m, g, "ssm.group_count", 1, 4096, -1, &m->ssm_n_k, err, len) ||
        meta_int(m, g, "ssm.time_step_rank", 1, 4096, -1, &m->ssm_n_v, err, len) ||
        meta_int(m, g, "ssm.inner_size", 1, MAX_DIM, -1, &m->ssm_d_inner, err, len) ||
        read_recurrent_layers(m, g, err, len))
        return -1;
    if (m->ssm_n_v % m->ssm_n_k != 0)
        return pl_model_fail_(err, len, "%s: %d value heads are not a multiple of "
                              "ssm.group_count's %d key heads",
                              arch_key(k, sizeof k, m, "ssm.time_step_rank"), m->ssm_n_v,
                              m->ssm_n_k);
    if (m->ssm_d_inner != m->ssm_n_v * m->ssm_d_state)
        return pl_model_fail_(err, len, "%s: %d is not ssm.time_step_rank %d x "
                              "ssm.state_size %d (value heads as wide as key heads)",
                              arch_key(k, sizeof k, m, "ssm.inner_size"), m->ssm_d_inner,
                              m->ssm_n_v, m->ssm_d_state);
    m->ssm_conv_dim = 2 * m->ssm_n_k * m->ssm_d_state + m->ssm_d_inner;
    return 0;
}

/* The integer of layer l in a per-layer array key, or its single value;
 * def when absent. */
static long long layer_int(const pl_gguf_kv *kv, int l, long long def)
{
    if (!kv)
        return def;
    if (kv->type == PL_GGUF_TYPE_ARRAY)
        return pl_gguf_arr_int(kv, (uint64_t)l);
    return is_signed_type(kv->type) ? kv->v.i64 : (long long)kv->v.u64;
}

int pl_model_read_geometry_(pl_model *m, const pl_gguf *g, char *err, size_t len)
{
    char k[128];
    const pl_arch *a = m->info;
    m->kv_dim = m->q_dim = 0;
    if (a->kind_geometry) {
        if (meta_int(m, g, "attention.shared_kv_layers", 0, m->n_layer - 1, 0,
                     &m->n_shared_kv, err, len))
            return -1;
        m->v_norm = true;
    }
    const pl_gguf_kv *hkv = a->kind_geometry
        ? pl_gguf_find(g, arch_key(k, sizeof k, m, "attention.head_count_kv")) : NULL;
    if (hkv && hkv->type == PL_GGUF_TYPE_ARRAY && hkv->v.arr.n != (uint64_t)m->n_layer)
        return pl_model_fail_(err, len, "%s: %llu values for %d layers", k,
                              (unsigned long long)hkv->v.arr.n, m->n_layer);
    const pl_gguf_kv *ffkv = a->kind_geometry
        ? pl_gguf_find(g, arch_key(k, sizeof k, m, "feed_forward_length")) : NULL;
    int first_shared = m->n_layer - m->n_shared_kv;
    for (int l = 0; l < m->n_layer; l++) {
        pl_layer *y = &m->layers[l];
        y->n_ff = (int)layer_int(ffkv, l, m->n_ff);   /* read_ff checked its values */
        bool swa = a->kind_geometry && y->n_swa > 0;
        y->head_dim = swa ? m->head_dim_swa : m->head_dim;
        y->n_rot = swa ? m->n_rot_swa : m->n_rot;
        if (a->nope_period > 0 && (l + 1) % a->nope_period == 0)
            y->n_rot = 0;        /* a NoPE layer */
        y->n_head_kv = (int)layer_int(hkv, l, m->n_head_kv);
        y->kv_src = l;
        if (l >= first_shared) {   /* the last earlier non-shared layer of its kind */
            y->kv_src = -1;
            for (int s = first_shared - 1; s >= 0 && y->kv_src < 0; s--)
                if ((m->layers[s].n_swa > 0) == (y->n_swa > 0))
                    y->kv_src = s;
            if (y->kv_src < 0)
                return pl_model_fail_(err, len, "%s: shared layer %d has no earlier %s layer "
                                      "to read", arch_key(k, sizeof k, m,
                                                          "attention.shared_kv_layers"), l,
                                      y->n_swa ? "sliding" : "global");
            y->no_kv = true;
            const pl_layer *src = &m->layers[y->kv_src];
            if (src->n_head_kv != y->n_head_kv)
                return pl_model_fail_(err, len, "%s: shared layer %d has %d K/V heads, the "
                                      "layer it reads (%d) %d", arch_key(k, sizeof k, m,
                                      "attention.head_count_kv"), l, y->n_head_kv, y->kv_src,
                                      src->n_head_kv);
        }
        int q = m->n_head * y->head_dim, kvd = y->n_head_kv * y->head_dim;
        m->q_dim = q > m->q_dim ? q : m->q_dim;
        m->kv_dim = kvd > m->kv_dim ? kvd : m->kv_dim;
    }
    return 0;
}

/* The readers above, for model_rope.c. */
const char *pl_model_key_(char *k, size_t n, const pl_model *m, const char *key)
{
    return arch_key(k, n, m, key);
}

int pl_model_meta_int_(const pl_model *m, const pl_gguf *g, const char *key, long long lo,
                       long long hi, long long def, int *out, char *err, size_t len)
{
    return meta_int(m, g, key, lo, hi, def, out, err, len);
}

int pl_model_meta_float_(const pl_model *m, const pl_gguf *g, const char *key, float def,
                         float *out, char *err, size_t len)
{
    return meta_pos_float(m, g, key, def, out, err, len);
}

const char *pl_model_type_name_(pl_gguf_type t) { return type_name(t); }
