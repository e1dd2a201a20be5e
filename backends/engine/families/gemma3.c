/* gemma3.c - the gemma3 family (Gemma 3, text; the multimodal checkpoints'
 * language model): gemma2's blocks with per-head q/k norms and no
 * soft-capping.
 *
 *   x = token_embd[id] * sqrt(n_embd)
 *   per layer: q, k = rmsnorm per head; five local layers (sliding window,
 *              RoPE base 10,000 unscaled), then a global one;
 *              x += rmsnorm(attn(rmsnorm(x)), post_attention_norm);
 *              x += rmsnorm(geglu(rmsnorm(x)), post_ffw_norm)
 *   logits = rmsnorm(x) @ output^T (tied unless the file has output.weight)
 *
 * Queries scale as gemma2's (62 layers: the 27B). As llama.cpp's
 * src/models/gemma3-iswa.cpp. */
#include "backends/engine/families/family.h"
#include "backends/engine/model/hf_config.h"

#include <string.h>

/* Gemma 3's template puts a system message's text before the first user
 * turn's, and a blank line. */
static const pl_family_chat chat_ = {PL_CHAT_TMPL_GEMMA, PL_CHAT_F_GEMMA_SYSTEM};

/* Which layers slide: sliding_window_pattern (a period), or newer configs'
 * layer_types, which must follow a period (one full layer last in each).
 * 0 with *period, or -1. */
static int period_(const pl_hf_json *c, int n_layer, int *period, char *err, size_t n)
{
    json_t *lt = pl_hf_json_get(c, "layer_types"), *v;
    size_t i;
    if (pl_family_hf_int(c, "sliding_window_pattern", false, 1, 4096, 6, period, err, n))
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

static int hparams_(const pl_hf_arch *a, const pl_hf_json *c, pl_hf_shape *sh,
                    pl_gguf_synth *s, char *err, size_t n)
{
    double local = 10000;
    int w = 0, period = 6;
    if (pl_family_hf_int(c, "sliding_window", true, 1, 1 << 24, 0, &w, err, n) ||
        period_(c, sh->n_layer, &period, err, n) ||
        pl_hf_config_swa_theta(c, 10000, &local, err, n) ||
        pl_family_hf_query_scale(c, sh, pl_family_gemma3.model.wide_query_scale_layers, err, n))
        return -1;
    if (pl_hf_json_get(c, "attn_logit_softcapping") || pl_hf_json_get(c, "final_logit_softcapping"))
        return pl_hf_json_fail(c, pl_hf_json_get(c, "attn_logit_softcapping")
                               ? "attn_logit_softcapping" : "final_logit_softcapping", err, n,
                               "Gemma 3 has no soft-capping");
    return pl_family_hf_put_u32(s, a, "attention.sliding_window", w, err, n) ||
           pl_family_hf_put_u32(s, a, "attention.sliding_window_pattern", period, err, n) ||
           pl_family_hf_put_f32(s, a, "rope.freq_base_swa", local, err, n) ? -1 : 0;
}

/* transformers' Gemma3TextConfig defaults (the multimodal checkpoints'
 * text_config lists only what differs from them). */
static const pl_hf_default text_[] = {
    {"vocab_size", 262208, true, false}, {"hidden_size", 2304, true, false},
    {"intermediate_size", 9216, true, false}, {"num_hidden_layers", 26, true, false},
    {"num_attention_heads", 8, true, false}, {"num_key_value_heads", 4, true, false},
    {"head_dim", 256, true, false}, {"max_position_embeddings", 131072, true, false},
    {"rms_norm_eps", 1e-6, false, false}, {"rope_theta", 1000000.0, false, false},
    {"query_pre_attn_scalar", 256, false, false}, {"sliding_window", 4096, true, false},
    {"rope_local_base_freq", 10000.0, false, false}, {"tie_word_embeddings", 1, false, true},
    {NULL, 0, false, false},
};

static const pl_hf_tmap layer_[] = {PL_HF_ATTN(0), PL_HF_QK_NORM, PL_HF_SANDWICH_NORMS,
                                    PL_HF_MLP, PL_HF_END};

static const pl_hf_arch hf_[] = {
    {"Gemma3ForCausalLM", "gemma3", layer_, 1, true, false, 1000000, hparams_, NULL},
    {"Gemma3ForConditionalGeneration", "gemma3", layer_, 1, true, false, 1000000, hparams_,
     text_},
};

const pl_family pl_family_gemma3 = {
    .name = "gemma3",
    .model = {.need = PL_FAM_DENSE | PL_FAM_POST_NORMS | PL_FAM_QK_NORM, .rope_neox = true,
              .act = PL_FFN_GELU_TANH, .embd_scale = true, .norm_eps_required = true,
              /* five local layers, then a global one (set_swa_pattern(6)); the
               * local layers' RoPE base is 10,000 whatever rope.freq_base
               * says, unscaled */
              .swa_period = 6, .swa_rope_base = 10000.0f, .wide_query_scale_layers = 62},
    .hf = hf_, .n_hf = 2,
    .chat = &chat_,
    .runners = PL_FAMILY_RUNS_CPU | PL_FAMILY_RUNS_CUDA,
};
