/* qdot_k_gemv.c - the decode GEMV of Q4_K and Q5_K weights
 * (qdot_k_gemv.h): four weight rows against one activation row at a time.
 *
 * The single-row kernels (qdot_k.c, qdot_vnni.c) spend most of a
 * super-block on scalar work: unpacking the 6-bit scales and mins, one
 * float product per sub-block for its factor d * sc * a.d and two for its
 * min term, each broadcast to a vector; and their one accumulator is a
 * chain of 8 dependent multiply-adds per super-block. Here:
 *   - the activation's per-block a.d and a.s are taken out of the blocks
 *     once per call, into arrays;
 *   - a row's 8 factors of a super-block are one vector product (the same
 *     float products as the scalar ones, so the same bits), each sub-block
 *     picks its lane by a permute; the 8 min products likewise, added to
 *     the row's min term pair by pair in the single-row kernel's order;
 *   - four rows run side by side, so four independent chains fill the
 *     multiply-add latency, and the activation's quants are loaded once
 *     for the four; the next four rows are prefetched meanwhile (four
 *     short streams are more than the hardware prefetchers follow).
 * Every row gets the single-row kernel's float operations in its order
 * (the integer dots are exact whichever instruction forms them), so its
 * value is that kernel's bit for bit on every ISA path and batch size
 * (test_cpu_kquant_gemv.c). Rows past the last group of four, and rows
 * wider than GV_MAX_BLK activation blocks, stay on the single-row kernels.
 * On Zen 4, one thread: Q4_K 1.5-1.6x the single-row kernel's speed, Q5_K
 * 1.5x. Q6_K stays there: the same scheme for it (2 and 4 rows, scales as
 * int16 pairs) ran no faster, within this machine's noise.
 */
#include "backends/engine/cpu/qdot_k_gemv.h"

#include "src/base/cpu_features.h"
#include "src/base/le.h"

#include <string.h>

#define GV_MAX_BLK 1024          /* 32,768 inputs: 8 KB of arrays on the stack */

int pl_qdot_k_gemv_supported(pl_ggml_type t)
{
    return t == PL_GGML_TYPE_Q4_K || t == PL_GGML_TYPE_Q5_K;
}

#if defined(__x86_64__)
#include <immintrin.h>

#include "backends/engine/cpu/simd_x86.h"

/* The activation's blocks, taken apart once per call. */
typedef struct gv_act {
    _Alignas(32) float d[GV_MAX_BLK];
    _Alignas(32) float s[GV_MAX_BLK];
} gv_act;

/* Four rows read side by side are four short streams, which the hardware
 * prefetchers follow badly once the weights come from memory (without
 * this the GEMV ran at 0.7-0.8x the single-row kernel's speed on a 75 MB
 * matrix and on a mixture's experts). At super-block s each row asks for
 * its super-block GV_AHEAD further on, in the next group of four rows once
 * past the end of these (addresses as integers: the last group's next one
 * lies past the matrix, where prefetches are harmless and pointers are
 * not). */
#define GV_AHEAD 8

static inline void gv_prefetch(uintptr_t w, size_t rb, size_t bb, int nsb, int s)
{
    int t = s + GV_AHEAD;
    w += (size_t)(t / nsb) * 4 * rb;
    t %= nsb;
    for (int r = 0; r < 4; r++) {
        uintptr_t p = w + (size_t)r * rb + (size_t)t * bb;
        for (uintptr_t q = p & ~(uintptr_t)63; q < p + bb; q += 64)
            _mm_prefetch((const char *)q, _MM_HINT_T0);
    }
}

/* The 6-bit scales (sc) and mins (mn) of a Q4_K / Q5_K super-block as 8
 * bytes each: pl_k4_scales on 32-bit words. */
static inline void k4_scales8(const uint8_t *s, uint64_t *sc, uint64_t *mn)
{
    uint32_t u0 = pl_le32(s), u1 = pl_le32(s + 4), u2 = pl_le32(s + 8);
    uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
    uint32_t mn_hi = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
    *sc = (uint64_t)(u0 & 0x3f3f3f3fu) | (uint64_t)sc_hi << 32;
    *mn = (uint64_t)(u1 & 0x3f3f3f3fu) | (uint64_t)mn_hi << 32;
}

#define GV_BODY(SFX, TARGET, DPBUSD)                                                             \
    TARGET static inline __m256i gv_dot_##SFX(__m256i u, __m256i s)                              \
    {                                                                                            \
        return DPBUSD(_mm256_setzero_si256(), u, s);                                             \
    }                                                                                            \
    TARGET static void gv_prep_##SFX(const pl_q8_act *a, int nb, gv_act *p)                     \
    {                                                                                            \
        for (int i = 0; i < nb; i++) {                                                           \
            p->d[i] = a[i].d;                                                                    \
            p->s[i] = a[i].s;                                                                    \
        }                                                                                        \
    }                                                                                            \
    /* Q4_K (five 0) or Q5_K (five 1): sub-blocks 2j and 2j+1 of the      \
     * super-block at b (values lo, hi). */                                    \
    TARGET static inline __attribute__((always_inline)) void                                     \
    gv_k45_unpack_##SFX(const uint8_t *b, int five, int j, __m256i *lo, __m256i *hi)             \
    {                                                                                            \
        const __m256i m4 = _mm256_set1_epi8(0x0f);                                               \
        __m256i t = _mm256_loadu_si256((const __m256i *)(b + (five ? 48 : 16) + 32 * j));        \
        *lo = _mm256_and_si256(t, m4);                                                           \
        *hi = _mm256_and_si256(_mm256_srli_epi16(t, 4), m4);                                     \
        if (five) {                                                                              \
            const __m256i one = _mm256_set1_epi8(1);                                             \
            __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 16));                          \
            __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one);                    \
            __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one);                \
            *lo = _mm256_or_si256(*lo, _mm256_slli_epi16(h0, 4));                                \
            *hi = _mm256_or_si256(*hi, _mm256_slli_epi16(h1, 4));                                \
        }                                                                                        \
    }                                                                                            \
    /* Rows w[0..3] (row_bytes apart) of Q4_K / Q5_K against the activation \
     * (blocks a, arrays p): y[0..3]. Per row and sub-block i the lanes get  \
     * fmadd(d * sc[i] * a_i.d, dot), then off += (dmin * mn[2j] * a.s) +   \
     * (dmin * mn[2j+1] * a.s) per pair j, as avx2_k45 / q4k_* do. */         \
    TARGET static inline __attribute__((always_inline)) void                                     \
    gv_k45_##SFX(const uint8_t *w, size_t rb, int five, const pl_q8_act *a,                      \
                 const gv_act *p, int nsb, float *y)                                             \
    {                                                                                            \
        __m256 acc[4];                                                                           \
        float off[4];                                                                            \
        for (int r = 0; r < 4; r++) {                                                            \
            acc[r] = _mm256_setzero_ps();                                                        \
            off[r] = 0.0f;                                                                       \
        }                                                                                        \
        size_t bb = five ? 176 : 144;                                                            \
        for (int s = 0; s < nsb; s++) {                                                          \
            __m256 f[4];                                                                         \
            gv_prefetch((uintptr_t)w, rb, bb, nsb, s);                                           \
            __m256 ad = _mm256_load_ps(p->d + 8 * s), as = _mm256_load_ps(p->s + 8 * s);         \
            for (int r = 0; r < 4; r++) {                                                        \
                const uint8_t *b = w + (size_t)r * rb + (size_t)s * bb;                          \
                uint64_t sc, mn;                                                                 \
                k4_scales8(b + 4, &sc, &mn);                                                     \
                __m256 scf = _mm256_cvtepi32_ps(                                                 \
                    _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc)));                     \
                __m256 mnf = _mm256_cvtepi32_ps(                                                 \
                    _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mn)));                     \
                f[r] = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(h2f_hw(b)), scf), ad);         \
                __m256 m = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(h2f_hw(b + 2)), mnf), as); \
                m = _mm256_add_ps(m, _mm256_permute_ps(m, 0xb1)); /* pairs in lanes 0,2,4,6 */  \
                __m128 lo = _mm256_castps256_ps128(m), hi = _mm256_extractf128_ps(m, 1);         \
                float o = off[r];                                                                \
                o += _mm_cvtss_f32(lo);                                                          \
                o += _mm_cvtss_f32(_mm_movehl_ps(lo, lo));                                       \
                o += _mm_cvtss_f32(hi);                                                          \
                o += _mm_cvtss_f32(_mm_movehl_ps(hi, hi));                                       \
                off[r] = o;                                                                      \
            }                                                                                    \
            const pl_q8_act *as8 = a + 8 * s;                                                    \
            for (int j = 0; j < 4; j++) {                                                        \
                __m256i a0 = _mm256_loadu_si256((const __m256i *)as8[2 * j].qs);                 \
                __m256i a1 = _mm256_loadu_si256((const __m256i *)as8[2 * j + 1].qs);             \
                __m256i i0 = _mm256_set1_epi32(2 * j), i1 = _mm256_set1_epi32(2 * j + 1);        \
                for (int r = 0; r < 4; r++) {                                                    \
                    __m256i lo, hi;                                                              \
                    gv_k45_unpack_##SFX(w + (size_t)r * rb + (size_t)s * bb, five, j, &lo, &hi); \
                    acc[r] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(f[r], i0),                 \
                                             _mm256_cvtepi32_ps(gv_dot_##SFX(lo, a0)), acc[r]);  \
                    acc[r] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(f[r], i1),                 \
                                             _mm256_cvtepi32_ps(gv_dot_##SFX(hi, a1)), acc[r]);  \
                }                                                                                \
            }                                                                                    \
        }                                                                                        \
        for (int r = 0; r < 4; r++)                                                              \
            y[r] = hsum8(acc[r]) - off[r];                                                       \
    }                                                                                            \
    TARGET static int gv_run_##SFX(pl_ggml_type t, const uint8_t *w, size_t rb,                  \
                                   const pl_q8_act *a, int nb, float *y, int o0, int o1)         \
    {                                                                                            \
        _Alignas(32) gv_act p;                                                                   \
        int five = t == PL_GGML_TYPE_Q5_K, o = o0;                                               \
        gv_prep_##SFX(a, nb, &p);                                                                \
        for (; o + 4 <= o1; o += 4) {                                                            \
            const uint8_t *wo = w + (size_t)o * rb;                                              \
            if (five)                                                                            \
                gv_k45_##SFX(wo, rb, 1, a, &p, nb / 8, y + o);                                   \
            else                                                                                 \
                gv_k45_##SFX(wo, rb, 0, a, &p, nb / 8, y + o);                                   \
        }                                                                                        \
        return o - o0;                                                                           \
    }

/* AVX2's int8 dot (exact here: no int16 saturation is reachable, see
 * qdot_vnni.c), then the two VNNI encodings of VPDPBUSD. */
__attribute__((target("avx2,fma,f16c"))) static inline __m256i
gv_dpbusd_avx2(__m256i acc, __m256i u, __m256i s)
{
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s),
                                                   _mm256_set1_epi16(1)));
}

GV_BODY(avx2, __attribute__((target("avx2,fma,f16c"))), gv_dpbusd_avx2)
GV_BODY(avxvnni, __attribute__((target("avx2,fma,f16c,avxvnni"))), _mm256_dpbusd_avx_epi32)
GV_BODY(avx512vnni,
        __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"))),
        _mm256_dpbusd_epi32)

int pl_qdot_k_gemv(pl_vnni_level lv, pl_ggml_type t, const uint8_t *w, size_t row_bytes,
                   const pl_q8_act *a, int n_blk, float *y, int o0, int o1)
{
    if (!pl_cpu_has_avx2() || !pl_qdot_k_gemv_supported(t) || n_blk % 8 || n_blk > GV_MAX_BLK ||
        o1 - o0 < 4)
        return 0;
    if (lv == PL_VNNI_AVX512)
        return gv_run_avx512vnni(t, w, row_bytes, a, n_blk, y, o0, o1);
    if (lv == PL_VNNI_AVX)
        return gv_run_avxvnni(t, w, row_bytes, a, n_blk, y, o0, o1);
    return gv_run_avx2(t, w, row_bytes, a, n_blk, y, o0, o1);
}

#else

int pl_qdot_k_gemv(pl_vnni_level lv, pl_ggml_type t, const uint8_t *w, size_t row_bytes,
                   const pl_q8_act *a, int n_blk, float *y, int o0, int o1)
{
    (void)lv, (void)t, (void)w, (void)row_bytes, (void)a, (void)n_blk, (void)y, (void)o0,
        (void)o1;
    return 0;
}
#endif
