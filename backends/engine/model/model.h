/* model.h - a decoder-only transformer loaded from GGUF for the runners:
 * hyperparameters from metadata, weights borrowed from the mapping, and f32
 * copies for the batched (BLAS) path.
 *
 * Architectures: llama (Llama 2/3, SmolLM2, TinyLlama, Mistral) and qwen2
 * (q/k/v biases, NEOX rope). Weights are (rows = output features,
 * cols = input features), ne[0] = cols contiguous, as GGUF stores them.
 */
#ifndef PL_MODEL_H
#define PL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/engine/model/gguf.h"

typedef enum pl_model_arch {
    PL_MODEL_ARCH_LLAMA = 0,
    PL_MODEL_ARCH_QWEN2,
} pl_model_arch;

/** One weight matrix. */
typedef struct pl_weight {
    pl_ggml_type type;
    int rows, cols;
    size_t row_bytes;
    const void *q;               /**< (rows, cols) of type, borrowed from the GGUF */
    float *f32;                  /**< (rows, cols) dequantised, owned; NULL when
                                      not kept (see pl_model_opts) */
} pl_weight;

typedef struct pl_layer {
    float *attn_norm;            /**< (n_embd) */
    pl_weight wq;                /**< (n_head*head_dim, n_embd) */
    pl_weight wk, wv;            /**< (n_head_kv*head_dim, n_embd) */
    float *bq, *bk, *bv;         /**< qwen2 biases, else NULL */
    pl_weight wo;                /**< (n_embd, n_head*head_dim) */
    float *ffn_norm;             /**< (n_embd) */
    pl_weight w_gate, w_up;      /**< (n_ff, n_embd) */
    pl_weight w_down;            /**< (n_embd, n_ff) */
} pl_layer;

typedef struct pl_model {
    pl_model_arch arch;
    char arch_name[32];
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab;
    int n_ctx_train;             /**< context length from metadata */
    int n_rot;                   /**< rotated dims per head */
    bool rope_neox;
    float rope_base, rms_eps;
    float *rope_inv_freq;        /**< (n_rot/2), scaling applied */
    int32_t bos_id, eos_id;      /**< -1 when absent */
    pl_weight tok_embd;          /**< (n_vocab, n_embd) */
    pl_weight output;            /**< (n_vocab, n_embd); equals tok_embd when tied */
    bool tied;
    float *output_norm;          /**< (n_embd) */
    pl_layer *layers;            /**< (n_layer) */
} pl_model;

/** Whether a runner reads tensors of type t packed (no f32 copy needed). */
typedef int (*pl_keep_packed_fn)(pl_ggml_type t);

/** Every type packed: for runners that convert weights themselves (the CUDA
 *  runner dequantises to bf16 on upload, weights_host.c). */
int pl_keep_packed_all(pl_ggml_type t);

typedef struct pl_model_opts {
    bool keep_f32;               /**< dequantise matrices to f32 for the GEMM path */
    /** When !keep_f32: nonzero for the types the runner's kernels read
     *  packed, which then get no f32 copy. NULL: every type gets one. */
    pl_keep_packed_fn keep_packed;
} pl_model_opts;

/** Load from an opened GGUF (borrowed: must outlive the model). opts may be
 *  NULL (keep_f32 = true). Returns NULL with a message naming the
 *  unsupported architecture, tensor type or mismatched shape. */
pl_model *pl_model_load(const pl_gguf *g, const pl_model_opts *opts,
                        char *err, size_t errlen);
void pl_model_free(pl_model *m);

/** Compute rope inverse frequencies: base^(-2i/n_rot), then llama3-style or
 *  linear scaling (type "llama3"/"linear"/"none"), then divided by
 *  factors[i] when factors is non-NULL. out has n_rot/2 entries. */
void pl_model_rope_freqs(float *out, int n_rot, float base, const char *scaling,
                         float factor, float low_ff, float high_ff, int orig_ctx,
                         const float *factors);

#endif
