/* half.h - IEEE half (fp16) and bfloat16 <-> float conversion: the one copy
 * used by the model loader (quant), the CPU kernels (qdot) and the CUDA
 * runner's host side (weight upload, kernel tests).
 *
 * Header-only and plain C that also compiles as C++ (nvcc), so every layer
 * and the .cu files can include it. Exact in both directions where the
 * target can represent the value; float -> half/bf16 rounds to nearest
 * even, NaN stays a (quiet) NaN.
 */
#ifndef PL_BASE_HALF_H
#define PL_BASE_HALF_H

#include <stdint.h>
#include <string.h>

static inline float pl_bits_to_f32_(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/** IEEE half -> float, exact for every input (subnormals, inf, NaN). */
static inline float pl_fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f)
        return pl_bits_to_f32_(sign | 0x7f800000u | (man << 13));
    if (exp != 0)
        return pl_bits_to_f32_(sign | ((exp + 112u) << 23) | (man << 13));
    if (man == 0)
        return pl_bits_to_f32_(sign);
    exp = 113;                   /* subnormal: renormalise */
    while (!(man & 0x400u)) {
        man <<= 1;
        exp--;
    }
    return pl_bits_to_f32_(sign | (exp << 23) | ((man & 0x3ffu) << 13));
}

/** float -> IEEE half, round to nearest even; overflow gives inf. */
static inline uint16_t pl_fp32_to_fp16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    int32_t exp = (int32_t)((x >> 23) & 0xffu) - 127 + 15;
    uint32_t man = x & 0x7fffffu;
    if (((x >> 23) & 0xffu) == 0xffu)
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0u));
    if (exp >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (exp <= 0) {              /* half subnormal (or zero) */
        if (exp < -10)
            return (uint16_t)sign;
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t h = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1u)))
            h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)exp << 10) | (man >> 13), rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++;                     /* a carry into the exponent is right */
    return (uint16_t)(sign | h);
}

/** bfloat16 -> float (the top half of a float's bits). */
static inline float pl_bf16_to_fp32(uint16_t h)
{
    return pl_bits_to_f32_((uint32_t)h << 16);
}

/** float -> bfloat16, round to nearest even; NaN stays a quiet NaN. */
static inline uint16_t pl_fp32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#endif
