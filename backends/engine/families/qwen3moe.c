/* qwen3moe.c - the qwen3moe family (Qwen 3 mixtures of experts): qwen3's
 * attention, and experts in every layer.
 *
 *   per layer: x += attn(rmsnorm(x); q/k norms);
 *              p = softmax(rmsnorm(x) @ gate_inp^T), top expert_used_count
 *              of p, renormalised unless expert_weights_norm is false;
 *              x += sum of the chosen experts' swiglu, weighted
 *
 * As llama.cpp's src/models/qwen3moe.cpp. */
#include "backends/engine/families/family.h"

/* An expert's width when the file omits it: llama.cpp's
 * feed_forward_length / expert_used_count. */
static int expert_ff_(const pl_model *m) { return m->n_ff / m->n_expert_used; }

const pl_family pl_family_qwen3moe = {
    .name = "qwen3moe",
    .model = {.need = PL_FAM_DENSE | PL_FAM_QK_NORM, .rope_neox = true,
              .norm_eps_required = true,
              .moe = PL_MOE_ALWAYS, .moe_norm_w = true, .moe_need = PL_FAM_EXPERTS,
              .expert_ff_default = expert_ff_},
    .runners = PL_FAMILY_RUNS_CPU,
};
