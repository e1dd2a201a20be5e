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

#include <stdio.h>

/* An expert's width when the file omits it: llama.cpp's
 * feed_forward_length / expert_used_count. */
static int expert_ff_(const pl_model *m) { return m->n_ff / m->n_expert_used; }

/* Experts in every layer (the layout parley runs), norm_topk_prob as
 * expert_weights_norm: llama.cpp's converter leaves it out and its
 * qwen3moe always renormalises, transformers' default is false. */
static int hparams_(const pl_hf_arch *a, const pl_hf_json *c, pl_hf_shape *sh,
                    pl_gguf_synth *s, char *err, size_t n)
{
    int step = 1;
    bool norm = false;
    json_t *only = pl_hf_json_get(c, "mlp_only_layers");
    if (pl_family_hf_no_window(a, c, sh, s, err, n) ||
        pl_family_hf_experts(a, c, "moe_intermediate_size", sh, s, err, n) ||
        pl_family_hf_int(c, "decoder_sparse_step", false, 1, 1 << 20, 1, &step, err, n) ||
        pl_hf_json_bool(c, "norm_topk_prob", false, &norm, err, n) < 0)
        return -1;
    if (step != 1)
        return pl_hf_json_fail(c, "decoder_sparse_step", err, n, "%d: parley runs experts in "
                               "every layer (1)", step);
    if (only && (!json_is_array(only) || json_array_size(only)))
        return pl_hf_json_fail(c, "mlp_only_layers", err, n, "dense layers among the experts' "
                               "are not supported (only [])");
    char k[128];
    snprintf(k, sizeof k, "%s.expert_weights_norm", a->gguf);
    if (pl_gguf_synth_bool(s, k, norm))
        return snprintf(err, n, "out of memory"), -1;
    return 0;
}

static const pl_hf_tmap layer_[] = {PL_HF_ATTN(0), PL_HF_QK_NORM, PL_HF_PLAIN_NORM,
                                    PL_HF_EXPERTS, PL_HF_END};

static const pl_hf_arch hf_[] = {
    {"Qwen3MoeForCausalLM", "qwen3moe", layer_, 0, false, false, 10000, hparams_, NULL},
};

const pl_family pl_family_qwen3moe = {
    .name = "qwen3moe",
    .model = {.need = PL_FAM_DENSE | PL_FAM_QK_NORM, .rope_neox = true,
              .norm_eps_required = true,
              .moe = PL_MOE_ALWAYS, .moe_norm_w = true, .moe_need = PL_FAM_EXPERTS,
              .expert_ff_default = expert_ff_},
    .hf = hf_, .n_hf = 1,
    .runners = PL_FAMILY_RUNS_CPU,
};
