/* hf_arch.h - the Hugging Face architectures parley reads: config.json's
 * `architectures` name -> the GGUF architecture, config.json's keys -> GGUF
 * metadata (the keys llama.cpp's converter writes, which the model loader
 * reads), and every tensor's Hugging Face name -> its GGUF name, expected
 * shape and layout change.
 *
 * Used by hf_model.c only. The shared keys and the global tensors are here
 * (hf_arch.c); each architecture (struct pl_hf_arch, families/family.h) is
 * a row of its family's file in backends/engine/families/: its layer
 * tensors, its norm shift, and a function for its own config.json keys.
 *
 * Experts (qwen3moe, gpt-oss): the checkpoint holds them one 2-D tensor
 * per expert ("...mlp.experts.%d.gate_proj.weight", PL_HF_T_EXPERTS) or
 * all in one 3-D tensor (PL_HF_T_FUSED: transformers' gpt-oss layout,
 * [n_expert, in, out] with gate and up interleaved along out;
 * PL_HF_T_STACKED: Gemma 4's [n_expert, out, in]); either way
 * they become one GGUF tensor of n_expert matrices, ne = {cols, rows,
 * n_expert}, as llama.cpp's converter stacks them.
 */
#ifndef PL_HF_ARCH_H
#define PL_HF_ARCH_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/engine/model/gguf_synth.h"
#include "backends/formats/hf_json.h"

/** A dimension of a tensor's expected shape, from config.json. */
typedef enum pl_hf_dim {
    PL_HF_DIM_NONE = 0,          /**< (a vector has one dimension) */
    PL_HF_DIM_HIDDEN,            /**< hidden_size */
    PL_HF_DIM_FF,                /**< intermediate_size */
    PL_HF_DIM_VOCAB,             /**< vocab_size */
    PL_HF_DIM_Q,                 /**< num_attention_heads * head_dim */
    PL_HF_DIM_KV,                /**< num_key_value_heads * head_dim */
    PL_HF_DIM_HEAD,              /**< head_dim */
    PL_HF_DIM_HEADS,             /**< num_attention_heads (gpt-oss's sinks) */
    PL_HF_DIM_EXPERTS,           /**< the experts per layer */
    PL_HF_DIM_FF_EXP,            /**< an expert's feed-forward width */
    PL_HF_DIM_POS,               /**< max_position_embeddings (an encoder's
                                      absolute positions) */
    PL_HF_DIM_TYPES,             /**< type_vocab_size (token types) */
    PL_HF_DIM_Q_GATE,            /**< 2 x num_attention_heads x head_dim (Qwen3.5's
                                      query with its output gate) */
    PL_HF_DIM_SSM_CONV,          /**< a Gated DeltaNet conv's channels: 2 n_k d + n_v d */
    PL_HF_DIM_SSM_INNER,         /**< linear_num_value_heads x linear_value_head_dim */
    PL_HF_DIM_SSM_V,             /**< linear_num_value_heads */
    PL_HF_DIM_SSM_HEAD,          /**< linear_value_head_dim (= the key heads') */
    PL_HF_DIM_SSM_KERNEL,        /**< linear_conv_kernel_dim */
    PL_HF_DIM_FF_SHEXP,          /**< shared_expert_intermediate_size */
    PL_HF_DIM_PLE,               /**< hidden_size_per_layer_input (Gemma 4) */
    PL_HF_DIM_PLE_ALL,           /**< num_hidden_layers x hidden_size_per_layer_input */
    PL_HF_DIM_ONE,               /**< 1 (a layer's scalar) */
    PL_HF_DIM_FF_EXP2,           /**< 2 x an expert's width (gate then up, Gemma 4) */
} pl_hf_dim;

enum {
    PL_HF_T_OPTIONAL = 1,        /**< may be absent */
    PL_HF_T_PERMUTE_Q = 2,       /**< rows: rotate-half -> interleaved, per q head */
    PL_HF_T_PERMUTE_K = 4,       /**< rows: rotate-half -> interleaved, per kv head */
    PL_HF_T_NORM = 8,            /**< an RMSNorm weight (+ the arch's norm_shift) */
    PL_HF_T_BIAS = 16,           /**< only when the model has q/k/v biases */
    /** One [d0, d1] tensor per expert: hf has a second %d, the expert. */
    PL_HF_T_EXPERTS = 32,
    /** Every expert in one tensor [n_expert, d1, d0], each stored (in, out):
     *  the transpose of the GGUF matrix. */
    PL_HF_T_FUSED = 64,
    /** The stored last dimension interleaves two tensors (twice its size);
     *  this one is its even entries (PL_HF_T_ODD: its odd ones). */
    PL_HF_T_EVEN = 128,
    PL_HF_T_ODD = 256,
    PL_HF_T_F32 = 512,           /**< a matrix kept in f32 (per-expert biases) */
    /** Only in the recurrent layers (PL_HF_T_ATTN_ONLY: only in the others);
     *  pl_hf_shape.recurrent says which. */
    PL_HF_T_RECURRENT = 1024,
    PL_HF_T_ATTN_ONLY = 2048,
    PL_HF_T_NEG_EXP = 4096,      /**< stored as -exp(x) (A_log -> ssm_a) */
    /** Stored [d0, 1, d1] (a depthwise Conv1d's kernel): read as [d0, d1]. */
    PL_HF_T_SQUEEZE = 8192,
    /** The value heads (linear_num_value_heads, each its width wide) move
     *  from Hugging Face's order, grouped by key head, to llama.cpp's tiled
     *  one (value head h reads key head h % n_k): along the rows, which
     *  for the qkv projection and the conv start after the 2 n_k d q/k
     *  rows, or along the columns (PL_HF_T_VHEADS_COLS: ssm_out). */
    PL_HF_T_VHEADS = 16384,
    PL_HF_T_VHEADS_COLS = 32768,
    /** A vector [d0] stored as a one-output Linear [1, d0] (Qwen3.5 MoE's
     *  shared-expert gate). */
    PL_HF_T_COLUMN = 1 << 16,
    /** Every expert in one tensor [n_expert, d0, d1], each stored (out, in)
     *  as the GGUF matrix (Gemma 4's experts). */
    PL_HF_T_STACKED = 1 << 18,
};

/** One tensor: "model.layers.%d.<...>" (per layer) or a global name. */
typedef struct pl_hf_tmap {
    const char *hf;
    const char *gguf;            /**< "blk.%d.<...>" or a global name */
    pl_hf_dim d0, d1;            /**< HF shape [d0] or [d0, d1] (rows, cols) */
    unsigned flags;
} pl_hf_tmap;

/** What config.json says about the shapes, after pl_hf_arch_hparams. */
typedef struct pl_hf_shape {
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab;
    int n_pos, n_types;          /**< an encoder's position and token-type
                                      rows (its family's hparams set them) */
    bool tied;                   /**< the output head is the embedding */
    bool bias;                   /**< q/k/v projections have biases */
    int n_expert, n_ff_exp;      /**< experts per layer and their width; 0: dense */
    int n_ff_shexp;              /**< the shared expert's width; 0: none */
    /** Gated DeltaNet hybrids (their family's hparams set them): key and
     *  value heads, a head's width, the conv's kernel; 0 without. */
    int ssm_n_k, ssm_n_v, ssm_d, ssm_kernel;
    uint64_t recurrent[64];      /**< bit l: layer l is recurrent (l < 4096) */
    /** Gemma 4 (its family's hparams set them): the global layers' head
     *  size and K/V heads (0: the sliding ones' head_dim, n_head_kv), bit
     *  l of `global` where layer l is one, the first layer reading
     *  earlier K/V, the per-layer embeddings' width; double_wide
     *  (use_double_wide_mlp, E2B): from first_shared on the MLPs are
     *  2 n_ff wide. */
    int head_dim_full, n_head_kv_full, first_shared, n_ple;
    uint64_t global[64];
    bool double_wide;
} pl_hf_shape;

/** Whether layer l of sh is recurrent. */
static inline bool pl_hf_shape_recurrent(const pl_hf_shape *sh, int l)
{
    return l >= 0 && l < 4096 && (sh->recurrent[l / 64] >> (l % 64) & 1);
}

typedef struct pl_hf_arch pl_hf_arch;

/** The entry for config.json's architectures[0] among the families', or
 *  NULL. */
const pl_hf_arch *pl_hf_arch_find(const char *name);
/** The names the families read, comma separated (from the family
 *  registry; a per-thread buffer). */
const char *pl_hf_arch_names(void);
const char *pl_hf_arch_gguf(const pl_hf_arch *a);
/** A composite (vision + text) model's text_config defaults, or NULL for a
 *  text model. Its text keys are read under text_config, its text tensors
 *  are found under language_model. (or model.language_model.), and its
 *  vision tensors are left alone. */
const pl_hf_default *pl_hf_arch_text_config(const pl_hf_arch *a);
/** Added to RMSNorm weights (Gemma's norms scale by 1 + w). */
float pl_hf_arch_norm_shift(const pl_hf_arch *a);
/** Whether checkpoint tensor name is one the architecture drops (an
 *  encoder's pooler head and position_ids buffer, as llama.cpp's converter
 *  drops them). */
bool pl_hf_arch_skips(const pl_hf_arch *a, const char *name);
/** The per-layer and global tensor tables, each ending with hf == NULL. */
const pl_hf_tmap *pl_hf_arch_layer_tensors(const pl_hf_arch *a);
const pl_hf_tmap *pl_hf_arch_global_tensors(const pl_hf_arch *a);

/**
 * Read config.json (cfg) into *sh and write the GGUF metadata into s
 * (general.architecture, <arch>.*). Refuses, naming the key, a value out of
 * range or a feature the GGUF model would not honour (an unsupported rope
 * scaling, a sliding window parley cannot apply, ...). Returns 0 or -1.
 */
int pl_hf_arch_hparams(const pl_hf_arch *a, const pl_hf_json *cfg, pl_hf_shape *sh,
                       pl_gguf_synth *s, char *err, size_t errlen);

/** The size of dimension d for a model of shape sh; _at: in layer l (-1: a
 *  global tensor), whose kind may have its own head sizes. */
int pl_hf_dim_size(const pl_hf_shape *sh, pl_hf_dim d);
int pl_hf_dim_size_at(const pl_hf_shape *sh, int l, pl_hf_dim d);
/** How config.json names d in messages ("hidden_size", ...). */
const char *pl_hf_dim_name(pl_hf_dim d);

#endif
