/* qdot_block_order.c - the Q4_0, Q4_1, Q5_0, Q8_0 and MXFP4 kernels, 8
 * weight rows at a time (see qdot_block_order.h).
 *
 * They sum as the scalar reference does, block after block: each of 8
 * weight rows is dotted with an activation block into 8 int32 partials, the
 * 8 x 8 partials are reduced to one int32 per row (integer sums: exact in
 * any order), and the reference's float steps then run lane-wise, one lane
 * per weight row. So every path of these types agrees with the reference
 * bit for bit, AMX tiles included (a tile sums a whole block into one
 * int32), and the float work is shared by 8 rows: these replaced lane-wise
 * kernels (8 float partial sums per row, as llama.cpp keeps) that ran
 * prefill at 0.7-0.8x their speed on Zen 4. Per block the 8 rows' scales
 * come in one gather (d and, for Q4_1, m are the block's first 4 bytes).
 * The multi-row kernel takes VPDPBUSD where the CPU has it (AVX-512 VNNI
 * or AVX-VNNI; prefill 1.13x on Zen 4). A 512-bit decode version (two
 * blocks per register) ran no faster on Zen 4, in cache or from memory, and
 * was dropped. Q5_0 (most matrices of llama.cpp's Q4_K_M files of small
 * models, Gemma 3 270M's among them) joined them: its lane-wise kernels
 * left prefill at about half llama.cpp's speed there. MXFP4 (gpt-oss's
 * experts) is Q8_0's signed path: its nibbles become the doubled FP4 values
 * by one byte shuffle, and its E8M0 scale a float by shifting the byte into
 * the exponent.
 */
#include "backends/engine/cpu/qdot_block_order.h"

#include <string.h>
#include "backends/engine/cpu/qdot_vnni.h"

#include "backends/formats/gguf.h"
#include "src/base/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "backends/engine/cpu/simd_x86.h"
#define PL_HAVE_X86 1
#endif

static size_t block_bytes(pl_ggml_type t)
{
    size_t bb = 0;
    pl_ggml_type_block(t, NULL, &bb);
    return bb;
}

#ifdef PL_HAVE_X86
#define T2 __attribute__((target("avx2,fma,f16c")))

/* Q5_0's fifth bits: byte j is 16 when bit j of the block's qh is set. */
T2 static inline __m256i q5_high_bits(const uint8_t *qh)
{
    uint32_t h;
    memcpy(&h, qh, 4);
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), shuf);
    b = _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
    return _mm256_and_si256(b, _mm256_set1_epi8(0x10));
}

/* Whether a type's quants are signed bytes (the sign trick below). */
static inline int signed_quants(pl_ggml_type t)
{
    return t == PL_GGML_TYPE_Q8_0 || t == PL_GGML_TYPE_MXFP4;
}

/* The 32 quants of the block at blk as bytes, element j in byte j: signed
 * for Q8_0 and MXFP4 (its nibbles looked up in the doubled FP4 values),
 * else unsigned (Q4_0 and Q4_1 0..15, Q5_0 0..31). */
T2 static inline __m256i block_quants(pl_ggml_type t, const uint8_t *blk)
{
    if (t == PL_GGML_TYPE_Q8_0)
        return _mm256_loadu_si256((const __m256i *)(const void *)(blk + 2));
    size_t qo = t == PL_GGML_TYPE_Q4_1 ? 4 : t == PL_GGML_TYPE_Q5_0 ? 6
                : t == PL_GGML_TYPE_MXFP4 ? 1 : 2;
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(blk + qo));
    __m128i m = _mm_set1_epi8(0x0f);
    __m256i u = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
    if (t == PL_GGML_TYPE_MXFP4)
        return _mm256_shuffle_epi8(_mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4,
                                                    -6, -8, -12, 0, 1, 2, 3, 4, 6, 8, 12, 0, -1,
                                                    -2, -3, -4, -6, -8, -12), u);
    return t == PL_GGML_TYPE_Q5_0 ? _mm256_or_si256(u, q5_high_bits(blk + 2)) : u;
}

/* Lane r: the total of s[r]'s 8 lanes. */
T2 static inline __m256i hsum8x8(const __m256i *s)
{
    __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
    __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(s[4], s[5]), _mm256_hadd_epi32(s[6], s[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                            _mm256_permute2x128_si256(a, b, 0x31));
}

/* The halves at the start of one block of 8 rows (idx: the rows' byte
 * offsets): d, and the next half (Q4_1's m), as floats. */
T2 static inline void gather_scales(const uint8_t *blk0, __m256i idx, __m256 *d, __m256 *m)
{
    __m256i dm = _mm256_i32gather_epi32((const int *)(const void *)blk0, idx, 1);
    __m256i p = _mm256_packus_epi32(_mm256_and_si256(dm, _mm256_set1_epi32(0xffff)),
                                    _mm256_srli_epi32(dm, 16));
    p = _mm256_permute4x64_epi64(p, 0xd8);       /* d0..d7 | m0..m7 */
    *d = _mm256_cvtph_ps(_mm256_castsi256_si128(p));
    *m = _mm256_cvtph_ps(_mm256_extracti128_si256(p, 1));
}

/* MXFP4's scales of one block of 8 rows: the E8M0 byte e at each block's
 * start as 2^(e - 128) (pl_e8m0_half: subnormal below e = 2). */
T2 static inline __m256 gather_e8m0_half(const uint8_t *blk0, __m256i idx)
{
    __m256i e = _mm256_and_si256(_mm256_i32gather_epi32((const int *)(const void *)blk0, idx, 1),
                                 _mm256_set1_epi32(0xff));
    __m256i norm = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(norm, sub, small));
}

/* The scales of one block of 8 rows: d, and Q4_1's m. */
T2 static inline void block_scales(pl_ggml_type t, const uint8_t *blk0, __m256i idx, __m256 *d,
                                   __m256 *m)
{
    if (t == PL_GGML_TYPE_MXFP4) {
        *d = gather_e8m0_half(blk0, idx);
        *m = _mm256_setzero_ps();
        return;
    }
    gather_scales(blk0, idx, d, m);
}

/* One block's contribution for 8 rows, the reference's float steps:
 * d * d_a * isum (+ m * s_a), m = -8 d for Q4_0, -16 d for Q5_0. */
T2 static inline __m256 block_value(pl_ggml_type t, __m256 d, __m256 m, __m256i isum,
                                    const pl_q8_act *a)
{
    __m256 v = _mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(a->d)), _mm256_cvtepi32_ps(isum));
    if (signed_quants(t))
        return v;
    if (t == PL_GGML_TYPE_Q4_0)
        m = _mm256_mul_ps(_mm256_set1_ps(-8.0f), d);
    else if (t == PL_GGML_TYPE_Q5_0)
        m = _mm256_mul_ps(_mm256_set1_ps(-16.0f), d);
    return _mm256_add_ps(v, _mm256_mul_ps(m, _mm256_set1_ps(a->s)));
}

T2 static inline __m256i row_offsets(size_t row_bytes)
{
    return _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                              _mm256_set1_epi32((int)row_bytes));
}

#define INLINE __attribute__((always_inline)) inline

/* One copy of a kernel per type (F: its always-inline body, with t as its
 * first argument), so that no test of t is left in its inner loop. */
#define PER_TYPE(F, t, ...)                                                                      \
    do {                                                                                         \
        switch (t) {                                                                             \
        case PL_GGML_TYPE_Q4_0: F(PL_GGML_TYPE_Q4_0, __VA_ARGS__); break;                        \
        case PL_GGML_TYPE_Q4_1: F(PL_GGML_TYPE_Q4_1, __VA_ARGS__); break;                        \
        case PL_GGML_TYPE_Q5_0: F(PL_GGML_TYPE_Q5_0, __VA_ARGS__); break;                        \
        case PL_GGML_TYPE_Q8_0: F(PL_GGML_TYPE_Q8_0, __VA_ARGS__); break;                        \
        default: F(PL_GGML_TYPE_MXFP4, __VA_ARGS__); break;                                      \
        }                                                                                        \
    } while (0)

/* The int8 dots, each adding the sums of 4 products u8 x s8 to a lane:
 * AVX2's VPMADDUBSW + VPMADDWD, or VPDPBUSD (the same integer sums: no
 * int16 saturation is reachable with these quants). */
T2 static inline __m256i dot_avx2(__m256i acc, __m256i u, __m256i s)
{
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s),
                                                   _mm256_set1_epi16(1)));
}
#define TV512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
TV512 static inline __m256i dot_vnni512(__m256i acc, __m256i u, __m256i s)
{
    return _mm256_dpbusd_epi32(acc, u, s);
}
#define TAVXV __attribute__((target("avx2,fma,f16c,avxvnni")))
TAVXV static inline __m256i dot_avxvnni(__m256i acc, __m256i u, __m256i s)
{
    return _mm256_dpbusd_avx_epi32(acc, u, s);
}

/* Weight rows [0, 8) from w (row_bytes apart) against one activation row,
 * block after block: each row's block dotted into 8 int32 partials, the 8 x
 * 8 partials reduced to one sum per row (hsum8x8), the float steps 8 rows
 * at once. The next group's span is prefetched along the way. Written once
 * and instantiated per int8 dot instruction. */
#define ROWS8_ROW1(SFX, TARGET, DOT)                                                             \
    TARGET static INLINE void rows8_t_##SFX(pl_ggml_type t, const uint8_t *w, size_t row_bytes, \
                                            const pl_q8_act *a, int n_blk, float *y)            \
    {                                                                                            \
        __m256i idx = row_offsets(row_bytes);                                                    \
        __m256 acc = _mm256_setzero_ps();                                                        \
        size_t bb = block_bytes(t);                                                              \
        prefetch_span ps = prefetch_init(w, row_bytes, n_blk, 1);                                \
        for (int b = 0; b < n_blk; b++) {                                                        \
            prefetch_step(&ps, 0);                                                           \
            const uint8_t *blk0 = w + (size_t)b * bb;                                            \
            __m256i aq = _mm256_loadu_si256((const __m256i *)a[b].qs), s[8];                     \
            for (int r = 0; r < 8; r++) {                                                        \
                __m256i q = block_quants(t, blk0 + (size_t)r * row_bytes);                       \
                s[r] = signed_quants(t)                                                          \
                           ? DOT(_mm256_setzero_si256(), _mm256_abs_epi8(q),                     \
                                 _mm256_sign_epi8(aq, q))                                        \
                           : DOT(_mm256_setzero_si256(), q, aq);                                 \
            }                                                                                    \
            __m256 d, m;                                                                         \
            block_scales(t, blk0, idx, &d, &m);                                                  \
            acc = _mm256_add_ps(acc, block_value(t, d, m, hsum8x8(s), a + b));                   \
        }                                                                                        \
        _mm256_storeu_ps(y, acc);                                                                \
    }                                                                                            \
    TARGET static void rows8_##SFX(pl_ggml_type t, const uint8_t *w, size_t row_bytes,          \
                                   const pl_q8_act *a, int n_blk, float *y)                      \
    {                                                                                            \
        PER_TYPE(rows8_t_##SFX, t, w, row_bytes, a, n_blk, y);                                   \
    }

ROWS8_ROW1(avx2, T2, dot_avx2)
ROWS8_ROW1(vnni512, TV512, dot_vnni512)
ROWS8_ROW1(avxvnni, TAVXV, dot_avxvnni)

#endif

static void tail_ref(pl_ggml_type t, const uint8_t *w, size_t row_bytes, const pl_q8_act *a,
                     int n_blk, float *y, int o, int o1)
{
    for (; o < o1; o++)
        y[o] = pl_op_qdot_ref(t, w + (size_t)o * row_bytes, a, n_blk * PL_QK);
}

void pl_qdot_block_order_row1(pl_ggml_type t, const uint8_t *w, size_t row_bytes,
                              const pl_q8_act *a, int n_blk, float *y, int o0, int o1)
{
    int o = o0;
#ifdef PL_HAVE_X86
    pl_vnni_level lv = pl_qdot_vnni_level();
    if (pl_cpu_has_avx2())
        for (; o + 8 <= o1; o += 8) {
            const uint8_t *wo = w + (size_t)o * row_bytes;
            if (lv == PL_VNNI_AVX512)
                rows8_vnni512(t, wo, row_bytes, a, n_blk, y + o);
            else if (lv == PL_VNNI_AVX)
                rows8_avxvnni(t, wo, row_bytes, a, n_blk, y + o);
            else
                rows8_avx2(t, wo, row_bytes, a, n_blk, y + o);
        }
#endif
    tail_ref(t, w, row_bytes, a, n_blk, y, o, o1);
}

int pl_qdot_block_order_row1_avx2(pl_ggml_type t, const uint8_t *w, size_t row_bytes,
                                  const pl_q8_act *a, int n_blk, float *y, int o0, int o1)
{
    if (!pl_cpu_has_avx2())
        return 0;
    pl_qdot_block_order_row1(t, w, row_bytes, a, n_blk, y, o0, o1);
    return 1;
}

#define ROW_CHUNK 256
#define XO_BYTES (96 * 1024) /* the offset quants of a chunk of rows, on the stack */

#ifdef PL_HAVE_X86
/* Weight rows [o, o + 8) against activation rows [0, n_rows), block after
 * block: each block's 8 weight rows are unpacked once for all activation
 * rows (at most ROW_CHUNK), whose 8 running sums live side by side in L1
 * (in y, ldy apart, a power-of-two stride put them all in one cache set)
 * and are written to y at the end. The block is held
 * transposed (transpose8), so that one int8 dot of an activation dword
 * broadcast to every lane adds 4 products to each of the 8 rows' sums at
 * once: 8 dots give the block's 8 integer sums with no horizontal sum.
 * Q8_0 and MXFP4 quants are signed, as the activation's. With VPDPBUSD
 * (OFF) the caller hands over the chunk's activation quants plus 128 (xo,
 * unsigned bytes, made once per chunk), and each row's 128 * sum of quants,
 * taken once per block, comes off the integer sum: exact, no int32 sum can
 * overflow, and 8 sign instructions fewer per activation row and block
 * (Q8_0 prefill 1.2x; making the offset bytes per row and block instead
 * ran slower than the sign trick). AVX2's VPMADDUBSW would saturate there,
 * so it keeps the sign trick on the broadcast (|w| unsigned, a signed as
 * w's sign). Four accumulators keep the dots' latency off the chain (Q5_0
 * prefill 1.5x over two). Written once and instantiated per int8 dot. */
#define ROWS8_MULTI(SFX, TARGET, DOT, OFF)                                                       \
    TARGET static INLINE void rows8_multi_t_##SFX(                                              \
        pl_ggml_type t, const uint8_t *w, size_t row_bytes, const pl_q8_act *x, int n_blk,      \
        int n_rows, float *y, int ldy, const uint8_t *xo)                                       \
    {                                                                                            \
        int q8 = signed_quants(t), off = OFF && q8;                                              \
        size_t bb = block_bytes(t);                                                              \
        __m256i idx = row_offsets(row_bytes);                                                    \
        _Alignas(32) float sum[ROW_CHUNK][8];                                                    \
        for (int b = 0; b < n_blk; b++) {                                                        \
            const uint8_t *blk0 = w + (size_t)b * bb;                                            \
            __m256i v[8], ws[8], wq[8];                                                          \
            for (int j = 0; j < 8; j++)                                                          \
                v[j] = block_quants(t, blk0 + (size_t)j * row_bytes);                            \
            transpose8(v, ws);                                                                   \
            __m256i corr = _mm256_setzero_si256();                                               \
            for (int k = 0; k < 8; k++) {                                                        \
                wq[k] = q8 && !off ? _mm256_abs_epi8(ws[k]) : ws[k];                             \
                if (off)                                                                         \
                    corr = DOT(corr, _mm256_set1_epi8(1), ws[k]);                                \
            }                                                                                    \
            corr = _mm256_slli_epi32(corr, 7);                                                   \
            __m256 d, m;                                                                         \
            block_scales(t, blk0, idx, &d, &m);                                                  \
            for (int r = 0; r < n_rows; r++) {                                                   \
                const pl_q8_act *a = x + (size_t)r * n_blk + b;                                  \
                __m256i sk[4];                                                                   \
                for (int k = 0; k < 4; k++)                                                      \
                    sk[k] = _mm256_setzero_si256();                                              \
                const int8_t *aq = off ? (const int8_t *)xo + ((size_t)r * n_blk + b) * 32     \
                                       : a->qs;                                                  \
                for (int k = 0; k < 8; k++) {                                                    \
                    int32_t a4;                                                                  \
                    memcpy(&a4, aq + 4 * k, 4);                                                  \
                    __m256i bk = _mm256_set1_epi32(a4);                                          \
                    if (off)                                                                     \
                        sk[k & 3] = DOT(sk[k & 3], bk, ws[k]);                                   \
                    else                                                                         \
                        sk[k & 3] = DOT(sk[k & 3], wq[k], q8 ? _mm256_sign_epi8(bk, ws[k]) : bk); \
                }                                                                                \
                __m256 acc = b ? _mm256_load_ps(sum[r]) : _mm256_setzero_ps();                   \
                __m256i isum = _mm256_add_epi32(_mm256_add_epi32(sk[0], sk[1]),                  \
                                                _mm256_add_epi32(sk[2], sk[3]));                 \
                if (off)                                                                         \
                    isum = _mm256_sub_epi32(isum, corr);                                         \
                _mm256_store_ps(sum[r], _mm256_add_ps(acc, block_value(t, d, m, isum, a)));      \
            }                                                                                    \
        }                                                                                        \
        for (int r = 0; r < n_rows; r++)                                                         \
            _mm256_storeu_ps(y + (size_t)r * ldy, _mm256_load_ps(sum[r]));                       \
    }                                                                                            \
    TARGET static void rows8_multi_##SFX(pl_ggml_type t, const uint8_t *w, size_t row_bytes,    \
                                         const pl_q8_act *x, int n_blk, int n_rows, float *y,   \
                                         int ldy, const uint8_t *xo)                             \
    {                                                                                            \
        PER_TYPE(rows8_multi_t_##SFX, t, w, row_bytes, x, n_blk, n_rows, y, ldy, xo);            \
    }

ROWS8_MULTI(avx2, T2, dot_avx2, 0)
ROWS8_MULTI(vnni512, TV512, dot_vnni512, 1)
ROWS8_MULTI(avxvnni, TAVXV, dot_avxvnni, 1)
#endif

#ifdef PL_HAVE_X86
/* The activation quants of n blocks plus 128, as bytes 0..255, 32 a block:
 * VPDPBUSD's unsigned operand for Q8_0 and MXFP4 (see ROWS8_MULTI). */
T2 static void offset_quants(const pl_q8_act *x, size_t n, uint8_t *dst)
{
    for (size_t i = 0; i < n; i++)
        _mm256_store_si256((__m256i *)(void *)(dst + 32 * i),
                           _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)x[i].qs),
                                            _mm256_set1_epi8((char)0x80)));
}
#endif

void pl_qdot_block_order_rows(pl_ggml_type t, const uint8_t *w, size_t row_bytes,
                              const pl_q8_act *x, int n_blk, int n_rows, float *y, int ldy,
                              int o0, int o1)
{
    int o = o0;
#ifdef PL_HAVE_X86
    /* Activation rows in chunks whose running sums (32 bytes a row) stay in
     * L1 while the chunk passes every block of 8 weight rows. */
    pl_vnni_level lv = pl_qdot_vnni_level();
    size_t per_row = (size_t)n_blk * 32;   /* a row's offset quants */
    if (signed_quants(t) && per_row > XO_BYTES)
        lv = PL_VNNI_NONE;   /* one row's would not fit: AVX2's sign trick, the same sums */
    int off = lv != PL_VNNI_NONE && signed_quants(t), chunk = ROW_CHUNK;
    if (off && XO_BYTES / per_row < ROW_CHUNK)
        chunk = (int)(XO_BYTES / per_row);
    _Alignas(32) uint8_t xo[off ? XO_BYTES : 32];
    if (pl_cpu_has_avx2())
        for (int r0 = 0; r0 < n_rows; r0 += chunk) {
            int nr = n_rows - r0 < chunk ? n_rows - r0 : chunk;
            const pl_q8_act *xr = x + (size_t)r0 * n_blk;
            if (off)
                offset_quants(xr, (size_t)nr * n_blk, xo);
            for (o = o0; o + 8 <= o1; o += 8) {
                const uint8_t *wo = w + (size_t)o * row_bytes;
                float *yr = y + (size_t)r0 * ldy + o;
                if (lv == PL_VNNI_AVX512)
                    rows8_multi_vnni512(t, wo, row_bytes, xr, n_blk, nr, yr, ldy, xo);
                else if (lv == PL_VNNI_AVX)
                    rows8_multi_avxvnni(t, wo, row_bytes, xr, n_blk, nr, yr, ldy, xo);
                else
                    rows8_multi_avx2(t, wo, row_bytes, xr, n_blk, nr, yr, ldy, xo);
            }
        }
#endif
    for (int r = 0; r < n_rows; r++)
        tail_ref(t, w, row_bytes, x + (size_t)r * n_blk, n_blk, y + (size_t)r * ldy, o, o1);
}
