/* qwen35moe.c - the qwen35moe family (Qwen3.5 / Qwen3.6 mixtures of
 * experts): qwen35's Gated DeltaNet hybrid layers (qwen35.c), and in every
 * layer, for the feed-forward, routed experts beside a shared expert with
 * its own sigmoid gate:
 *
 *   h = rmsnorm(x, post_attention_norm)
 *   p = softmax(h @ gate_inp^T), top expert_used_count, renormalised
 *   x += sum of the chosen experts' swiglu(h), weighted
 *      + sigmoid(h . gate_inp_shexp) * swiglu_shexp(h)
 *
 * (model.h's formula). As llama.cpp's src/models/qwen35moe.cpp, which
 * always renormalises the top k (transformers' Qwen3_5MoeTopKRouter too).
 *
 * Hugging Face checkpoints (Qwen3_5MoeForCausalLM, the text model of
 * Qwen3_5MoeForConditionalGeneration) go through qwen35's changes; the
 * experts are one tensor per expert on disk (or transformers' fused
 * gate_up_proj and down_proj), stacked as the converter stacks them; the
 * shared expert's gate, a [1, hidden_size] Linear, is a vector. config.json
 * has no dense intermediate_size. */
#include "backends/engine/families/family.h"

#include <stdio.h>

/* An expert's width when the file omits it: llama.cpp's
 * feed_forward_length / expert_used_count (the converter writes it). */
static int expert_ff_(const pl_model *m) { return m->n_ff / m->n_expert_used; }

static int hparams_(const pl_hf_arch *a, const pl_hf_json *c, pl_hf_shape *sh,
                    pl_gguf_synth *s, char *err, size_t n)
{
    if (pl_family_hf_qwen35(a, c, sh, s, err, n) ||
        pl_family_hf_experts(a, c, "moe_intermediate_size", sh, s, err, n) ||
        pl_family_hf_int(c, "shared_expert_intermediate_size", true, 1, 1 << 22, 0,
                         &sh->n_ff_shexp, err, n))
        return -1;
    return pl_family_hf_put_u32(s, a, "expert_shared_feed_forward_length", sh->n_ff_shexp,
                                err, n);
}

/* The experts one tensor per expert as checkpoints store them, or as
 * transformers holds them (one [n_expert, 2 n_ff_exp, hidden] gate-then-up
 * tensor and one down tensor: a checkpoint saved without the per-expert
 * split); a file with neither is refused naming the GGUF tensor. */
#define EXP_(n, gg, d0, d1)                                                          \
    {PL_HF_L_ "mlp.experts.%d." n ".weight", PL_HF_B_ gg, d0, d1,                      \
     PL_HF_T_EXPERTS | PL_HF_T_OPTIONAL}
static const pl_hf_tmap layer_[] = {
    PL_HF_QWEN35_BLOCKS,
    {PL_HF_L_ "mlp.gate.weight", PL_HF_B_ "ffn_gate_inp.weight", PL_HF_DIM_EXPERTS,
     PL_HF_DIM_HIDDEN, PL_HF_T_F32},
    EXP_("gate_proj", "ffn_gate_exps.weight", PL_HF_DIM_FF_EXP, PL_HF_DIM_HIDDEN),
    EXP_("up_proj", "ffn_up_exps.weight", PL_HF_DIM_FF_EXP, PL_HF_DIM_HIDDEN),
    EXP_("down_proj", "ffn_down_exps.weight", PL_HF_DIM_HIDDEN, PL_HF_DIM_FF_EXP),
    {PL_HF_L_ "mlp.experts.gate_up_proj", PL_HF_B_ "ffn_gate_up_exps.weight",
     PL_HF_DIM_FF_EXP2, PL_HF_DIM_HIDDEN, PL_HF_T_STACKED | PL_HF_T_OPTIONAL},
    {PL_HF_L_ "mlp.experts.down_proj", PL_HF_B_ "ffn_down_exps.weight", PL_HF_DIM_HIDDEN,
     PL_HF_DIM_FF_EXP, PL_HF_T_STACKED | PL_HF_T_OPTIONAL},
    PL_HF_SHEXP,
    PL_HF_END,
};

static const pl_hf_arch hf_[] = {
    {"Qwen3_5MoeForCausalLM", "qwen35moe", layer_, 1, false, false, 10000000, hparams_, NULL,
     NULL, pl_family_hf_qwen35_skip, .no_dense_ff = true},
    {"Qwen3_5MoeForConditionalGeneration", "qwen35moe", layer_, 1, false, false, 10000000,
     hparams_, pl_family_hf_qwen35_text, NULL, pl_family_hf_qwen35_skip, .no_dense_ff = true},
};

const pl_family pl_family_qwen35moe = {
    .name = "qwen35moe",
    .note = "Qwen3.5 Gated DeltaNet hybrids with experts",
    .model = {.need = PL_FAM_DENSE | PL_FAM_QK_NORM, .rope_neox = true,
              .norm_eps_required = true, .ffn_norm_name = "post_attention_norm",
              .recurrent = true, .need_recurrent = PL_FAM_SSM, .attn_out_gate = true,
              .rope_sections = true, .mtp_ignored = true,
              .moe = PL_MOE_ALWAYS, .moe_norm_w = true,
              .moe_need = PL_FAM_EXPERTS | PL_FAM_SHEXP, .expert_ff_default = expert_ff_,
              .shexp = true},
    .hf = hf_, .n_hf = 2,
    .runners = PL_FAMILY_RUNS_CPU,
};
