/* attn_decode_split.cu - split-KV, GQA-grouped decode attention on CUDA
 * cores, the merge of the splits, and the dispatch of every split kind.
 *
 * grid (n_rows, n_kv_heads, n_splits), 4 warps. A block takes one KV head
 * of one row and the split's whole pages of the row's keys; it loads each
 * key and value once for the G = n_heads / n_kv_heads query heads of the
 * group. Warp w walks pages w, w + 4, ... of the split (one block-table
 * load per page) with one online softmax per query head in log2 units;
 * the warps are merged in shared memory. With one split the block writes
 * the output; otherwise it writes (max, sum, unnormalised accumulator) per
 * query head to the workspace and a second kernel merges the splits. The
 * split count is fixed per batch size (a CUDA graph's bucket):
 * pl_cuda_attn_split_plan. The tensor-core kind is attn_decode_mma.cu. */
#include <math.h>

#include "backends/engine/cuda/attn_split.cuh"

/* One key (k, v: this lane's pairs) into the online softmax of each of the
 * G query heads: score by warp sum, rescale by the new max, accumulate. */
template <int NP, int G>
static __device__ __forceinline__ void online_update(const float2 (&qv)[G][NP],
                                                     const float (&k)[NP][2],
                                                     const float (&v)[NP][2], pl_score sc,
                                                     float (&m)[G], float (&l)[G],
                                                     float2 (&acc)[G][NP])
{
#pragma unroll
    for (int j = 0; j < G; j++) {
        float d = 0.0f;
#pragma unroll
        for (int p = 0; p < NP; p++)
            d += qv[j][p].x * k[p][0] + qv[j][p].y * k[p][1];
        float s = pl_score_fix(pl_warp_sum(d), sc);
        float mn = fmaxf(m[j], s);
        float corr = exp2f(m[j] - mn), pw = exp2f(s - mn);
        l[j] = l[j] * corr + pw;
#pragma unroll
        for (int p = 0; p < NP; p++) {
            acc[j][p].x = acc[j][p].x * corr + pw * v[p][0];
            acc[j][p].y = acc[j][p].y * corr + pw * v[p][1];
        }
        m[j] = mn;
    }
}

/* The row, its split's keys [t0, t1), its pages, and the query scale. */
struct split_ctx {
    int r, kvh, sp, ns, t0, t1;
    pl_pages pg;
    pl_score sc;
};

static __device__ __forceinline__ split_ctx split_ctx_of(const pl_attn_step &s,
                                                         const int32_t *rows, pl_kv_geom g,
                                                         const float *ks, pl_attn_opts o)
{
    split_ctx c;
    c.r = rows ? rows[blockIdx.x] : blockIdx.x;
    c.kvh = blockIdx.y;
    c.sp = blockIdx.z;
    c.ns = gridDim.z;
    int pos = s.positions[c.r];
    c.pg = pl_pages_of(s.block_table, s.row_seq[c.r], g);
    pl_split_range(pl_window_lo(pos, o.window), pos + 1, c.sp, c.ns, c.pg.shift, &c.t0, &c.t1);
    c.sc = pl_score_of(o, ks ? ks[c.kvh] : 1.0f);
    return c;
}

template <typename T, int NP, int G> /* NP: pairs per lane (head_dim / 64); G: group */
static __global__ void __launch_bounds__(32 * PL_SPLIT_WARPS, NP * G <= 4 ? 8 : 1)
attn_split_kernel(pl_attn_step s, const int32_t *rows, pl_kv_geom g, const T *kc,
                  const T *vc, const float *ks, const float *vs, float *ws, pl_attn_opts o)
{
    enum { HD = NP * 64, W = PL_SPLIT_WARPS };
    __shared__ float sm_m[W * G], sm_l[W * G], sm_acc[W * G * HD];
    split_ctx c = split_ctx_of(s, rows, g, ks, o);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    float2 qv[G][NP], acc[G][NP];
    float m[G], l[G];
#pragma unroll
    for (int j = 0; j < G; j++) {
        const float *qr = s.q + (size_t)c.r * s.q_stride + (size_t)(c.kvh * G + j) * HD;
#pragma unroll
        for (int p = 0; p < NP; p++) {
            qv[j][p] = make_float2(qr[2 * lane + 64 * p] * c.sc.qs,
                                   qr[2 * lane + 64 * p + 1] * c.sc.qs);
            acc[j][p] = make_float2(0.0f, 0.0f);
        }
        m[j] = -INFINITY;
        l[j] = 0.0f;
    }
    size_t tok_stride = (size_t)g.n_kv_heads * HD;
    for (int page = (c.t0 >> c.pg.shift) + w; page << c.pg.shift < c.t1; page += W) {
        int blk = c.pg.blk(page);
        if (blk < 0)
            continue;
        int ta = max(c.t0, page << c.pg.shift), tb = min(c.t1, (page + 1) << c.pg.shift);
        size_t base = ((size_t)blk * g.block_size + (ta & (g.block_size - 1))) * tok_stride
                      + (size_t)c.kvh * HD + 2 * lane;
        for (int t = ta; t < tb; t++, base += tok_stride) {
            float k[NP][2], v[NP][2];
#pragma unroll
            for (int p = 0; p < NP; p++) {
                pl_kv_load<2>(kc + base + 64 * p, k[p]);
                pl_kv_load<2>(vc + base + 64 * p, v[p]);
            }
            online_update<NP, G>(qv, k, v, c.sc, m, l, acc);
        }
    }
#pragma unroll
    for (int j = 0; j < G; j++) {
        if (lane == 0) {
            sm_m[w * G + j] = m[j];
            sm_l[w * G + j] = l[j];
        }
#pragma unroll
        for (int p = 0; p < NP; p++) {
            sm_acc[(w * G + j) * HD + 2 * lane + 64 * p] = acc[j][p].x;
            sm_acc[(w * G + j) * HD + 2 * lane + 64 * p + 1] = acc[j][p].y;
        }
    }
    __syncthreads();
    pl_merge_partials(sm_m, sm_l, sm_acc, W, G, HD, c.r, c.kvh, c.sp, c.ns,
                      (__nv_bfloat16 *)s.out, ws, s.n_heads, vs ? vs[c.kvh] : 1.0f,
                      o.sinks);
}

/* The split16 variant: a warp is two half-warps of 16 lanes, each with a
 * key stream (even and odd keys of the warp's page) and an online softmax
 * of its own, and a lane holds DPL = head_dim / 16 contiguous dims (one 8-
 * to 32-byte load per key). Against the 32-lane kernel a key costs 4
 * shuffle levels per query head instead of 5, shared by two keys, and half
 * the exponentials per key. The loop bound is the same for every lane of
 * a warp (full-mask shuffles); the half-warp past the page's end skips the
 * update. Small groups are capped at 96 registers (5 blocks per SM), the
 * next at 128 (4 blocks). */
template <typename T, int DPL, int G>
static __global__ void __launch_bounds__(32 * PL_SPLIT_WARPS,
                                         DPL * G <= 16 ? 5 : DPL * G <= 32 ? 4 : 1)
attn_split16_kernel(pl_attn_step s, const int32_t *rows, pl_kv_geom g, const T *kc,
                    const T *vc, const float *ks, const float *vs, float *ws, pl_attn_opts o)
{
    enum { HD = 16 * DPL, NV = 2 * PL_SPLIT_WARPS };
    __shared__ float sm_m[NV * G], sm_l[NV * G], sm_acc[NV * G * HD];
    split_ctx c = split_ctx_of(s, rows, g, ks, o);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, hw = lane >> 4, sl = lane & 15;
    float qv[G][DPL], acc[G][DPL], m[G], l[G];
#pragma unroll
    for (int j = 0; j < G; j++) {
        const float *qr = s.q + (size_t)c.r * s.q_stride + (size_t)(c.kvh * G + j) * HD
                          + sl * DPL;
#pragma unroll
        for (int d = 0; d < DPL; d++) {
            qv[j][d] = qr[d] * c.sc.qs;
            acc[j][d] = 0.0f;
        }
        m[j] = -INFINITY;
        l[j] = 0.0f;
    }
    size_t tok_stride = (size_t)g.n_kv_heads * HD;
    for (int page = (c.t0 >> c.pg.shift) + w; page << c.pg.shift < c.t1;
         page += PL_SPLIT_WARPS) {
        int blk = c.pg.blk(page);
        if (blk < 0)
            continue;
        int ta = max(c.t0, page << c.pg.shift), tb = min(c.t1, (page + 1) << c.pg.shift);
        size_t base = ((size_t)blk * g.block_size + (ta & (g.block_size - 1))) * tok_stride
                      + (size_t)c.kvh * HD + sl * DPL;
        for (int t = ta; t < tb; t += 2) {
            bool ok = t + hw < tb;
            size_t off = base + (size_t)(t - ta + (ok ? hw : 0)) * tok_stride;
            float k[DPL], v[DPL], sc[G];
            pl_kv_load<DPL>(kc + off, k);
            pl_kv_load<DPL>(vc + off, v);
#pragma unroll
            for (int j = 0; j < G; j++) {
                sc[j] = 0.0f;
#pragma unroll
                for (int d = 0; d < DPL; d++)
                    sc[j] += qv[j][d] * k[d];
            }
#pragma unroll
            for (int x = 8; x > 0; x >>= 1)
#pragma unroll
                for (int j = 0; j < G; j++)
                    sc[j] += __shfl_xor_sync(0xffffffffu, sc[j], x);
            if (!ok)
                continue;
#pragma unroll
            for (int j = 0; j < G; j++) {
                float sj = pl_score_fix(sc[j], c.sc);
                float mn = fmaxf(m[j], sj);
                float corr = exp2f(m[j] - mn), pw = exp2f(sj - mn);
                l[j] = l[j] * corr + pw;
#pragma unroll
                for (int d = 0; d < DPL; d++)
                    acc[j][d] = acc[j][d] * corr + pw * v[d];
                m[j] = mn;
            }
        }
    }
    int vw = 2 * w + hw;
#pragma unroll
    for (int j = 0; j < G; j++) {
        if (sl == 0) {
            sm_m[vw * G + j] = m[j];
            sm_l[vw * G + j] = l[j];
        }
#pragma unroll
        for (int d = 0; d < DPL; d++)
            sm_acc[(vw * G + j) * HD + sl * DPL + d] = acc[j][d];
    }
    __syncthreads();
    pl_merge_partials(sm_m, sm_l, sm_acc, NV, G, HD, c.r, c.kvh, c.sp, c.ns,
                      (__nv_bfloat16 *)s.out, ws, s.n_heads, vs ? vs[c.kvh] : 1.0f,
                      o.sinks);
}

/* Merge the splits of (row, head), the head's sink in the sum: grid
 * (n_rows, n_heads), head_dim threads. */
static __global__ void attn_split_merge(const float *ws, const int32_t *rows,
                                        __nv_bfloat16 *out, int n_heads, int hd, int ns,
                                        const float *sinks)
{
    int r = rows ? rows[blockIdx.x] : blockIdx.x, h = blockIdx.y, d = threadIdx.x;
    const float *p = ws + ((size_t)blockIdx.x * n_heads + h) * ns * (hd + 2);
    float gm = -INFINITY, gl = 0.0f, a = 0.0f;
    for (int x = 0; x < ns; x++)
        gm = fmaxf(gm, p[x * (hd + 2)]);
    for (int x = 0; x < ns; x++) {
        float m = p[x * (hd + 2)];
        float f = m == -INFINITY ? 0.0f : exp2f(m - gm);
        gl += p[x * (hd + 2) + 1] * f;
        a += p[x * (hd + 2) + 2 + d] * f;
    }
    gl = pl_sink_sum(gl, gm, sinks, h);
    out[(size_t)r * n_heads * hd + (size_t)h * hd + d] =
        __float2bfloat16(gl > 0.0f ? a / gl : 0.0f);
}

/* The CUDA-core kernel of a kind for one (element, head_dim, group), for
 * cudaLaunchKernel and the occupancy query; NULL: none. */
typedef const void *split_fn;

template <typename T, int NP, int G>
static split_fn split_kernel_of(pl_split_kind kind)
{
    if (kind == PL_SPLIT_HALF) {
        if constexpr (NP == 4 && G > 4)
            return NULL;
        else
            return (split_fn)attn_split16_kernel<T, 4 * NP, G>;
    }
    return (split_fn)attn_split_kernel<T, NP, G>;
}

template <typename T>
static split_fn split_kernel_t(pl_split_kind kind, int hd, int G)
{
#define SK_CASE(NP, GG) case NP * 16 + GG: return split_kernel_of<T, NP, GG>(kind)
    switch ((hd / 64) * 16 + G) {
    SK_CASE(1, 1); SK_CASE(1, 2); SK_CASE(1, 4); SK_CASE(1, 8);
    SK_CASE(2, 1); SK_CASE(2, 2); SK_CASE(2, 4); SK_CASE(2, 8);
    SK_CASE(4, 1); SK_CASE(4, 2); SK_CASE(4, 4); SK_CASE(4, 8);
    default: return NULL;
    }
#undef SK_CASE
}

static split_fn split_kernel(pl_split_kind kind, int hd, int G, pl_kv_dtype dt)
{
    if (kind != PL_SPLIT_WARP && kind != PL_SPLIT_HALF)
        return NULL;
    return dt == PL_KV_FP8 ? split_kernel_t<pl_e4m3>(kind, hd, G)
                           : split_kernel_t<__nv_bfloat16>(kind, hd, G);
}

extern "C" size_t pl_cuda_attn_split_ws(int n_rows, int n_heads, int head_dim, int n_splits)
{
    return n_splits <= 1 ? 0 : (size_t)n_rows * n_heads * n_splits * (head_dim + 2);
}

extern "C" int pl_cuda_attn_split_supported(pl_split_kind kind, int n_heads, int n_kv_heads,
                                            int head_dim)
{
    int G = n_kv_heads > 0 ? n_heads / n_kv_heads : 0;
    if (G < 1 || n_heads != G * n_kv_heads)
        return 0;
    if (kind == PL_SPLIT_MMA)
        return (head_dim == 64 || head_dim == 128 || head_dim == 256) && G <= PL_SPLIT_MAX_G;
    return split_kernel(kind, head_dim, G, PL_KV_BF16) != NULL;
}

extern "C" int pl_cuda_attn_split_occupancy(pl_split_kind kind, int n_heads, int n_kv_heads,
                                            int head_dim, pl_kv_dtype dtype)
{
    if (!pl_cuda_attn_split_supported(kind, n_heads, n_kv_heads, head_dim))
        return pl_cuda_fail_(__FILE__, __LINE__, "split decode: unsupported shape");
    if (kind == PL_SPLIT_MMA)
        return pl_attn_mma_occupancy_(head_dim, dtype);
    int n = 0;
    split_fn f = split_kernel(kind, head_dim, n_heads / n_kv_heads, dtype);
    PL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, f,
                                                                32 * PL_SPLIT_WARPS, 0));
    return n;
}

extern "C" int pl_cuda_attn_decode_split(const pl_attn_step *s, pl_kv_geom g, pl_kv_layer kv,
                                         pl_attn_opts o, const int32_t *rows, int n_rows,
                                         int n_splits, float *ws, pl_split_kind kind,
                                         cudaStream_t st)
{
    PL_CUDA_ARG(s && s->q && s->positions && s->row_seq && s->block_table && s->out);
    PL_CUDA_ARG(kv.k && kv.v && pl_attn_opts_ok(o));
    PL_CUDA_ARG(pl_cuda_attn_split_supported(kind, s->n_heads, g.n_kv_heads, g.head_dim));
    PL_CUDA_ARG(g.block_size > 0 && (g.block_size & (g.block_size - 1)) == 0);
    PL_CUDA_ARG(s->q_stride >= s->n_heads * g.head_dim && n_rows >= 0);
    PL_CUDA_ARG(n_splits >= 1 && n_splits <= PL_ATTN_MAX_SPLITS && (n_splits == 1 || ws));
    PL_CUDA_ARG(g.dtype == PL_KV_BF16 || g.dtype == PL_KV_FP8);
    if (n_rows == 0)
        return 0;
    if (kind == PL_SPLIT_MMA) {
        if (pl_attn_mma_launch_(s, g, kv, o, rows, n_rows, n_splits, ws, st) != 0)
            return -1;
    } else {
        bool fp8 = g.dtype == PL_KV_FP8;
        split_fn f = split_kernel(kind, g.head_dim, s->n_heads / g.n_kv_heads, g.dtype);
        const void *kc = kv.k, *vc = kv.v;
        const float *ks = fp8 ? kv.k_scale : NULL, *vs = fp8 ? kv.v_scale : NULL;
        void *args[] = {(void *)s, &rows, &g, &kc, &vc, &ks, &vs, &ws, &o};
        PL_CUDA_CHECK(cudaLaunchKernel(f, dim3(n_rows, g.n_kv_heads, n_splits),
                                       dim3(32 * PL_SPLIT_WARPS), args, 0, st));
    }
    if (n_splits > 1) {
        attn_split_merge<<<dim3(n_rows, s->n_heads), g.head_dim, 0, st>>>(
            ws, rows, (__nv_bfloat16 *)s->out, s->n_heads, g.head_dim, n_splits, o.sinks);
        PL_CUDA_LAUNCHED();
    }
    return 0;
}
