/* qwen3.c - the qwen3 family (dense Qwen 3): qwen2's attention without the
 * biases, with a per-head RMSNorm of q and k before rope.
 *
 *   per layer: q, k = rmsnorm per head (attn_q_norm, attn_k_norm);
 *              x += attn(rmsnorm(x)); x += swiglu(rmsnorm(x))
 *
 * As llama.cpp's src/models/qwen3.cpp. */
#include "backends/engine/families/family.h"

static const pl_hf_tmap layer_[] = {PL_HF_ATTN(0), PL_HF_QK_NORM, PL_HF_PLAIN_NORM, PL_HF_MLP,
                                    PL_HF_END};

static const pl_hf_arch hf_[] = {
    {"Qwen3ForCausalLM", "qwen3", layer_, 0, false, false, 10000, pl_family_hf_no_window, NULL},
};

const pl_family pl_family_qwen3 = {
    .name = "qwen3",
    .model = {.need = PL_FAM_DENSE | PL_FAM_QK_NORM, .rope_neox = true,
              .norm_eps_required = true},
    .hf = hf_, .n_hf = 1,
    .runners = PL_FAMILY_RUNS_CPU | PL_FAMILY_RUNS_CUDA,
};
