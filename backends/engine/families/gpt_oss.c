/* gpt_oss.c - the gpt-oss family (OpenAI's open-weight mixtures):
 *
 *   per layer: x += attn(rmsnorm(x); q/k/v/o biases, one sink logit per
 *              head in the softmax's denominator, YaRN rope), even layers
 *              sliding (the window is required);
 *              r = h @ gate_inp^T + b; top expert_used_count of r, softmax
 *              over them; x += sum of the chosen experts' clamped SwiGLU
 *              (biased), weighted
 *
 * The FFN's input norm is blk.N.post_attention_norm.weight. As llama.cpp's
 * src/models/openai-moe-iswa.cpp. */
#include "backends/engine/families/family.h"

const pl_family pl_family_gpt_oss = {
    .name = "gpt-oss",
    .model = {.need = PL_FAM_DENSE | PL_FAM_QKV_BIAS | PL_FAM_B(BO) | PL_FAM_B(SINKS),
              .rope_neox = true, .act = PL_FFN_SWIGLU_OAI, .norm_eps_required = true,
              /* even layers slide (set_swa_pattern(2)) */
              .swa_period = 2,
              .moe = PL_MOE_ALWAYS, .gating = PL_MOE_TOPK_SOFTMAX,
              .moe_need = PL_FAM_EXPERTS | PL_FAM_EXPERT_BIASES,
              .ffn_norm_name = "post_attention_norm"},
    .runners = PL_FAMILY_RUNS_CPU,
};
