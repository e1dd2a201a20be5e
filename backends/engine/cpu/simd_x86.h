/* simd_x86.h - the two small AVX2 helpers every x86 kernel file uses:
 * a half from memory to float (F16C: the 256 KiB table would compete with
 * the weights for cache) and the horizontal sum of 8 floats, always in the
 * same order (the kernels' bit-identity depends on it). Include only
 * inside an x86 guard; a caller compiled for a superset (AVX-512) may
 * inline them.
 */
#ifndef PL_CPU_SIMD_X86_H
#define PL_CPU_SIMD_X86_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

__attribute__((target("avx2,fma,f16c"))) static inline float h2f_hw(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

__attribute__((target("avx2,fma,f16c"))) static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#endif
