/* quant.h - row dequantisation for the ggml tensor
 * types that GGUF files carry (F32, F16, BF16, Q4_0 .. Q8_0, the K-quants).
 *
 * These are the plain C references: the CPU runner may use faster fused
 * kernels, and those are tested against these.
 */
#ifndef PL_QUANT_H
#define PL_QUANT_H

#include <stdint.h>
#include <string.h>

#include "backends/engine/model/gguf.h"
#include "src/base/half.h"   /* pl_fp16_to_fp32, pl_bf16_to_fp32 (one copy) */

/** Dequantise n elements of type t from src (packed blocks, any alignment)
 *  into dst. n must be a multiple of the type's block size. Returns 0, or
 *  -1 when the type is unsupported or n is not a whole number of blocks. */
int pl_dequant_row(pl_ggml_type t, const void *src, float *dst, int64_t n);

#endif
