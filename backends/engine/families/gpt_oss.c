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

#include <math.h>

#define L_ PL_HF_L_
#define B_ PL_HF_B_

/* transformers' layout: every expert in one tensor, stored (in, out), gate
 * and up interleaved along out (gate the even entries), as
 * transformers 5 writes it for an unquantised checkpoint. */
static const pl_hf_tmap layer_[] = {
    PL_HF_ATTN(0),
    {L_ "self_attn.o_proj.bias", B_ "attn_output.bias", PL_HF_DIM_HIDDEN, 0, 0},
    {L_ "self_attn.sinks", B_ "attn_sinks.weight", PL_HF_DIM_HEADS, 0, 0},
    {L_ "post_attention_layernorm.weight", B_ "post_attention_norm.weight", PL_HF_DIM_HIDDEN,
     0, PL_HF_T_NORM},
    {L_ "mlp.router.weight", B_ "ffn_gate_inp.weight", PL_HF_DIM_EXPERTS, PL_HF_DIM_HIDDEN,
     PL_HF_T_F32},
    {L_ "mlp.router.bias", B_ "ffn_gate_inp.bias", PL_HF_DIM_EXPERTS, 0, 0},
    {L_ "mlp.experts.gate_up_proj", B_ "ffn_gate_exps.weight", PL_HF_DIM_FF_EXP,
     PL_HF_DIM_HIDDEN, PL_HF_T_FUSED | PL_HF_T_EVEN},
    {L_ "mlp.experts.gate_up_proj", B_ "ffn_up_exps.weight", PL_HF_DIM_FF_EXP,
     PL_HF_DIM_HIDDEN, PL_HF_T_FUSED | PL_HF_T_ODD},
    {L_ "mlp.experts.down_proj", B_ "ffn_down_exps.weight", PL_HF_DIM_HIDDEN, PL_HF_DIM_FF_EXP,
     PL_HF_T_FUSED},
    {L_ "mlp.experts.gate_up_proj_bias", B_ "ffn_gate_exps.bias", PL_HF_DIM_EXPERTS,
     PL_HF_DIM_FF_EXP, PL_HF_T_EVEN | PL_HF_T_F32},
    {L_ "mlp.experts.gate_up_proj_bias", B_ "ffn_up_exps.bias", PL_HF_DIM_EXPERTS,
     PL_HF_DIM_FF_EXP, PL_HF_T_ODD | PL_HF_T_F32},
    {L_ "mlp.experts.down_proj_bias", B_ "ffn_down_exps.bias", PL_HF_DIM_EXPERTS,
     PL_HF_DIM_HIDDEN, PL_HF_T_F32},
    PL_HF_END,
};

/* A key whose value is parley's constant (the clamped SwiGLU's). */
static int fixed_(const pl_hf_json *c, const char *key, double want, char *err, size_t n)
{
    double v = want;
    if (pl_family_hf_num(c, key, -1e9, 1e9, want, &v, err, n))
        return -1;
    if (fabs(v - want) > 1e-6)
        return pl_hf_json_fail(c, key, err, n, "%g: parley's gpt-oss SwiGLU has %g", v, want);
    return 0;
}

/* The experts (intermediate_size is an expert's width), the window, and
 * the SwiGLU's limit and alpha. */
static int hparams_(const pl_hf_arch *a, const pl_hf_json *c, pl_hf_shape *sh,
                    pl_gguf_synth *s, char *err, size_t n)
{
    int w;
    if (pl_family_hf_experts(a, c, "intermediate_size", sh, s, err, n) ||
        pl_family_hf_int(c, "sliding_window", true, 1, 1 << 24, 0, &w, err, n) ||
        pl_family_hf_put_u32(s, a, "attention.sliding_window", w, err, n) ||
        fixed_(c, "swiglu_limit", PL_OAI_SWIGLU_LIMIT, err, n) ||
        fixed_(c, "swiglu_alpha", PL_OAI_SWIGLU_ALPHA, err, n))
        return -1;
    return 0;
}

static const pl_hf_arch hf_[] = {
    {"GptOssForCausalLM", "gpt-oss", layer_, 0, false, true, 150000, hparams_, NULL},
};

const pl_family pl_family_gpt_oss = {
    .name = "gpt-oss",
    .model = {.need = PL_FAM_DENSE | PL_FAM_QKV_BIAS | PL_FAM_B(BO) | PL_FAM_B(SINKS),
              .rope_neox = true, .act = PL_FFN_SWIGLU_OAI, .norm_eps_required = true,
              /* even layers slide (set_swa_pattern(2)) */
              .swa_period = 2,
              .moe = PL_MOE_ALWAYS, .gating = PL_MOE_TOPK_SOFTMAX,
              .moe_need = PL_FAM_EXPERTS | PL_FAM_EXPERT_BIASES,
              .ffn_norm_name = "post_attention_norm"},
    .hf = hf_, .n_hf = 1,
    .runners = PL_FAMILY_RUNS_CPU,
};
