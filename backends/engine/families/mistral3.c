/* mistral3.c - the mistral3 family (Ministral 3; llama.cpp's name for
 * Mistral's 2025 text models): llama's blocks, YaRN with its log
 * multiplier, and a temperature on the queries past the original context:
 *
 *   x = token_embd[id]
 *   per layer: q, k = rope(h @ wq^T, h @ wk^T; YaRN, adjacent pairs);
 *              q *= 1 + s ln(1 + floor(pos / original_context_length));
 *              x += attn(rmsnorm(x));  x += swiglu(rmsnorm(x))
 *   logits = rmsnorm(x) @ output^T
 *
 * (s: attention.temperature_scale, config.json's llama_4_scaling_beta). As
 * llama.cpp's src/models/mistral3.cpp; its experts (Mistral 4's layout
 * aside) and its optional biases are refused. */
#include "backends/engine/families/family.h"

/* llama's adjacent-pair rope: q and k rows permuted from rotate-half, as
 * llama.cpp's converter does (its Ministral3Model is a LlamaModel). */
static const pl_hf_tmap layer_[] = {PL_HF_ATTN(1), PL_HF_PLAIN_NORM, PL_HF_MLP, PL_HF_END};

static const pl_hf_arch hf_[] = {
    {"Ministral3ForCausalLM", "mistral3", layer_, 0, false, false, 1000000,
     pl_family_hf_no_window, NULL},
};

const pl_family pl_family_mistral3 = {
    .name = "mistral3",
    .model = {.need = PL_FAM_DENSE, .norm_eps_required = true, .rope_freqs_tensor = true,
              .ministral_rope = true},
    .hf = hf_, .n_hf = 1,
    .runners = PL_FAMILY_RUNS_CPU,
};
