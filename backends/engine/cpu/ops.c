/* ops.c - element-wise and attention operations of the CPU runner (the C
 * references for the CUDA kernels). Quantised dots live in qdot.c. */
#include "backends/engine/cpu/ops.h"

#include <math.h>
#include <string.h>

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

void pl_op_attention(const pl_attn_args *a, const float *q, int n_q, int n_ctx,
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
