/* qwen35.c - the qwen35 family (Qwen3.5 / Qwen3.6 dense): Gated DeltaNet
 * hybrids. Three of every four layers (attention.recurrent_layers, else
 * all but each full_attention_interval-th) are linear attention with a
 * fixed-size recurrent state; the others gated full attention.
 *
 *   per layer: h = rmsnorm(x, attn_norm)
 *     recurrent: x += gated_deltanet(h)   (model.h's pl_layer.recurrent:
 *                causal depthwise conv + SiLU, L2-normalised q and k, the
 *                gated delta rule, rmsnorm(o) * silu(z), ssm_out)
 *     attention: q|gate = h @ attn_q^T (per head: the query, then its gate);
 *                q, k = rmsnorm per head; partial NeoX RoPE
 *                (rope.dimension_count of key_length; the multimodal
 *                sections rotate text positions alike);
 *                x += (attn(q, k, v) * sigmoid(gate)) @ attn_output^T
 *     x += swiglu(rmsnorm(x, post_attention_norm))
 *
 * The converter stores Qwen3.5's zero-centred norms as 1 + w, A_log as
 * ssm_a = -exp(A_log), and the value heads in llama.cpp's tiled order
 * (value head h reads key head h % n_k). The multi-token-prediction
 * blocks (nextn_predict_layers) are skipped: parley does not draft with
 * them. As llama.cpp's src/models/qwen35.cpp.
 *
 * Hugging Face checkpoints (Qwen3_5ForCausalLM, the text model of
 * Qwen3_5ForConditionalGeneration) go through the converter's changes:
 * every norm but linear_attn.norm + 1, A_log -> -exp(A_log), the conv
 * kernel squeezed, the value heads reordered to the tiled order, layer
 * types -> full_attention_interval, partial_rotary_factor -> the rotated
 * dimensions. */
#include "backends/engine/families/family.h"

#include <string.h>

/* The Gated DeltaNet sizes: value heads as wide as key heads (the GGUF
 * model's ssm.state_size is both), a whole number of value heads per key
 * head. */
static int ssm_sizes_(const pl_hf_json *c, pl_hf_shape *sh, char *err, size_t n)
{
    int dv = 0;
    if (pl_family_hf_int(c, "linear_conv_kernel_dim", true, 2, 64, 0, &sh->ssm_kernel, err, n) ||
        pl_family_hf_int(c, "linear_key_head_dim", true, 1, 4096, 0, &sh->ssm_d, err, n) ||
        pl_family_hf_int(c, "linear_value_head_dim", true, 1, 4096, 0, &dv, err, n) ||
        pl_family_hf_int(c, "linear_num_key_heads", true, 1, 4096, 0, &sh->ssm_n_k, err, n) ||
        pl_family_hf_int(c, "linear_num_value_heads", true, 1, 4096, 0, &sh->ssm_n_v, err, n))
        return -1;
    if (dv != sh->ssm_d)
        return pl_hf_json_fail(c, "linear_value_head_dim", err, n, "%d: parley's Gated "
                               "DeltaNet has value heads as wide as key heads (%d)", dv,
                               sh->ssm_d);
    if (sh->ssm_n_v % sh->ssm_n_k)
        return pl_hf_json_fail(c, "linear_num_value_heads", err, n, "%d is not a multiple of "
                               "linear_num_key_heads %d", sh->ssm_n_v, sh->ssm_n_k);
    return 0;
}

/* layer_types (linear_attention / full_attention) into sh->recurrent: a
 * full layer every *iv (full_attention_interval, which the GGUF model
 * reads), the last of each period. */
static int layer_kinds_(const pl_hf_json *c, pl_hf_shape *sh, int *iv, char *err, size_t n)
{
    json_t *lt = pl_hf_json_get(c, "layer_types"), *v;
    size_t i;
    if (pl_family_hf_int(c, "full_attention_interval", false, 1, 4096, 4, iv, err, n))
        return -1;
    if (lt && (!json_is_array(lt) || json_array_size(lt) != (size_t)sh->n_layer))
        return pl_hf_json_fail(c, "layer_types", err, n, "must list num_hidden_layers %d "
                               "layer types", sh->n_layer);
    if (lt && !pl_hf_json_get(c, "full_attention_interval")) {
        *iv = sh->n_layer + 1;
        json_array_foreach(lt, i, v)
            if (json_string_value(v) && !strcmp(json_string_value(v), "full_attention")) {
                *iv = (int)i + 1;
                break;
            }
    }
    memset(sh->recurrent, 0, sizeof sh->recurrent);
    for (int l = 0; l < sh->n_layer && l < 4096; l++) {
        bool rec = (l + 1) % *iv != 0;
        const char *t = json_string_value(json_array_get(lt, (size_t)l));
        if (lt && (!t || strcmp(t, rec ? "linear_attention" : "full_attention")))
            return pl_hf_json_fail(c, "layer_types", err, n, "layer %d is '%s': parley runs "
                                   "a full_attention layer every %d (the rest "
                                   "linear_attention)", l, t ? t : "?", *iv);
        sh->recurrent[l / 64] |= (uint64_t)rec << (l % 64);
    }
    return 0;
}

/* The rope keys beside the shared ones: partial_rotary_factor given (the
 * default differs between transformers' classes), the mrope sections
 * covering the rotated pairs (with text positions they rotate alike). */
static int rope_(const pl_hf_json *c, const pl_hf_shape *sh, char *err, size_t n)
{
    const char *pk = pl_hf_json_get(c, "rope_parameters") ? "rope_parameters.partial_rotary_factor"
                                                           : "partial_rotary_factor";
    double partial = 1;
    bool inter = true;
    if (pl_hf_json_num(c, pk, true, 1e-3, 1, &partial, err, n) < 0 ||
        pl_hf_json_bool(c, "rope_parameters.mrope_interleaved", false, &inter, err, n) < 0)
        return -1;
    json_t *ms = pl_hf_json_get(c, "rope_parameters.mrope_section"), *v;
    size_t i;
    long long sum = 0;
    if (!ms)
        return 0;
    if (!json_is_array(ms) || json_array_size(ms) > 4)
        return pl_hf_json_fail(c, "rope_parameters.mrope_section", err, n, "expected up to 4 "
                               "integers");
    json_array_foreach(ms, i, v)
        sum += json_is_integer(v) && json_integer_value(v) >= 0 ? json_integer_value(v) : -(1 << 20);
    if (sum != (long long)(sh->head_dim * partial) / 2)
        return pl_hf_json_fail(c, "rope_parameters.mrope_section", err, n, "covers %lld "
                               "rotated pairs, partial_rotary_factor %g of head_dim %d has %d",
                               sum, partial, sh->head_dim, (int)(sh->head_dim * partial) / 2);
    return 0;
}

int pl_family_hf_qwen35(const pl_hf_arch *a, const pl_hf_json *c, pl_hf_shape *sh,
                        pl_gguf_synth *s, char *err, size_t n)
{
    int iv = 4, mtp = 0;
    bool ded = false;
    if (ssm_sizes_(c, sh, err, n) || layer_kinds_(c, sh, &iv, err, n) || rope_(c, sh, err, n) ||
        pl_family_hf_int(c, "mtp_num_hidden_layers", false, 0, 64, 0, &mtp, err, n) ||
        pl_hf_json_bool(c, "mtp_use_dedicated_embeddings", false, &ded, err, n) < 0)
        return -1;                   /* mtp.*: not run (skipped below) */
    return pl_family_hf_put_u32(s, a, "ssm.conv_kernel", sh->ssm_kernel, err, n) ||
           pl_family_hf_put_u32(s, a, "ssm.state_size", sh->ssm_d, err, n) ||
           pl_family_hf_put_u32(s, a, "ssm.group_count", sh->ssm_n_k, err, n) ||
           pl_family_hf_put_u32(s, a, "ssm.time_step_rank", sh->ssm_n_v, err, n) ||
           pl_family_hf_put_u32(s, a, "ssm.inner_size", sh->ssm_n_v * sh->ssm_d, err, n) ||
           pl_family_hf_put_u32(s, a, "full_attention_interval", iv, err, n) ? -1 : 0;
}

static const pl_hf_tmap layer_[] = {PL_HF_QWEN35_BLOCKS, PL_HF_MLP, PL_HF_END};

/* The multi-token-prediction block and (composite models) the vision
 * tower: read and dropped. */
const char *const pl_family_hf_qwen35_skip[] = {"mtp.*", "model.mtp.*", "model.visual.*",
                                                "visual.*", NULL};

/* transformers' Qwen3_5TextConfig defaults for what a composite
 * checkpoint's text_config may leave out. */
const pl_hf_default pl_family_hf_qwen35_text[] = {
    {"rms_norm_eps", 1e-6, false, false}, {"tie_word_embeddings", 0, false, true},
    {"max_position_embeddings", 32768, true, false}, {NULL, 0, false, false},
};

static const pl_hf_arch hf_[] = {
    {"Qwen3_5ForCausalLM", "qwen35", layer_, 1, false, false, 10000000, pl_family_hf_qwen35,
     NULL, NULL, pl_family_hf_qwen35_skip},
    {"Qwen3_5ForConditionalGeneration", "qwen35", layer_, 1, false, false, 10000000,
     pl_family_hf_qwen35, pl_family_hf_qwen35_text, NULL, pl_family_hf_qwen35_skip},
};

const pl_family pl_family_qwen35 = {
    .name = "qwen35",
    .note = "Qwen3.5 Gated DeltaNet hybrids",
    .model = {.need = PL_FAM_DENSE | PL_FAM_QK_NORM, .rope_neox = true,
              .norm_eps_required = true, .ffn_norm_name = "post_attention_norm",
              .recurrent = true, .need_recurrent = PL_FAM_SSM, .attn_out_gate = true,
              .rope_sections = true, .mtp_ignored = true},
    .hf = hf_, .n_hf = 2,
    .runners = PL_FAMILY_RUNS_CPU,
};
