/* hf_arch.c - Hugging Face architectures (hf_arch.h): the config.json keys
 * every family shares onto GGUF metadata, as llama.cpp's
 * convert_hf_to_gguf.py writes them, and the global tensors. Each family's
 * own keys and layer tensors are in its file (backends/engine/families/).
 */
#include "backends/engine/model/hf_arch.h"
#include "backends/engine/model/hf_config.h"

#include "backends/engine/families/family.h"

#include <math.h>
#include <stdio.h>
#include <string.h>


static const pl_hf_tmap globals_[] = {
    {"model.embed_tokens.weight", "token_embd.weight", PL_HF_DIM_VOCAB, PL_HF_DIM_HIDDEN, 0},
    {"model.norm.weight", "output_norm.weight", PL_HF_DIM_HIDDEN, 0, PL_HF_T_NORM},
    {"lm_head.weight", "output.weight", PL_HF_DIM_VOCAB, PL_HF_DIM_HIDDEN, PL_HF_T_OPTIONAL},
    PL_HF_END,
};

static int put_u32_(pl_gguf_synth *s, const pl_hf_arch *a, const char *key, int v)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", a->gguf, key);
    return pl_gguf_synth_u32(s, k, (uint32_t)v);
}

static int put_f32_(pl_gguf_synth *s, const pl_hf_arch *a, const char *key, double v)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", a->gguf, key);
    return pl_gguf_synth_f32(s, k, (float)v);
}

static int shape_(const pl_hf_arch *a, const pl_hf_json *c, pl_hf_shape *sh, char *err,
                  size_t n)
{
    if (pl_family_hf_int(c, "num_hidden_layers", true, 1, 4096, 0, &sh->n_layer, err, n) ||
        pl_family_hf_int(c, "hidden_size", true, 1, 1 << 20, 0, &sh->n_embd, err, n) ||
        pl_family_hf_int(c, "intermediate_size", !a->no_dense_ff, 1, 1 << 22, 0, &sh->n_ff,
                         err, n) ||
        pl_family_hf_int(c, "num_attention_heads", true, 1, 4096, 0, &sh->n_head, err, n) ||
        pl_family_hf_int(c, "num_key_value_heads", false, 1, 4096, sh->n_head, &sh->n_head_kv, err, n) ||
        pl_family_hf_int(c, "vocab_size", true, 1, 1 << 24, 0, &sh->n_vocab, err, n))
        return -1;
    if (sh->n_head % sh->n_head_kv)
        return pl_hf_json_fail(c, "num_key_value_heads", err, n, "%d does not divide "
                               "num_attention_heads %d", sh->n_head_kv, sh->n_head);
    bool given = pl_hf_json_get(c, "head_dim") != NULL;
    if (!given && sh->n_embd % sh->n_head)
        return pl_hf_json_fail(c, "num_attention_heads", err, n, "%d does not divide "
                               "hidden_size %d (and no head_dim)", sh->n_head, sh->n_embd);
    if (pl_family_hf_int(c, "head_dim", false, 2, 4096, sh->n_embd / sh->n_head, &sh->head_dim, err, n))
        return -1;
    if (sh->head_dim % 2)
        return pl_hf_json_fail(c, "head_dim", err, n, "must be even (rope rotates pairs)");
    bool tied = a->default_tied, bias = false;
    if (pl_hf_json_bool(c, "tie_word_embeddings", false, &tied, err, n) < 0 ||
        pl_hf_json_bool(c, "attention_bias", false, &bias, err, n) < 0)
        return -1;
    sh->tied = tied;
    sh->bias = bias || a->always_bias;
    return 0;
}

/* The rope metadata from hf_config.c's reading of either layout. */
static int rope_scaling_(const pl_hf_arch *a, const pl_hf_rope *r, pl_gguf_synth *s, char *err,
                         size_t n)
{
    char k[128];
    if (!strcmp(r->type, "none"))
        return 0;
    snprintf(k, sizeof k, "%s.rope.scaling.type", a->gguf);
    if (pl_gguf_synth_str(s, k, r->type) || put_f32_(s, a, "rope.scaling.factor", r->factor) ||
        put_f32_(s, a, "rope.scaling.low_freq_factor", r->low_freq_factor) ||
        put_f32_(s, a, "rope.scaling.high_freq_factor", r->high_freq_factor) ||
        put_f32_(s, a, "rope.scaling.attn_factor", r->attn_factor) ||
        put_u32_(s, a, "rope.scaling.original_context_length", r->orig_ctx))
        return snprintf(err, n, "out of memory"), -1;
    /* parley's own key: llama.cpp's converter drops truncate */
    snprintf(k, sizeof k, "%s.rope.scaling.yarn_truncate", a->gguf);
    if (r->yarn_exact && pl_gguf_synth_bool(s, k, 0))
        return snprintf(err, n, "out of memory"), -1;
    return 0;
}

/* The rotated dimensions: the whole head, or partial_rotary_factor of it
 * for the families whose q/k rows keep Hugging Face's rotate-half order
 * (a permuted family's rows would pair across the rotated part). */
static int rope_dims_(const pl_hf_arch *a, const pl_hf_json *c, const pl_hf_shape *sh,
                      const pl_hf_rope *r, int *dims, char *err, size_t n)
{
    bool permuted = false;
    for (const pl_hf_tmap *e = a->layer; e->hf; e++)
        permuted |= (e->flags & PL_HF_T_PERMUTE_Q) != 0;
    double d = sh->head_dim * r->partial;
    *dims = (int)lround(d);
    const char *key = pl_hf_json_get(c, "rope_parameters") ? "rope_parameters" :
                      "partial_rotary_factor";
    if (r->partial != 1 && permuted)
        return pl_hf_json_fail(c, key, err, n, "partial_rotary_factor %g: only 1 (rope on the "
                               "whole head) is supported for %s", r->partial, a->hf_name);
    if (fabs(d - *dims) > 1e-6 || *dims % 2 || *dims < 2)
        return pl_hf_json_fail(c, key, err, n, "partial_rotary_factor %g of head_dim %d is "
                               "not an even number of dimensions", r->partial, sh->head_dim);
    return 0;
}

int pl_hf_arch_hparams(const pl_hf_arch *a, const pl_hf_json *c, pl_hf_shape *sh,
                       pl_gguf_synth *s, char *err, size_t n)
{
    double eps;
    int n_ctx, dims;
    pl_hf_rope r;
    if (shape_(a, c, sh, err, n) ||
        pl_family_hf_int(c, "max_position_embeddings", false, 1, 1 << 24, 2048, &n_ctx, err, n) ||
        pl_family_hf_num(c, "rms_norm_eps", 1e-12, 0.5, 1e-6, &eps, err, n) ||
        pl_hf_config_rope(c, a->default_theta, n_ctx, &r, err, n) ||
        rope_dims_(a, c, sh, &r, &dims, err, n))
        return -1;
    const pl_family *fam = pl_family_find(a->gguf, strlen(a->gguf));
    if (r.proportional && !(fam && fam->model.kind_geometry))
        return pl_hf_json_fail(c, "rope_parameters", err, n, "proportional RoPE is not part "
                               "of %s", a->hf_name);
    if (r.llama4_beta > 0 && !(fam && fam->model.ministral_rope))
        return pl_hf_json_fail(c, "rope_parameters.llama_4_scaling_beta", err, n, "a query "
                               "temperature is not part of %s", a->hf_name);
    if (r.llama4_beta > 0 && put_f32_(s, a, "attention.temperature_scale", r.llama4_beta))
        return snprintf(err, n, "out of memory"), -1;
    if (pl_gguf_synth_str(s, "general.architecture", a->gguf) ||
        put_u32_(s, a, "block_count", sh->n_layer) ||
        put_u32_(s, a, "embedding_length", sh->n_embd) ||
        (sh->n_ff > 0 && put_u32_(s, a, "feed_forward_length", sh->n_ff)) ||
        put_u32_(s, a, "attention.head_count", sh->n_head) ||
        put_u32_(s, a, "attention.head_count_kv", sh->n_head_kv) ||
        put_u32_(s, a, "attention.key_length", sh->head_dim) ||
        put_u32_(s, a, "attention.value_length", sh->head_dim) ||
        put_u32_(s, a, "rope.dimension_count", dims) ||
        put_u32_(s, a, "vocab_size", sh->n_vocab) || put_u32_(s, a, "context_length", n_ctx) ||
        put_f32_(s, a, "attention.layer_norm_rms_epsilon", eps) ||
        put_f32_(s, a, "rope.freq_base", r.theta))
        return snprintf(err, n, "out of memory"), -1;
    if (rope_scaling_(a, &r, s, err, n) || (a->extra && a->extra(a, c, sh, s, err, n)))
        return -1;
    return pl_hf_config_finish(c, a->gguf, &r, s, err, n);
}

const pl_hf_arch *pl_hf_arch_find(const char *name) { return pl_family_find_hf(name); }
const char *pl_hf_arch_names(void) { return pl_family_names(true); }

const char *pl_hf_arch_gguf(const pl_hf_arch *a) { return a->gguf; }
const pl_hf_default *pl_hf_arch_text_config(const pl_hf_arch *a) { return a->text_config; }
float pl_hf_arch_norm_shift(const pl_hf_arch *a) { return a->norm_shift; }
const pl_hf_tmap *pl_hf_arch_layer_tensors(const pl_hf_arch *a) { return a->layer; }
const pl_hf_tmap *pl_hf_arch_global_tensors(const pl_hf_arch *a)
{
    return a->globals ? a->globals : globals_;
}

bool pl_hf_arch_skips(const pl_hf_arch *a, const char *name)
{
    for (const char *const *k = a->skip; k && *k; k++) {
        size_t len = strlen(*k);
        if (len && (*k)[len - 1] == '*' ? !strncmp(name, *k, len - 1) : !strcmp(name, *k))
            return true;
    }
    return false;
}

int pl_hf_dim_size_at(const pl_hf_shape *sh, int l, pl_hf_dim d)
{
    bool full = sh->head_dim_full > 0 && l >= 0 && l < 4096 && (sh->global[l / 64] >> (l % 64) & 1);
    int hd = full ? sh->head_dim_full : sh->head_dim;
    int kv = full && sh->n_head_kv_full ? sh->n_head_kv_full : sh->n_head_kv;
    switch (d) {
    case PL_HF_DIM_Q: return sh->n_head * hd;
    case PL_HF_DIM_KV: return kv * hd;
    case PL_HF_DIM_HEAD: return hd;
    case PL_HF_DIM_PLE: return sh->n_ple;
    case PL_HF_DIM_PLE_ALL: return sh->n_layer * sh->n_ple;
    case PL_HF_DIM_ONE: return 1;
    case PL_HF_DIM_FF: return sh->double_wide && l >= sh->first_shared ? 2 * sh->n_ff : sh->n_ff;
    default: return pl_hf_dim_size(sh, d);
    }
}

int pl_hf_dim_size(const pl_hf_shape *sh, pl_hf_dim d)
{
    switch (d) {
    case PL_HF_DIM_HIDDEN: return sh->n_embd;
    case PL_HF_DIM_FF: return sh->n_ff;
    case PL_HF_DIM_VOCAB: return sh->n_vocab;
    case PL_HF_DIM_Q: return sh->n_head * sh->head_dim;
    case PL_HF_DIM_KV: return sh->n_head_kv * sh->head_dim;
    case PL_HF_DIM_HEAD: return sh->head_dim;
    case PL_HF_DIM_HEADS: return sh->n_head;
    case PL_HF_DIM_EXPERTS: return sh->n_expert;
    case PL_HF_DIM_FF_EXP: return sh->n_ff_exp;
    case PL_HF_DIM_FF_EXP2: return 2 * sh->n_ff_exp;
    case PL_HF_DIM_POS: return sh->n_pos;
    case PL_HF_DIM_TYPES: return sh->n_types;
    case PL_HF_DIM_Q_GATE: return 2 * sh->n_head * sh->head_dim;
    case PL_HF_DIM_SSM_CONV: return (2 * sh->ssm_n_k + sh->ssm_n_v) * sh->ssm_d;
    case PL_HF_DIM_SSM_INNER: return sh->ssm_n_v * sh->ssm_d;
    case PL_HF_DIM_SSM_V: return sh->ssm_n_v;
    case PL_HF_DIM_SSM_HEAD: return sh->ssm_d;
    case PL_HF_DIM_SSM_KERNEL: return sh->ssm_kernel;
    case PL_HF_DIM_FF_SHEXP: return sh->n_ff_shexp;
    default: return 0;
    }
}

const char *pl_hf_dim_name(pl_hf_dim d)
{
    switch (d) {
    case PL_HF_DIM_HIDDEN: return "hidden_size";
    case PL_HF_DIM_FF: return "intermediate_size";
    case PL_HF_DIM_VOCAB: return "vocab_size";
    case PL_HF_DIM_Q: return "num_attention_heads x head_dim";
    case PL_HF_DIM_KV: return "num_key_value_heads x head_dim";
    case PL_HF_DIM_HEAD: return "head_dim";
    case PL_HF_DIM_HEADS: return "num_attention_heads";
    case PL_HF_DIM_EXPERTS: return "the experts per layer";
    case PL_HF_DIM_FF_EXP: return "an expert's width";
    case PL_HF_DIM_FF_EXP2: return "2 x an expert's width";
    case PL_HF_DIM_POS: return "max_position_embeddings";
    case PL_HF_DIM_TYPES: return "type_vocab_size";
    case PL_HF_DIM_Q_GATE: return "2 x num_attention_heads x head_dim";
    case PL_HF_DIM_SSM_CONV: return "(2 linear_num_key_heads + linear_num_value_heads) x "
                                    "linear_key_head_dim";
    case PL_HF_DIM_SSM_INNER: return "linear_num_value_heads x linear_value_head_dim";
    case PL_HF_DIM_SSM_V: return "linear_num_value_heads";
    case PL_HF_DIM_SSM_HEAD: return "linear_value_head_dim";
    case PL_HF_DIM_SSM_KERNEL: return "linear_conv_kernel_dim";
    case PL_HF_DIM_FF_SHEXP: return "shared_expert_intermediate_size";
    case PL_HF_DIM_PLE: return "hidden_size_per_layer_input";
    case PL_HF_DIM_PLE_ALL: return "num_hidden_layers x hidden_size_per_layer_input";
    case PL_HF_DIM_ONE: return "1";
    default: return "-";
    }
}
