/* hf_config.h - the config.json keys every family shares, in every layout
 * transformers writes them:
 *   - RoPE: transformers 5's rope_parameters block (rope_theta, rope_type,
 *     its factors, partial_rotary_factor), per layer type
 *     ({"full_attention": {...}, "sliding_attention": {...}}) or one for
 *     all; and the older top-level rope_theta, rope_scaling and
 *     partial_rotary_factor. Where both layouts give a value and they
 *     disagree, an error names both keys.
 *   - layer_types: which layers slide, checked against what the GGUF model
 *     will do;
 *   - hidden_act / hidden_activation against the family's activation;
 *   - dtype / torch_dtype;
 *   - and, last, every key of the config that holds a value, was not read
 *     and is not known to leave the numbers alone: an error naming it,
 *     never a silent default.
 *
 * Used by hf_arch.c (pl_hf_arch_hparams) only.
 */
#ifndef PL_HF_CONFIG_H
#define PL_HF_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/engine/model/gguf_synth.h"
#include "backends/formats/hf_json.h"

/** The RoPE of the full-attention layers, as GGUF metadata wants it. */
typedef struct pl_hf_rope {
    double theta;                /**< rope_theta */
    char type[16];               /**< GGUF rope.scaling.type: none, linear, llama3, yarn */
    double factor;               /**< scaling factor (1: none) */
    double low_freq_factor, high_freq_factor; /**< llama3 */
    double attn_factor;          /**< yarn: attention_factor / (0.1 ln factor + 1) */
    int orig_ctx;                /**< original_max_position_embeddings */
    bool yarn_exact;             /**< yarn: truncate false (the ramp's ends not rounded) */
    double partial;              /**< partial_rotary_factor (1: the whole head) */
    bool has_swa;                /**< a sliding_attention block was given */
    double theta_swa;            /**< its rope_theta */
    double partial_swa;          /**< its partial_rotary_factor */
    /** The full layers' rope_type is "proportional" (Gemma 4): the first
     *  partial x head_dim / 2 pairs rotate at base^(-2i / head_dim), the
     *  rest not at all; the sliding layers may then rotate another part. */
    bool proportional;
    /** yarn: llama_4_scaling_beta, the queries' temperature (Ministral 3;
     *  0: none) */
    double llama4_beta;
} pl_hf_rope;

/**
 * Read the RoPE keys of c (see above) into *r: default_theta when no
 * rope_theta is given anywhere, n_ctx the model's max_position_embeddings
 * (original_max_position_embeddings' default). Refuses, naming the key, a
 * rope_type parley does not apply (dynamic, longrope, proportional, ...), a
 * key of the block its type does not have, and two layouts that disagree.
 * Returns 0 or -1.
 */
int pl_hf_config_rope(const pl_hf_json *c, double default_theta, int n_ctx, pl_hf_rope *r,
                      char *err, size_t errlen);

/**
 * The sliding layers' RoPE base: rope_parameters.sliding_attention (which
 * must be unscaled) or the older rope_local_base_freq; dflt when neither is
 * given; both given and different: an error naming both. Returns 0 or -1.
 */
int pl_hf_config_swa_theta(const pl_hf_json *c, double dflt, double *out, char *err,
                           size_t errlen);

/**
 * The checks after the family has written its metadata into s (gguf_arch
 * its general.architecture; rope the result of pl_hf_config_rope):
 * layer_types against the sliding window and pattern in s; a sliding
 * RoPE base the family did not write; the activation; dtype against
 * torch_dtype; then every unread key. Returns 0 or -1.
 */
int pl_hf_config_finish(const pl_hf_json *c, const char *gguf_arch, const pl_hf_rope *rope,
                        pl_gguf_synth *s, char *err, size_t errlen);

/**
 * The checkpoint's declared precision: dtype (transformers 5) or
 * torch_dtype ("bfloat16", "float16", "float32"), or NULL when neither is
 * given. Borrowed from c.
 */
const char *pl_hf_config_dtype(const pl_hf_json *c);

#endif
