/* attn_decode.cu - decode attention over the paged KV cache, one block per
 * (row, query head).
 *
 * grid (n_rows, n_heads), 4 warps; with a row list, block x takes row
 * rows[x] (the decode rows of a mixed step). Warp w walks pages w, w + 4,
 * ... of the row's key range (one block-table load per page) and their
 * keys with an online softmax in log2 units; lanes hold pairs of head
 * dimensions, the q.k dot is a warp reduction. The four partial states are
 * merged in shared memory at the end, where the head's sink (if any) joins
 * the sum. */
#include <math.h>

#include "backends/engine/cuda/attn_decode.cuh"

#define DEC_WARPS 4

template <typename T, int NP> /* T: cache element; NP: pairs per lane (head_dim / 64) */
static __global__ void __launch_bounds__(32 * DEC_WARPS, 8)
attn_decode_kernel(pl_attn_step s, const int32_t *rows, pl_kv_geom g, const T *kc,
                   const T *vc, const float *ks, const float *vs, pl_attn_opts o)
{
    __shared__ float sm_m[DEC_WARPS], sm_l[DEC_WARPS];
    __shared__ float sm_acc[DEC_WARPS][NP * 64];
    const int hd = NP * 64;
    int r = rows ? rows[blockIdx.x] : blockIdx.x, h = blockIdx.y;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int kvh = h / (s.n_heads / g.n_kv_heads);
    int pos = s.positions[r], lo = pl_window_lo(pos, o.window);
    pl_pages pg = pl_pages_of(s.block_table, s.row_seq[r], g);
    pl_score sc = pl_score_of(o, ks ? ks[kvh] : 1.0f);
    const float *qr = s.q + (size_t)r * s.q_stride + (size_t)h * hd;
    float2 qv[NP], acc[NP];
#pragma unroll
    for (int p = 0; p < NP; p++) {
        qv[p] = make_float2(qr[2 * lane + 64 * p] * sc.qs, qr[2 * lane + 64 * p + 1] * sc.qs);
        acc[p] = make_float2(0.0f, 0.0f);
    }
    float m = -INFINITY, l = 0.0f;
    size_t tok_stride = (size_t)g.n_kv_heads * hd;
    for (int page = (lo >> pg.shift) + w; page <= pos >> pg.shift; page += DEC_WARPS) {
        int blk = pg.blk(page);
        if (blk < 0)
            continue;
        int ta = max(lo, page << pg.shift), tb = min(pos + 1, (page + 1) << pg.shift);
        size_t base = ((size_t)blk * g.block_size + (ta & (g.block_size - 1))) * tok_stride
                      + (size_t)kvh * hd + 2 * lane;
        for (int t = ta; t < tb; t++, base += tok_stride) {
            float d = 0.0f, k[NP][2], v[NP][2];
#pragma unroll
            for (int p = 0; p < NP; p++) {
                pl_kv_load<2>(kc + base + 64 * p, k[p]);
                pl_kv_load<2>(vc + base + 64 * p, v[p]);
                d += qv[p].x * k[p][0] + qv[p].y * k[p][1];
            }
            float sv = pl_score_fix(pl_warp_sum(d), sc);
            float mn = fmaxf(m, sv);
            float corr = exp2f(m - mn), pw = exp2f(sv - mn);
            l = l * corr + pw;
#pragma unroll
            for (int p = 0; p < NP; p++) {
                acc[p].x = acc[p].x * corr + pw * v[p][0];
                acc[p].y = acc[p].y * corr + pw * v[p][1];
            }
            m = mn;
        }
    }
    if (lane == 0) {
        sm_m[w] = m;
        sm_l[w] = l;
    }
#pragma unroll
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
        f[i] = sm_m[i] == -INFINITY ? 0.0f : exp2f(sm_m[i] - gm);
        gl += sm_l[i] * f[i];
    }
    gl = pl_sink_sum(gl, gm, o.sinks, h);
    float inv = gl > 0.0f ? (vs ? vs[kvh] : 1.0f) / gl : 0.0f;
    __nv_bfloat16 *out = (__nv_bfloat16 *)s.out + (size_t)r * s.n_heads * hd + (size_t)h * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0.0f;
        for (int i = 0; i < DEC_WARPS; i++)
            a += sm_acc[i][d] * f[i];
        out[d] = __float2bfloat16(a * inv);
    }
}

template <typename T, int NP>
static void launch_rows(const pl_attn_step *s, pl_kv_geom g, pl_kv_layer kv, pl_attn_opts o,
                        const int32_t *rows, int n_rows, cudaStream_t st)
{
    attn_decode_kernel<T, NP><<<dim3(n_rows, s->n_heads), 32 * DEC_WARPS, 0, st>>>(
        *s, rows, g, (const T *)kv.k, (const T *)kv.v,
        g.dtype == PL_KV_FP8 ? kv.k_scale : NULL, g.dtype == PL_KV_FP8 ? kv.v_scale : NULL, o);
}

template <typename T>
static void launch_rows_t(const pl_attn_step *s, pl_kv_geom g, pl_kv_layer kv,
                          pl_attn_opts o, const int32_t *rows, int n_rows, cudaStream_t st)
{
    switch (g.head_dim / 64) {
    case 1: launch_rows<T, 1>(s, g, kv, o, rows, n_rows, st); break;
    case 2: launch_rows<T, 2>(s, g, kv, o, rows, n_rows, st); break;
    case 3: launch_rows<T, 3>(s, g, kv, o, rows, n_rows, st); break;
    case 4: launch_rows<T, 4>(s, g, kv, o, rows, n_rows, st); break;
    default: launch_rows<T, 8>(s, g, kv, o, rows, n_rows, st); break;   /* Gemma 4's 512 */
    }
}

extern "C" int pl_cuda_attn_rows_supported(int head_dim)
{
    return head_dim == 64 || head_dim == 128 || head_dim == 192 || head_dim == 256 ||
           head_dim == 512;
}

extern "C" int pl_cuda_attn_decode_rows(const pl_attn_step *s, pl_kv_geom g, pl_kv_layer kv,
                                        pl_attn_opts o, const int32_t *rows, int n_rows,
                                        cudaStream_t st)
{
    PL_CUDA_ARG(s && s->q && s->positions && s->row_seq && s->block_table && s->out);
    PL_CUDA_ARG(kv.k && kv.v && pl_attn_opts_ok(o));
    PL_CUDA_ARG(pl_cuda_attn_rows_supported(g.head_dim) && g.block_size > 0);
    PL_CUDA_ARG((g.block_size & (g.block_size - 1)) == 0);
    PL_CUDA_ARG(s->n_heads > 0 && g.n_kv_heads > 0 && s->n_heads % g.n_kv_heads == 0);
    PL_CUDA_ARG(s->q_stride >= s->n_heads * g.head_dim && n_rows >= 0);
    PL_CUDA_ARG(g.dtype == PL_KV_BF16 || g.dtype == PL_KV_FP8);
    if (n_rows == 0)
        return 0;
    if (g.dtype == PL_KV_FP8)
        launch_rows_t<pl_e4m3>(s, g, kv, o, rows, n_rows, st);
    else
        launch_rows_t<__nv_bfloat16>(s, g, kv, o, rows, n_rows, st);
    PL_CUDA_LAUNCHED();
    return 0;
}
