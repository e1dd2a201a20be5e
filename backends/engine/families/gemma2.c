/* gemma2.c - the gemma2 family (Gemma 2):
 *
 *   x = token_embd[id] * sqrt(n_embd)
 *   per layer: x += rmsnorm(attn(rmsnorm(x)), post_attention_norm), scores
 *              soft-capped (attn_logit_softcapping, 50), even layers
 *              sliding (4,096 when the file omits the window);
 *              x += rmsnorm(geglu(rmsnorm(x)), post_ffw_norm)
 *   logits = softcap(rmsnorm(x) @ token_embd^T; final_logit_softcapping, 30)
 *
 * Queries scale by 1/sqrt(head_dim), 1/sqrt(n_embd / n_head) for the 27B
 * (46 layers). As llama.cpp's src/models/gemma2-iswa.cpp. */
#include "backends/engine/families/family.h"

/* The official template has no system role: its text is folded into the
 * first user turn (as llama.cpp's server does). */
static const pl_family_chat chat_ = {PL_CHAT_TMPL_GEMMA, 0};

static int hparams_(const pl_hf_arch *a, const pl_hf_json *c, pl_hf_shape *sh,
                    pl_gguf_synth *s, char *err, size_t n)
{
    double attn = 0, fin = 0;
    int w = 0;
    if (pl_hf_json_num(c, "attn_logit_softcapping", true, 1e-6, 1e9, &attn, err, n) < 0 ||
        pl_hf_json_num(c, "final_logit_softcapping", true, 1e-6, 1e9, &fin, err, n) < 0 ||
        pl_family_hf_int(c, "sliding_window", true, 1, 1 << 24, 0, &w, err, n) ||
        pl_family_hf_query_scale(c, sh, pl_family_gemma2.model.wide_query_scale_layers, err, n))
        return -1;
    return pl_family_hf_put_f32(s, a, "attn_logit_softcapping", attn, err, n) ||
           pl_family_hf_put_f32(s, a, "final_logit_softcapping", fin, err, n) ||
           pl_family_hf_put_u32(s, a, "attention.sliding_window", w, err, n) ? -1 : 0;
}

static const pl_hf_tmap layer_[] = {PL_HF_ATTN(0), PL_HF_SANDWICH_NORMS, PL_HF_MLP, PL_HF_END};

static const pl_hf_arch hf_[] = {
    {"Gemma2ForCausalLM", "gemma2", layer_, 1, true, false, 10000, hparams_, NULL},
};

const pl_family pl_family_gemma2 = {
    .name = "gemma2",
    .model = {.need = PL_FAM_DENSE | PL_FAM_POST_NORMS, .rope_neox = true,
              .act = PL_FFN_GELU_TANH, .embd_scale = true, .output_tied = true,
              .norm_eps_required = true, .attn_softcap = true, .final_softcap = true,
              .attn_softcap_default = 50.0f, .final_softcap_default = 30.0f,
              /* even layers slide (llama.cpp: set_swa_pattern(2)) */
              .swa_period = 2, .swa_window_default = 4096, .wide_query_scale_layers = 46},
    .hf = hf_, .n_hf = 1,
    .chat = &chat_,
    .runners = PL_FAMILY_RUNS_CPU | PL_FAMILY_RUNS_CUDA,
};
