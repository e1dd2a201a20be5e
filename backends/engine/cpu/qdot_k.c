/* qdot_k.c - dot products of Q5_0, Q5_1, Q4_K, Q5_K and Q6_K weight rows with q8
 * activations (pl_q8_act, 32-element blocks), so that these weights stay
 * packed in memory instead of being dequantised to f32 at load (a Q4_K_M
 * file is mostly Q4_K and Q6_K, with Q5_0 / Q8_0 where a row's width is not
 * a multiple of 256). A scalar reference and an AVX2 version of each; the
 * integer sums are exact in both, only the float accumulation order differs.
 *
 * Layouts (ggml's, see model/quant.c for the dequantisation):
 *   Q5_0: fp16 d, u32 qh, 16 bytes nibbles; x = d * (q - 16)
 *   Q5_1: fp16 d, fp16 m, u32 qh, 16 bytes; x = d * q + m
 *   Q4_K: 256 elements, fp16 d, dmin, 12 bytes of 6-bit scales/mins, 128
 *         bytes of nibbles; sub-block i (32 elements) x = d*sc*q - dmin*mn
 *   Q5_K: as Q4_K, then qh[32] before the 128 bytes of nibbles; bit 4 of
 *         element l of sub-block i is bit i of qh[l]
 *   Q6_K: 256 elements, ql[128], qh[64], int8 scales[16], fp16 d;
 *         x = d * scales[e / 16] * (q - 32)
 * A 32-element K sub-block lines up with one activation block, so with
 * a.s = a.d * sum(a.qs): sum_i x_i a_i = d*sc*a.d*sum(q*aq) - dmin*mn*a.s.
 */
#include "backends/engine/cpu/qdot_k.h"

#include "backends/engine/model/quant.h"
#include "src/base/cpu_features.h"
#include "src/base/half.h"
#include "src/base/le.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "backends/engine/cpu/simd_x86.h"
#define PL_HAVE_X86 1
#endif

static inline float f16(const uint8_t *p) { return pl_fp16_to_fp32(pl_le16(p)); }

int pl_qdot_k_supported(pl_ggml_type t)
{
    return t == PL_GGML_TYPE_Q5_0 || t == PL_GGML_TYPE_Q5_1 || t == PL_GGML_TYPE_Q4_K ||
           t == PL_GGML_TYPE_Q5_K || t == PL_GGML_TYPE_Q6_K;
}

size_t pl_qdot_k_block_bytes(pl_ggml_type t)
{
    switch (t) {
    case PL_GGML_TYPE_Q5_0: return 22;
    case PL_GGML_TYPE_Q5_1: return 24;
    case PL_GGML_TYPE_Q4_K: return 144;
    case PL_GGML_TYPE_Q5_K: return 176;
    case PL_GGML_TYPE_Q6_K: return 210;
    default: return 0;
    }
}

static float ref_q5(const uint8_t *b, const pl_q8_act *a, int nb, int has_m)
{
    float acc = 0.0f;
    size_t bb = has_m ? 24 : 22, qo = has_m ? 4 : 2;
    for (int i = 0; i < nb; i++, b += bb) {
        uint32_t qh = pl_le32(b + qo);
        const uint8_t *qs = b + qo + 4;
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            int lo = (qs[j] & 0xf) | (int)(((qh >> j) & 1) << 4);
            int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            isum += lo * a[i].qs[j] + hi * a[i].qs[j + 16];
        }
        float d = f16(b), m = has_m ? f16(b + 2) : -16.0f * d;
        acc += d * a[i].d * (float)isum + m * a[i].s;
    }
    return acc;
}

static float ref_q4_k(const uint8_t *b, const pl_q8_act *a, int nsb)
{
    float acc = 0.0f;
    for (int s = 0; s < nsb; s++, b += 144, a += 8) {
        float d = f16(b), dmin = f16(b + 2);
        int sc[8], mn[8];
        pl_k4_scales(b + 4, sc, mn);
        for (int i = 0; i < 8; i++) {
            const uint8_t *q = b + 16 + 32 * (i / 2);
            int shift = 4 * (i % 2), isum = 0;
            for (int l = 0; l < 32; l++)
                isum += ((q[l] >> shift) & 0xf) * a[i].qs[l];
            acc += d * (float)sc[i] * a[i].d * (float)isum - dmin * (float)mn[i] * a[i].s;
        }
    }
    return acc;
}

static float ref_q5_k(const uint8_t *b, const pl_q8_act *a, int nsb)
{
    float acc = 0.0f;
    for (int s = 0; s < nsb; s++, b += 176, a += 8) {
        float d = f16(b), dmin = f16(b + 2);
        const uint8_t *qh = b + 16;
        int sc[8], mn[8];
        pl_k4_scales(b + 4, sc, mn);
        for (int i = 0; i < 8; i++) {
            const uint8_t *q = b + 48 + 32 * (i / 2);
            int shift = 4 * (i % 2), isum = 0;
            for (int l = 0; l < 32; l++)
                isum += (((q[l] >> shift) & 0xf) | (((qh[l] >> i) & 1) << 4)) * a[i].qs[l];
            acc += d * (float)sc[i] * a[i].d * (float)isum - dmin * (float)mn[i] * a[i].s;
        }
    }
    return acc;
}

static float ref_q6_k(const uint8_t *b, const pl_q8_act *a, int nsb)
{
    float acc = 0.0f;
    for (int s = 0; s < nsb; s++, b += 210, a += 8) {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = f16(b + 208);
        for (int j = 0; j < 8; j++) {  /* sub-block j: elements 32j .. 32j+31 */
            int h = j / 4, t = j % 4, isum[2] = {0, 0};
            for (int l = 0; l < 32; l++) {
                int lo = (ql[64 * h + 32 * (t % 2) + l] >> (4 * (t / 2))) & 0xf;
                int hi = (qh[32 * h + l] >> (2 * t)) & 3;
                isum[l / 16] += ((lo | (hi << 4)) - 32) * a[j].qs[l];
            }
            acc += d * a[j].d * (float)(sc[2 * j] * isum[0] + sc[2 * j + 1] * isum[1]);
        }
    }
    return acc;
}

float pl_qdot_k_ref(pl_ggml_type t, const void *w, const pl_q8_act *a, int n)
{
    switch (t) {
    case PL_GGML_TYPE_Q5_0: return ref_q5(w, a, n / PL_QK, 0);
    case PL_GGML_TYPE_Q5_1: return ref_q5(w, a, n / PL_QK, 1);
    case PL_GGML_TYPE_Q4_K: return ref_q4_k(w, a, n / 256);
    case PL_GGML_TYPE_Q5_K: return ref_q5_k(w, a, n / 256);
    case PL_GGML_TYPE_Q6_K: return ref_q6_k(w, a, n / 256);
    default: return 0.0f;
    }
}

#ifdef PL_HAVE_X86
#define AVX2 __attribute__((target("avx2,fma,f16c")))

/* u8 x s8 products summed to 8 int32 lanes. */
AVX2 static inline __m256i dot_u8s8_i32(__m256i u, __m256i s)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* Byte k of the result is 0x10 when bit k of the 32-bit qh is set. */
AVX2 static inline __m256i q5_high_bits(uint32_t qh)
{
    __m256i v = _mm256_set1_epi32((int)qh);
    v = _mm256_shuffle_epi8(v, _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                                 0x0101010101010101LL, 0));
    __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

AVX2 static float avx2_q5(const uint8_t *b, const pl_q8_act *a, int nb, int has_m)
{
    __m256 acc = _mm256_setzero_ps();
    float off = 0.0f;
    size_t bb = has_m ? 24 : 22, qo = has_m ? 4 : 2;
    for (int i = 0; i < nb; i++, b += bb) {
        __m128i t = _mm_loadu_si128((const __m128i *)(b + qo + 4)), m4 = _mm_set1_epi8(0x0f);
        __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(t, 4), m4),
                                     _mm_and_si128(t, m4));
        q = _mm256_or_si256(q, q5_high_bits(pl_le32(b + qo)));
        __m256i aq = _mm256_loadu_si256((const __m256i *)a[i].qs);
        float d = h2f_hw(b);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d * a[i].d),
                              _mm256_cvtepi32_ps(dot_u8s8_i32(q, aq)), acc);
        off += (has_m ? h2f_hw(b + 2) : -16.0f * d) * a[i].s;
    }
    return hsum8(acc) + off;
}

/* Sub-blocks 2j and 2j+1 of a Q4_K / Q5_K block (values lo, hi) against
 * activation blocks a0 and a0 + 1: one row's step, in the one order the
 * single- and multi-row kernels share (batch invariance). */
AVX2 static inline void k_pair_acc(__m256i lo, __m256i hi, const pl_q8_act *a0, float d,
                                   float dmin, const int *sc, const int *mn, int j,
                                   __m256 *acc, float *off)
{
    const pl_q8_act *a1 = a0 + 1;
    __m256i p0 = dot_u8s8_i32(lo, _mm256_loadu_si256((const __m256i *)a0->qs));
    __m256i p1 = dot_u8s8_i32(hi, _mm256_loadu_si256((const __m256i *)a1->qs));
    *acc = _mm256_fmadd_ps(_mm256_set1_ps(d * (float)sc[2 * j] * a0->d),
                           _mm256_cvtepi32_ps(p0), *acc);
    *acc = _mm256_fmadd_ps(_mm256_set1_ps(d * (float)sc[2 * j + 1] * a1->d),
                           _mm256_cvtepi32_ps(p1), *acc);
    *off += dmin * (float)mn[2 * j] * a0->s + dmin * (float)mn[2 * j + 1] * a1->s;
}

/* Q5_K's 5-bit values of sub-blocks 2j (lo) and 2j+1 (hi) of block b. */
AVX2 static inline void q5_k_unpack(const uint8_t *b, __m256i qh, int j, __m256i *lo,
                                    __m256i *hi)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    __m256i t = _mm256_loadu_si256((const __m256i *)(b + 48 + 32 * j));
    __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one);
    __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one);
    *lo = _mm256_or_si256(_mm256_and_si256(t, m4), _mm256_slli_epi16(h0, 4));
    *hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(t, 4), m4),
                          _mm256_slli_epi16(h1, 4));
}

/* Q4_K (five = 0) or Q5_K (five = 1): the values of sub-blocks 2j and
 * 2j+1 of block b. */
AVX2 static inline void k45_unpack(const uint8_t *b, int five, int j, __m256i *lo, __m256i *hi)
{
    if (five) {
        q5_k_unpack(b, _mm256_loadu_si256((const __m256i *)(b + 16)), j, lo, hi);
        return;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i t = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * j));
    *lo = _mm256_and_si256(t, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(t, 4), m4);
}

AVX2 static float avx2_k45(const uint8_t *b, int five, const pl_q8_act *a, int nsb)
{
    __m256 acc = _mm256_setzero_ps();
    float off = 0.0f;
    for (int s = 0; s < nsb; s++, b += five ? 176 : 144, a += 8) {
        float d = h2f_hw(b), dmin = h2f_hw(b + 2);
        int sc[8], mn[8];
        pl_k4_scales(b + 4, sc, mn);
        for (int j = 0; j < 4; j++) {
            __m256i lo, hi;
            k45_unpack(b, five, j, &lo, &hi);
            k_pair_acc(lo, hi, &a[2 * j], d, dmin, sc, mn, j, &acc, &off);
        }
    }
    return hsum8(acc) - off;
}

AVX2 static float avx2_q6_k(const uint8_t *b, const pl_q8_act *a, int nsb)
{
    __m256 acc = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
    const __m256i k32 = _mm256_set1_epi8(32);
    for (int s = 0; s < nsb; s++, b += 210, a += 8) {
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = h2f_hw(b + 208);
        for (int h = 0; h < 2; h++) {
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(b + 64 * h));
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
            for (int t = 0; t < 4; t++) {
                int j = 4 * h + t;
                __m256i lq = t % 2 ? l1 : l0;
                __m256i lo = _mm256_and_si256(t / 2 ? _mm256_srli_epi16(lq, 4) : lq, m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * t), m2);
                __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
                __m256i aq = _mm256_loadu_si256((const __m256i *)a[j].qs);
                __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[2 * j + 1]),
                                               _mm_set1_epi16(sc[2 * j]));
                __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, aq),
                                             _mm256_maddubs_epi16(k32, aq));
                __m256i isum = _mm256_madd_epi16(p, scv);
                acc = _mm256_fmadd_ps(_mm256_set1_ps(d * a[j].d), _mm256_cvtepi32_ps(isum), acc);
            }
        }
    }
    return hsum8(acc);
}

/* The multi-row versions below unpack each weight block once for nr <= 4
 * activation rows (a_stride blocks apart) and accumulate every row in
 * exactly the order of the single-row kernel above, so a row's result
 * does not depend on how many rows share the call (batch invariance). */
AVX2 static void rows_q5(const uint8_t *b, const pl_q8_act *a, size_t as, int nb, int has_m,
                         int nr, float *out, size_t os)
{
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    float off[4] = {0, 0, 0, 0};
    size_t bb = has_m ? 24 : 22, qo = has_m ? 4 : 2;
    for (int i = 0; i < nb; i++, b += bb) {
        __m128i t = _mm_loadu_si128((const __m128i *)(b + qo + 4)), m4 = _mm_set1_epi8(0x0f);
        __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(t, 4), m4),
                                     _mm_and_si128(t, m4));
        q = _mm256_or_si256(q, q5_high_bits(pl_le32(b + qo)));
        float d = h2f_hw(b), m = has_m ? h2f_hw(b + 2) : -16.0f * d;
        for (int r = 0; r < nr; r++) {
            const pl_q8_act *ar = a + (size_t)r * as + i;
            __m256i aq = _mm256_loadu_si256((const __m256i *)ar->qs);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * ar->d),
                                     _mm256_cvtepi32_ps(dot_u8s8_i32(q, aq)), acc[r]);
            off[r] += m * ar->s;
        }
    }
    for (int r = 0; r < nr; r++)
        out[(size_t)r * os] = hsum8(acc[r]) + off[r];
}

AVX2 static void rows_k45(const uint8_t *b, int five, const pl_q8_act *a, size_t as, int nsb,
                          int nr, float *out, size_t os)
{
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    float off[4] = {0, 0, 0, 0};
    for (int s = 0; s < nsb; s++, b += five ? 176 : 144) {
        float d = h2f_hw(b), dmin = h2f_hw(b + 2);
        int sc[8], mn[8];
        pl_k4_scales(b + 4, sc, mn);
        for (int j = 0; j < 4; j++) {
            __m256i lo, hi;
            k45_unpack(b, five, j, &lo, &hi);
            for (int r = 0; r < nr; r++)
                k_pair_acc(lo, hi, a + (size_t)r * as + 8 * s + 2 * j, d, dmin, sc, mn, j,
                           &acc[r], &off[r]);
        }
    }
    for (int r = 0; r < nr; r++)
        out[(size_t)r * os] = hsum8(acc[r]) - off[r];
}

AVX2 static void rows_q6_k(const uint8_t *b, const pl_q8_act *a, size_t as, int nsb, int nr,
                           float *out, size_t os)
{
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
    const __m256i k32 = _mm256_set1_epi8(32);
    for (int s = 0; s < nsb; s++, b += 210) {
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = h2f_hw(b + 208);
        for (int h = 0; h < 2; h++) {
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(b + 64 * h));
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
            for (int t = 0; t < 4; t++) {
                int j = 4 * h + t;
                __m256i lq = t % 2 ? l1 : l0;
                __m256i lo = _mm256_and_si256(t / 2 ? _mm256_srli_epi16(lq, 4) : lq, m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * t), m2);
                __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
                __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[2 * j + 1]),
                                               _mm_set1_epi16(sc[2 * j]));
                for (int r = 0; r < nr; r++) {
                    const pl_q8_act *ar = a + (size_t)r * as + 8 * s + j;
                    __m256i aq = _mm256_loadu_si256((const __m256i *)ar->qs);
                    __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, aq),
                                                 _mm256_maddubs_epi16(k32, aq));
                    acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * ar->d),
                                             _mm256_cvtepi32_ps(_mm256_madd_epi16(p, scv)),
                                             acc[r]);
                }
            }
        }
    }
    for (int r = 0; r < nr; r++)
        out[(size_t)r * os] = hsum8(acc[r]);
}

void pl_qdot_k_rows(pl_ggml_type t, const void *w, const pl_q8_act *a, size_t a_stride, int n,
                    int nr, float *out, size_t out_stride)
{
    if (pl_cpu_has_avx2()) {
        switch (t) {
        case PL_GGML_TYPE_Q5_0: rows_q5(w, a, a_stride, n / PL_QK, 0, nr, out, out_stride); return;
        case PL_GGML_TYPE_Q5_1: rows_q5(w, a, a_stride, n / PL_QK, 1, nr, out, out_stride); return;
        case PL_GGML_TYPE_Q4_K: rows_k45(w, 0, a, a_stride, n / 256, nr, out, out_stride); return;
        case PL_GGML_TYPE_Q5_K: rows_k45(w, 1, a, a_stride, n / 256, nr, out, out_stride); return;
        case PL_GGML_TYPE_Q6_K: rows_q6_k(w, a, a_stride, n / 256, nr, out, out_stride); return;
        default: break;
        }
    }
    for (int r = 0; r < nr; r++)
        out[(size_t)r * out_stride] = pl_qdot_k_ref(t, w, a + (size_t)r * a_stride, n);
}

void pl_qdot_k_row1(pl_ggml_type t, const uint8_t *w, size_t row_bytes, const pl_q8_act *a,
                    int n, float *y, int o0, int o1)
{
    if (pl_cpu_has_avx2()) {
        int five = t == PL_GGML_TYPE_Q5_K, has_m = t == PL_GGML_TYPE_Q5_1;
        switch (t) {
        case PL_GGML_TYPE_Q5_0:
        case PL_GGML_TYPE_Q5_1:
            for (int o = o0; o < o1; o++)
                y[o] = avx2_q5(w + (size_t)o * row_bytes, a, n / PL_QK, has_m);
            return;
        case PL_GGML_TYPE_Q4_K:
        case PL_GGML_TYPE_Q5_K:
            for (int o = o0; o < o1; o++)
                y[o] = avx2_k45(w + (size_t)o * row_bytes, five, a, n / 256);
            return;
        case PL_GGML_TYPE_Q6_K:
            for (int o = o0; o < o1; o++)
                y[o] = avx2_q6_k(w + (size_t)o * row_bytes, a, n / 256);
            return;
        default: break;
        }
    }
    for (int o = o0; o < o1; o++)
        y[o] = pl_qdot_k_ref(t, w + (size_t)o * row_bytes, a, n);
}

#else

void pl_qdot_k_row1(pl_ggml_type t, const uint8_t *w, size_t row_bytes, const pl_q8_act *a,
                    int n, float *y, int o0, int o1)
{
    for (int o = o0; o < o1; o++)
        y[o] = pl_qdot_k_ref(t, w + (size_t)o * row_bytes, a, n);
}

void pl_qdot_k_rows(pl_ggml_type t, const void *w, const pl_q8_act *a, size_t a_stride, int n,
                    int nr, float *out, size_t out_stride)
{
    for (int r = 0; r < nr; r++)
        out[(size_t)r * out_stride] = pl_qdot_k_ref(t, w, a + (size_t)r * a_stride, n);
}
#endif

/* One row: the decode loop's dispatch, so the two cannot disagree. */
float pl_qdot_k(pl_ggml_type t, const void *w, const pl_q8_act *a, int n)
{
    float y;
    pl_qdot_k_row1(t, w, 0, a, n, &y, 0, 1);
    return y;
}
