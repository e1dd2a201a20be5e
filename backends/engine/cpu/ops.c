/* ops.c - element-wise and attention operations of the CPU runner (the C
 * references for the CUDA kernels). Quantised dots live in qdot.c. */
#include "backends/engine/cpu/ops.h"

#include "src/base/cpu_features.h"
#include "src/base/half.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "backends/engine/cpu/simd_x86.h"
#define PL_HAVE_X86 1
#endif

#ifdef PL_HAVE_X86
/* Rounds to nearest even, as pl_fp32_to_fp16; returns the elements done. */
__attribute__((target("avx2,f16c")))
static int f32_to_f16_f16c(uint16_t *dst, const float *src, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    return i;
}
#endif

void pl_op_rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float inv = 1.0f / sqrtf((float)(ss / n) + eps);
    if (!w) {                    /* unweighted (Gemma 4's V) */
        for (int i = 0; i < n; i++)
            out[i] = x[i] * inv;
        return;
    }
    for (int i = 0; i < n; i++)
        out[i] = x[i] * inv * w[i];
}

void pl_op_rope(float *x, int n_heads, int head_dim, int n_rot, int pos,
                const float *inv_freq, int neox)
{
    int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        float th = (float)pos * inv_freq[i];
        float c = cosf(th), s = sinf(th);
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)h * head_dim;
            int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
            float a = v[i0], b = v[i1];
            v[i0] = a * c - b * s;
            v[i1] = a * s + b * c;
        }
    }
}

void pl_op_swiglu(float *gate, const float *up, int n)
{
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

/* tanh(x) as a rational function of x (the 13/6 one of Eigen's
 * generic_fast_tanh_float: within 6 float ulps of tanh; +-1 from
 * |x| = 7.9 on, where tanh is 1 - 2.8e-7). Plain element-wise C compiled for the
 * baseline ISA, so that the compiler vectorises it the same way whatever
 * PARLEY_CPU_ISA allows: every path gets the same bits. GeGLU's libm tanhf
 * took a sixth of Gemma's prefill. */
static inline float tanh_rational(float x)
{
    const float lim = 7.90531110763549805f;
    x = x > lim ? lim : x < -lim ? -lim : x;
    float x2 = x * x;
    float p = -2.76076847742355e-16f;
    p = p * x2 + 2.00018790482477e-13f;
    p = p * x2 + -8.60467152213735e-11f;
    p = p * x2 + 5.12229709037114e-08f;
    p = p * x2 + 1.48572235717979e-05f;
    p = p * x2 + 6.37261928875436e-04f;
    p = p * x2 + 4.89352455891786e-03f;
    float q = 1.19825839466702e-06f;
    q = q * x2 + 1.18534705686654e-04f;
    q = q * x2 + 2.26843463243900e-03f;
    q = q * x2 + 4.89352518554385e-03f;
    return x * p / q;
}

void pl_op_geglu(float *gate, const float *up, int n)
{
    const float c = 0.79788456080286535588f, a = 0.044715f;   /* sqrt(2/pi) */
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = 0.5f * g * (1.0f + tanh_rational(c * g * (1.0f + a * g * g))) * up[i];
    }
}

void pl_op_softcap(float *x, int n, float cap)
{
    float inv = 1.0f / cap;
    for (int i = 0; i < n; i++)
        x[i] = cap * tanh_rational(x[i] * inv);
}

void pl_op_swiglu_oai(float *gate, const float *up, int n, float alpha, float limit)
{
    for (int i = 0; i < n; i++) {
        float g = gate[i] < limit ? gate[i] : limit;
        float u = up[i] < -limit ? -limit : up[i] > limit ? limit : up[i];
        gate[i] = g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
    }
}

#ifdef PL_HAVE_X86
/* softmax_with on 8 lanes: exp256 (within 2 ulp of expf) instead of a libm
 * call per element, the denominator summed in doubles lane-wise, the
 * lanes by element index, so a row's value never depends on its batch. */
__attribute__((target("avx2,fma"))) static float softmax_avx2(float *x, int n, float sink)
{
    float mx = row_max_avx2(x, n, sink);
    __m256 m = _mm256_set1_ps(mx), ninf = _mm256_set1_ps(-INFINITY);
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        /* exp256 clamps: e^-inf would be 1.2e-38, not 0 */
        __m256 e = _mm256_and_ps(exp256(_mm256_sub_ps(v, m)), _mm256_cmp_ps(v, ninf, _CMP_NEQ_OQ));
        _mm256_storeu_ps(x + i, e);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double d[4];
    _mm256_storeu_pd(d, _mm256_add_pd(s0, s1));
    double sum = (double)expf(sink - mx) + ((d[0] + d[1]) + (d[2] + d[3]));
    for (; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    __m256 inv8 = _mm256_set1_ps(inv);
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv8));
    for (; i < n; i++)
        x[i] *= inv;
    return (float)log(sum) + mx;
}
#endif

/* Softmax of x[0..n) with sink's term in the denominator (-INFINITY:
 * none); the log of the denominator. */
static float softmax_with(float *x, int n, float sink)
{
#ifdef PL_HAVE_X86
    if (pl_cpu_has_avx2())
        return softmax_avx2(x, n, sink);
#endif
    float mx = sink;
    for (int i = 0; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    double sum = expf(sink - mx);
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++)
        x[i] *= inv;
    return (float)log(sum) + mx;
}

void pl_op_softmax_sink(float *x, int n, float sink) { softmax_with(x, n, sink); }

float pl_op_softmax(float *x, int n) { return softmax_with(x, n, -INFINITY); }

static inline const char *kv_row(const pl_attn_args *a, const void *base, int t)
{
    int32_t blk = a->block_table[t / a->block_size];
    size_t esz = a->kv_f16 ? 2 : 4;
    return (const char *)base + esz * ((size_t)blk * a->block_stride +
                                       (size_t)(t % a->block_size) * a->row_stride);
}

/* Row t of K or V as floats: in place (f32), or widened into buf (f16). */
static const float *kv_row_f32(const pl_attn_args *a, const void *base, int t, float *buf)
{
    const char *r = kv_row(a, base, t);
    if (!a->kv_f16)
        return (const float *)(const void *)r;
    for (int i = 0; i < a->head_dim; i++) {
        uint16_t h;
        memcpy(&h, r + 2 * i, 2);
        buf[i] = pl_fp16_to_fp32(h);
    }
    return buf;
}

static void attn_scores_ref(const pl_attn_args *a, const float *q, int n_q, int t0, int t1,
                            float *scores, size_t stride)
{
    int hd = a->head_dim;
    float buf[PL_ATTN_MAX_F16_HEAD_DIM];
    for (int t = t0; t < t1; t++) {
        const float *k = kv_row_f32(a, a->k_base, t, buf);
        for (int h = 0; h < n_q; h++)
            scores[(size_t)h * stride + t] = pl_op_dot_f32(q + (size_t)h * hd, k, hd) * a->scale;
    }
}

/* Dims [d0, d1) (d0 a multiple of 8, so pl_op_axpy_f32's vector and tail
 * elements are those of the whole row). */
static void attn_values_ref(const pl_attn_args *a, const float *p, size_t stride, int n_q,
                            int n_ctx, int d0, int d1, float *out)
{
    int hd = a->head_dim;
    float buf[PL_ATTN_MAX_F16_HEAD_DIM];
    for (int h = 0; h < n_q; h++)
        memset(out + (size_t)h * hd + d0, 0, sizeof(float) * (size_t)(d1 - d0));
    for (int t = a->first; t < n_ctx; t++) {
        const float *v = kv_row_f32(a, a->v_base, t, buf);
        for (int h = 0; h < n_q; h++)
            pl_op_axpy_f32(out + (size_t)h * hd + d0, p[(size_t)h * stride + t], v + d0, d1 - d0);
    }
}

/* Soft-capping after the scaled dot products, the same scalar code on
 * every path. */
static void scores_softcap(const pl_attn_args *a, int n_q, int t0, int t1, float *scores,
                           size_t stride)
{
    if (a->softcap > 0 && t1 > t0)
        for (int h = 0; h < n_q; h++)
            pl_op_softcap(scores + (size_t)h * stride + t0, t1 - t0, a->softcap);
}

typedef void attn_scores_fn(const pl_attn_args *a, const float *q, int n_q, int t0, int t1,
                            float *scores, size_t stride);
typedef void attn_values_fn(const pl_attn_args *a, const float *p, size_t stride, int n_q,
                            int n_ctx, int d0, int d1, float *out);

/* The whole attention from its parts: the scores of every position, a
 * softmax per query head, then every dim of the values (pl_op_attention
 * and its reference, from their own parts). */
static void attention_from(attn_scores_fn *scores, attn_values_fn *values,
                           const pl_attn_args *a, const float *q, int n_q, int n_ctx,
                           float *out, float *scratch)
{
    scores(a, q, n_q, a->first, n_ctx, scratch, (size_t)n_ctx);
    for (int h = 0; h < n_q; h++)
        if (a->sinks)
            pl_op_softmax_sink(scratch + (size_t)h * n_ctx + a->first, n_ctx - a->first,
                               a->sinks[h]);
        else
            pl_op_softmax(scratch + (size_t)h * n_ctx + a->first, n_ctx - a->first);
    values(a, scratch, (size_t)n_ctx, n_q, n_ctx, 0, a->head_dim, out);
}

static void attn_scores_capped_ref(const pl_attn_args *a, const float *q, int n_q, int t0,
                                   int t1, float *scores, size_t stride)
{
    attn_scores_ref(a, q, n_q, t0, t1, scores, stride);
    scores_softcap(a, n_q, t0, t1, scores, stride);
}

void pl_op_attention_ref(const pl_attn_args *a, const float *q, int n_q, int n_ctx,
                         float *out, float *scratch)
{
    attention_from(attn_scores_capped_ref, attn_values_ref, a, q, n_q, n_ctx, out, scratch);
}

void pl_op_f32_to_f16_row(uint16_t *dst, const float *src, int n)
{
    int i = 0;
#ifdef PL_HAVE_X86
    if (pl_cpu_features()->f16c)
        i = f32_to_f16_f16c(dst, src, n);
#endif
    for (; i < n; i++)
        dst[i] = pl_fp32_to_fp16(src[i]);
}

#ifdef PL_HAVE_X86
/* The horizontal sums of four vectors, lane r of the result from c[r], each
 * added in the order of the one-vector sum (lo + hi, then lanes 0+2 and 1+3,
 * then those two), so a score does not depend on its neighbours. */
__attribute__((target("avx2,fma")))
static inline __m128 hsum8x4(__m256 c0, __m256 c1, __m256 c2, __m256 c3)
{
    __m128 x0 = _mm_add_ps(_mm256_castps256_ps128(c0), _mm256_extractf128_ps(c0, 1));
    __m128 x1 = _mm_add_ps(_mm256_castps256_ps128(c1), _mm256_extractf128_ps(c1, 1));
    __m128 x2 = _mm_add_ps(_mm256_castps256_ps128(c2), _mm256_extractf128_ps(c2, 1));
    __m128 x3 = _mm_add_ps(_mm256_castps256_ps128(c3), _mm256_extractf128_ps(c3, 1));
    _MM_TRANSPOSE4_PS(x0, x1, x2, x3);   /* x_j = lane j of the four */
    return _mm_add_ps(_mm_add_ps(x0, x2), _mm_add_ps(x1, x3));
}

__attribute__((target("avx2,fma")))
static inline float hsum8_att(__m256 c)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* A walk over positions' K or V rows in order, with no division per row
 * (strides in bytes). */
typedef struct kv_walk {
    const char *base;
    const int32_t *bt;
    size_t block_stride, row_stride;
    int block_size, blk, slot;
} kv_walk;

static inline kv_walk kv_walk_at(const pl_attn_args *a, const void *base, int t)
{
    size_t esz = a->kv_f16 ? 2 : 4;
    return (kv_walk){.base = base, .bt = a->block_table, .block_stride = esz * a->block_stride,
                     .row_stride = esz * a->row_stride, .block_size = a->block_size,
                     .blk = t / a->block_size, .slot = t % a->block_size};
}

static inline const char *kv_walk_next(kv_walk *w)
{
    const char *r = w->base + (size_t)w->bt[w->blk] * w->block_stride +
                    (size_t)w->slot * w->row_stride;
    if (++w->slot == w->block_size) {
        w->slot = 0;
        w->blk++;
    }
    return r;
}

/* Eight K/V elements from i of row r, widened from f16 when f16 (a
 * constant in each instantiation below). */
__attribute__((target("avx2,fma,f16c")))
static inline __m256 kv_load8(const char *r, int i, int f16)
{
    if (f16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(r + 2 * i)));
    return _mm256_loadu_ps((const float *)(const void *)r + i);
}

/* Rows this far ahead are fetched early: a head's rows are contiguous only
 * within a block, and the blocks of a sequence lie anywhere in the pool. */
#define ATT_AHEAD 16

__attribute__((target("avx2,fma")))
static inline void prefetch_row(const char *r, int bytes)
{
    for (int i = 0; i < bytes; i += 64)
        _mm_prefetch(r + i, _MM_HINT_T0);
}

/* scores[t0..t0+8) of head q: eight independent FMA chains (each over the
 * head dim in order, as for one position alone) share each q load. */
__attribute__((target("avx2,fma,f16c"), always_inline))
static inline void att_scores8(const char *const *k, const float *q, int hd, __m128 sc4,
                               float *s, int f16)
{
    __m256 c[8];
    for (int j = 0; j < 8; j++)
        c[j] = _mm256_setzero_ps();
    for (int i = 0; i < hd; i += 8) {
        __m256 qv = _mm256_loadu_ps(q + i);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            c[j] = _mm256_fmadd_ps(qv, kv_load8(k[j], i, f16), c[j]);
    }
    _mm_storeu_ps(s, _mm_mul_ps(hsum8x4(c[0], c[1], c[2], c[3]), sc4));
    _mm_storeu_ps(s + 4, _mm_mul_ps(hsum8x4(c[4], c[5], c[6], c[7]), sc4));
}

/* scores[h * stride + t] = scale * q_h . k_t for t in [t0, t1). */
__attribute__((target("avx2,fma,f16c"), always_inline))
static inline void att_scores(const pl_attn_args *a, const float *q, int n_q, int t0, int t1,
                              float *scores, size_t stride, int f16)
{
    int hd = a->head_dim, t = t0, row_bytes = hd * (f16 ? 2 : 4);
    __m128 sc4 = _mm_set1_ps(a->scale);
    kv_walk w = kv_walk_at(a, a->k_base, t0), ahead = kv_walk_at(a, a->k_base, t0 + ATT_AHEAD);
    for (; t + 8 <= t1; t += 8) {
        const char *k[8];
        for (int j = 0; j < 8; j++) {
            k[j] = kv_walk_next(&w);
            if (t + ATT_AHEAD + j < t1)
                prefetch_row(kv_walk_next(&ahead), row_bytes);
        }
        for (int h = 0; h < n_q; h++)
            att_scores8(k, q + (size_t)h * hd, hd, sc4, scores + (size_t)h * stride + t, f16);
    }
    for (; t < t1; t++) {
        const char *k = kv_walk_next(&w);
        for (int h = 0; h < n_q; h++) {
            __m256 c = _mm256_setzero_ps();
            for (int i = 0; i < hd; i += 8)
                c = _mm256_fmadd_ps(_mm256_loadu_ps(q + (size_t)h * hd + i),
                                    kv_load8(k, i, f16), c);
            scores[(size_t)h * stride + t] = hsum8_att(c) * a->scale;
        }
    }
}

#define ATT_VH 3                 /* heads per pass over V */
#define ATT_VD 32                /* dims per pass over V */

/* Dims [i0, i0 + 8 * nv) of heads [h0, h0 + nh) (nv <= 4, nh <= ATT_VH):
 * out_h = sum over t (in order) of p[h][t] * v_t, each V row's slice read
 * once for all nh heads, the sums held in registers. A lane's sum is the
 * same whatever the slicing. */
__attribute__((target("avx2,fma,f16c"), always_inline))
static inline void att_values_pass(const pl_attn_args *a, const float *p, size_t stride,
                                   int h0, int nh, int n_ctx, int i0, int nv, float *out,
                                   int f16)
{
    int hd = a->head_dim, esz = f16 ? 2 : 4;
    __m256 acc[ATT_VH][4];
    for (int h = 0; h < ATT_VH; h++)
        for (int j = 0; j < 4; j++)
            acc[h][j] = _mm256_setzero_ps();
    const float *ph = p + (size_t)h0 * stride;
    kv_walk w = kv_walk_at(a, a->v_base, a->first);
    kv_walk ahead = kv_walk_at(a, a->v_base, a->first + ATT_AHEAD);
    for (int t = a->first; t < n_ctx; t++) {
        const char *v = kv_walk_next(&w) + esz * i0;
        if (t + ATT_AHEAD < n_ctx)
            prefetch_row(kv_walk_next(&ahead) + esz * i0, nv * 8 * esz);
        if (nv == 4 && nh == ATT_VH) {   /* unrolled: accumulators in registers */
            __m256 v0 = kv_load8(v, 0, f16), v1 = kv_load8(v, 8, f16);
            __m256 v2 = kv_load8(v, 16, f16), v3 = kv_load8(v, 24, f16);
            for (int h = 0; h < ATT_VH; h++) {
                __m256 pt = _mm256_set1_ps(ph[(size_t)h * stride + t]);
                acc[h][0] = _mm256_fmadd_ps(pt, v0, acc[h][0]);
                acc[h][1] = _mm256_fmadd_ps(pt, v1, acc[h][1]);
                acc[h][2] = _mm256_fmadd_ps(pt, v2, acc[h][2]);
                acc[h][3] = _mm256_fmadd_ps(pt, v3, acc[h][3]);
            }
        } else {
            for (int h = 0; h < nh; h++) {
                __m256 pt = _mm256_set1_ps(ph[(size_t)h * stride + t]);
                for (int j = 0; j < nv; j++)
                    acc[h][j] = _mm256_fmadd_ps(pt, kv_load8(v, 8 * j, f16), acc[h][j]);
            }
        }
    }
    for (int h = 0; h < nh; h++)
        for (int j = 0; j < nv; j++)
            _mm256_storeu_ps(out + (size_t)(h0 + h) * hd + i0 + 8 * j, acc[h][j]);
}

/* Dims [d0, d1) (multiples of 8) of the n_q heads' outputs. */
__attribute__((target("avx2,fma,f16c"), always_inline))
static inline void att_values(const pl_attn_args *a, const float *p, size_t stride, int n_q,
                              int n_ctx, int d0, int d1, float *out, int f16)
{
    for (int i0 = d0; i0 < d1; i0 += ATT_VD) {
        int nv = (d1 - i0 < ATT_VD ? d1 - i0 : ATT_VD) / 8;
        for (int h0 = 0; h0 < n_q; h0 += ATT_VH)
            att_values_pass(a, p, stride, h0, n_q - h0 < ATT_VH ? n_q - h0 : ATT_VH, n_ctx,
                            i0, nv, out, f16);
    }
}

__attribute__((target("avx2,fma,f16c")))
static void attn_scores_avx2(const pl_attn_args *a, const float *q, int n_q, int t0, int t1,
                             float *scores, size_t stride)
{
    if (a->kv_f16)
        att_scores(a, q, n_q, t0, t1, scores, stride, 1);
    else
        att_scores(a, q, n_q, t0, t1, scores, stride, 0);
}

__attribute__((target("avx2,fma,f16c")))
static void attn_values_avx2(const pl_attn_args *a, const float *p, size_t stride, int n_q,
                             int n_ctx, int d0, int d1, float *out)
{
    if (a->kv_f16)
        att_values(a, p, stride, n_q, n_ctx, d0, d1, out, 1);
    else
        att_values(a, p, stride, n_q, n_ctx, d0, d1, out, 0);
}

static int attn_avx2(const pl_attn_args *a)
{
    const pl_cpu_feature_set *cpu = pl_cpu_features();
    return cpu->avx2 && cpu->fma && cpu->f16c && a->head_dim % 8 == 0;
}
#endif

void pl_op_attn_scores(const pl_attn_args *a, const float *q, int n_q, int t0, int t1,
                       float *scores, size_t stride)
{
#ifdef PL_HAVE_X86
    if (attn_avx2(a)) {
        attn_scores_avx2(a, q, n_q, t0, t1, scores, stride);
        scores_softcap(a, n_q, t0, t1, scores, stride);
        return;
    }
#endif
    attn_scores_ref(a, q, n_q, t0, t1, scores, stride);
    scores_softcap(a, n_q, t0, t1, scores, stride);
}

void pl_op_attn_values(const pl_attn_args *a, const float *p, size_t stride, int n_q,
                       int n_ctx, int d0, int d1, float *out)
{
#ifdef PL_HAVE_X86
    if (attn_avx2(a)) {
        attn_values_avx2(a, p, stride, n_q, n_ctx, d0, d1, out);
        return;
    }
#endif
    attn_values_ref(a, p, stride, n_q, n_ctx, d0, d1, out);
}

void pl_op_attention(const pl_attn_args *a, const float *q, int n_q, int n_ctx,
                     float *out, float *scratch)
{
    attention_from(pl_op_attn_scores, pl_op_attn_values, a, q, n_q, n_ctx, out, scratch);
}
