/* model_arch.c - the architecture table (model.h, pl_arch): one row per
 * general.architecture parley runs, as llama.cpp's converter writes the
 * file and llama.cpp reads it (src/llama-model.cpp: load_hparams,
 * load_tensors and the graph builders). A new architecture is a new row,
 * plus tensor slots in model.c when it has tensors no row has yet. */
#include "backends/engine/model/model.h"

#include <string.h>

#define B(s) PL_T_BIT(PL_T_##s)
/* What every architecture here has. */
#define DENSE (B(ATTN_NORM) | B(WQ) | B(WK) | B(WV) | B(WO) | B(FFN_NORM) | B(GATE) | \
               B(UP) | B(DOWN))
#define QK_NORM (B(Q_NORM) | B(K_NORM))
#define POST_NORMS (B(ATTN_POST_NORM) | B(FFN_POST_NORM))
/* The expert block that replaces GATE, UP and DOWN in a layer with experts. */
#define EXPERTS (B(GATE_INP) | B(GATE_EXPS) | B(UP_EXPS) | B(DOWN_EXPS))
#define EXPERT_BIASES (B(GATE_INP_B) | B(GATE_EXPS_B) | B(UP_EXPS_B) | B(DOWN_EXPS_B))

static const pl_arch archs_[] = {
    {.name = "llama", .arch = PL_MODEL_ARCH_LLAMA, .need = DENSE,
     /* Mistral v0.1 slides every layer over 4,096 positions; llama.cpp's
      * converter does not write the window for llama files, so it applies
      * only where a file declares one. */
     .swa_period = 1,
     /* Mixtral: experts when the file has expert_count (llama.cpp's llama
      * graph, build_moe_ffn with softmax gating, renormalised top-k) */
     .moe = PL_MOE_OPTIONAL, .moe_norm_w = true, .moe_need = EXPERTS},
    {.name = "qwen2", .arch = PL_MODEL_ARCH_QWEN2, .need = DENSE | B(BQ) | B(BK) | B(BV),
     .rope_neox = true},
    {.name = "qwen3", .arch = PL_MODEL_ARCH_QWEN3, .need = DENSE | QK_NORM,
     .rope_neox = true, .norm_eps_required = true},
    {.name = "gemma2", .arch = PL_MODEL_ARCH_GEMMA2, .need = DENSE | POST_NORMS,
     .rope_neox = true, .act = PL_FFN_GELU_TANH, .embd_scale = true, .output_tied = true,
     .norm_eps_required = true, .attn_softcap = true, .final_softcap = true,
     .attn_softcap_default = 50.0f, .final_softcap_default = 30.0f,
     /* even layers slide (llama.cpp: set_swa_pattern(2)); 4,096 when absent */
     .swa_period = 2, .swa_window_default = 4096, .wide_query_scale_layers = 46},
    {.name = "gemma3", .arch = PL_MODEL_ARCH_GEMMA3, .need = DENSE | POST_NORMS | QK_NORM,
     .rope_neox = true, .act = PL_FFN_GELU_TANH, .embd_scale = true,
     .norm_eps_required = true,
     /* five local layers, then a global one (set_swa_pattern(6)); the local
      * layers' RoPE base is 10,000 whatever rope.freq_base says, unscaled */
     .swa_period = 6, .swa_rope_base = 10000.0f, .wide_query_scale_layers = 62},
    {.name = "qwen3moe", .arch = PL_MODEL_ARCH_QWEN3MOE, .need = DENSE | QK_NORM,
     .rope_neox = true, .norm_eps_required = true,
     .moe = PL_MOE_ALWAYS, .moe_norm_w = true, .moe_need = EXPERTS},
    {.name = "gpt-oss", .arch = PL_MODEL_ARCH_GPT_OSS,
     .need = DENSE | B(BQ) | B(BK) | B(BV) | B(BO) | B(SINKS), .rope_neox = true,
     .act = PL_FFN_SWIGLU_OAI, .norm_eps_required = true,
     /* even layers slide (set_swa_pattern(2)); the window is required */
     .swa_period = 2,
     .moe = PL_MOE_ALWAYS, .gating = PL_MOE_TOPK_SOFTMAX, .moe_need = EXPERTS | EXPERT_BIASES,
     .ffn_norm_name = "post_attention_norm"},
};

const pl_arch *pl_arch_find(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof archs_ / sizeof archs_[0]; i++)
        if (strlen(archs_[i].name) == len && memcmp(archs_[i].name, name, len) == 0)
            return &archs_[i];
    return NULL;
}

const char *pl_arch_names(void)
{
    return "llama (with or without experts), qwen2, qwen3, qwen3moe, gemma2, gemma3, gpt-oss";
}
