/* attn_decode.cu - decode attention over the paged KV cache.
 *
 * grid (n_rows, n_heads), 4 warps; with a row list, block x takes row rows[x]
 * (the decode rows of a mixed step). Each warp walks every 4th key with an
 * online softmax; lanes hold pairs of head dimensions (bf16x2 loads), the
 * q.k dot is a warp reduction. The four partial states are merged in
 * shared memory at the end. */
#include <math.h>

#include "backends/engine/cuda/attn_decode.cuh"

#define DEC_WARPS 4

template <int NP> /* bf16 pairs per lane: head_dim / 64 */
static __global__ void attn_decode_kernel(const float *q, int q_stride,
                                          const int32_t *positions, const int32_t *rows,
                                          const int32_t *row_seq, const int32_t *bt,
                                          pl_kv_geom g, const __nv_bfloat16 *kc,
                                          const __nv_bfloat16 *vc, __nv_bfloat16 *out,
                                          int n_heads, float scale)
{
    __shared__ float sm_m[DEC_WARPS], sm_l[DEC_WARPS];
    __shared__ float sm_acc[DEC_WARPS][NP * 64];
    int r = rows ? rows[blockIdx.x] : blockIdx.x, h = blockIdx.y;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int hd = NP * 64, kvh = h / (n_heads / g.n_kv_heads);
    int n_keys = positions[r] + 1;
    const int32_t *tab = bt + (size_t)row_seq[r] * g.max_blocks_per_seq;
    const float *qr = q + (size_t)r * q_stride + (size_t)h * hd;
    float2 qv[NP], acc[NP];
    for (int p = 0; p < NP; p++) {
        qv[p] = make_float2(qr[2 * lane + 64 * p] * scale, qr[2 * lane + 64 * p + 1] * scale);
        acc[p] = make_float2(0.0f, 0.0f);
    }
    float m = -INFINITY, l = 0.0f;
    for (int t = w; t < n_keys; t += DEC_WARPS) {
        int blk = tab[t / g.block_size];
        if (blk < 0 || blk >= g.n_blocks)
            continue;
        size_t base = (((size_t)blk * g.block_size + t % g.block_size) * g.n_kv_heads
                       + kvh) * hd;
        const __nv_bfloat162 *k2 = (const __nv_bfloat162 *)(kc + base);
        const __nv_bfloat162 *v2 = (const __nv_bfloat162 *)(vc + base);
        float s = 0.0f;
        for (int p = 0; p < NP; p++) {
            float2 k = __bfloat1622float2(k2[lane + 32 * p]);
            s += qv[p].x * k.x + qv[p].y * k.y;
        }
        s = pl_warp_sum(s);
        float mn = fmaxf(m, s);
        float corr = expf(m - mn), pw = expf(s - mn);
        l = l * corr + pw;
        for (int p = 0; p < NP; p++) {
            float2 v = __bfloat1622float2(v2[lane + 32 * p]);
            acc[p].x = acc[p].x * corr + pw * v.x;
            acc[p].y = acc[p].y * corr + pw * v.y;
        }
        m = mn;
    }
    if (lane == 0) {
        sm_m[w] = m;
        sm_l[w] = l;
    }
    for (int p = 0; p < NP; p++) {
        sm_acc[w][2 * lane + 64 * p] = acc[p].x;
        sm_acc[w][2 * lane + 64 * p + 1] = acc[p].y;
    }
    __syncthreads();
    float gm = -INFINITY;
    for (int i = 0; i < DEC_WARPS; i++)
        gm = fmaxf(gm, sm_m[i]);
    float gl = 0.0f, f[DEC_WARPS];
    for (int i = 0; i < DEC_WARPS; i++) {
        f[i] = sm_m[i] == -INFINITY ? 0.0f : expf(sm_m[i] - gm);
        gl += sm_l[i] * f[i];
    }
    float inv = gl > 0.0f ? 1.0f / gl : 0.0f;
    __nv_bfloat16 *o = out + (size_t)r * n_heads * hd + (size_t)h * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0.0f;
        for (int i = 0; i < DEC_WARPS; i++)
            a += sm_acc[i][d] * f[i];
        o[d] = __float2bfloat16(a * inv);
    }
}

extern "C" int pl_cuda_attn_decode(const float *q, int q_stride, const int32_t *positions,
                                   const int32_t *row_seq, const int32_t *block_table,
                                   pl_kv_geom g, const pl_bf16 *k_cache,
                                   const pl_bf16 *v_cache, pl_bf16 *out, int n_rows,
                                   int n_heads, float scale, cudaStream_t st)
{
    return pl_cuda_attn_decode_rows(q, q_stride, positions, NULL, row_seq, block_table, g,
                                    k_cache, v_cache, out, n_rows, n_heads, scale, st);
}

extern "C" int pl_cuda_attn_decode_rows(const float *q, int q_stride,
                                        const int32_t *positions, const int32_t *rows,
                                        const int32_t *row_seq, const int32_t *block_table,
                                        pl_kv_geom g, const pl_bf16 *k_cache,
                                        const pl_bf16 *v_cache, pl_bf16 *out, int n_rows,
                                        int n_heads, float scale, cudaStream_t st)
{
    PL_CUDA_ARG(q && positions && row_seq && block_table && k_cache && v_cache && out);
    PL_CUDA_ARG(g.head_dim % 64 == 0 && g.head_dim <= 256 && g.block_size > 0);
    PL_CUDA_ARG(n_heads > 0 && g.n_kv_heads > 0 && n_heads % g.n_kv_heads == 0);
    PL_CUDA_ARG(q_stride >= n_heads * g.head_dim && n_rows >= 0);
    if (n_rows == 0)
        return 0;
    dim3 grid(n_rows, n_heads);
    const __nv_bfloat16 *kc = (const __nv_bfloat16 *)k_cache;
    const __nv_bfloat16 *vc = (const __nv_bfloat16 *)v_cache;
    __nv_bfloat16 *o = (__nv_bfloat16 *)out;
    switch (g.head_dim / 64) {
    case 1: attn_decode_kernel<1><<<grid, 32 * DEC_WARPS, 0, st>>>(q, q_stride, positions,
                rows, row_seq, block_table, g, kc, vc, o, n_heads, scale); break;
    case 2: attn_decode_kernel<2><<<grid, 32 * DEC_WARPS, 0, st>>>(q, q_stride, positions,
                rows, row_seq, block_table, g, kc, vc, o, n_heads, scale); break;
    case 3: attn_decode_kernel<3><<<grid, 32 * DEC_WARPS, 0, st>>>(q, q_stride, positions,
                rows, row_seq, block_table, g, kc, vc, o, n_heads, scale); break;
    default: attn_decode_kernel<4><<<grid, 32 * DEC_WARPS, 0, st>>>(q, q_stride, positions,
                rows, row_seq, block_table, g, kc, vc, o, n_heads, scale); break;
    }
    PL_CUDA_LAUNCHED();
    return 0;
}
