/* quant.h - scalar conversions and row dequantisation for the ggml tensor
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

/** IEEE half -> float, exact for every input (subnormals, inf, NaN). */
static inline float pl_fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {                     /* subnormal: renormalise */
        exp = 113;
        while (!(man & 0x400u)) {
            man <<= 1;
            exp--;
        }
        bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/** bfloat16 -> float (the top half of a float's bits). */
static inline float pl_bf16_to_fp32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/** Dequantise n elements of type t from src (packed blocks, any alignment)
 *  into dst. n must be a multiple of the type's block size. Returns 0, or
 *  -1 when the type is unsupported or n is not a whole number of blocks. */
int pl_dequant_row(pl_ggml_type t, const void *src, float *dst, int64_t n);

#endif
