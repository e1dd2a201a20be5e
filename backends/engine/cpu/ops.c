/* ops.c - element-wise and attention operations of the CPU runner (the C
 * references for the CUDA kernels). Quantised dots live in qdot.c. */
#include "backends/engine/cpu/ops.h"

#include "src/base/cpu_features.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PL_HAVE_X86 1
#endif

void pl_op_rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float inv = 1.0f / sqrtf((float)(ss / n) + eps);
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

float pl_op_softmax(float *x, int n)
{
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++)
        x[i] *= inv;
    return (float)log(sum) + mx;
}

static inline const float *kv_row(const pl_attn_args *a, const float *base, int t)
{
    int32_t blk = a->block_table[t / a->block_size];
    return base + (size_t)blk * a->block_stride + (size_t)(t % a->block_size) * a->row_stride;
}

void pl_op_attention_ref(const pl_attn_args *a, const float *q, int n_q, int n_ctx,
                         float *out, float *scratch)
{
    int hd = a->head_dim;
    for (int t = 0; t < n_ctx; t++) {
        const float *k = kv_row(a, a->k_base, t);
        for (int h = 0; h < n_q; h++)
            scratch[(size_t)h * n_ctx + t] = pl_op_dot_f32(q + (size_t)h * hd, k, hd) * a->scale;
    }
    for (int h = 0; h < n_q; h++)
        pl_op_softmax(scratch + (size_t)h * n_ctx, n_ctx);
    memset(out, 0, sizeof(float) * (size_t)n_q * hd);
    for (int t = 0; t < n_ctx; t++) {
        const float *v = kv_row(a, a->v_base, t);
        for (int h = 0; h < n_q; h++)
            pl_op_axpy_f32(out + (size_t)h * hd, scratch[(size_t)h * n_ctx + t], v, hd);
    }
}

#ifdef PL_HAVE_X86
/* The same computation with the head loop inlined: one K/V row load serves
 * the whole GQA group, and no call per (position, head). head_dim % 8 == 0. */
__attribute__((target("avx2,fma")))
static void attention_avx2(const pl_attn_args *a, const float *q, int n_q, int n_ctx,
                           float *out, float *scratch)
{
    int hd = a->head_dim;
    for (int t = 0; t < n_ctx; t++) {
        const float *k = kv_row(a, a->k_base, t);
        for (int h = 0; h < n_q; h++) {
            const float *qh = q + (size_t)h * hd;
            __m256 acc = _mm256_setzero_ps();
            for (int i = 0; i < hd; i += 8)
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(qh + i), _mm256_loadu_ps(k + i), acc);
            __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
            s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            s = _mm_add_ss(s, _mm_movehdup_ps(s));
            scratch[(size_t)h * n_ctx + t] = _mm_cvtss_f32(s) * a->scale;
        }
    }
    for (int h = 0; h < n_q; h++)
        pl_op_softmax(scratch + (size_t)h * n_ctx, n_ctx);
    memset(out, 0, sizeof(float) * (size_t)n_q * hd);
    for (int t = 0; t < n_ctx; t++) {
        const float *v = kv_row(a, a->v_base, t);
        for (int h = 0; h < n_q; h++) {
            float *oh = out + (size_t)h * hd;
            __m256 p = _mm256_set1_ps(scratch[(size_t)h * n_ctx + t]);
            for (int i = 0; i < hd; i += 8)
                _mm256_storeu_ps(oh + i, _mm256_fmadd_ps(p, _mm256_loadu_ps(v + i),
                                                         _mm256_loadu_ps(oh + i)));
        }
    }
}
#endif

void pl_op_attention(const pl_attn_args *a, const float *q, int n_q, int n_ctx,
                     float *out, float *scratch)
{
#ifdef PL_HAVE_X86
    const pl_cpu_feature_set *cpu = pl_cpu_features();
    if (cpu->avx2 && cpu->fma && a->head_dim % 8 == 0) {
        attention_avx2(a, q, n_q, n_ctx, out, scratch);
        return;
    }
#endif
    pl_op_attention_ref(a, q, n_q, n_ctx, out, scratch);
}
