/* hf_weights.h - Hugging Face tensors into ggml-typed rows: f32, f16,
 * bf16 and FP8 (e4m3, e5m2) with their scales, permuted and shifted as the
 * architecture asks (hf_arch.h), then quantised (quantize.h), on a few
 * threads.
 *
 * FP8 scales multiply (w = q * s) and come per tensor (shape [] or [1]),
 * per output channel ([rows] or [rows, 1]) or per block
 * ([ceil(rows / br), ceil(cols / bc)], the block from quantization_config's
 * weight_block_size); compressed-tensors' weight_scale and the fp8 method's
 * weight_scale / weight_scale_inv are all of these.
 */
#ifndef PL_HF_WEIGHTS_H
#define PL_HF_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/formats/gguf.h"
#include "backends/formats/safetensors.h"

typedef struct pl_hf_conv {
    const pl_st_tensor *src;     /**< a vector [cols] or a matrix [rows, cols] */
    const pl_st_tensor *scale;   /**< FP8 scales, or NULL */
    int block_rows, block_cols;  /**< the scale blocks' size (block scales) */
    int permute_heads;           /**< > 0: rows rotate-half -> interleaved, per head */
    float shift;                 /**< added to every element (Gemma's norms) */
    bool neg_exp;                /**< write -exp(x) (A_log as llama.cpp stores it) */
    /** Value heads reordered (hf_arch.h's PL_HF_T_VHEADS): vh_n_k > 0 moves
     *  the rows from vh_start on (vh_cols: the columns) from grouped by key
     *  head, [k][j][i], to tiled, [j][k][i]: vh_n_k key heads, vh_per_k
     *  value heads each, vh_width elements a head. */
    int vh_n_k, vh_per_k, vh_width, vh_start;
    bool vh_cols;
    pl_ggml_type type;           /**< what to write */
    void *dst;                   /**< rows * row bytes of type, owned by the caller */
    int rows, cols;
    /** Where the matrix lies in src (one expert of a fused tensor, one half
     *  of an interleaved one): element (r, c) is src element offset +
     *  r * row_step + c * col_step. 0 steps: cols and 1 (src is the
     *  matrix, row-major). */
    uint64_t offset, row_step, col_step;
} pl_hf_conv;

/** Whether a tensor of this dtype can be converted (f32, f16, bf16, f64,
 *  F8_E4M3, F8_E5M2). */
bool pl_hf_dtype_supported(pl_st_dtype t);

/** Check that c's matrix lies within c->src, that c->scale fits it (per
 *  tensor, per channel or per block), and that scales are only given to
 *  FP8 weights. Returns 0, or -1 with a message naming the tensor. */
int pl_hf_conv_check(const pl_hf_conv *c, char *err, size_t errlen);

/** Bytes of c->rows rows of c->type (c->cols elements each). */
size_t pl_hf_conv_bytes(const pl_hf_conv *c);

/** Run every conversion on up to `threads` threads (0: the cores).
 *  Returns 0, or -1 with a message naming the tensor (a non-finite value,
 *  out of memory). */
int pl_hf_convert_all(pl_hf_conv *c, int n, int threads, char *err, size_t errlen);

/** One row, for tests: element j of source row r as a float, scaled. */
float pl_hf_conv_value(const pl_hf_conv *c, int r, int j);

#endif
