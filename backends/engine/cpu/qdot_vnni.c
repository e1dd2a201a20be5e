/* qdot_vnni.c - the dot kernels of qdot_k.c (Q5_0, Q5_1, Q4_K, Q6_K) with
 * the int8 dot product instruction VPDPBUSD: AVX-VNNI (VEX, e.g.
 * Alder Lake and later) and AVX-512 VNNI on 256-bit registers (AVX512-VL,
 * e.g. Cascade Lake and later Xeons). Compiled with target attributes and
 * chosen at run time from the one cpuid probe (src/base/cpu_features.h).
 *
 * VPDPBUSD sums four u8 x s8 products into an int32 lane, where AVX2 needs
 * VPMADDUBSW (pairs to int16) then VPMADDWD. The operands never reach the
 * int16 saturation of VPMADDUBSW (at most 2 * 128 * 127), so the integer
 * sums are the same, and each kernel accumulates its floats in the order
 * of its AVX2 twin: results are bit-identical to the AVX2 path, which is
 * what test_cpu_ops checks on CPUs that have these instructions (the tests
 * skip elsewhere). The body is written once, below, and instantiated per
 * instruction set.
 */
#include "backends/engine/cpu/qdot_vnni.h"

#include "backends/engine/model/quant.h"
#include "src/base/cpu_features.h"
#include "src/base/le.h"

#include <string.h>

int pl_qdot_vnni_supported(pl_ggml_type t)
{
    return t == PL_GGML_TYPE_Q5_0 || t == PL_GGML_TYPE_Q5_1 || t == PL_GGML_TYPE_Q4_K ||
           t == PL_GGML_TYPE_Q6_K;
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define VNNI_BODY(SFX, TARGET, DPBUSD)                                                           \
    TARGET static inline float h2f_##SFX(const uint8_t *p)                                      \
    {                                                                                            \
        uint16_t h;                                                                              \
        memcpy(&h, p, 2);                                                                        \
        return _cvtsh_ss(h);                                                                     \
    }                                                                                            \
    TARGET static inline float hsum8_##SFX(__m256 v)                                             \
    {                                                                                            \
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));           \
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));                                                  \
        s = _mm_add_ss(s, _mm_movehdup_ps(s));                                                   \
        return _mm_cvtss_f32(s);                                                                 \
    }                                                                                            \
    TARGET static inline __m256i dot_##SFX(__m256i u, __m256i s)                                 \
    {                                                                                            \
        return DPBUSD(_mm256_setzero_si256(), u, s);                                             \
    }                                                                                            \
    TARGET static inline __m256i nib_##SFX(const uint8_t *qs)                                    \
    {                                                                                            \
        __m128i t = _mm_loadu_si128((const __m128i *)qs), m = _mm_set1_epi8(0x0f);              \
        return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(t, 4), m), _mm_and_si128(t, m));    \
    }                                                                                            \
    /* Up to 4 activation rows (as blocks apart) against one weight row, each   \
     * row in its single-row kernel's order (as qdot_k.c's rows_* on AVX2). */ \
    TARGET static inline __attribute__((always_inline)) void                                     \
    rows_q5_##SFX(const uint8_t *b, const pl_q8_act *a, size_t as, int nb,                       \
                  int has_m, int nr, float *out, size_t os)                                      \
    {                                                                                            \
        __m256 acc[4];                                                                           \
        float off[4] = {0, 0, 0, 0};                                                             \
        for (int r = 0; r < nr; r++)                                                             \
            acc[r] = _mm256_setzero_ps();                                                        \
        size_t bb = has_m ? 24 : 22, qo = has_m ? 4 : 2;                                         \
        const __m256i sh = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,         \
                                             0x0101010101010101LL, 0);                           \
        const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);                \
        for (int i = 0; i < nb; i++, b += bb) {                                                  \
            __m256i h = _mm256_shuffle_epi8(_mm256_set1_epi32((int)pl_le32(b + qo)), sh);         \
            h = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit),              \
                                 _mm256_set1_epi8(0x10));                                        \
            __m256i q = _mm256_or_si256(nib_##SFX(b + qo + 4), h);                               \
            float d = h2f_##SFX(b), m = has_m ? h2f_##SFX(b + 2) : -16.0f * d;                   \
            for (int r = 0; r < nr; r++) {                                                       \
                const pl_q8_act *ar = a + (size_t)r * as + i;                                    \
                __m256i aq = _mm256_loadu_si256((const __m256i *)ar->qs);                        \
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * ar->d),                              \
                                         _mm256_cvtepi32_ps(dot_##SFX(q, aq)), acc[r]);          \
                off[r] += m * ar->s;                                                             \
            }                                                                                    \
        }                                                                                        \
        for (int r = 0; r < nr; r++)                                                             \
            out[(size_t)r * os] = hsum8_##SFX(acc[r]) + off[r];                                  \
    }                                                                                            \
    TARGET static inline __attribute__((always_inline)) void                                     \
    rows_q4k_##SFX(const uint8_t *b, const pl_q8_act *a, size_t as, int nsb,                     \
                   int nr, float *out, size_t os)                                                \
    {                                                                                            \
        __m256 acc[4];                                                                           \
        float off[4] = {0, 0, 0, 0};                                                             \
        for (int r = 0; r < nr; r++)                                                             \
            acc[r] = _mm256_setzero_ps();                                                        \
        const __m256i m4 = _mm256_set1_epi8(0x0f);                                               \
        for (int s = 0; s < nsb; s++, b += 144) {                                                \
            float d = h2f_##SFX(b), dmin = h2f_##SFX(b + 2);                                     \
            int sc[8], mn[8];                                                                    \
            pl_k4_scales(b + 4, sc, mn);                                                         \
            for (int j = 0; j < 4; j++) {                                                        \
                __m256i t = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * j));              \
                __m256i lo = _mm256_and_si256(t, m4);                                            \
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(t, 4), m4);                      \
                for (int r = 0; r < nr; r++) {                                                   \
                    const pl_q8_act *a0 = a + (size_t)r * as + 8 * s + 2 * j, *a1 = a0 + 1;      \
                    __m256i p0 = dot_##SFX(lo, _mm256_loadu_si256((const __m256i *)a0->qs));     \
                    __m256i p1 = dot_##SFX(hi, _mm256_loadu_si256((const __m256i *)a1->qs));     \
                    acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * (float)sc[2 * j] * a0->d),       \
                                             _mm256_cvtepi32_ps(p0), acc[r]);                    \
                    acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * (float)sc[2 * j + 1] * a1->d),   \
                                             _mm256_cvtepi32_ps(p1), acc[r]);                    \
                    off[r] += dmin * (float)mn[2 * j] * a0->s +                                  \
                              dmin * (float)mn[2 * j + 1] * a1->s;                               \
                }                                                                                \
            }                                                                                    \
        }                                                                                        \
        for (int r = 0; r < nr; r++)                                                             \
            out[(size_t)r * os] = hsum8_##SFX(acc[r]) - off[r];                                  \
    }                                                                                            \
    TARGET static inline __attribute__((always_inline)) void                                     \
    rows_q6k_##SFX(const uint8_t *b, const pl_q8_act *a, size_t as, int nsb,                     \
                   int nr, float *out, size_t os)                                                \
    {                                                                                            \
        __m256 acc[4];                                                                           \
        for (int r = 0; r < nr; r++)                                                             \
            acc[r] = _mm256_setzero_ps();                                                        \
        const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);                     \
        const __m256i k32 = _mm256_set1_epi8(32);                                                \
        for (int s = 0; s < nsb; s++, b += 210) {                                                \
            const int8_t *sc = (const int8_t *)(b + 192);                                        \
            float d = h2f_##SFX(b + 208);                                                        \
            for (int h = 0; h < 2; h++) {                                                        \
                __m256i l0 = _mm256_loadu_si256((const __m256i *)(b + 64 * h));                  \
                __m256i l1 = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));             \
                __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));            \
                for (int t = 0; t < 4; t++) {                                                    \
                    int j = 4 * h + t;                                                           \
                    __m256i lq = t % 2 ? l1 : l0;                                                \
                    __m256i lo = _mm256_and_si256(t / 2 ? _mm256_srli_epi16(lq, 4) : lq, m4);   \
                    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * t), m2);             \
                    __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));                   \
                    __m256i scv = _mm256_set_m128i(_mm_set1_epi32(sc[2 * j + 1]),                \
                                                   _mm_set1_epi32(sc[2 * j]));                   \
                    for (int r = 0; r < nr; r++) {                                               \
                        const pl_q8_act *ar = a + (size_t)r * as + 8 * s + j;                    \
                        __m256i aq = _mm256_loadu_si256((const __m256i *)ar->qs);                \
                        __m256i p = _mm256_sub_epi32(dot_##SFX(q, aq), dot_##SFX(k32, aq));      \
                        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * ar->d),                      \
                                                 _mm256_cvtepi32_ps(_mm256_mullo_epi32(p, scv)), \
                                                 acc[r]);                                        \
                    }                                                                            \
                }                                                                                \
            }                                                                                    \
        }                                                                                        \
        for (int r = 0; r < nr; r++)                                                             \
            out[(size_t)r * os] = hsum8_##SFX(acc[r]);                                           \
    }                                                                                            \
    /* The single-row kernels: the bodies above with one row (inlined, so    \
     * the row loops vanish); the multi-row ones with nr a constant where it   \
     * is 4, so the accumulators stay in registers. */                         \
    TARGET static float q5_##SFX(const uint8_t *b, const pl_q8_act *a, int nb, int has_m)        \
    {                                                                                            \
        float r;                                                                                 \
        rows_q5_##SFX(b, a, 0, nb, has_m, 1, &r, 0);                                             \
        return r;                                                                                \
    }                                                                                            \
    TARGET static float q4k_##SFX(const uint8_t *b, const pl_q8_act *a, int nsb)                 \
    {                                                                                            \
        float r;                                                                                 \
        rows_q4k_##SFX(b, a, 0, nsb, 1, &r, 0);                                                  \
        return r;                                                                                \
    }                                                                                            \
    TARGET static float q6k_##SFX(const uint8_t *b, const pl_q8_act *a, int nsb)                 \
    {                                                                                            \
        float r;                                                                                 \
        rows_q6k_##SFX(b, a, 0, nsb, 1, &r, 0);                                                  \
        return r;                                                                                \
    }                                                                                            \
    TARGET static int rows_##SFX(pl_ggml_type t, const void *w, const pl_q8_act *a, size_t as,   \
                                 int n, int nr, float *out, size_t os)                           \
    {                                                                                            \
        int four = nr == 4;                                                                      \
        switch (t) {                                                                             \
        case PL_GGML_TYPE_Q5_0:                                                                  \
        case PL_GGML_TYPE_Q5_1: {                                                                \
            int m = t == PL_GGML_TYPE_Q5_1;                                                      \
            if (four)                                                                            \
                rows_q5_##SFX(w, a, as, n / PL_QK, m, 4, out, os);                               \
            else                                                                                 \
                rows_q5_##SFX(w, a, as, n / PL_QK, m, nr, out, os);                              \
            return 1;                                                                            \
        }                                                                                        \
        case PL_GGML_TYPE_Q4_K:                                                                  \
            if (four)                                                                            \
                rows_q4k_##SFX(w, a, as, n / 256, 4, out, os);                                   \
            else                                                                                 \
                rows_q4k_##SFX(w, a, as, n / 256, nr, out, os);                                  \
            return 1;                                                                            \
        case PL_GGML_TYPE_Q6_K:                                                                  \
            if (four)                                                                            \
                rows_q6k_##SFX(w, a, as, n / 256, 4, out, os);                                   \
            else                                                                                 \
                rows_q6k_##SFX(w, a, as, n / 256, nr, out, os);                                  \
            return 1;                                                                            \
        default: return 0;                                                                       \
        }                                                                                        \
    }                                                                                            \
    static int kernel_##SFX(pl_ggml_type t, const void *w, const pl_q8_act *a, int n, float *out)\
    {                                                                                            \
        switch (t) {                                                                             \
        case PL_GGML_TYPE_Q5_0: *out = q5_##SFX(w, a, n / PL_QK, 0); return 1;                   \
        case PL_GGML_TYPE_Q5_1: *out = q5_##SFX(w, a, n / PL_QK, 1); return 1;                   \
        case PL_GGML_TYPE_Q4_K: *out = q4k_##SFX(w, a, n / 256); return 1;                       \
        case PL_GGML_TYPE_Q6_K: *out = q6k_##SFX(w, a, n / 256); return 1;                       \
        default: return 0;                                                                       \
        }                                                                                        \
    }

VNNI_BODY(avxvnni, __attribute__((target("avx2,fma,f16c,avxvnni"))), _mm256_dpbusd_avx_epi32)
VNNI_BODY(avx512vnni,
          __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"))),
          _mm256_dpbusd_epi32)

/* The same body with VPDPBUSD emulated by AVX2 (exact here: no int16
 * saturation, see above), so that the bodies' logic is tested on any AVX2
 * CPU; only the instruction itself needs VNNI hardware. */
__attribute__((target("avx2,fma,f16c"))) static inline __m256i
dpbusd_emulated(__m256i acc, __m256i u, __m256i s)
{
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s),
                                                   _mm256_set1_epi16(1)));
}

VNNI_BODY(emulated, __attribute__((target("avx2,fma,f16c"))), dpbusd_emulated)

int pl_qdot_vnni_emulated(pl_ggml_type t, const void *w, const pl_q8_act *a, int n, float *out)
{
    return pl_cpu_has_avx2() ? kernel_emulated(t, w, a, n, out) : 0;
}

int pl_qdot_vnni_rows_emulated(pl_ggml_type t, const void *w, const pl_q8_act *a,
                               size_t a_stride, int n, int nr, float *out, size_t out_stride)
{
    return pl_cpu_has_avx2() ? rows_emulated(t, w, a, a_stride, n, nr, out, out_stride) : 0;
}

int pl_qdot_vnni_rows(pl_vnni_level lv, pl_ggml_type t, const void *w, const pl_q8_act *a,
                      size_t a_stride, int n, int nr, float *out, size_t out_stride)
{
    if (lv == PL_VNNI_AVX512)
        return rows_avx512vnni(t, w, a, a_stride, n, nr, out, out_stride);
    if (lv == PL_VNNI_AVX)
        return rows_avxvnni(t, w, a, a_stride, n, nr, out, out_stride);
    return 0;
}

pl_vnni_level pl_qdot_vnni_level(void)
{
    const pl_cpu_feature_set *f = pl_cpu_features();
    if (!pl_cpu_has_avx2())
        return PL_VNNI_NONE;
    if (f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni)
        return PL_VNNI_AVX512;
    return f->avxvnni ? PL_VNNI_AVX : PL_VNNI_NONE;
}

int pl_qdot_vnni(pl_vnni_level lv, pl_ggml_type t, const void *w, const pl_q8_act *a, int n,
                 float *out)
{
    if (lv == PL_VNNI_AVX512)
        return kernel_avx512vnni(t, w, a, n, out);
    if (lv == PL_VNNI_AVX)
        return kernel_avxvnni(t, w, a, n, out);
    return 0;
}
#else
pl_vnni_level pl_qdot_vnni_level(void) { return PL_VNNI_NONE; }

int pl_qdot_vnni_rows_emulated(pl_ggml_type t, const void *w, const pl_q8_act *a,
                               size_t a_stride, int n, int nr, float *out, size_t out_stride)
{
    (void)t, (void)w, (void)a, (void)a_stride, (void)n, (void)nr, (void)out, (void)out_stride;
    return 0;
}

int pl_qdot_vnni_rows(pl_vnni_level lv, pl_ggml_type t, const void *w, const pl_q8_act *a,
                      size_t a_stride, int n, int nr, float *out, size_t out_stride)
{
    (void)lv, (void)t, (void)w, (void)a, (void)a_stride, (void)n, (void)nr, (void)out,
        (void)out_stride;
    return 0;
}

int pl_qdot_vnni_emulated(pl_ggml_type t, const void *w, const pl_q8_act *a, int n, float *out)
{
    (void)t, (void)w, (void)a, (void)n, (void)out;
    return 0;
}

int pl_qdot_vnni(pl_vnni_level lv, pl_ggml_type t, const void *w, const pl_q8_act *a, int n,
                 float *out)
{
    (void)lv, (void)t, (void)w, (void)a, (void)n, (void)out;
    return 0;
}
#endif
