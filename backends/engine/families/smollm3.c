/* smollm3.c - the smollm3 family (SmolLM3): llama's blocks, and every
 * fourth layer without RoPE (NoPE):
 *
 *   x = token_embd[id]
 *   per layer l: x += attn(rmsnorm(x)), rope on adjacent pairs unless
 *                (l + 1) % 4 == 0;  x += swiglu(rmsnorm(x))
 *   logits = rmsnorm(x) @ output^T
 *
 * As llama.cpp's src/models/smollm3.cpp (its n_no_rope_layer_step 4: the
 * converter writes no key for the pattern, so config.json's no_rope_layers
 * must be that one). */
#include "backends/engine/families/family.h"

#include <jansson.h>

#define NOPE_PERIOD 4

/* no_rope_layers (1: the layer has RoPE) or no_rope_layer_interval: the
 * pattern llama.cpp runs; no sliding window. */
static int hparams_(const pl_hf_arch *a, const pl_hf_json *c, pl_hf_shape *sh,
                    pl_gguf_synth *s, char *err, size_t n)
{
    int step = NOPE_PERIOD;
    json_t *nr = pl_hf_json_get(c, "no_rope_layers"), *v;
    size_t i;
    if (pl_family_hf_no_window(a, c, sh, s, err, n) ||
        pl_family_hf_int(c, "no_rope_layer_interval", false, 1, 1 << 20, NOPE_PERIOD, &step,
                         err, n))
        return -1;
    if (!nr && step != NOPE_PERIOD)
        return pl_hf_json_fail(c, "no_rope_layer_interval", err, n, "%d: the GGUF model has "
                               "no RoPE in every %dth layer", step, NOPE_PERIOD);
    if (nr && (!json_is_array(nr) || json_array_size(nr) != (size_t)sh->n_layer))
        return pl_hf_json_fail(c, "no_rope_layers", err, n, "must list num_hidden_layers %d "
                               "values", sh->n_layer);
    json_array_foreach(nr, i, v) {
        bool rope = (i + 1) % NOPE_PERIOD != 0;
        if (!json_is_integer(v) || json_integer_value(v) != (rope ? 1 : 0))
            return pl_hf_json_fail(c, "no_rope_layers", err, n, "layer %zu: the GGUF model "
                                   "has %s there (RoPE in all but every %dth layer)", i,
                                   rope ? "RoPE (1)" : "none (0)", NOPE_PERIOD);
    }
    return 0;
}

/* llama's adjacent-pair rope: q and k rows permuted from rotate-half, as
 * llama.cpp's converter does. */
static const pl_hf_tmap layer_[] = {PL_HF_ATTN(1), PL_HF_PLAIN_NORM, PL_HF_MLP, PL_HF_END};

static const pl_hf_arch hf_[] = {
    {"SmolLM3ForCausalLM", "smollm3", layer_, 0, true, false, 2000000, hparams_, NULL},
};

const pl_family pl_family_smollm3 = {
    .name = "smollm3",
    .model = {.need = PL_FAM_DENSE, .norm_eps_required = true, .nope_period = NOPE_PERIOD},
    .hf = hf_, .n_hf = 1,
    .runners = PL_FAMILY_RUNS_CPU,
};
