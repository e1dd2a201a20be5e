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
 *     x += rmsnorm(geglu(rmsnorm(x)), post_ffw_norm);
 *     x += per-layer embedding (E2B/E4B; model.h);  x *= layer_output_scale
 *   logits = softcap(rmsnorm(x) @ output^T; final_logit_softcapping)
 *
 * As llama.cpp's src/models/gemma4.cpp. The chat template's style is the
 * text side's (backends/text/); a file without a template has none here. */
#include "backends/engine/families/family.h"

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
              .kind_geometry = true, .per_layer_embd = true},
    .runners = PL_FAMILY_RUNS_CPU,
};
