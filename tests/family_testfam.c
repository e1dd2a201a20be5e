/* family_testfam.c - a model family defined in tests/ alone (issue 46):
 * "parley-testfam", registered at run time by test_family.c, never built
 * into parley. Its formula is qwen2's (q/k/v biases, NeoX rope), so its
 * fixture (tests/fixtures/tiny_testfam.gguf: tiny_qwen2's weights under
 * this name) must give tiny_qwen2's logits; its files carry no template and
 * its chat style is ChatML with Qwen 2.5's tool branch (tool format
 * "hermes"). */
#include "backends/engine/families/family.h"

static const pl_hf_tmap layer_[] = {PL_HF_ATTN(0), PL_HF_PLAIN_NORM, PL_HF_MLP, PL_HF_END};

static const pl_hf_arch hf_[] = {
    {"ParleyTestFamForCausalLM", "parley-testfam", layer_, 0, false, true, 10000, NULL, NULL},
};

static const pl_family_chat chat_ = {PL_CHAT_TMPL_CHATML, PL_CHAT_F_QWEN_TOOLS};

const pl_family pl_family_testfam = {
    .name = "parley-testfam", .note = "a test's",
    .model = {.need = PL_FAM_DENSE | PL_FAM_QKV_BIAS, .rope_neox = true},
    .hf = hf_, .n_hf = 1,
    .chat = &chat_,
    .runners = PL_FAMILY_RUNS_CPU,
};
