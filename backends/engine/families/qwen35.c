/* qwen35.c - the qwen35 family (Qwen3.5 / Qwen3.6 dense): Gated DeltaNet
 * hybrids. Three of every four layers (attention.recurrent_layers, else
 * all but each full_attention_interval-th) are linear attention with a
 * fixed-size recurrent state; the others gated full attention.
 *
 *   per layer: h = rmsnorm(x, attn_norm)
 *     recurrent: x += gated_deltanet(h)   (model.h's pl_layer.recurrent:
 *                causal depthwise conv + SiLU, L2-normalised q and k, the
 *                gated delta rule, rmsnorm(o) * silu(z), ssm_out)
 *     attention: q|gate = h @ attn_q^T (per head: the query, then its gate);
 *                q, k = rmsnorm per head; partial NeoX RoPE
 *                (rope.dimension_count of key_length; the multimodal
 *                sections rotate text positions alike);
 *                x += (attn(q, k, v) * sigmoid(gate)) @ attn_output^T
 *     x += swiglu(rmsnorm(x, post_attention_norm))
 *
 * The converter stores Qwen3.5's zero-centred norms as 1 + w, A_log as
 * ssm_a = -exp(A_log), and the value heads in llama.cpp's tiled order
 * (value head h reads key head h % n_k). The multi-token-prediction
 * blocks (nextn_predict_layers) are skipped: parley does not draft with
 * them. As llama.cpp's src/models/qwen35.cpp. */
#include "backends/engine/families/family.h"

#define SSM_BLOCK                                                                    \
    (PL_FAM_B(SSM_QKV) | PL_FAM_B(SSM_Z) | PL_FAM_B(SSM_BETA) | PL_FAM_B(SSM_ALPHA) | \
     PL_FAM_B(SSM_CONV) | PL_FAM_B(SSM_DT) | PL_FAM_B(SSM_A) | PL_FAM_B(SSM_NORM) |   \
     PL_FAM_B(SSM_OUT))

const pl_family pl_family_qwen35 = {
    .name = "qwen35",
    .note = "Qwen3.5 Gated DeltaNet hybrids",
    .model = {.need = PL_FAM_DENSE | PL_FAM_QK_NORM, .rope_neox = true,
              .norm_eps_required = true, .ffn_norm_name = "post_attention_norm",
              .recurrent = true, .need_recurrent = SSM_BLOCK, .attn_out_gate = true,
              .rope_sections = true, .mtp_ignored = true},
    .runners = PL_FAMILY_RUNS_CPU,
};
