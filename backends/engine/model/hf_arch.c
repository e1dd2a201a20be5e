/* hf_arch.c - the table of Hugging Face architectures (hf_arch.h): their
 * config.json keys onto GGUF metadata, as llama.cpp's convert_hf_to_gguf.py
 * writes them, and their tensors.
 */
#include "backends/engine/model/hf_arch.h"
#include "backends/engine/model/hf_config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>


typedef int (*hparams_fn)(const pl_hf_arch *a, const pl_hf_json *c, pl_hf_shape *sh,
                          pl_gguf_synth *s, char *err, size_t n);

struct pl_hf_arch {
    const char *hf_name;         /* config.json architectures[0] */
    const char *gguf;            /* general.architecture */
    const pl_hf_tmap *layer;
    float norm_shift;
    bool default_tied;           /* tie_word_embeddings when config.json omits it */
    bool always_bias;            /* q/k/v biases whatever attention_bias says */
    double default_theta;
    hparams_fn extra;            /* the family's own keys, or NULL */
    /* A composite (vision + text) model: the text model's keys under
     * text_config with these defaults (what transformers leaves out of a
     * sub-config), its tensors under language_model. NULL: a text model. */
    const pl_hf_default *text_config;
};

#define L_ "model.layers.%d."
#define B_ "blk.%d."
#define ATTN_(P)                                                                      \
    {L_ "input_layernorm.weight", B_ "attn_norm.weight", PL_HF_DIM_HIDDEN, 0, PL_HF_T_NORM}, \
    {L_ "self_attn.q_proj.weight", B_ "attn_q.weight", PL_HF_DIM_Q, PL_HF_DIM_HIDDEN,    \
     (P) ? PL_HF_T_PERMUTE_Q : 0},                                          \
    {L_ "self_attn.k_proj.weight", B_ "attn_k.weight", PL_HF_DIM_KV, PL_HF_DIM_HIDDEN,   \
     (P) ? PL_HF_T_PERMUTE_K : 0},                                          \
    {L_ "self_attn.v_proj.weight", B_ "attn_v.weight", PL_HF_DIM_KV, PL_HF_DIM_HIDDEN, 0}, \
    {L_ "self_attn.o_proj.weight", B_ "attn_output.weight", PL_HF_DIM_HIDDEN, PL_HF_DIM_Q, 0}, \
    {L_ "self_attn.q_proj.bias", B_ "attn_q.bias", PL_HF_DIM_Q, 0,                       \
     PL_HF_T_BIAS | ((P) ? PL_HF_T_PERMUTE_Q : 0)},                         \
    {L_ "self_attn.k_proj.bias", B_ "attn_k.bias", PL_HF_DIM_KV, 0,                      \
     PL_HF_T_BIAS | ((P) ? PL_HF_T_PERMUTE_K : 0)},                         \
    {L_ "self_attn.v_proj.bias", B_ "attn_v.bias", PL_HF_DIM_KV, 0, PL_HF_T_BIAS}
#define MLP_                                                                             \
    {L_ "mlp.gate_proj.weight", B_ "ffn_gate.weight", PL_HF_DIM_FF, PL_HF_DIM_HIDDEN, 0}, \
    {L_ "mlp.up_proj.weight", B_ "ffn_up.weight", PL_HF_DIM_FF, PL_HF_DIM_HIDDEN, 0},     \
    {L_ "mlp.down_proj.weight", B_ "ffn_down.weight", PL_HF_DIM_HIDDEN, PL_HF_DIM_FF, 0}
#define QK_NORM_                                                                          \
    {L_ "self_attn.q_norm.weight", B_ "attn_q_norm.weight", PL_HF_DIM_HEAD, 0, PL_HF_T_NORM}, \
    {L_ "self_attn.k_norm.weight", B_ "attn_k_norm.weight", PL_HF_DIM_HEAD, 0, PL_HF_T_NORM}
#define PLAIN_NORM_ \
    {L_ "post_attention_layernorm.weight", B_ "ffn_norm.weight", PL_HF_DIM_HIDDEN, 0, PL_HF_T_NORM}
#define SANDWICH_NORMS_                                                                   \
    {L_ "post_attention_layernorm.weight", B_ "post_attention_norm.weight",              \
     PL_HF_DIM_HIDDEN, 0, PL_HF_T_NORM},                                                 \
    {L_ "pre_feedforward_layernorm.weight", B_ "ffn_norm.weight", PL_HF_DIM_HIDDEN, 0,   \
     PL_HF_T_NORM},                                                                      \
    {L_ "post_feedforward_layernorm.weight", B_ "post_ffw_norm.weight", PL_HF_DIM_HIDDEN, \
     0, PL_HF_T_NORM}
#define END_ {NULL, NULL, 0, 0, 0}

/* llama's GGUF rope rotates adjacent pairs, so q and k rows are permuted
 * from Hugging Face's rotate-half order (llama.cpp's converter does the
 * same); the NeoX-rope families keep Hugging Face's order. */
static const pl_hf_tmap llama_layer_[] = {ATTN_(1), PLAIN_NORM_, MLP_, END_};
static const pl_hf_tmap qwen2_layer_[] = {ATTN_(0), PLAIN_NORM_, MLP_, END_};
static const pl_hf_tmap qwen3_layer_[] = {ATTN_(0), QK_NORM_, PLAIN_NORM_, MLP_, END_};
static const pl_hf_tmap gemma2_layer_[] = {ATTN_(0), SANDWICH_NORMS_, MLP_, END_};
static const pl_hf_tmap gemma3_layer_[] = {ATTN_(0), QK_NORM_, SANDWICH_NORMS_, MLP_, END_};

static const pl_hf_tmap globals_[] = {
    {"model.embed_tokens.weight", "token_embd.weight", PL_HF_DIM_VOCAB, PL_HF_DIM_HIDDEN, 0},
    {"model.norm.weight", "output_norm.weight", PL_HF_DIM_HIDDEN, 0, PL_HF_T_NORM},
    {"lm_head.weight", "output.weight", PL_HF_DIM_VOCAB, PL_HF_DIM_HIDDEN, PL_HF_T_OPTIONAL},
    END_,
};

static int geti_(const pl_hf_json *c, const char *key, bool req, long long lo, long long hi,
                 int dflt, int *out, char *err, size_t n)
{
    long long v = dflt;
    int rc = pl_hf_json_int(c, key, req, lo, hi, &v, err, n);
    *out = (int)v;
    return rc < 0 ? -1 : 0;
}

static int getf_(const pl_hf_json *c, const char *key, double lo, double hi, double dflt,
                 double *out, char *err, size_t n)
{
    *out = dflt;
    return pl_hf_json_num(c, key, false, lo, hi, out, err, n) < 0 ? -1 : 0;
}

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
    if (geti_(c, "num_hidden_layers", true, 1, 4096, 0, &sh->n_layer, err, n) ||
        geti_(c, "hidden_size", true, 1, 1 << 20, 0, &sh->n_embd, err, n) ||
        geti_(c, "intermediate_size", true, 1, 1 << 22, 0, &sh->n_ff, err, n) ||
        geti_(c, "num_attention_heads", true, 1, 4096, 0, &sh->n_head, err, n) ||
        geti_(c, "num_key_value_heads", false, 1, 4096, sh->n_head, &sh->n_head_kv, err, n) ||
        geti_(c, "vocab_size", true, 1, 1 << 24, 0, &sh->n_vocab, err, n))
        return -1;
    if (sh->n_head % sh->n_head_kv)
        return pl_hf_json_fail(c, "num_key_value_heads", err, n, "%d does not divide "
                               "num_attention_heads %d", sh->n_head_kv, sh->n_head);
    bool given = pl_hf_json_get(c, "head_dim") != NULL;
    if (!given && sh->n_embd % sh->n_head)
        return pl_hf_json_fail(c, "num_attention_heads", err, n, "%d does not divide "
                               "hidden_size %d (and no head_dim)", sh->n_head, sh->n_embd);
    if (geti_(c, "head_dim", false, 2, 4096, sh->n_embd / sh->n_head, &sh->head_dim, err, n))
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
        geti_(c, "max_position_embeddings", false, 1, 1 << 24, 2048, &n_ctx, err, n) ||
        getf_(c, "rms_norm_eps", 1e-12, 0.5, 1e-6, &eps, err, n) ||
        pl_hf_config_rope(c, a->default_theta, n_ctx, &r, err, n) ||
        rope_dims_(a, c, sh, &r, &dims, err, n))
        return -1;
    if (pl_gguf_synth_str(s, "general.architecture", a->gguf) ||
        put_u32_(s, a, "block_count", sh->n_layer) ||
        put_u32_(s, a, "embedding_length", sh->n_embd) ||
        put_u32_(s, a, "feed_forward_length", sh->n_ff) ||
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

/* Mistral v0.1's sliding window (every layer slides over it). */
static int llama_window_(const pl_hf_arch *a, const pl_hf_json *c, pl_hf_shape *sh,
                         pl_gguf_synth *s, char *err, size_t n)
{
    int w = 0;
    (void)sh;
    if (geti_(c, "sliding_window", false, 1, 1 << 24, 0, &w, err, n))
        return -1;
    if (w > 0 && put_u32_(s, a, "attention.sliding_window", w))
        return snprintf(err, n, "out of memory"), -1;
    return 0;
}

/* Qwen's use_sliding_window (off in the released models) is refused. */
static int qwen_window_(const pl_hf_arch *a, const pl_hf_json *c, pl_hf_shape *sh,
                        pl_gguf_synth *s, char *err, size_t n)
{
    bool on = false;
    (void)a, (void)sh, (void)s;
    if (pl_hf_json_bool(c, "use_sliding_window", false, &on, err, n) < 0)
        return -1;
    if (on)
        return pl_hf_json_fail(c, "use_sliding_window", err, n, "sliding-window attention "
                               "is not supported for %s", a->hf_name);
    return 0;
}

/* Gemma 2 and 3: the query scale the GGUF model assumes (llama.cpp's:
 * 1/sqrt(head_dim), or 1/sqrt(hidden/heads) for the 27B, which has `wide`
 * layers) must be the checkpoint's query_pre_attn_scalar. */
static int gemma_query_scale_(const pl_hf_json *c, const pl_hf_shape *sh, int wide, char *err,
                              size_t n)
{
    double q = sh->head_dim;
    if (getf_(c, "query_pre_attn_scalar", 1e-6, 1e9, sh->head_dim, &q, err, n))
        return -1;
    double want = sh->n_layer == wide ? (double)sh->n_embd / sh->n_head : sh->head_dim;
    if (fabs(q - want) > 1e-6)
        return pl_hf_json_fail(c, "query_pre_attn_scalar", err, n, "%g: the GGUF model "
                               "scales queries by 1/sqrt(%g)", q, want);
    return 0;
}

static int gemma2_(const pl_hf_arch *a, const pl_hf_json *c, pl_hf_shape *sh, pl_gguf_synth *s,
                   char *err, size_t n)
{
    double attn = 0, fin = 0;
    int w = 0;
    if (pl_hf_json_num(c, "attn_logit_softcapping", true, 1e-6, 1e9, &attn, err, n) < 0 ||
        pl_hf_json_num(c, "final_logit_softcapping", true, 1e-6, 1e9, &fin, err, n) < 0 ||
        geti_(c, "sliding_window", true, 1, 1 << 24, 0, &w, err, n) ||
        gemma_query_scale_(c, sh, 46, err, n))
        return -1;
    if (put_f32_(s, a, "attn_logit_softcapping", attn) ||
        put_f32_(s, a, "final_logit_softcapping", fin) ||
        put_u32_(s, a, "attention.sliding_window", w))
        return snprintf(err, n, "out of memory"), -1;
    return 0;
}

/* Which Gemma 3 layers slide: sliding_window_pattern (a period), or newer
 * configs' layer_types, which must follow a period (one full layer last in
 * each). 0 with *period, or -1. */
static int gemma3_period_(const pl_hf_json *c, int n_layer, int *period, char *err, size_t n)
{
    json_t *lt = pl_hf_json_get(c, "layer_types"), *v;
    size_t i;
    if (geti_(c, "sliding_window_pattern", false, 1, 4096, 6, period, err, n))
        return -1;
    if (lt && (!json_is_array(lt) || json_array_size(lt) != (size_t)n_layer))
        return pl_hf_json_fail(c, "layer_types", err, n, "must list num_hidden_layers %d "
                               "layer types", n_layer);
    if (lt && !pl_hf_json_get(c, "sliding_window_pattern")) {
        *period = n_layer + 1;         /* no full layer: every layer slides */
        json_array_foreach(lt, i, v) {
            const char *t = json_string_value(v);
            if (t && !strcmp(t, "full_attention")) {
                *period = (int)i + 1;
                break;
            }
        }
    }
    json_array_foreach(lt, i, v) {
        const char *t = json_string_value(v);
        bool slides = t && !strcmp(t, "sliding_attention");
        if ((!t || (!slides && strcmp(t, "full_attention"))) ||
            slides != ((int)i % *period < *period - 1))
            return pl_hf_json_fail(c, "layer_types", err, n, "layer %zu: '%s' does not "
                                   "follow a full layer every %d", i, t ? t : "?", *period);
    }
    return 0;
}

static int gemma3_(const pl_hf_arch *a, const pl_hf_json *c, pl_hf_shape *sh, pl_gguf_synth *s,
                   char *err, size_t n)
{
    double local = 10000;
    int w = 0, period = 6;
    if (geti_(c, "sliding_window", true, 1, 1 << 24, 0, &w, err, n) ||
        gemma3_period_(c, sh->n_layer, &period, err, n) ||
        pl_hf_config_swa_theta(c, 10000, &local, err, n) ||
        gemma_query_scale_(c, sh, 62, err, n))
        return -1;
    if (pl_hf_json_get(c, "attn_logit_softcapping") || pl_hf_json_get(c, "final_logit_softcapping"))
        return pl_hf_json_fail(c, pl_hf_json_get(c, "attn_logit_softcapping")
                               ? "attn_logit_softcapping" : "final_logit_softcapping", err, n,
                               "Gemma 3 has no soft-capping");
    if (put_u32_(s, a, "attention.sliding_window", w) ||
        put_u32_(s, a, "attention.sliding_window_pattern", period) ||
        put_f32_(s, a, "rope.freq_base_swa", local))
        return snprintf(err, n, "out of memory"), -1;
    return 0;
}

/* transformers' Gemma3TextConfig defaults (the multimodal checkpoints'
 * text_config lists only what differs from them). */
static const pl_hf_default gemma3_text_[] = {
    {"vocab_size", 262208, true, false}, {"hidden_size", 2304, true, false},
    {"intermediate_size", 9216, true, false}, {"num_hidden_layers", 26, true, false},
    {"num_attention_heads", 8, true, false}, {"num_key_value_heads", 4, true, false},
    {"head_dim", 256, true, false}, {"max_position_embeddings", 131072, true, false},
    {"rms_norm_eps", 1e-6, false, false}, {"rope_theta", 1000000.0, false, false},
    {"query_pre_attn_scalar", 256, false, false}, {"sliding_window", 4096, true, false},
    {"rope_local_base_freq", 10000.0, false, false}, {"tie_word_embeddings", 1, false, true},
    {NULL, 0, false, false},
};

static const pl_hf_arch archs_[] = {
    {"LlamaForCausalLM", "llama", llama_layer_, 0, false, false, 10000, llama_window_},
    {"MistralForCausalLM", "llama", llama_layer_, 0, false, false, 10000, llama_window_},
    {"Qwen2ForCausalLM", "qwen2", qwen2_layer_, 0, false, true, 10000, qwen_window_},
    {"Qwen3ForCausalLM", "qwen3", qwen3_layer_, 0, false, false, 10000, qwen_window_},
    {"Gemma2ForCausalLM", "gemma2", gemma2_layer_, 1, true, false, 10000, gemma2_},
    {"Gemma3ForCausalLM", "gemma3", gemma3_layer_, 1, true, false, 1000000, gemma3_},
    {"Gemma3ForConditionalGeneration", "gemma3", gemma3_layer_, 1, true, false, 1000000,
     gemma3_, gemma3_text_},
};

const pl_hf_arch *pl_hf_arch_find(const char *name)
{
    for (size_t i = 0; i < sizeof archs_ / sizeof archs_[0]; i++)
        if (!strcmp(archs_[i].hf_name, name))
            return &archs_[i];
    return NULL;
}

const char *pl_hf_arch_names(void)
{
    return "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
           "Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3ForConditionalGeneration (its text)";
}

const char *pl_hf_arch_gguf(const pl_hf_arch *a) { return a->gguf; }
const pl_hf_default *pl_hf_arch_text_config(const pl_hf_arch *a) { return a->text_config; }
float pl_hf_arch_norm_shift(const pl_hf_arch *a) { return a->norm_shift; }
const pl_hf_tmap *pl_hf_arch_layer_tensors(const pl_hf_arch *a) { return a->layer; }
const pl_hf_tmap *pl_hf_arch_global_tensors(const pl_hf_arch *a)
{
    (void)a;
    return globals_;
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
    default: return "-";
    }
}
