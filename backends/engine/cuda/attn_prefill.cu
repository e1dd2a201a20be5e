/* attn_prefill.cu - flash-style prefill attention over the paged KV cache
 * on CUDA cores (fp32), and the entry point of both prefill kernels.
 *
 * grid (row tiles, n_heads, n_seqs; tiled by 65535), 4 warps, 32 query
 * rows per block (8 per warp, state in registers). Per 32-key tile: K and
 * V go to shared memory as fp32 (K padded against bank conflicts) with a
 * validity flag per key; lane j scores key j for a row, the tile's max and
 * sum are warp reductions in log2 units, and lanes then own head dimensions
 * to accumulate P.V with the probabilities broadcast by shuffle. Causality
 * and windows are by position, so cached-prefix keys need no special case. */
#include <math.h>

#include "backends/engine/cuda/attn_prefill.cuh"

#define PF_WARPS 4
#define PF_BQ 32
#define PF_BK 32
#define PF_RPW (PF_BQ / PF_WARPS)
#define PF_MAX_Z 65535           /* gridDim.z limit */

/* Keys t0 .. t0 + PF_BK - 1 of KV head kvh into shared memory as fp32: K
 * rows padded to hd + 1 floats, V rows of hd; ok[j]: key j is below t1 and
 * in a mapped block (else its K/V are zero and it is masked). */
template <typename T>
static __device__ __forceinline__ void load_kv_tile(float *sk, float *sv, int *ok, int hd,
                                                    int t0, int t1, const pl_pages &pg,
                                                    pl_kv_geom g, int kvh, const T *kc,
                                                    const T *vc)
{
    const int kst = hd + 1;
    for (int i = threadIdx.x; i < PF_BK * hd / 2; i += blockDim.x) {
        int j = i / (hd / 2), d = 2 * (i % (hd / 2)), t = t0 + j;
        float kv[2] = {0.0f, 0.0f}, vv[2] = {0.0f, 0.0f};
        int blk = t < t1 ? pg.blk(t >> pg.shift) : -1;
        if (blk >= 0) {
            size_t off = (((size_t)blk * g.block_size + (t & (g.block_size - 1)))
                          * g.n_kv_heads + kvh) * hd + d;
            pl_kv_load<2>(kc + off, kv);
            pl_kv_load<2>(vc + off, vv);
        }
        sk[j * kst + d] = kv[0];
        sk[j * kst + d + 1] = kv[1];
        sv[j * hd + d] = vv[0];
        sv[j * hd + d + 1] = vv[1];
        if (d == 0)
            ok[j] = blk >= 0;
    }
}

/* One query row (q: its scaled values in shared memory) against the tile
 * of keys t0 .. t0 + PF_BK - 1: lane j scores key j, then the online
 * softmax in log2 units and P.V with the lanes owning head dimensions. */
template <int E>
static __device__ __forceinline__ void row_tile(const float *qr, const float *sk,
                                                const float *sv, const int *ok, int t0, int pos,
                                                int lo, pl_score sc, float &m, float &l,
                                                float (&acc)[E], int lane)
{
    const int hd = E * 32;
    if (pos < t0 || t0 + PF_BK <= lo)   /* the row sees no key of this tile (or is padding) */
        return;
    const float *kr = sk + lane * (hd + 1);
    float d = 0.0f;
    for (int x = 0; x < hd; x++)
        d += qr[x] * kr[x];
    int t = t0 + lane;
    float s = t > pos || t < lo || !ok[lane] ? -INFINITY : pl_score_fix(d, sc);
    float mn = fmaxf(m, pl_warp_max(s)), base = mn == -INFINITY ? 0.0f : mn;
    float p = exp2f(s - base), corr = exp2f(m - base);
    l = l * corr + pl_warp_sum(p);
#pragma unroll
    for (int e = 0; e < E; e++)
        acc[e] *= corr;
    for (int j = 0; j < PF_BK; j++) {
        float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
        for (int e = 0; e < E; e++)
            acc[e] += pj * sv[j * hd + lane + 32 * e];
    }
    m = mn;
}

template <typename T, int E> /* E: head dims per lane (head_dim / 32) */
static __global__ void attn_prefill_kernel(pl_attn_step s, const int32_t *seqs, int s0,
                                           const int32_t *first_row,
                                           const int32_t *n_rows_of, pl_kv_geom g,
                                           const T *kc, const T *vc, const float *ks,
                                           const float *vs, pl_attn_opts o)
{
    extern __shared__ float smem[];
    __shared__ int ok[PF_BK];
    const int hd = E * 32, kst = hd + 1;
    float *sq = smem;                       /* (PF_BQ, hd) */
    float *sk = sq + PF_BQ * hd;            /* (PF_BK, hd + 1) */
    float *sv = sk + PF_BK * kst;           /* (PF_BK, hd) */
    int sq_id = seqs ? seqs[s0 + blockIdx.z] : s0 + blockIdx.z, h = blockIdx.y;
    int r0 = blockIdx.x * PF_BQ, nr = n_rows_of[sq_id];
    if (r0 >= nr)
        return;
    int row0 = first_row[sq_id] + r0, rows = min(PF_BQ, nr - r0);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int kvh = h / (s.n_heads / g.n_kv_heads);
    pl_pages pg = pl_pages_of(s.block_table, sq_id, g);
    pl_score sc = pl_score_of(o, ks ? ks[kvh] : 1.0f);
    for (int i = threadIdx.x; i < PF_BQ * hd; i += blockDim.x) {
        int rr = i / hd;
        sq[i] = rr < rows ? s.q[(size_t)(row0 + rr) * s.q_stride + (size_t)h * hd + i % hd]
                            * sc.qs : 0.0f;
    }
    int my_pos[PF_RPW], my_lo[PF_RPW];
    float m[PF_RPW], l[PF_RPW], acc[PF_RPW][E];
#pragma unroll
    for (int i = 0; i < PF_RPW; i++) {
        int rr = w * PF_RPW + i;
        my_pos[i] = rr < rows ? s.positions[row0 + rr] : -1;
        my_lo[i] = rr < rows ? pl_window_lo(my_pos[i], o.window) : 0;
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int e = 0; e < E; e++)
            acc[i][e] = 0.0f;
    }
    int t_lo = pl_window_lo(s.positions[row0], o.window);
    int t_hi = s.positions[row0 + rows - 1] + 1;
    for (int t0 = t_lo; t0 < t_hi; t0 += PF_BK) {
        __syncthreads();
        load_kv_tile<T>(sk, sv, ok, hd, t0, t_hi, pg, g, kvh, kc, vc);
        __syncthreads();
#pragma unroll
        for (int i = 0; i < PF_RPW; i++)
            row_tile<E>(sq + (w * PF_RPW + i) * hd, sk, sv, ok, t0, my_pos[i], my_lo[i], sc,
                        m[i], l[i], acc[i], lane);
    }
    float vsc = vs ? vs[kvh] : 1.0f;
#pragma unroll
    for (int i = 0; i < PF_RPW; i++) {
        int rr = w * PF_RPW + i;
        if (rr >= rows)
            break;
        float li = pl_sink_sum(l[i], m[i], o.sinks, h);
        float inv = li > 0.0f ? vsc / li : 0.0f;
        __nv_bfloat16 *out = (__nv_bfloat16 *)s.out + (size_t)(row0 + rr) * s.n_heads * hd
                             + (size_t)h * hd;
#pragma unroll
        for (int e = 0; e < E; e++)
            out[lane + 32 * e] = __float2bfloat16(acc[i][e] * inv);
    }
}

template <typename T, int E>
static int launch_prefill(dim3 grid, cudaStream_t st, const pl_attn_step *s, pl_kv_geom g,
                          pl_kv_layer kv, pl_attn_opts o, const int32_t *seqs, int s0,
                          const int32_t *fr, const int32_t *nr)
{
    int hd = E * 32;
    size_t sm = sizeof(float) * ((size_t)PF_BQ * hd + (size_t)PF_BK * (hd + 1)
                                 + (size_t)PF_BK * hd);
    PL_CUDA_CHECK(cudaFuncSetAttribute(attn_prefill_kernel<T, E>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    bool fp8 = g.dtype == PL_KV_FP8;
    attn_prefill_kernel<T, E><<<grid, 32 * PF_WARPS, sm, st>>>(*s, seqs, s0, fr, nr, g,
        (const T *)kv.k, (const T *)kv.v, fp8 ? kv.k_scale : NULL, fp8 ? kv.v_scale : NULL, o);
    PL_CUDA_LAUNCHED();
    return 0;
}

template <typename T>
static int launch_prefill_t(dim3 grid, cudaStream_t st, const pl_attn_step *s, pl_kv_geom g,
                            pl_kv_layer kv, pl_attn_opts o, const int32_t *seqs, int s0,
                            const int32_t *fr, const int32_t *nr)
{
#define PF_CASE(E) case E: return launch_prefill<T, E>(grid, st, s, g, kv, o, seqs, s0, fr, nr)
    switch (g.head_dim / 32) {
    PF_CASE(1); PF_CASE(2); PF_CASE(3); PF_CASE(4);
    PF_CASE(5); PF_CASE(6); PF_CASE(7); PF_CASE(8);
    default: return pl_cuda_fail_(__FILE__, __LINE__, "head_dim %d unsupported", g.head_dim);
    }
#undef PF_CASE
}

extern "C" int pl_cuda_attn_prefill_seqs(const pl_attn_step *s, pl_kv_geom g, pl_kv_layer kv,
                                         pl_attn_opts o, const int32_t *seqs,
                                         const int32_t *seq_first_row,
                                         const int32_t *seq_n_rows, int n_seqs,
                                         int max_seq_rows, bool mma, cudaStream_t st)
{
    PL_CUDA_ARG(s && s->q && s->positions && s->block_table && s->out);
    PL_CUDA_ARG(seq_first_row && seq_n_rows && kv.k && kv.v && pl_attn_opts_ok(o));
    PL_CUDA_ARG(n_seqs >= 0 && max_seq_rows >= 0);
    PL_CUDA_ARG(g.head_dim % 32 == 0 && g.head_dim <= 256 && g.head_dim > 0);
    PL_CUDA_ARG(g.block_size > 0 && (g.block_size & (g.block_size - 1)) == 0);
    PL_CUDA_ARG(s->n_heads > 0 && g.n_kv_heads > 0 && s->n_heads % g.n_kv_heads == 0);
    PL_CUDA_ARG(s->q_stride >= s->n_heads * g.head_dim);
    PL_CUDA_ARG(g.dtype == PL_KV_BF16 || g.dtype == PL_KV_FP8);
    PL_CUDA_ARG(!mma || pl_cuda_attn_prefill_mma_supported(g.head_dim));
    if (n_seqs == 0 || max_seq_rows == 0)
        return 0;
    /* grid.z is at most 65535: more sequences are launched in tiles of it. */
    for (int s0 = 0; s0 < n_seqs; s0 += PF_MAX_Z) {
        int n = n_seqs - s0 < PF_MAX_Z ? n_seqs - s0 : PF_MAX_Z, rc;
        dim3 grid((max_seq_rows + PF_BQ - 1) / PF_BQ, s->n_heads, n);
        if (mma)
            rc = pl_cuda_attn_prefill_mma_tile_(s, g, kv, o, seqs, s0, n, seq_first_row,
                                                seq_n_rows, max_seq_rows, st);
        else if (g.dtype == PL_KV_FP8)
            rc = launch_prefill_t<pl_e4m3>(grid, st, s, g, kv, o, seqs, s0, seq_first_row,
                                           seq_n_rows);
        else
            rc = launch_prefill_t<__nv_bfloat16>(grid, st, s, g, kv, o, seqs, s0,
                                                 seq_first_row, seq_n_rows);
        if (rc != 0)
            return rc;
    }
    return 0;
}
