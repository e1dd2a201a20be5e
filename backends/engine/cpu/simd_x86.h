/* simd_x86.h - the small AVX2 helpers the x86 kernel files share: a half
 * from memory to float (F16C: the 256 KiB table would compete with the
 * weights for cache), the horizontal sum of 8 floats, always in the same
 * order (the kernels' bit-identity depends on it), a row's max (the
 * sampler's and the softmax's), e^x on 8 lanes (the recurrent layers'
 * gates, the sampler's softmax), the 8 x 8 dword transpose by which the
 * GEMMs hold 8 weight rows side by side, and the prefetch of a coming
 * 8-row group for the kernels that read 8 rows at once. Include only
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

/* The largest of x[0..n) and init (max is exact: any order gives it). */
__attribute__((target("avx2"))) static inline float row_max_avx2(const float *x, int n,
                                                                  float init)
{
    __m256 m0 = _mm256_set1_ps(init), m1 = m0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
        m1 = _mm256_max_ps(m1, _mm256_loadu_ps(x + i + 8));
    }
    float v[8], mx = init;
    _mm256_storeu_ps(v, _mm256_max_ps(m0, m1));
    for (int k = 0; k < 8; k++)
        mx = v[k] > mx ? v[k] : mx;
    for (; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    return mx;
}

/* out[l] lane r = dword l of v[r]. */
__attribute__((target("avx2"))) static inline void transpose8(const __m256i *v, __m256i *out)
{
    __m256i t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        out[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
        out[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
    }
}

/* e^x on 8 lanes: x = n ln2 + r, |r| <= ln2/2, e^r by Cephes' degree-6
 * polynomial, 2^n into the exponent; x clamped to where floats hold it
 * (so e^-inf is 1.2e-38, not 0). Within 2 ulp of expf. */
__attribute__((target("avx2,fma"))) static inline __m256 exp256(__m256 x)
{
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n),
                                                   _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* Eight rows read side by side are eight interleaved streams, which the
 * hardware prefetchers follow badly once the weights come from memory
 * (Q8_0 ran at a third of the row-by-row speed on a 30 MB matrix, Q4_K at
 * 0.4x on 1024 x 512 experts). The 8-row group `ahead` groups on is one
 * contiguous span: step asks for it in order, a slice per block (n_it of
 * them) of this group. */
typedef struct prefetch_span {
    uintptr_t p, end;            /* addresses as integers: the last group's */
    size_t step;                 /* span lies past the matrix (prefetches of */
} prefetch_span;                 /* it are harmless; pointers there are not) */

static inline prefetch_span prefetch_init(const uint8_t *w, size_t row_bytes, int n_it,
                                          int ahead)
{
    size_t span = 8 * row_bytes, step = (span / (size_t)n_it + 64) & ~(size_t)63;
    uintptr_t p = (uintptr_t)w + (size_t)ahead * span;
    return (prefetch_span){p, p + span, step};
}

/* The next step's lines, into L1 or (l2) into L2 only. */
static inline void prefetch_step(prefetch_span *ps, int l2)
{
    uintptr_t e = ps->p + ps->step < ps->end ? ps->p + ps->step : ps->end;
    for (; ps->p < e; ps->p += 64)
        if (l2)
            _mm_prefetch((const char *)ps->p, _MM_HINT_T1);
        else
            _mm_prefetch((const char *)ps->p, _MM_HINT_T0);
}

#endif
