/* qdot_k_repack.c - the prefill GEMM of Q4_K, Q5_K and Q6_K weights
 * (qdot_k_repack.h): 8 weight rows at a time, repacked into a scratch once
 * per call and used against every activation row; and the decode GEMV,
 * the same chains for one activation row with the 8 rows transposed in
 * registers straight from the file's layout (KG_BODY below).
 *
 * The lane-wise kernels (qdot_k.c, qdot_vnni.c) keep, per (weight row,
 * activation row), 8 float lanes: lane l sums, sub-block after sub-block,
 * the int32 dot of elements 4l..4l+3 scaled by the sub-block's float
 * factor; the row's value is then a fixed horizontal sum of the lanes
 * (hsum8), minus Q4_K/Q5_K's min term. Each lane is one scalar chain, so
 * the chains may sit in any register lane as long as each sees the same
 * operations in the same order. Here register l holds lane l of 8 weight
 * rows (lane r: row r): the 8 rows' quants of elements 4l..4l+3 are one
 * 32-byte vector, dotted with the activation's 4 bytes broadcast, and the
 * factors (d * sc, then * a.d) are 8 rows' products at once. The float
 * operations per chain are the lane-wise kernels' own, so every ISA path
 * and every batch size gives each row the single-row kernel's value bit
 * for bit (test_cpu_kquant_repack.c), while the unpacking and the scale
 * arithmetic are shared by all activation rows and 8 weight rows.
 *
 * The repacked group lives in a scratch on the stack (no second copy of
 * the weights: test_cpu_kquant bounds the process at 1.2x the file); rows
 * wider than KR_MAX_SB super-blocks, and the rows of a slice that do not
 * fill a group, stay on the lane-wise kernels.
 */
#include "backends/engine/cpu/qdot_k_repack.h"

#include "backends/engine/model/quant.h"
#include "src/base/cpu_features.h"

#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

#include "backends/engine/cpu/simd_x86.h"
#define PL_HAVE_X86 1
#endif

#define KR_MAX_SB 64             /* 16384 elements: 160 KB of scratch */
#ifndef KR_TWO
#define KR_TWO 1
#endif

int pl_qdot_k_gemm_supported(pl_ggml_type t)
{
    return t == PL_GGML_TYPE_Q4_K || t == PL_GGML_TYPE_Q5_K || t == PL_GGML_TYPE_Q6_K;
}

#ifdef PL_HAVE_X86
#define T2 __attribute__((target("avx2,fma,f16c")))

/* One 8-row group, repacked: q[s][j][l] holds element 4l..4l+3 of
 * sub-block j of super-block s for rows 0..7 (dword r: row r); fa/fb the
 * per-row factors: Q4_K/Q5_K d*sc[j] and dmin*mn[j] ([s][j][r]), Q6_K the
 * 16 scales as int16 pairs (fa as int32 [s][16][r]) and d ([s][r] in fb). */
typedef struct kr_group {
    __m256i q[KR_MAX_SB][8][8];
    float fa[KR_MAX_SB][16][8];
    float fb[KR_MAX_SB][8][8];
} kr_group;

/* Sub-block values (32 bytes, element e in byte e) of one Q4_K / Q5_K
 * super-block b into v[j], its factors into fa/fb column r. */
T2 static inline void unpack_k45(const uint8_t *b, int five, __m256i *v, float (*fa)[8],
                                 float (*fb)[8], int r)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    float d = h2f_hw(b), dmin = h2f_hw(b + 2);
    int sc[8], mn[8];
    pl_k4_scales(b + 4, sc, mn);
    for (int j = 0; j < 8; j++) {
        fa[j][r] = d * (float)sc[j];
        fb[j][r] = dmin * (float)mn[j];
    }
    __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 16));
    for (int j = 0; j < 4; j++) {
        __m256i t = _mm256_loadu_si256((const __m256i *)(b + (five ? 48 : 16) + 32 * j));
        __m256i lo = _mm256_and_si256(t, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(t, 4), m4);
        if (five) {
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(
                                         _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(
                                         _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one),
                                         4));
        }
        v[2 * j] = lo;
        v[2 * j + 1] = hi;
    }
}

/* The same for Q6_K: values 0..63; the 16 scales as (sc, sc) int16 pairs
 * (the lane-wise kernels' VPMADDWD operand), d into fb[0]. */
T2 static inline void unpack_q6k(const uint8_t *b, __m256i *v, float (*fa)[8], float (*fb)[8],
                                 int r)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
    const int8_t *sc = (const int8_t *)(b + 192);
    for (int i = 0; i < 16; i++) {
        uint32_t p = (uint16_t)sc[i] | (uint32_t)(uint16_t)sc[i] << 16;
        memcpy(&fa[i][r], &p, 4);
    }
    fb[0][r] = h2f_hw(b + 208);
    for (int h = 0; h < 2; h++) {
        __m256i l0 = _mm256_loadu_si256((const __m256i *)(b + 64 * h));
        __m256i l1 = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
        for (int t = 0; t < 4; t++) {
            __m256i lq = t % 2 ? l1 : l0;
            __m256i lo = _mm256_and_si256(t / 2 ? _mm256_srli_epi16(lq, 4) : lq, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * t), m2);
            v[4 * h + t] = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
        }
    }
}

/* Rows w .. w + 7 * row_bytes (nsb super-blocks each) into g. */
T2 static void repack_group(pl_ggml_type t, const uint8_t *w, size_t row_bytes, int nsb,
                            kr_group *g)
{
    size_t bb = t == PL_GGML_TYPE_Q6_K ? 210 : t == PL_GGML_TYPE_Q5_K ? 176 : 144;
    for (int s = 0; s < nsb; s++) {
        __m256i v[8][8];         /* [row][sub-block] */
        for (int r = 0; r < 8; r++) {
            const uint8_t *b = w + (size_t)r * row_bytes + (size_t)s * bb;
            if (t == PL_GGML_TYPE_Q6_K)
                unpack_q6k(b, v[r], g->fa[s], g->fb[s], r);
            else
                unpack_k45(b, t == PL_GGML_TYPE_Q5_K, v[r], g->fa[s], g->fb[s], r);
        }
        for (int j = 0; j < 8; j++) {
            __m256i col[8];
            for (int r = 0; r < 8; r++)
                col[r] = v[r][j];
            transpose8(col, g->q[s][j]);
        }
    }
}

T2 static inline __m256 lanes_sum(const __m256 *a)
{
    return _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6])),
                         _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7])));
}

T2 static inline __m256i bcast4(const int8_t *p)
{
    int v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* NR activation rows (as blocks apart) against a repacked group: y[rr *
 * ldy + 0..7]. Q4_K / Q5_K: acc_l += (d sc[j] a.d) * dot, the min term per
 * sub-block pair, as k_pair_acc; Q6_K: acc_l += (d a.d) * sc * dot(q - 32),
 * as rows_q6_k. DOT is the int8 dot to int32 lanes of the ISA. */
#define KR_ROWS(SFX, TARGET, DOT)                                                                \
    TARGET static inline __attribute__((always_inline)) void                                     \
    kr_rows_##SFX(const kr_group *g, int six, const pl_q8_act *a, size_t as, int nsb, int nr,    \
                  float *y, size_t ldy)                                                          \
    {                                                                                            \
        __m256 acc[2][8], off[2];                                                                \
        for (int rr = 0; rr < nr; rr++) {                                                        \
            off[rr] = _mm256_setzero_ps();                                                       \
            for (int l = 0; l < 8; l++)                                                          \
                acc[rr][l] = _mm256_setzero_ps();                                                \
        }                                                                                        \
        const __m256i k32 = _mm256_set1_epi8(32);                                                \
        for (int s = 0; s < nsb; s++)                                                            \
            for (int j = 0; j < 8; j++) {                                                        \
                __m256 f[2];                                                                     \
                const pl_q8_act *ab[2];                                                          \
                for (int rr = 0; rr < nr; rr++) {                                                \
                    ab[rr] = a + (size_t)rr * as + 8 * s + j;                                    \
                    f[rr] = _mm256_mul_ps(_mm256_loadu_ps(six ? g->fb[s][0] : g->fa[s][j]),      \
                                          _mm256_set1_ps(ab[rr]->d));                            \
                }                                                                                \
                for (int l = 0; l < 8; l++) {                                                    \
                    __m256i wq = _mm256_load_si256(&g->q[s][j][l]);                              \
                    __m256i sc = six ? _mm256_castps_si256(                                      \
                                           _mm256_loadu_ps(g->fa[s][2 * j + l / 4]))             \
                                     : _mm256_setzero_si256();                                   \
                    for (int rr = 0; rr < nr; rr++) {                                            \
                        __m256i av = bcast4(ab[rr]->qs + 4 * l), p;                              \
                        if (six)                                                                 \
                            p = _mm256_madd_epi16(                                               \
                                _mm256_sub_epi16(_mm256_maddubs_epi16(wq, av),                   \
                                                 _mm256_maddubs_epi16(k32, av)),                 \
                                sc);                                                             \
                        else                                                                     \
                            p = DOT(wq, av);                                                     \
                        acc[rr][l] = _mm256_fmadd_ps(f[rr], _mm256_cvtepi32_ps(p), acc[rr][l]); \
                    }                                                                            \
                }                                                                                \
                if (!six && j % 2)                                                               \
                    for (int rr = 0; rr < nr; rr++) {                                            \
                        __m256 m0 = _mm256_mul_ps(_mm256_loadu_ps(g->fb[s][j - 1]),              \
                                                  _mm256_set1_ps(ab[rr][-1].s));                 \
                        __m256 m1 = _mm256_mul_ps(_mm256_loadu_ps(g->fb[s][j]),                  \
                                                  _mm256_set1_ps(ab[rr]->s));                    \
                        off[rr] = _mm256_add_ps(off[rr], _mm256_add_ps(m0, m1));                 \
                    }                                                                            \
            }                                                                                    \
        for (int rr = 0; rr < nr; rr++) {                                                        \
            __m256 v = lanes_sum(acc[rr]);                                                       \
            _mm256_storeu_ps(y + (size_t)rr * ldy, six ? v : _mm256_sub_ps(v, off[rr]));         \
        }                                                                                        \
    }                                                                                            \
    /* All activation rows against one group; NR 2 where 32 registers hold    \
     * both rows' 16 chains (AVX-512), else 1. */                              \
    TARGET static void kr_group_##SFX(const kr_group *g, int six, const pl_q8_act *x, int n_blk, \
                                      int n_rows, int two, float *y, int ldy)                    \
    {                                                                                            \
        int r = 0, nsb = n_blk / 8;                                                              \
        if (two)                                                                                 \
            for (; r + 2 <= n_rows; r += 2) {                                                    \
                const pl_q8_act *xr = x + (size_t)r * n_blk;                                     \
                if (six)                                                                         \
                    kr_rows_##SFX(g, 1, xr, (size_t)n_blk, nsb, 2, y + (size_t)r * ldy, ldy);   \
                else                                                                             \
                    kr_rows_##SFX(g, 0, xr, (size_t)n_blk, nsb, 2, y + (size_t)r * ldy, ldy);   \
            }                                                                                    \
        for (; r < n_rows; r++) {                                                                \
            const pl_q8_act *xr = x + (size_t)r * n_blk;                                         \
            if (six)                                                                             \
                kr_rows_##SFX(g, 1, xr, (size_t)n_blk, nsb, 1, y + (size_t)r * ldy, ldy);       \
            else                                                                                 \
                kr_rows_##SFX(g, 0, xr, (size_t)n_blk, nsb, 1, y + (size_t)r * ldy, ldy);       \
        }                                                                                        \
    }

T2 static inline __m256i dot_avx2(__m256i u, __m256i s)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
#define TV512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
TV512 static inline __m256i dot_vnni512(__m256i u, __m256i s)
{
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}
#define TAVXV __attribute__((target("avx2,fma,f16c,avxvnni")))
TAVXV static inline __m256i dot_avxvnni(__m256i u, __m256i s)
{
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
}

KR_ROWS(avx2, T2, dot_avx2)
KR_ROWS(vnni512, TV512, dot_vnni512)
KR_ROWS(avxvnni, TAVXV, dot_avxvnni)

#define KG_PREFETCH_MAX (64 * 1024)
/* The group after next asked for into L2, a slice per super-block: over 8
 * rows read side by side the hardware prefetchers fall behind (1024 x 512
 * Q4_K experts read at 0.4x the row-by-row speed without it; with the next
 * group into L1 instead, 0.8x). Groups over 64 KB are 8 long streams they
 * follow. */
static inline prefetch_span kg_prefetch_init(const uint8_t *w, size_t rb, int nsb)
{
    prefetch_span ps = prefetch_init(w, rb, nsb, 2);
    if (8 * rb > KG_PREFETCH_MAX)
        ps.end = ps.p;
    return ps;
}

/* Decode (one activation row): kr_rows' chains for 8 weight rows read
 * straight from the file's layout, no scratch. A 4-dword transposition in
 * registers (t8x4) of 16 bytes of each of the 8 rows gives four of the
 * chains' operands; the 8 rows' scales are loaded side by side and
 * unpacked as vectors (k4_scale). A super-block's scale arithmetic and
 * unpacking so serve 8 rows, and 8 independent chains replace the
 * lane-wise kernel's one, whose 8 FMAs in a row per super-block bounded it
 * (~35 cycles for 144 bytes on Zen 4). */
#define KG_BODY(SFX, TARGET, DOT)                                                                \
    /* out[k] lane r = dword k of the 16 bytes at p + r * rb (r = 0..7). */    \
    TARGET static inline void t8x4_##SFX(const uint8_t *p, size_t rb, __m256i *out)              \
    {                                                                                            \
        __m256i v[4];                                                                            \
        for (int i = 0; i < 4; i++)                                                              \
            v[i] = _mm256_inserti128_si256(                                                      \
                _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p + i * rb))),          \
                _mm_loadu_si128((const __m128i *)(p + (i + 4) * rb)), 1);                        \
        __m256i a = _mm256_unpacklo_epi32(v[0], v[1]), b = _mm256_unpackhi_epi32(v[0], v[1]);    \
        __m256i c = _mm256_unpacklo_epi32(v[2], v[3]), d = _mm256_unpackhi_epi32(v[2], v[3]);    \
        out[0] = _mm256_unpacklo_epi64(a, c);                                                    \
        out[1] = _mm256_unpackhi_epi64(a, c);                                                    \
        out[2] = _mm256_unpacklo_epi64(b, d);                                                    \
        out[3] = _mm256_unpackhi_epi64(b, d);                                                    \
    }                                                                                            \
    /* The dwords at p + r * rb, r = 0..7, side by side. */                    \
    TARGET static inline __m256i g8_##SFX(const uint8_t *p, size_t rb)                           \
    {                                                                                            \
        int v[8];                                                                                \
        for (int r = 0; r < 8; r++)                                                              \
            memcpy(&v[r], p + r * rb, 4);                                                        \
        return _mm256_setr_epi32(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);               \
    }                                                                                            \
    /* The 8 halves in the low (hi = 0) or high 16 bits of g's dwords, as     \
     * floats (F16C's conversion, as h2f_hw). */                               \
    TARGET static inline __m256 halves_##SFX(__m256i g, int hi)                                  \
    {                                                                                            \
        __m256i h = hi ? _mm256_srli_epi32(g, 16)                                                \
                       : _mm256_and_si256(g, _mm256_set1_epi32(0xffff));                         \
        h = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08);                           \
        return _mm256_cvtph_ps(_mm256_castsi256_si128(h));                                       \
    }                                                                                            \
    /* Sub-block j's scale (mn = 0) or min (mn = 1) of the 8 rows as floats,  \
     * unpacked as pl_k4_scales does, from scale bytes 0-3, 4-7, 8-11 (q). */  \
    TARGET static inline __m256 k4_scale_##SFX(const __m256i *q, int j, int mn)                  \
    {                                                                                            \
        __m256i v;                                                                               \
        if (j < 4) {                                                                             \
            v = _mm256_and_si256(_mm256_srli_epi32(q[mn], 8 * j), _mm256_set1_epi32(63));        \
        } else {                                                                                 \
            int k = j - 4;                                                                       \
            __m256i lo = _mm256_and_si256(_mm256_srli_epi32(q[2], 8 * k + 4 * mn),               \
                                          _mm256_set1_epi32(15));                                \
            __m256i hi = _mm256_and_si256(_mm256_srli_epi32(q[mn], 8 * k + 6),                   \
                                          _mm256_set1_epi32(3));                                 \
            v = _mm256_or_si256(lo, _mm256_slli_epi32(hi, 4));                                   \
        }                                                                                        \
        return _mm256_cvtepi32_ps(v);                                                            \
    }                                                                                            \
    /* Q5_K's fifth bit of sub-block j, from the transposed qh dwords h. */    \
    TARGET static inline __m256i k5_bit_##SFX(__m256i h, int j)                                  \
    {                                                                                            \
        __m256i b = _mm256_and_si256(_mm256_srli_epi16(h, j), _mm256_set1_epi8(1));              \
        return _mm256_slli_epi16(b, 4);                                                          \
    }                                                                                            \
    /* Q4_K / Q5_K: per sub-block pair, acc_l += (d sc a.d) dot in order,     \
     * then the pair's min term, as kr_rows. */                                \
    TARGET static inline __attribute__((always_inline)) void                                     \
    kg_k45_##SFX(const uint8_t *w, size_t rb, int five, const pl_q8_act *a, int nsb, float *y)   \
    {                                                                                            \
        __m256 acc[8], off = _mm256_setzero_ps();                                                \
        for (int l = 0; l < 8; l++)                                                              \
            acc[l] = _mm256_setzero_ps();                                                        \
        const __m256i m4 = _mm256_set1_epi8(0x0f);                                               \
        size_t bb = five ? 176 : 144;                                                            \
        prefetch_span ps = kg_prefetch_init(w, rb, nsb);                                         \
        for (int s = 0; s < nsb; s++) {                                                          \
            const uint8_t *b = w + (size_t)s * bb;                                               \
            prefetch_step(&ps, 1);                                                               \
            __m256i dd = g8_##SFX(b, rb), q[3];                                                  \
            for (int i = 0; i < 3; i++)                                                          \
                q[i] = g8_##SFX(b + 4 + 4 * i, rb);                                              \
            __m256 d = halves_##SFX(dd, 0), dmin = halves_##SFX(dd, 1);                          \
            __m256i h[2][4]; /* Q5_K's fifth bits, the same for every pair */                   \
            for (int hh = 0; five && hh < 2; hh++)                                               \
                t8x4_##SFX(b + 16 + 16 * hh, rb, h[hh]);                                         \
            for (int jp = 0; jp < 4; jp++) {                                                     \
                const pl_q8_act *a0 = a + 8 * s + 2 * jp, *a1 = a0 + 1;                          \
                __m256 f0 = _mm256_mul_ps(_mm256_mul_ps(d, k4_scale_##SFX(q, 2 * jp, 0)),        \
                                          _mm256_set1_ps(a0->d));                                \
                __m256 f1 = _mm256_mul_ps(_mm256_mul_ps(d, k4_scale_##SFX(q, 2 * jp + 1, 0)),    \
                                          _mm256_set1_ps(a1->d));                                \
                for (int hh = 0; hh < 2; hh++) {                                                 \
                    __m256i t[4];                                                                \
                    t8x4_##SFX(b + (five ? 48 : 16) + 32 * jp + 16 * hh, rb, t);                 \
                    for (int k = 0; k < 4; k++) {                                                \
                        int l = 4 * hh + k;                                                      \
                        __m256i lo = _mm256_and_si256(t[k], m4);                                 \
                        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(t[k], 4), m4);           \
                        if (five) {                                                              \
                            lo = _mm256_or_si256(lo, k5_bit_##SFX(h[hh][k], 2 * jp));            \
                            hi = _mm256_or_si256(hi, k5_bit_##SFX(h[hh][k], 2 * jp + 1));        \
                        }                                                                        \
                        __m256i p0 = DOT(lo, bcast4(a0->qs + 4 * l));                            \
                        __m256i p1 = DOT(hi, bcast4(a1->qs + 4 * l));                            \
                        acc[l] = _mm256_fmadd_ps(f0, _mm256_cvtepi32_ps(p0), acc[l]);            \
                        acc[l] = _mm256_fmadd_ps(f1, _mm256_cvtepi32_ps(p1), acc[l]);            \
                    }                                                                            \
                }                                                                                \
                __m256 m0 = _mm256_mul_ps(_mm256_mul_ps(dmin, k4_scale_##SFX(q, 2 * jp, 1)),     \
                                          _mm256_set1_ps(a0->s));                                \
                __m256 m1 = _mm256_mul_ps(_mm256_mul_ps(dmin, k4_scale_##SFX(q, 2 * jp + 1, 1)), \
                                          _mm256_set1_ps(a1->s));                                \
                off = _mm256_add_ps(off, _mm256_add_ps(m0, m1));                                 \
            }                                                                                    \
        }                                                                                        \
        _mm256_storeu_ps(y, _mm256_sub_ps(lanes_sum(acc), off));                                 \
    }                                                                                            \
    /* Q6_K: acc_l += (d a.d) * sc * dot(q - 32), sub-block after sub-block,   \
     * as kr_rows. */                                                          \
    TARGET static inline __attribute__((always_inline)) void                                     \
    kg_q6k_##SFX(const uint8_t *w, size_t rb, const pl_q8_act *a, int nsb, float *y)             \
    {                                                                                            \
        __m256 acc[8];                                                                           \
        for (int l = 0; l < 8; l++)                                                              \
            acc[l] = _mm256_setzero_ps();                                                        \
        const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);                     \
        const __m256i k32 = _mm256_set1_epi8(32);                                                \
        prefetch_span ps = kg_prefetch_init(w, rb, nsb);                                         \
        for (int s = 0; s < nsb; s++) {                                                          \
            const uint8_t *b = w + (size_t)s * 210;                                              \
            prefetch_step(&ps, 1);                                                               \
            /* d's dword would end past the block: from byte 206, its high half */             \
            __m256 d = halves_##SFX(g8_##SFX(b + 206, rb), 1);                                   \
            __m256i sc[4];                                                                       \
            for (int i = 0; i < 4; i++)                                                          \
                sc[i] = g8_##SFX(b + 192 + 4 * i, rb);                                           \
            for (int h = 0; h < 2; h++)                                                          \
                for (int hh = 0; hh < 2; hh++) {                                                 \
                    __m256i l0[4], l1[4], qh[4];                                                 \
                    t8x4_##SFX(b + 64 * h + 16 * hh, rb, l0);                                    \
                    t8x4_##SFX(b + 64 * h + 32 + 16 * hh, rb, l1);                               \
                    t8x4_##SFX(b + 128 + 32 * h + 16 * hh, rb, qh);                              \
                    for (int t = 0; t < 4; t++) {                                                \
                        int j = 4 * h + t, e = 2 * j + hh; /* lanes 4hh.. take scale e */        \
                        const pl_q8_act *aj = a + 8 * s + j;                                     \
                        __m256 f = _mm256_mul_ps(d, _mm256_set1_ps(aj->d));                      \
                        __m256i scv = _mm256_srai_epi32(                                         \
                            _mm256_slli_epi32(sc[e / 4], 24 - 8 * (e % 4)), 24);                 \
                        for (int k = 0; k < 4; k++) {                                            \
                            __m256i lq = t % 2 ? l1[k] : l0[k];                                  \
                            __m256i lo = _mm256_and_si256(t / 2 ? _mm256_srli_epi16(lq, 4) : lq, \
                                                          m4);                                   \
                            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh[k], 2 * t), m2);  \
                            __m256i qv = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));          \
                            __m256i av = bcast4(aj->qs + 4 * (4 * hh + k));                      \
                            __m256i p = _mm256_mullo_epi32(                                      \
                                _mm256_sub_epi32(DOT(qv, av), DOT(k32, av)), scv);               \
                            acc[4 * hh + k] =                                                    \
                                _mm256_fmadd_ps(f, _mm256_cvtepi32_ps(p), acc[4 * hh + k]);      \
                        }                                                                        \
                    }                                                                            \
                }                                                                                \
        }                                                                                        \
        _mm256_storeu_ps(y, lanes_sum(acc));                                                     \
    }                                                                                            \
    TARGET static int kg_rows_##SFX(pl_ggml_type t, const uint8_t *w, size_t rb,                 \
                                    const pl_q8_act *x, int nsb, float *y, int o0, int o1)       \
    {                                                                                            \
        int o = o0;                                                                              \
        for (; o + 8 <= o1; o += 8) {                                                            \
            const uint8_t *wo = w + (size_t)o * rb;                                              \
            if (t == PL_GGML_TYPE_Q6_K)                                                          \
                kg_q6k_##SFX(wo, rb, x, nsb, y + o);                                             \
            else if (t == PL_GGML_TYPE_Q5_K)                                                     \
                kg_k45_##SFX(wo, rb, 1, x, nsb, y + o);                                          \
            else                                                                                 \
                kg_k45_##SFX(wo, rb, 0, x, nsb, y + o);                                          \
        }                                                                                        \
        return o - o0;                                                                           \
    }

KG_BODY(avx2, T2, dot_avx2)
KG_BODY(vnni512, TV512, dot_vnni512)
KG_BODY(avxvnni, TAVXV, dot_avxvnni)

int pl_qdot_k_gemv(pl_vnni_level lv, pl_ggml_type t, const uint8_t *w, size_t row_bytes,
                   const pl_q8_act *x, int n_blk, float *y, int o0, int o1)
{
    /* Q6_K's 12 transposed registers and 8 chains fit AVX-512's 32: on 16,
     * spilled, it ran at 0.6x the lane-wise kernel (which stays in use). */
    if (!pl_cpu_has_avx2() || !pl_qdot_k_gemm_supported(t) || n_blk % 8 || o1 - o0 < 8 ||
        (t == PL_GGML_TYPE_Q6_K && lv != PL_VNNI_AVX512))
        return 0;
    if (lv == PL_VNNI_AVX512)
        return kg_rows_vnni512(t, w, row_bytes, x, n_blk / 8, y, o0, o1);
    if (lv == PL_VNNI_AVX)
        return kg_rows_avxvnni(t, w, row_bytes, x, n_blk / 8, y, o0, o1);
    return kg_rows_avx2(t, w, row_bytes, x, n_blk / 8, y, o0, o1);
}

int pl_qdot_k_gemm(pl_vnni_level lv, pl_ggml_type t, const uint8_t *w, size_t row_bytes,
                   const pl_q8_act *x, int n_blk, int n_rows, float *y, int ldy, int o0, int o1)
{
    int nsb = n_blk / 8, six = t == PL_GGML_TYPE_Q6_K;
    if (!pl_cpu_has_avx2() || !pl_qdot_k_gemm_supported(t) || nsb > KR_MAX_SB ||
        n_blk % 8 || o1 - o0 < 8)
        return 0;
    _Alignas(32) kr_group g;
    int o = o0;
    for (; o + 8 <= o1; o += 8) {
        repack_group(t, w + (size_t)o * row_bytes, row_bytes, nsb, &g);
        if (lv == PL_VNNI_AVX512)
            kr_group_vnni512(&g, six, x, n_blk, n_rows, KR_TWO, y + o, ldy);
        else if (lv == PL_VNNI_AVX)
            kr_group_avxvnni(&g, six, x, n_blk, n_rows, 0, y + o, ldy);
        else
            kr_group_avx2(&g, six, x, n_blk, n_rows, 0, y + o, ldy);
    }
    return o - o0;
}
#else
int pl_qdot_k_gemv(pl_vnni_level lv, pl_ggml_type t, const uint8_t *w, size_t row_bytes,
                   const pl_q8_act *x, int n_blk, float *y, int o0, int o1)
{
    (void)lv, (void)t, (void)w, (void)row_bytes, (void)x, (void)n_blk, (void)y, (void)o0,
        (void)o1;
    return 0;
}

int pl_qdot_k_gemm(pl_vnni_level lv, pl_ggml_type t, const uint8_t *w, size_t row_bytes,
                   const pl_q8_act *x, int n_blk, int n_rows, float *y, int ldy, int o0, int o1)
{
    (void)lv, (void)t, (void)w, (void)row_bytes, (void)x, (void)n_blk, (void)n_rows, (void)y,
        (void)ldy, (void)o0, (void)o1;
    return 0;
}
#endif
