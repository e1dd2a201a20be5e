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

#include "backends/formats/gguf.h"
#include "src/base/half.h"   /* pl_fp16_to_fp32, pl_bf16_to_fp32 (one copy) */

/** Dequantise n elements of type t from src (packed blocks, any alignment)
 *  into dst. n must be a multiple of the type's block size. Returns 0, or
 *  -1 when the type is unsupported or n is not a whole number of blocks. */
int pl_dequant_row(pl_ggml_type t, const void *src, float *dst, int64_t n);

/** The eight 6-bit scales and mins of Q4_K / Q5_K, packed in 12 bytes:
 *  sub-blocks 0..3 use the low 6 bits of bytes 0..3 (scale) and 4..7 (min);
 *  sub-blocks 4..7 take their low 4 bits from the nibbles of bytes 8..11 and
 *  their high 2 bits from the top bits of bytes 0..3 (scale) / 4..7 (min).
 *  Shared by the dequantiser and the CPU dot kernels. */
static inline void pl_k4_scales(const uint8_t *s, int *sc, int *mn)
{
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0xf) | ((s[j] >> 6) << 4);
        mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
    }
}

/** MXFP4's 16 FP4 (E2M1) values, doubled to integers (ggml's kvalues_mxfp4):
 *  element x = pl_e8m0_half(e) * pl_mxfp4_values[nibble]. */
extern const int8_t pl_mxfp4_values[16];

/** Half the E8M0 scale 2^(e - 127), exactly, as a float: 2^(e - 128)
 *  (subnormal for e < 2). MXFP4's block scale, paired with the doubled
 *  values above. */
static inline float pl_e8m0_half(uint8_t e)
{
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

#endif
