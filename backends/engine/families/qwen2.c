/* qwen2.c - the qwen2 family (Qwen 2 and 2.5): llama's blocks with q/k/v
 * biases and NeoX rope (rotate (x[i], x[i + n_rot/2])).
 *
 *   per layer: x += attn(rmsnorm(x); q, k, v with biases);
 *              x += swiglu(rmsnorm(x))
 *
 * As llama.cpp's src/models/qwen2.cpp. */
#include "backends/engine/families/family.h"

/* NeoX rope: Hugging Face's q/k order is kept. */
static const pl_hf_tmap layer_[] = {PL_HF_ATTN(0), PL_HF_PLAIN_NORM, PL_HF_MLP, PL_HF_END};

static const pl_hf_arch hf_[] = {
    {"Qwen2ForCausalLM", "qwen2", layer_, 0, false, true, 10000, pl_family_hf_no_window, NULL},
};

const pl_family pl_family_qwen2 = {
    .name = "qwen2",
    .model = {.need = PL_FAM_DENSE | PL_FAM_QKV_BIAS, .rope_neox = true},
    .hf = hf_, .n_hf = 1,
    .runners = PL_FAMILY_RUNS_CPU | PL_FAMILY_RUNS_CUDA,
};
