/* qdot.c - quantised weight x q8 activation dot products: the scalar
 * reference of every type, the dispatch of pl_op_qdot / pl_op_qmatmul_rows
 * to the kernels of this CPU, and the dequantisation of the types the CPU
 * runner keeps. Q4_0, Q4_1 and Q8_0 sum in block order, as the reference
 * does (qdot_block_order.c); the Q5 and K-quant kernels (qdot_k.c,
 * qdot_vnni.c, qdot_avx512.c) keep 8 lanes of partial sums, their AVX2
 * order.
 *
 * Block layouts are those of the GGUF format (ggml):
 *   Q4_0: fp16 d, 16 bytes of nibbles; x = d * (q - 8)
 *   Q4_1: fp16 d, fp16 m, 16 bytes;    x = d * q + m
 *   Q8_0: fp16 d, 32 int8;              x = d * q
 *   MXFP4: u8 e (E8M0), 16 bytes;       x = 2^(e - 128) * v[q], v the
 *          doubled FP4 values (quant.h)
 * Nibble j (low) is element j, nibble j (high) is element j + 16.
 */
#include "backends/engine/cpu/ops.h"
#include "backends/engine/cpu/qdot_avx512.h"
#include "backends/engine/cpu/qdot_block_order.h"
#include "backends/engine/cpu/qdot_k.h"
#include "backends/engine/cpu/qdot_k_repack.h"
#include "backends/engine/cpu/qdot_vnni.h"

#include "backends/engine/model/quant.h"
#include "src/base/cpu_features.h"
#include "src/base/half.h"
#include "src/base/le.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "backends/engine/cpu/simd_x86.h"
#define PL_HAVE_X86 1
#endif

static float fp16_table[65536];
static pthread_once_t fp16_once = PTHREAD_ONCE_INIT;

static void fp16_init(void)
{
    for (uint32_t i = 0; i < 65536; i++)
        fp16_table[i] = pl_fp16_to_fp32((uint16_t)i);
}

float pl_op_fp16_to_f32(uint16_t h)
{
    pthread_once(&fp16_once, fp16_init);
    return fp16_table[h];
}

static inline float h2f(const uint8_t *p)
{
    return fp16_table[pl_le16(p)];
}

int pl_op_qdot_supported(pl_ggml_type t)
{
    return t == PL_GGML_TYPE_Q4_0 || t == PL_GGML_TYPE_Q4_1 || t == PL_GGML_TYPE_Q8_0 ||
           t == PL_GGML_TYPE_MXFP4 || pl_qdot_k_supported(t);
}

int pl_op_keep_packed(pl_ggml_type t)
{
    return pl_op_qdot_supported(t) || t == PL_GGML_TYPE_F16 || t == PL_GGML_TYPE_BF16;
}

static void dequant_q4(const uint8_t *b, float *y, int has_m)
{
    float d = h2f(b), m = has_m ? h2f(b + 2) : -8.0f * d;
    const uint8_t *qs = b + (has_m ? 4 : 2);
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)(qs[j] & 0x0f) + m;
        y[j + 16] = d * (float)(qs[j] >> 4) + m;
    }
}

int pl_op_dequant_row(pl_ggml_type t, const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    pthread_once(&fp16_once, fp16_init);
    switch (t) {
    case PL_GGML_TYPE_F32:
        memcpy(dst, src, (size_t)n * 4);
        return 0;
    case PL_GGML_TYPE_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = h2f(b + 2 * i);
        return 0;
    case PL_GGML_TYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = pl_bf16_to_fp32(pl_le16(b + 2 * i));
        return 0;
    case PL_GGML_TYPE_Q4_0:
    case PL_GGML_TYPE_Q4_1: {
        int has_m = t == PL_GGML_TYPE_Q4_1;
        size_t bb = has_m ? 20 : 18;
        for (int64_t i = 0; i < n / PL_QK; i++)
            dequant_q4(b + i * bb, dst + i * PL_QK, has_m);
        return 0;
    }
    case PL_GGML_TYPE_Q8_0:
        for (int64_t i = 0; i < n / PL_QK; i++) {
            const uint8_t *blk = b + i * 34;
            float d = h2f(blk);
            for (int j = 0; j < PL_QK; j++)
                dst[i * PL_QK + j] = d * (float)(int8_t)blk[2 + j];
        }
        return 0;
    default:
        return pl_dequant_row(t, src, dst, n); /* K-quants etc. (quant.c) */
    }
}

void pl_op_quantize_row_q8_ref(const float *x, pl_q8_act *dst, int n)
{
    for (int b = 0; b < n / PL_QK; b++) {
        const float *v = x + b * PL_QK;
        float amax = 0.0f;
        for (int j = 0; j < PL_QK; j++)
            amax = fmaxf(amax, fabsf(v[j]));
        float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < PL_QK; j++) {
            int q = (int)lrintf(v[j] * id);
            dst[b].qs[j] = (int8_t)q;
            sum += q;
        }
        dst[b].d = d;
        dst[b].s = d * (float)sum;
    }
}

float pl_op_qdot_ref(pl_ggml_type t, const void *w, const pl_q8_act *a, int n)
{
    const uint8_t *b = w;
    if (pl_qdot_k_supported(t) && !pl_qdot_block_order_type(t))
        return pl_qdot_k_ref(t, w, a, n);
    pthread_once(&fp16_once, fp16_init);
    float acc = 0.0f;
    for (int i = 0; i < n / PL_QK; i++) {
        int isum = 0;
        if (t == PL_GGML_TYPE_Q5_0) {   /* q = nibble | bit j of qh << 4, x = d (q - 16) */
            const uint8_t *blk = b + i * 22, *qs = blk + 6;
            uint32_t qh = (uint32_t)blk[2] | (uint32_t)blk[3] << 8 | (uint32_t)blk[4] << 16 |
                          (uint32_t)blk[5] << 24;
            for (int j = 0; j < 16; j++)
                isum += ((qs[j] & 0x0f) | (qh >> j & 1) << 4) * a[i].qs[j] +
                        ((qs[j] >> 4) | (qh >> (j + 16) & 1) << 4) * a[i].qs[j + 16];
            float d = h2f(blk);
            acc += d * a[i].d * (float)isum + -16.0f * d * a[i].s;
            continue;
        }
        if (t == PL_GGML_TYPE_MXFP4) {  /* signed values from the table */
            const uint8_t *blk = b + i * 17, *qs = blk + 1;
            for (int j = 0; j < 16; j++)
                isum += pl_mxfp4_values[qs[j] & 0x0f] * a[i].qs[j] +
                        pl_mxfp4_values[qs[j] >> 4] * a[i].qs[j + 16];
            acc += pl_e8m0_half(blk[0]) * a[i].d * (float)isum;
            continue;
        }
        if (t == PL_GGML_TYPE_Q8_0) {
            const uint8_t *blk = b + i * 34;
            for (int j = 0; j < PL_QK; j++)
                isum += (int8_t)blk[2 + j] * a[i].qs[j];
            acc += h2f(blk) * a[i].d * (float)isum;
            continue;
        }
        int has_m = t == PL_GGML_TYPE_Q4_1;
        const uint8_t *blk = b + i * (has_m ? 20 : 18), *qs = blk + (has_m ? 4 : 2);
        for (int j = 0; j < 16; j++)
            isum += (qs[j] & 0x0f) * a[i].qs[j] + (qs[j] >> 4) * a[i].qs[j + 16];
        float d = h2f(blk);
        acc += d * a[i].d * (float)isum + (has_m ? h2f(blk + 2) : -8.0f * d) * a[i].s;
    }
    return acc;
}

#ifdef PL_HAVE_X86
__attribute__((target("avx2,fma,f16c")))
static float dot_f32_avx2(const float *a, const float *b, int n)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum8(_mm256_add_ps(s0, s1));
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

__attribute__((target("avx2,fma,f16c")))
static void axpy_f32_avx2(float *y, float a, const float *x, int n)
{
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i),
                                                _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] += a * x[i];
}

/* The same arithmetic as pl_op_quantize_row_q8_ref: the max of |x| is
 * exact in any order, v * id is one rounded product, and cvtps rounds half
 * to even like lrintf in the default rounding mode. */
__attribute__((target("avx2,fma,f16c")))
static void quantize_row_q8_avx2(const float *x, pl_q8_act *dst, int n)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int b = 0; b < n / PL_QK; b++) {
        __m256 v[4], m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + b * PL_QK + 8 * k);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[k]));
        }
        __m128 h = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        float d = _mm_cvtss_f32(h) / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
        __m256i q[4];
        for (int k = 0; k < 4; k++)
            q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], _mm256_set1_ps(id)));
        __m256i s8 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        __m128i s4 = _mm_add_epi32(_mm256_extracti128_si256(s8, 1), _mm256_castsi256_si128(s8));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]),
                                       _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256((__m256i *)dst[b].qs, _mm256_permutevar8x32_epi32(p, perm));
        dst[b].d = d;
        dst[b].s = d * (float)_mm_cvtsi128_si32(s4);
    }
}

static int have_avx2(void) { return pl_cpu_has_avx2(); }
#else
static void quantize_row_q8_avx2(const float *x, pl_q8_act *dst, int n)
{
    pl_op_quantize_row_q8_ref(x, dst, n);
}

static int have_avx2(void) { return 0; }
#endif

const char *pl_op_kernel_path(void)
{
    switch (pl_qdot_vnni_level()) {
    case PL_VNNI_AVX512: return "avx512vnni+avx2+fma+f16c";
    case PL_VNNI_AVX: return "avxvnni+avx2+fma+f16c";
    default: return have_avx2() ? "avx2+fma+f16c" : "scalar";
    }
}

void pl_op_quantize_row_q8(const float *x, pl_q8_act *dst, int n)
{
    if (have_avx2())
        quantize_row_q8_avx2(x, dst, n);
    else
        pl_op_quantize_row_q8_ref(x, dst, n);
}

float pl_op_qdot(pl_ggml_type t, const void *w, const pl_q8_act *a, int n)
{
    if (pl_qdot_block_order_type(t))
        return pl_op_qdot_ref(t, w, a, n);  /* what every kernel of these types sums */
    pl_vnni_level lv = pl_qdot_vnni_level();
    float r;
    if (lv != PL_VNNI_NONE && pl_qdot_vnni(lv, t, w, a, n, &r))
        return r;                /* bit-identical to the AVX2 kernels */
    return pl_qdot_k(t, w, a, n);
}

int pl_op_qdot_avx2(pl_ggml_type t, const void *w, const pl_q8_act *a, int n, float *out)
{
#ifdef PL_HAVE_X86
    if (!have_avx2() || !pl_qdot_k_supported(t))
        return 0;
    *out = pl_qdot_k(t, w, a, n);
    return 1;
#else
    (void)t, (void)w, (void)a, (void)n, (void)out;
    return 0;
#endif
}

float pl_op_dot_f32(const float *a, const float *b, int n)
{
#ifdef PL_HAVE_X86
    if (have_avx2())
        return dot_f32_avx2(a, b, n);
#endif
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

void pl_op_axpy_f32(float *y, float a, const float *x, int n)
{
#ifdef PL_HAVE_X86
    if (have_avx2()) {
        axpy_f32_avx2(y, a, x, n);
        return;
    }
#endif
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

#ifdef PL_HAVE_X86
/* y[o0..o1) for one activation row, the kernel chosen once per call
 * instead of per output row (pl_op_qdot's dispatch cost ~4% of a decode
 * step): the 512-bit kernels, else the VNNI ones, else AVX2. */
static void qmatmul_row1(pl_ggml_type t, const uint8_t *wb, size_t row_bytes,
                         const pl_q8_act *x, int n, float *y, int o0, int o1)
{
    if (pl_qdot512_available() && pl_qdot512_supported(t)) {
        pl_qdot512_row1(t, wb, row_bytes, x, n / PL_QK, y, o0, o1);
        return;
    }
    pl_vnni_level lv = pl_qdot_vnni_level();
    /* Q4_K / Q5_K / Q6_K: 8 rows at a time (qdot_k_repack.c), the rows
     * past the slice's last group of 8 below. */
    o0 += pl_qdot_k_gemv(lv, t, wb, row_bytes, x, n / PL_QK, y, o0, o1);
    if (lv != PL_VNNI_NONE && pl_qdot_vnni_supported(t)) {
        for (int o = o0; o < o1; o++)
            pl_qdot_vnni(lv, t, wb + (size_t)o * row_bytes, x, n, &y[o]);
        return;
    }
    pl_qdot_k_row1(t, wb, row_bytes, x, n, y, o0, o1);
}
#endif

#define ROW_TILE_BYTES (24 * 1024)
#define K_GEMM_MIN_ROWS 8

void pl_op_qmatmul_rows(pl_ggml_type t, const void *w, size_t row_bytes,
                        const pl_q8_act *x, int n_blk, int n_rows,
                        float *y, int ldy, int o0, int o1)
{
    const uint8_t *wb = w;
    int n = n_blk * PL_QK;
#ifdef PL_HAVE_X86
    if (have_avx2() && pl_qdot_block_order_type(t)) {
        if (n_rows == 1)
            pl_qdot_block_order_row1(t, wb, row_bytes, x, n_blk, y, o0, o1);
        else
            pl_qdot_block_order_rows(t, wb, row_bytes, x, n_blk, n_rows, y, ldy, o0, o1);
        return;
    }
    if (have_avx2()) {
        pthread_once(&fp16_once, fp16_init);
        if (n_rows == 1) {       /* decode: the single-row kernels */
            qmatmul_row1(t, wb, row_bytes, x, n, y, o0, o1);
            return;
        }
        /* Q4_K / Q5_K / Q6_K from K_GEMM_MIN_ROWS rows: 8 weight rows
         * repacked once for all activation rows (qdot_k_repack.c); the
         * rows of the slice past its last group of 8 come below. */
        if (n_rows >= K_GEMM_MIN_ROWS)
            o0 += pl_qdot_k_gemm(pl_qdot_vnni_level(), t, wb, row_bytes, x, n_blk, n_rows, y,
                                 ldy, o0, o1);
        int k = pl_qdot512_available() && pl_qdot512_supported(t) ? 2 : 1;
        /* Activation rows in tiles of ~24 KB, which stay in L1 while every
         * weight row of the slice passes over them (row by row, the whole
         * activation matrix came from L2 once per weight row). */
        pl_vnni_level lv = pl_qdot_vnni_level();
        int tile = (int)(ROW_TILE_BYTES / ((size_t)n_blk * sizeof(pl_q8_act))) & ~3;
        if (tile < 4)
            tile = 4;
        for (int r0 = 0; r0 < n_rows; r0 += tile) {
            int r1 = r0 + tile < n_rows ? r0 + tile : n_rows;
            for (int o = o0; o < o1; o++) {
                const uint8_t *wr = wb + (size_t)o * row_bytes;
                for (int r = r0; r < r1; r += 4) {
                    const pl_q8_act *xr = x + (size_t)r * n_blk;
                    int nr = r1 - r < 4 ? r1 - r : 4;
                    float *yr = y + (size_t)r * ldy + o;
                    if (k == 2)
                        pl_qdot512_rows(t, wr, xr, (size_t)n_blk, n_blk, nr, yr, (size_t)ldy);
                    else if (lv == PL_VNNI_NONE ||
                             !pl_qdot_vnni_rows(lv, t, wr, xr, (size_t)n_blk, n, nr, yr,
                                                (size_t)ldy))
                        pl_qdot_k_rows(t, wr, xr, (size_t)n_blk, n, nr, yr, (size_t)ldy);
                }
            }
        }
        return;
    }
#endif
    for (int o = o0; o < o1; o++) {
        const void *wr = wb + (size_t)o * row_bytes;
        for (int r = 0; r < n_rows; r++)
            y[(size_t)r * ldy + o] = pl_op_qdot_ref(t, wr, x + (size_t)r * n_blk, n);
    }
}
