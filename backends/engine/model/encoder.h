/* encoder.h - an encoder model (a family whose pl_arch says `encoder`:
 * bert) loaded from GGUF for embeddings: hyperparameters from metadata as
 * llama.cpp's converter writes them, every weight dequantised to f32 (the
 * encoders served here are small; the forward pass is GEMMs over whole
 * texts, cpu/encode.h). A checkpoint folder arrives here as the GGUF
 * hf_model.c builds from it, under the same names.
 *
 * The formula is the bert family's (families/bert.c): post-LayerNorm
 * blocks, bidirectional attention with biases, an ungated GELU (erf) FFN.
 */
#ifndef PL_ENCODER_H
#define PL_ENCODER_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/formats/gguf.h"

struct pl_family;

/** How token rows become one vector (llama.cpp's pooling_type values). */
typedef enum pl_pooling {
    PL_POOLING_NONE = 0,         /**< not given: the model's default (mean) */
    PL_POOLING_MEAN = 1,
    PL_POOLING_CLS = 2,          /**< the first row */
    PL_POOLING_LAST = 3,         /**< the last row */
} pl_pooling;

/** "mean", "cls", "last" -> *out: 0, or -1 for any other name. */
int pl_pooling_from_name(const char *name, pl_pooling *out);
const char *pl_pooling_name(pl_pooling p);

typedef struct pl_enc_layer {
    float *wq, *wk, *wv;         /**< (n_embd, n_embd) */
    float *bq, *bk, *bv;         /**< (n_embd) */
    float *wo, *bo;              /**< (n_embd, n_embd), (n_embd) */
    float *attn_norm_w, *attn_norm_b; /**< (n_embd) LayerNorm after attention */
    float *w_up, *b_up;          /**< (n_ff, n_embd), (n_ff) */
    float *w_down, *b_down;      /**< (n_embd, n_ff), (n_embd) */
    float *out_norm_w, *out_norm_b;   /**< (n_embd) LayerNorm after the FFN */
} pl_enc_layer;

typedef struct pl_encoder {
    const struct pl_family *family;
    int n_layer, n_embd, n_head, head_dim, n_ff, n_vocab;
    int n_pos;                   /**< position_embd rows: the longest text */
    int n_types;                 /**< token_types rows */
    float eps;                   /**< LayerNorm epsilon */
    pl_pooling pooling;          /**< the file's pooling_type, or NONE */
    float *tok_embd;             /**< (n_vocab, n_embd) */
    float *pos_embd;             /**< (n_pos, n_embd) */
    float *type_embd;            /**< (n_types, n_embd) */
    float *embd_norm_w, *embd_norm_b; /**< (n_embd) */
    pl_enc_layer *layers;        /**< (n_layer) */
} pl_encoder;

/** Whether g's general.architecture is an encoder family's. */
bool pl_encoder_is(const pl_gguf *g);

/** Load from g (read during the call; nothing is borrowed). Returns NULL
 *  with one line in err naming the key or tensor at fault: a missing or
 *  mistyped key, a feature not implemented (causal attention), a missing,
 *  misshaped, non-finite or unused tensor. Free with pl_encoder_free. */
pl_encoder *pl_encoder_load(const pl_gguf *g, char *err, size_t errlen);
void pl_encoder_free(pl_encoder *m);

#endif
