/* hdot.c - F16/BF16 weight x f32 activation dot products (hdot.h): the
 * scalar reference, which follows the AVX2 kernel's order lane by lane, and
 * the AVX2+F16C kernel (4 activation rows per pass over a weight row, the
 * activations in L1-sized tiles, as the quantised kernels do). */
#include "backends/engine/cpu/hdot.h"

#include <math.h>
#include <string.h>

#include "src/base/cpu_features.h"
#include "src/base/half.h"
#include "src/base/le.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "backends/engine/cpu/simd_x86.h"
#define PL_HAVE_X86 1
#endif

#define TILE_BYTES (24 * 1024)

int pl_op_hdot_supported(pl_ggml_type t)
{
    return t == PL_GGML_TYPE_F16 || t == PL_GGML_TYPE_BF16;
}

static inline float widen_(pl_ggml_type t, const uint8_t *p)
{
    uint16_t h = pl_le16(p);
    return t == PL_GGML_TYPE_BF16 ? pl_bf16_to_fp32(h) : pl_fp16_to_fp32(h);
}

float pl_op_hdot_ref(pl_ggml_type t, const void *w, const float *x, int n)
{
    const uint8_t *b = w;
    float a0[8] = {0}, a1[8] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 8; l++) {
            a0[l] = fmaf(widen_(t, b + 2 * (i + l)), x[i + l], a0[l]);
            a1[l] = fmaf(widen_(t, b + 2 * (i + 8 + l)), x[i + 8 + l], a1[l]);
        }
    if (i + 8 <= n) {
        for (int l = 0; l < 8; l++)
            a0[l] = fmaf(widen_(t, b + 2 * (i + l)), x[i + l], a0[l]);
        i += 8;
    }
    float v[8], s[4];
    for (int l = 0; l < 8; l++)
        v[l] = a0[l] + a1[l];
    for (int l = 0; l < 4; l++)          /* hsum8: halves, then pairs */
        s[l] = v[l] + v[l + 4];
    float r = (s[0] + s[2]) + (s[1] + s[3]);
    for (; i < n; i++)
        r = fmaf(widen_(t, b + 2 * i), x[i], r);
    return r;
}

#ifdef PL_HAVE_X86
#define T2 __attribute__((target("avx2,fma,f16c")))

T2 static inline __m256 load8_(int bf16, const uint8_t *p)
{
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)p);
    if (bf16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

/* Weight row w against up to 4 activation rows x (n apart), into y (ldy
 * apart). */
T2 static void rows4_(int bf16, const uint8_t *w, const float *x, int n, int nr, float *y,
                      size_t ldy)
{
    __m256 a0[4], a1[4];
    for (int r = 0; r < 4; r++)
        a0[r] = a1[r] = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 w0 = load8_(bf16, w + 2 * i), w1 = load8_(bf16, w + 2 * (i + 8));
        for (int r = 0; r < nr; r++) {
            const float *xr = x + (size_t)r * n + i;
            a0[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xr), a0[r]);
            a1[r] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xr + 8), a1[r]);
        }
    }
    if (i + 8 <= n) {
        __m256 w0 = load8_(bf16, w + 2 * i);
        for (int r = 0; r < nr; r++)
            a0[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + (size_t)r * n + i), a0[r]);
        i += 8;
    }
    pl_ggml_type t = bf16 ? PL_GGML_TYPE_BF16 : PL_GGML_TYPE_F16;
    for (int r = 0; r < nr; r++) {
        float s = hsum8(_mm256_add_ps(a0[r], a1[r]));
        for (int k = i; k < n; k++)
            s = fmaf(widen_(t, w + 2 * k), x[(size_t)r * n + k], s);
        y[(size_t)r * ldy] = s;
    }
}

T2 static void hmatmul_avx2_(int bf16, const uint8_t *wb, size_t row_bytes, const float *x,
                             int n, int n_rows, float *y, int ldy, int o0, int o1)
{
    int tile = (int)(TILE_BYTES / ((size_t)n * sizeof(float))) & ~3;
    if (tile < 4)
        tile = 4;
    for (int r0 = 0; r0 < n_rows; r0 += tile) {
        int r1 = r0 + tile < n_rows ? r0 + tile : n_rows;
        for (int o = o0; o < o1; o++)
            for (int r = r0; r < r1; r += 4)
                rows4_(bf16, wb + (size_t)o * row_bytes, x + (size_t)r * n, n,
                       r1 - r < 4 ? r1 - r : 4, y + (size_t)r * ldy + o, (size_t)ldy);
    }
}
#endif

void pl_op_hmatmul_rows(pl_ggml_type t, const void *w, size_t row_bytes, const float *x, int n,
                        int n_rows, float *y, int ldy, int o0, int o1)
{
    const uint8_t *wb = w;
#ifdef PL_HAVE_X86
    if (pl_cpu_has_avx2()) {
        hmatmul_avx2_(t == PL_GGML_TYPE_BF16, wb, row_bytes, x, n, n_rows, y, ldy, o0, o1);
        return;
    }
#endif
    for (int o = o0; o < o1; o++)
        for (int r = 0; r < n_rows; r++)
            y[(size_t)r * ldy + o] = pl_op_hdot_ref(t, wb + (size_t)o * row_bytes,
                                                    x + (size_t)r * n, n);
}
