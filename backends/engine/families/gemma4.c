/* gemma4.c - the gemma4 family (Gemma 4, text; the multimodal checkpoints'
 * language model): gemma3's sandwich blocks with attention of two kinds.
 *
 *   x = token_embd[id] * sqrt(n_embd)
 *   per layer, sliding (window, RoPE base rope.freq_base_swa) or global
 *   (attention.sliding_window_pattern; the last layer global), each kind
 *   with its own head size, rotated dims and K/V heads:
 *     q, k = rmsnorm per head (q/k norms); v = rmsnorm per head, unweighted;
 *     K = V (before the k norm) where the layer has no attn_v;
 *     global layers rotate with rope_freqs.weight's factors (proportional
 *     RoPE: the unrotated pairs get a factor of 1e30); q.k unscaled;
 *     the last attention.shared_kv_layers layers read the K/V of the last
 *     earlier layer of their kind and write none;
 *     x += rmsnorm(attn(rmsnorm(x)), post_attention_norm);
 *     x += rmsnorm(geglu(rmsnorm(x)), post_ffw_norm), or with experts
 *     (26B-A4B) the dense GeGLU and the experts side by side:
 *       f1 = rmsnorm(geglu(rmsnorm(x, ffn_norm)), post_ffw_norm_1)
 *       router: softmax(gate_inp @ (rmsnorm(x) / sqrt(n_embd) * gate_inp.scale)),
 *       top expert_used_count renormalised, each times ffn_down_exps.scale;
 *       f2 = rmsnorm(sum of the chosen experts' geglu(rmsnorm(x, pre_ffw_norm_2)),
 *                    post_ffw_norm_2)
 *       x += rmsnorm(f1 + f2, post_ffw_norm);
 *     x += per-layer embedding (E2B/E4B; model.h);  x *= layer_output_scale
 *   logits = softcap(rmsnorm(x) @ output^T; final_logit_softcapping)
 *
 * As llama.cpp's src/models/gemma4.cpp. The chat template's style is the
 * text side's (backends/text/); a file without a template gets Gemma 4's
 * own (PL_CHAT_F_GEMMA4: its turns, tool syntax and thought channel). */
#include "backends/engine/families/family.h"
#include "backends/engine/model/hf_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* layer_types: which layers are global (the last one must be), into
 * sh->global and the pattern (1: sliding). 0 or -1. */
static int layer_types_(const pl_hf_json *c, pl_hf_shape *sh, int32_t *swa, char *err,
                        size_t n)
{
    json_t *lt = pl_hf_json_get(c, "layer_types"), *v;
    size_t i;
    if (!json_is_array(lt) || json_array_size(lt) != (size_t)sh->n_layer)
        return pl_hf_json_fail(c, "layer_types", err, n, "must list num_hidden_layers %d "
                               "layer types", sh->n_layer);
    json_array_foreach(lt, i, v) {
        const char *t = json_string_value(v);
        bool slides = t && !strcmp(t, "sliding_attention");
        if (!t || (!slides && strcmp(t, "full_attention")))
            return pl_hf_json_fail(c, "layer_types", err, n, "layer %zu: '%s' is neither "
                                   "sliding_attention nor full_attention", i, t ? t : "?");
        swa[i] = slides;
        if (!slides)
            sh->global[i / 64] |= 1ull << (i % 64);
    }
    if (swa[sh->n_layer - 1])
        return pl_hf_json_fail(c, "layer_types", err, n, "the last layer must be "
                               "full_attention (transformers makes it so)");
    return 0;
}

/* The global layers' head_dim and K/V heads: global_head_dim and
 * num_global_key_value_heads, or per_layer_config's entries (each a global
 * layer's, all alike). 0 or -1. */
static int global_heads_(const pl_hf_json *c, pl_hf_shape *sh, const int32_t *swa, char *err,
                         size_t n)
{
    json_t *plc = pl_hf_json_get(c, "per_layer_config"), *e, *v;
    const char *idx, *k;
    int hd = 0, kv = 0;
    if (pl_family_hf_int(c, "global_head_dim", false, 2, 4096, 0, &hd, err, n) ||
        pl_family_hf_int(c, "num_global_key_value_heads", false, 1, 4096, 0, &kv, err, n))
        return -1;
    if (plc && !json_is_object(plc))
        return pl_hf_json_fail(c, "per_layer_config", err, n, "must be an object");
    json_object_foreach(plc, idx, e) {
        char *end;
        long l = strtol(idx, &end, 10);
        if (*end || l < 0 || l >= sh->n_layer || swa[l] || !json_is_object(e))
            return pl_hf_json_fail(c, "per_layer_config", err, n, "'%s' is not a "
                                   "full_attention layer's overrides", idx);
        json_object_foreach(e, k, v) {
            int *dst = !strcmp(k, "head_dim") ? &hd : !strcmp(k, "num_key_value_heads") ? &kv
                       : NULL;
            if (!dst || !json_is_integer(v) || json_integer_value(v) < 1 ||
                json_integer_value(v) > 4096 || (*dst && *dst != json_integer_value(v)))
                return pl_hf_json_fail(c, "per_layer_config", err, n, "layer %s: '%s' is "
                                       "not one value of head_dim or num_key_value_heads "
                                       "for every full_attention layer", idx, k);
            *dst = (int)json_integer_value(v);
        }
    }
    sh->head_dim_full = hd ? hd : sh->head_dim;
    sh->n_head_kv_full = kv ? kv : sh->n_head_kv;
    if (sh->head_dim_full % 2 || sh->n_head % sh->n_head_kv_full)
        return pl_hf_json_fail(c, "per_layer_config", err, n, "global layers' head_dim %d "
                               "must be even and their %d K/V heads divide %d heads",
                               sh->head_dim_full, sh->n_head_kv_full, sh->n_head);
    return 0;
}

/* rope_freqs.weight as llama.cpp's converter computes it: 1 for the
 * rotated pairs of a global head, 1e30 (no rotation) for the others. */
static int rope_freqs_(const pl_hf_shape *sh, double partial, pl_gguf_synth *s, char *err,
                       size_t n)
{
    int half = sh->head_dim_full / 2, rot = (int)(sh->head_dim_full * partial / 2);
    float *f = malloc(sizeof(float) * (size_t)half);
    if (!f)
        return snprintf(err, n, "out of memory"), -1;
    for (int i = 0; i < half; i++)
        f[i] = i < rot ? 1.0f : 1e30f;
    void *kept = pl_gguf_synth_keep(s, f, sizeof(float) * (size_t)half);
    free(f);
    uint64_t ne[1] = {(uint64_t)half};
    if (!kept || pl_gguf_synth_tensor(s, "rope_freqs.weight", PL_GGML_TYPE_F32, 1, ne, kept,
                                      sizeof(float) * (uint64_t)half))
        return snprintf(err, n, "out of memory"), -1;
    return 0;
}

/* The experts (26B-A4B) when enable_moe_block: num_experts,
 * top_k_experts, moe_intermediate_size. 0 or -1. */
static int experts_(const pl_hf_arch *a, const pl_hf_json *c, pl_hf_shape *sh,
                    pl_gguf_synth *s, char *err, size_t n)
{
    bool on = false;
    int e = 0, k = 0, w = 0;
    if (pl_hf_json_bool(c, "enable_moe_block", false, &on, err, n) < 0)
        return -1;
    if (!on)
        return 0;
    if (pl_family_hf_int(c, "num_experts", true, 1, PL_MOE_MAX_EXPERTS, 0, &e, err, n) ||
        pl_family_hf_int(c, "top_k_experts", true, 1, e < PL_MOE_MAX_USED ? e : PL_MOE_MAX_USED,
                         0, &k, err, n) ||
        pl_family_hf_int(c, "moe_intermediate_size", true, 1, 1 << 20, 0, &w, err, n))
        return -1;
    sh->n_expert = e;
    sh->n_ff_exp = w;
    return pl_family_hf_put_u32(s, a, "expert_count", e, err, n) ||
           pl_family_hf_put_u32(s, a, "expert_used_count", k, err, n) ||
           pl_family_hf_put_u32(s, a, "expert_feed_forward_length", w, err, n) ? -1 : 0;
}

/* The switches: use_double_wide_mlp (E2B: the shared layers' MLPs twice
 * as wide, written as a per-layer feed_forward_length as llama.cpp's
 * converter does) and attention_k_eq_v (read from which layers lack a
 * v_proj). */
static int switches_(const pl_hf_json *c, pl_hf_shape *sh, char *err, size_t n)
{
    bool kv_eq = false;
    if (pl_hf_json_bool(c, "use_double_wide_mlp", false, &sh->double_wide, err, n) < 0)
        return -1;
    return pl_hf_json_bool(c, "attention_k_eq_v", false, &kv_eq, err, n) < 0 ? -1 : 0;
}

/* feed_forward_length per layer when the shared layers are double-wide
 * (transformers: layer_idx >= first_kv_shared_layer_idx > 0). */
static int ff_widths_(const pl_hf_shape *sh, pl_gguf_synth *s)
{
    if (!sh->double_wide || sh->first_shared >= sh->n_layer || sh->first_shared <= 0)
        return 0;
    int32_t *ff = malloc(sizeof *ff * (size_t)sh->n_layer);
    if (!ff)
        return -1;
    for (int l = 0; l < sh->n_layer; l++)
        ff[l] = l >= sh->first_shared ? 2 * sh->n_ff : sh->n_ff;
    int rc = pl_gguf_synth_arr_i32(s, "gemma4.feed_forward_length", ff, (size_t)sh->n_layer);
    free(ff);
    return rc;
}

static int hparams_(const pl_hf_arch *a, const pl_hf_json *c, pl_hf_shape *sh,
                    pl_gguf_synth *s, char *err, size_t n)
{
    int w = 0, shared = 0, ple = 0, ple_vocab = 0;
    double local = 10000, cap = 0;
    pl_hf_rope r;
    int32_t *swa = calloc((size_t)sh->n_layer, sizeof *swa);
    if (!swa)
        return snprintf(err, n, "out of memory"), -1;
    int rc = -1;
    if (layer_types_(c, sh, swa, err, n) || global_heads_(c, sh, swa, err, n) ||
        switches_(c, sh, err, n) || experts_(a, c, sh, s, err, n) ||
        pl_family_hf_int(c, "sliding_window", true, 1, 1 << 24, 0, &w, err, n) ||
        pl_family_hf_int(c, "num_kv_shared_layers", false, 0, sh->n_layer - 1, 0, &shared,
                         err, n) ||
        pl_family_hf_int(c, "hidden_size_per_layer_input", false, 0, 1 << 16, 0, &ple, err,
                         n) ||
        pl_family_hf_int(c, "vocab_size_per_layer_input", false, 1, 1 << 24, sh->n_vocab,
                         &ple_vocab, err, n) ||
        pl_family_hf_num(c, "final_logit_softcapping", 1e-6, 1e6, 0, &cap, err, n) ||
        pl_hf_config_swa_theta(c, 10000, &local, err, n) ||
        pl_hf_config_rope(c, 1000000, 1 << 20, &r, err, n))
        goto out;
    if (ple && ple_vocab != sh->n_vocab) {
        pl_hf_json_fail(c, "vocab_size_per_layer_input", err, n, "%d differs from "
                        "vocab_size %d (not supported)", ple_vocab, sh->n_vocab);
        goto out;
    }
    double part_swa = r.has_swa ? r.partial_swa : 1;
    int rot_swa = (int)lround(sh->head_dim * part_swa);
    if (!r.proportional && r.partial != 1) {
        pl_hf_json_fail(c, "rope_parameters.full_attention", err, n, "a partial rotation "
                        "that is not proportional is not supported");
        goto out;
    }
    sh->n_ple = ple;
    sh->first_shared = sh->n_layer - shared;
    int32_t *kvh = swa;          /* reused: the pattern is written first */
    if (pl_gguf_synth_arr_i32(s, "gemma4.attention.sliding_window_pattern", swa,
                              (size_t)sh->n_layer))
        goto oom;
    for (int l = 0; l < sh->n_layer; l++)
        kvh[l] = swa[l] ? sh->n_head_kv : sh->n_head_kv_full;
    if (pl_family_hf_put_u32(s, a, "attention.sliding_window", w, err, n) ||
        pl_family_hf_put_f32(s, a, "rope.freq_base_swa", local, err, n) ||
        pl_family_hf_put_u32(s, a, "attention.key_length", sh->head_dim_full, err, n) ||
        pl_family_hf_put_u32(s, a, "attention.value_length", sh->head_dim_full, err, n) ||
        pl_family_hf_put_u32(s, a, "attention.key_length_swa", sh->head_dim, err, n) ||
        pl_family_hf_put_u32(s, a, "attention.value_length_swa", sh->head_dim, err, n) ||
        pl_family_hf_put_u32(s, a, "rope.dimension_count", sh->head_dim_full, err, n) ||
        pl_family_hf_put_u32(s, a, "rope.dimension_count_swa", rot_swa, err, n) ||
        pl_family_hf_put_u32(s, a, "attention.shared_kv_layers", shared, err, n) ||
        pl_family_hf_put_u32(s, a, "embedding_length_per_layer_input", ple, err, n) ||
        (cap > 0 && pl_family_hf_put_f32(s, a, "final_logit_softcapping", cap, err, n)))
        goto out;
    if (pl_gguf_synth_arr_i32(s, "gemma4.attention.head_count_kv", kvh, (size_t)sh->n_layer) ||
        ff_widths_(sh, s))
        goto oom;
    rc = rope_freqs_(sh, r.proportional ? r.partial : 1, s, err, n);
    goto out;
oom:
    snprintf(err, n, "out of memory");
out:
    free(swa);
    return rc;
}

#define G4_L_ "model.layers.%d."
static const pl_hf_tmap layer_[] = {
    {G4_L_ "input_layernorm.weight", PL_HF_B_ "attn_norm.weight", PL_HF_DIM_HIDDEN, 0,
     PL_HF_T_NORM},
    {G4_L_ "self_attn.q_proj.weight", PL_HF_B_ "attn_q.weight", PL_HF_DIM_Q, PL_HF_DIM_HIDDEN, 0},
    /* the shared layers have no k/v projection nor k norm, a global layer
     * with K = V no v projection (model.c checks which need them) */
    {G4_L_ "self_attn.k_proj.weight", PL_HF_B_ "attn_k.weight", PL_HF_DIM_KV, PL_HF_DIM_HIDDEN,
     PL_HF_T_OPTIONAL},
    {G4_L_ "self_attn.v_proj.weight", PL_HF_B_ "attn_v.weight", PL_HF_DIM_KV, PL_HF_DIM_HIDDEN,
     PL_HF_T_OPTIONAL},
    {G4_L_ "self_attn.o_proj.weight", PL_HF_B_ "attn_output.weight", PL_HF_DIM_HIDDEN,
     PL_HF_DIM_Q, 0},
    {G4_L_ "self_attn.q_norm.weight", PL_HF_B_ "attn_q_norm.weight", PL_HF_DIM_HEAD, 0,
     PL_HF_T_NORM},
    {G4_L_ "self_attn.k_norm.weight", PL_HF_B_ "attn_k_norm.weight", PL_HF_DIM_HEAD, 0,
     PL_HF_T_NORM | PL_HF_T_OPTIONAL},
    PL_HF_SANDWICH_NORMS, PL_HF_MLP,
    {G4_L_ "layer_scalar", PL_HF_B_ "layer_output_scale.weight", PL_HF_DIM_ONE, 0,
     PL_HF_T_OPTIONAL},
    {G4_L_ "per_layer_input_gate.weight", PL_HF_B_ "inp_gate.weight", PL_HF_DIM_PLE,
     PL_HF_DIM_HIDDEN, PL_HF_T_OPTIONAL},
    {G4_L_ "per_layer_projection.weight", PL_HF_B_ "proj.weight", PL_HF_DIM_HIDDEN,
     PL_HF_DIM_PLE, PL_HF_T_OPTIONAL},
    {G4_L_ "post_per_layer_input_norm.weight", PL_HF_B_ "post_norm.weight", PL_HF_DIM_HIDDEN,
     0, PL_HF_T_NORM | PL_HF_T_OPTIONAL},
    /* the experts beside the dense MLP (enable_moe_block); the loader
     * names any that a file with experts lacks */
    {G4_L_ "router.proj.weight", PL_HF_B_ "ffn_gate_inp.weight", PL_HF_DIM_EXPERTS,
     PL_HF_DIM_HIDDEN, PL_HF_T_F32 | PL_HF_T_OPTIONAL},
    {G4_L_ "router.scale", PL_HF_B_ "ffn_gate_inp.scale", PL_HF_DIM_HIDDEN, 0,
     PL_HF_T_OPTIONAL},
    {G4_L_ "router.per_expert_scale", PL_HF_B_ "ffn_down_exps.scale", PL_HF_DIM_EXPERTS, 0,
     PL_HF_T_OPTIONAL},
    {G4_L_ "experts.gate_up_proj", PL_HF_B_ "ffn_gate_up_exps.weight", PL_HF_DIM_FF_EXP2,
     PL_HF_DIM_HIDDEN, PL_HF_T_STACKED | PL_HF_T_OPTIONAL},
    {G4_L_ "experts.down_proj", PL_HF_B_ "ffn_down_exps.weight", PL_HF_DIM_HIDDEN,
     PL_HF_DIM_FF_EXP, PL_HF_T_STACKED | PL_HF_T_OPTIONAL},
    {G4_L_ "pre_feedforward_layernorm_2.weight", PL_HF_B_ "pre_ffw_norm_2.weight",
     PL_HF_DIM_HIDDEN, 0, PL_HF_T_NORM | PL_HF_T_OPTIONAL},
    {G4_L_ "post_feedforward_layernorm_1.weight", PL_HF_B_ "post_ffw_norm_1.weight",
     PL_HF_DIM_HIDDEN, 0, PL_HF_T_NORM | PL_HF_T_OPTIONAL},
    {G4_L_ "post_feedforward_layernorm_2.weight", PL_HF_B_ "post_ffw_norm_2.weight",
     PL_HF_DIM_HIDDEN, 0, PL_HF_T_NORM | PL_HF_T_OPTIONAL},
    PL_HF_END,
};

static const pl_hf_tmap globals_[] = {
    {"model.embed_tokens.weight", "token_embd.weight", PL_HF_DIM_VOCAB, PL_HF_DIM_HIDDEN, 0},
    {"model.norm.weight", "output_norm.weight", PL_HF_DIM_HIDDEN, 0, PL_HF_T_NORM},
    {"lm_head.weight", "output.weight", PL_HF_DIM_VOCAB, PL_HF_DIM_HIDDEN, PL_HF_T_OPTIONAL},
    {"model.embed_tokens_per_layer.weight", "per_layer_token_embd.weight", PL_HF_DIM_VOCAB,
     PL_HF_DIM_PLE_ALL, PL_HF_T_OPTIONAL},
    {"model.per_layer_model_projection.weight", "per_layer_model_proj.weight",
     PL_HF_DIM_PLE_ALL, PL_HF_DIM_HIDDEN, PL_HF_T_OPTIONAL},
    {"model.per_layer_projection_norm.weight", "per_layer_proj_norm.weight", PL_HF_DIM_PLE, 0,
     PL_HF_T_NORM | PL_HF_T_OPTIONAL},
    PL_HF_END,
};

/* transformers' Gemma4TextConfig defaults (a multimodal checkpoint's
 * text_config may list only what differs from them). */
static const pl_hf_default text_[] = {
    {"vocab_size", 262144, true, false}, {"hidden_size", 2304, true, false},
    {"intermediate_size", 9216, true, false}, {"num_hidden_layers", 30, true, false},
    {"num_attention_heads", 8, true, false}, {"num_key_value_heads", 4, true, false},
    {"head_dim", 256, true, false}, {"max_position_embeddings", 131072, true, false},
    {"rms_norm_eps", 1e-6, false, false}, {"sliding_window", 512, true, false},
    {"hidden_size_per_layer_input", 256, true, false},
    {"vocab_size_per_layer_input", 262144, true, false},
    {"tie_word_embeddings", 1, false, true},
    {NULL, 0, false, false},
};

/* The multimodal checkpoint's towers and projections, left aside. */
static const char *const skip_[] = {"model.embed_vision.*", "model.audio_tower.*",
                                    "model.embed_audio.*", NULL};

static const pl_family_chat chat_ = {PL_CHAT_TMPL_GEMMA, PL_CHAT_F_GEMMA4};

/* Gemma 4's norms scale by w itself (the converter's norm_shift 0). */
static const pl_hf_arch hf_[] = {
    {"Gemma4ForCausalLM", "gemma4", layer_, 0, true, false, 1000000, hparams_, NULL, globals_},
    {"Gemma4ForConditionalGeneration", "gemma4", layer_, 0, true, false, 1000000, hparams_,
     text_, globals_, skip_},
};

const pl_family pl_family_gemma4 = {
    .name = "gemma4",
    .model = {.need = PL_FAM_B(ATTN_NORM) | PL_FAM_B(WQ) | PL_FAM_B(WO) | PL_FAM_B(Q_NORM) |
                      PL_FAM_B(FFN_NORM) | PL_FAM_B(GATE) | PL_FAM_B(UP) | PL_FAM_B(DOWN) |
                      PL_FAM_POST_NORMS,
              /* K, V and the k norm: a layer reading its own K/V needs attn_k
               * and attn_k_norm (model.c), attn_v is optional (K = V) */
              .optional = PL_FAM_B(WK) | PL_FAM_B(WV) | PL_FAM_B(K_NORM) |
                          PL_FAM_B(OUT_SCALE),
              .rope_neox = true, .act = PL_FFN_GELU_TANH, .embd_scale = true,
              .norm_eps_required = true, .final_softcap = true,
              /* the file lists the pattern; sliding layers' base 10,000 unless
               * rope.freq_base_swa says otherwise */
              .swa_period = 6, .swa_rope_base = 10000.0f, .rope_freqs_tensor = true,
              .kind_geometry = true, .per_layer_embd = true,
              /* 26B-A4B: experts beside the dense FFN, in every layer when
               * the file has them (model.h) */
              .moe = PL_MOE_OPTIONAL, .moe_norm_w = true,
              .moe_need = PL_FAM_B(GATE) | PL_FAM_B(UP) | PL_FAM_B(DOWN) | PL_FAM_EXPERTS |
                          PL_FAM_B(GATE_INP_S) | PL_FAM_B(DOWN_EXPS_S) |
                          PL_FAM_B(FFN_PRE_NORM_2) | PL_FAM_B(FFN_POST_NORM_1) |
                          PL_FAM_B(FFN_POST_NORM_2)},
    .hf = hf_, .n_hf = 2,
    .chat = &chat_,
    .runners = PL_FAMILY_RUNS_CPU,
};
