/* quantize.h - float rows into the ggml tensor types, for models that are
 * quantised at load (Hugging Face checkpoints on the CPU runner).
 *
 * Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 follow ggml's reference quantisers
 * (quantize_row_*_ref) and give the same bytes; Q4_K and Q6_K pick each
 * sub-block's scale (and min) by a small search for the least weighted
 * squared error, as ggml's do; F32, F16 and BF16 round to nearest even.
 * quant.h's pl_dequant_row is the inverse.
 */
#ifndef PL_QUANTIZE_H
#define PL_QUANTIZE_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/formats/gguf.h"

/** Whether pl_quantize_row writes type t. */
bool pl_quantize_supported(pl_ggml_type t);

/** Quantise n floats (a multiple of t's block size) into dst (row bytes
 *  of t for n elements). Returns 0, or -1 for an unsupported type or a
 *  partial block. */
int pl_quantize_row(pl_ggml_type t, const float *src, void *dst, int64_t n);

/** A weight type by its lowercase name ("q8_0", "q4_k", "bf16", ...), or
 *  -1. pl_quantize_type_names lists the names accepted. */
int pl_quantize_type_parse(const char *name);
const char *pl_quantize_type_names(void);

#endif
