/* qdot_avx512.c - the Q5_0 and Q5_1 kernels of qdot_k.c on 512-bit
 * registers: two quant blocks per instruction, with VPDPBUSD for the int8
 * products (AVX-512 VNNI, e.g. Ice Lake and later Xeons, AMD Zen 4/5).
 * Q4_K and Q6_K stay on the 256-bit VNNI kernels, which ran faster on Zen 4
 * (0.78-0.97x here with 512-bit versions); Q4_0, Q4_1 and Q8_0 sum in block
 * order (qdot_block_order.c), which ran faster than their 512-bit kernels
 * here (prefill 1.3x), and those were dropped.
 *
 * Bit-identical to the AVX2 kernels, by construction: one chain of block
 * sums in order; two blocks' products come from one VPDPBUSD, then are
 * added to the 8-lane chain one after the other. The fifth bits come from
 * the qh words as a byte mask. VPDPBUSD sums the same four u8 x s8
 * products per lane as VPMADDUBSW + VPMADDWD (no int16 saturation is
 * reachable, see qdot_vnni.c), and the scales are the same scalar products,
 * so every float operation is the AVX2 kernel's, in its order. test_cpu_ops
 * checks this on CPUs that have AVX-512 VNNI and skips elsewhere.
 */
#include "backends/engine/cpu/qdot_avx512.h"

#include "src/base/cpu_features.h"
#include "src/base/le.h"

#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

#include "backends/engine/cpu/simd_x86.h"

#define T512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

bool pl_qdot512_available(void)
{
    const pl_cpu_feature_set *f = pl_cpu_features();
    return pl_cpu_has_avx2() && f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni;
}

T512 static inline __m256 hi8(__m512 v)
{
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

/* Two Q4 blocks' 16 quant bytes (q0, q1) as 64 u8 values in the order of
 * two activation blocks: q0's low nibbles, q0's high, q1's low, q1's high. */
T512 static inline __m512i q4_pair(const uint8_t *q0, const uint8_t *q1)
{
    __m256i t = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)q0)),
        _mm_loadu_si128((const __m128i *)q1), 1);
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(t), _mm256_srli_epi16(t, 4), 1);
    z = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
    return _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
}

/* Activation blocks a[0] and a[1]'s 32 int8 values each. */
T512 static inline __m512i act_pair(const pl_q8_act *a)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a[0].qs)),
                              _mm256_loadu_si256((const __m256i *)a[1].qs), 1);
}

T512 static inline __m512 dot_pair(__m512i u, __m512i s)
{
    return _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s));
}

T512 static inline __m256i q4_one(const uint8_t *q)
{
    __m128i t = _mm_loadu_si128((const __m128i *)q), m = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(t, 4), m), _mm_and_si128(t, m));
}

/* Two Q5 blocks' quants (nibbles, bit 4 from qh) as 64 u8 values in the
 * order of two activation blocks: qh's bit j is lane j, so the two qh words
 * are the byte mask of the 0x10s. */
T512 static inline __m512i q5_pair(const uint8_t *b, const uint8_t *c, size_t qo)
{
    __mmask64 h = (__mmask64)pl_le32(b + qo) | (__mmask64)pl_le32(c + qo) << 32;
    return _mm512_or_si512(q4_pair(b + qo + 4, c + qo + 4),
                           _mm512_maskz_mov_epi8(h, _mm512_set1_epi8(0x10)));
}

/* Up to 4 activation rows against one Q5_0/Q5_1 weight row: as the VNNI
 * rows_q5 (one chain per row, blocks in order), two blocks per VPDPBUSD. */
T512 static inline __attribute__((always_inline)) void
q5_rows(const uint8_t *b, const pl_q8_act *a, size_t as, int nb, int nr, float *out, size_t os,
        int has_m)
{
    __m256 acc[4];
    float off[4] = {0, 0, 0, 0};
    for (int r = 0; r < nr; r++)
        acc[r] = _mm256_setzero_ps();
    size_t bb = has_m ? 24 : 22, qo = has_m ? 4 : 2;
    int i = 0;
    for (; i + 2 <= nb; i += 2, b += 2 * bb) {
        const uint8_t *c = b + bb;
        __m512i q = q5_pair(b, c, qo);
        float d0 = h2f_hw(b), d1 = h2f_hw(c);
        float m0 = has_m ? h2f_hw(b + 2) : -16.0f * d0, m1 = has_m ? h2f_hw(c + 2) : -16.0f * d1;
        for (int r = 0; r < nr; r++) {
            const pl_q8_act *ar = a + (size_t)r * as + i;
            __m512 p = dot_pair(q, act_pair(ar));
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d0 * ar[0].d), _mm512_castps512_ps256(p),
                                     acc[r]);
            off[r] += m0 * ar[0].s;
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d1 * ar[1].d), hi8(p), acc[r]);
            off[r] += m1 * ar[1].s;
        }
    }
    if (i < nb) {
        __m256i q = _mm256_or_si256(
            q4_one(b + qo + 4),
            _mm256_maskz_mov_epi8((__mmask32)pl_le32(b + qo), _mm256_set1_epi8(0x10)));
        float d = h2f_hw(b), m = has_m ? h2f_hw(b + 2) : -16.0f * d;
        for (int r = 0; r < nr; r++) {
            const pl_q8_act *ar = a + (size_t)r * as + i;
            __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q,
                                            _mm256_loadu_si256((const __m256i *)ar->qs));
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * ar->d), _mm256_cvtepi32_ps(p), acc[r]);
            off[r] += m * ar->s;
        }
    }
    for (int r = 0; r < nr; r++)
        out[(size_t)r * os] = hsum8(acc[r]) + off[r];
}

bool pl_qdot512_supported(pl_ggml_type t)
{
    return t == PL_GGML_TYPE_Q5_0 || t == PL_GGML_TYPE_Q5_1;
}

/* The kernels are inlined here with nr a constant where it is 4 or 1, so
 * their accumulators stay in registers (indexed by a variable nr, they
 * live on the stack). */
T512 static inline __attribute__((always_inline)) void
rows_nr(pl_ggml_type t, const uint8_t *w, const pl_q8_act *a, size_t as, int nb, int nr,
        float *out, size_t os)
{
    q5_rows(w, a, as, nb, nr, out, os, t == PL_GGML_TYPE_Q5_1);
}

T512 void pl_qdot512_rows(pl_ggml_type t, const uint8_t *w, const pl_q8_act *a, size_t a_stride,
                          int nb, int nr, float *out, size_t out_stride)
{
    if (nr == 4)
        rows_nr(t, w, a, a_stride, nb, 4, out, out_stride);
    else
        rows_nr(t, w, a, a_stride, nb, nr, out, out_stride);
}

T512 void pl_qdot512_row1(pl_ggml_type t, const uint8_t *w, size_t row_bytes,
                          const pl_q8_act *x, int nb, float *y, int o0, int o1)
{
    for (int o = o0; o < o1; o++)
        rows_nr(t, w + (size_t)o * row_bytes, x, 0, nb, 1, &y[o], 0);
}
#else
bool pl_qdot512_available(void) { return false; }
bool pl_qdot512_supported(pl_ggml_type t) { (void)t; return false; }

void pl_qdot512_row1(pl_ggml_type t, const uint8_t *w, size_t row_bytes, const pl_q8_act *x,
                     int nb, float *y, int o0, int o1)
{
    (void)t, (void)w, (void)row_bytes, (void)x, (void)nb, (void)y, (void)o0, (void)o1;
}

void pl_qdot512_rows(pl_ggml_type t, const uint8_t *w, const pl_q8_act *a, size_t a_stride,
                     int nb, int nr, float *out, size_t out_stride)
{
    (void)t, (void)w, (void)a, (void)a_stride, (void)nb, (void)nr, (void)out, (void)out_stride;
}
#endif
