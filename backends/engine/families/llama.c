/* llama.c - the llama family: Llama 2/3, SmolLM2, TinyLlama, Mistral (a
 * sliding window when the file declares one) and, with experts, Mixtral.
 *
 *   x = token_embd[id]
 *   per layer: x += attn(rmsnorm(x)), rope on adjacent pairs (llama3's
 *              rope_freqs.weight factors when the file has them);
 *              x += swiglu(rmsnorm(x)), or the softmax-routed experts
 *   logits = rmsnorm(x) @ output^T
 *
 * As llama.cpp's converter writes the file and src/models/llama.cpp reads it. */
#include "backends/engine/families/family.h"

/* Mixtral: an expert's width is feed_forward_length unless the file says. */
static int expert_ff_(const pl_model *m) { return m->n_ff; }

/* Mistral v0.1's sliding window (every layer slides over it). */
static int window_(const pl_hf_arch *a, const pl_hf_json *c, pl_hf_shape *sh,
                   pl_gguf_synth *s, char *err, size_t n)
{
    int w = 0;
    (void)sh;
    if (pl_family_hf_int(c, "sliding_window", false, 1, 1 << 24, 0, &w, err, n))
        return -1;
    return w > 0 ? pl_family_hf_put_u32(s, a, "attention.sliding_window", w, err, n) : 0;
}

/* llama's GGUF rope rotates adjacent pairs, so q and k rows are permuted
 * from Hugging Face's rotate-half order (llama.cpp's converter does the
 * same). */
static const pl_hf_tmap layer_[] = {PL_HF_ATTN(1), PL_HF_PLAIN_NORM, PL_HF_MLP, PL_HF_END};

static const pl_hf_arch hf_[] = {
    {"LlamaForCausalLM", "llama", layer_, 0, false, false, 10000, window_, NULL},
    {"MistralForCausalLM", "llama", layer_, 0, false, false, 10000, window_, NULL},
};

const pl_family pl_family_llama = {
    .name = "llama", .note = "with or without experts",
    .model = {.need = PL_FAM_DENSE, .rope_freqs_tensor = true,
              /* Mistral v0.1 slides every layer over 4,096 positions;
               * llama.cpp's converter does not write the window for llama
               * files, so it applies only where a file declares one. */
              .swa_period = 1,
              /* Mixtral: experts when the file has expert_count (llama.cpp's
               * build_moe_ffn with softmax gating, renormalised top-k) */
              .moe = PL_MOE_OPTIONAL, .moe_norm_w = true, .moe_need = PL_FAM_EXPERTS,
              .expert_ff_default = expert_ff_},
    .hf = hf_, .n_hf = 2,
    .runners = PL_FAMILY_RUNS_CPU | PL_FAMILY_RUNS_CUDA,
};
