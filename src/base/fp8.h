/* fp8.h - OCP FP8 E4M3 ("e4m3fn", the format of vLLM's and FlashInfer's
 * fp8 KV caches) <-> float: the host side of the CUDA runner's fp8 KV
 * cache (tests, references). 1 sign bit, 4 exponent bits (bias 7), 3
 * mantissa bits; no infinities; S.1111.111 is NaN; largest finite 448,
 * smallest subnormal 2^-9.
 *
 * float -> e4m3 rounds to nearest even and saturates to +-448 (NaN stays
 * NaN), as the GPU's cvt.rn.satfinite.e4m3x2.f32 and cuda_fp8.h's
 * __NV_SATFINITE conversion do. Header-only plain C that also compiles as
 * C++ (nvcc).
 */
#ifndef PL_BASE_FP8_H
#define PL_BASE_FP8_H

#include <math.h>
#include <stdint.h>

#define PL_E4M3_MAX 448.0f

/** e4m3 -> float, exact for every code. */
static inline float pl_e4m3_to_fp32(uint8_t c)
{
    int e = (c >> 3) & 0xf, m = c & 7;
    float v;
    if (e == 0xf && m == 7)
        v = NAN;
    else if (e == 0)
        v = ldexpf((float)m, -9);
    else
        v = ldexpf((float)(8 + m), e - 10);
    return (c & 0x80) ? -v : v;
}

/** float -> e4m3, round to nearest even, saturating to +-448. */
static inline uint8_t pl_fp32_to_e4m3(float f)
{
    uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (isnan(f))
        return (uint8_t)(sign | 0x7f);
    if (a >= PL_E4M3_MAX)
        return (uint8_t)(sign | 0x7e);
    if (a < 0.015625f)           /* subnormal (or zero): steps of 2^-9; 8 steps reach 2^-6 */
        return (uint8_t)(sign | (uint8_t)rintf(ldexpf(a, 9)));
    int e;
    frexpf(a, &e);               /* a = frac * 2^e, frac in [0.5, 1) */
    e -= 1;                      /* a = 1.m * 2^e, e >= -6 */
    /* normal: q in [8, 16] steps of 2^(e-3); 16 carries into the exponent */
    int q = (int)rintf(ldexpf(a, 3 - e));
    return (uint8_t)(sign | (((e + 7) << 3) + (q - 8)));
}

#endif
