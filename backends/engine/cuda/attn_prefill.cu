/* attn_prefill.cu - flash-style prefill attention over the paged KV cache.
 *
 * grid (row tiles, n_heads, n_seqs; tiled by 65535), 4 warps, 32 query rows per block (8 per
 * warp, state in registers). Per 32-key tile: K and V go to shared memory
 * as fp32 (K padded against bank conflicts); lane j scores key j for a row,
 * the tile's max and sum are warp reductions, and lanes then own head
 * dimensions to accumulate P.V with the probabilities broadcast by shuffle.
 * Causality is by position, so cached-prefix keys need no special case. */
#include <math.h>

#include "backends/engine/cuda/attn_prefill.cuh"

#define PF_WARPS 4
#define PF_BQ 32
#define PF_BK 32
#define PF_RPW (PF_BQ / PF_WARPS)
#define PF_MAX_Z 65535           /* gridDim.z limit */

/* Keys t0 .. t0 + PF_BK - 1 of KV head kvh into shared memory as fp32: K
 * rows padded to hd + 1 floats (bank conflicts), V rows of hd; keys past
 * n_keys or in unmapped blocks are zero. All threads of the block take part. */
static __device__ __forceinline__ void load_kv_tile(float *sk, float *sv, int hd, int t0,
                                                    int n_keys, const int32_t *tab,
                                                    pl_kv_geom g, int kvh,
                                                    const __nv_bfloat16 *kc,
                                                    const __nv_bfloat16 *vc)
{
    const int kst = hd + 1;
    for (int i = threadIdx.x; i < PF_BK * hd; i += blockDim.x) {
        int j = i / hd, d = i % hd, t = t0 + j;
        float kv = 0.0f, vv = 0.0f;
        int blk = t < n_keys ? tab[t / g.block_size] : -1;
        if (blk >= 0 && blk < g.n_blocks) {
            size_t off = (((size_t)blk * g.block_size + t % g.block_size) * g.n_kv_heads
                          + kvh) * hd + d;
            kv = __bfloat162float(kc[off]);
            vv = __bfloat162float(vc[off]);
        }
        sk[j * kst + d] = kv;
        sv[j * hd + d] = vv;
    }
}

template <int E> /* head dims per lane: head_dim / 32 */
static __global__ void attn_prefill_kernel(const float *q, int q_stride,
                                           const int32_t *positions, const int32_t *seqs,
                                           int s0, const int32_t *first_row,
                                           const int32_t *n_rows_of,
                                           const int32_t *bt, pl_kv_geom g,
                                           const __nv_bfloat16 *kc,
                                           const __nv_bfloat16 *vc, __nv_bfloat16 *out,
                                           int n_heads, float scale)
{
    extern __shared__ float smem[];
    const int hd = E * 32, kst = hd + 1;
    float *sq = smem;                       /* (PF_BQ, hd) */
    float *sk = sq + PF_BQ * hd;            /* (PF_BK, hd + 1) */
    float *sv = sk + PF_BK * kst;           /* (PF_BK, hd) */
    int s = seqs ? seqs[s0 + blockIdx.z] : s0 + blockIdx.z, h = blockIdx.y;
    int r0 = blockIdx.x * PF_BQ, nr = n_rows_of[s];
    if (r0 >= nr)
        return;
    int row0 = first_row[s] + r0, rows = min(PF_BQ, nr - r0);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int kvh = h / (n_heads / g.n_kv_heads);
    const int32_t *tab = bt + (size_t)s * g.max_blocks_per_seq;
    for (int i = threadIdx.x; i < PF_BQ * hd; i += blockDim.x) {
        int rr = i / hd;
        sq[i] = rr < rows ? q[(size_t)(row0 + rr) * q_stride + (size_t)h * hd + i % hd] * scale
                          : 0.0f;
    }
    int my_pos[PF_RPW];
    float m[PF_RPW], l[PF_RPW], acc[PF_RPW][E];
#pragma unroll
    for (int i = 0; i < PF_RPW; i++) {
        int rr = w * PF_RPW + i;
        my_pos[i] = rr < rows ? positions[row0 + rr] : -1;
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int e = 0; e < E; e++)
            acc[i][e] = 0.0f;
    }
    int n_keys = positions[row0 + rows - 1] + 1;
    for (int t0 = 0; t0 < n_keys; t0 += PF_BK) {
        __syncthreads();
        load_kv_tile(sk, sv, hd, t0, n_keys, tab, g, kvh, kc, vc);
        __syncthreads();
#pragma unroll
        for (int i = 0; i < PF_RPW; i++) {
            if (my_pos[i] < t0)  /* row sees no key of this tile (or is padding) */
                continue;
            const float *qr = sq + (w * PF_RPW + i) * hd;
            const float *kr = sk + lane * kst;
            float sc = 0.0f;
            for (int d = 0; d < hd; d++)
                sc += qr[d] * kr[d];
            if (t0 + lane > my_pos[i])
                sc = -INFINITY;
            float mn = fmaxf(m[i], pl_warp_max(sc));
            float p = expf(sc - mn), corr = expf(m[i] - mn);
            l[i] = l[i] * corr + pl_warp_sum(p);
#pragma unroll
            for (int e = 0; e < E; e++)
                acc[i][e] *= corr;
            for (int j = 0; j < PF_BK; j++) {
                float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
                for (int e = 0; e < E; e++)
                    acc[i][e] += pj * sv[j * hd + lane + 32 * e];
            }
            m[i] = mn;
        }
    }
#pragma unroll
    for (int i = 0; i < PF_RPW; i++) {
        int rr = w * PF_RPW + i;
        if (rr >= rows)
            break;
        float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        __nv_bfloat16 *o = out + (size_t)(row0 + rr) * n_heads * hd + (size_t)h * hd;
#pragma unroll
        for (int e = 0; e < E; e++)
            o[lane + 32 * e] = __float2bfloat16(acc[i][e] * inv);
    }
}

template <int E>
static int launch_prefill(dim3 grid, cudaStream_t st, const float *q, int q_stride,
                          const int32_t *pos, const int32_t *seqs, int s0,
                          const int32_t *fr, const int32_t *nr,
                          const int32_t *bt, pl_kv_geom g, const pl_bf16 *kc,
                          const pl_bf16 *vc, pl_bf16 *out, int n_heads, float scale)
{
    int hd = E * 32;
    size_t sm = sizeof(float) * ((size_t)PF_BQ * hd + (size_t)PF_BK * (hd + 1)
                                 + (size_t)PF_BK * hd);
    PL_CUDA_CHECK(cudaFuncSetAttribute(attn_prefill_kernel<E>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)sm));
    attn_prefill_kernel<E><<<grid, 32 * PF_WARPS, sm, st>>>(q, q_stride, pos, seqs, s0, fr,
        nr, bt,
        g, (const __nv_bfloat16 *)kc, (const __nv_bfloat16 *)vc, (__nv_bfloat16 *)out,
        n_heads, scale);
    PL_CUDA_LAUNCHED();
    return 0;
}

extern "C" int pl_cuda_attn_prefill(const float *q, int q_stride, const int32_t *positions,
                                    const int32_t *seq_first_row, const int32_t *seq_n_rows,
                                    const int32_t *block_table, pl_kv_geom g,
                                    const pl_bf16 *k_cache, const pl_bf16 *v_cache,
                                    pl_bf16 *out, int n_seqs, int max_seq_rows,
                                    int n_heads, float scale, cudaStream_t st)
{
    return pl_cuda_attn_prefill_seqs(q, q_stride, positions, NULL, seq_first_row, seq_n_rows,
                                     block_table, g, k_cache, v_cache, out, n_seqs,
                                     max_seq_rows, n_heads, scale, false, st);
}

extern "C" int pl_cuda_attn_prefill_seqs(const float *q, int q_stride,
                                         const int32_t *positions, const int32_t *seqs,
                                         const int32_t *seq_first_row,
                                         const int32_t *seq_n_rows,
                                         const int32_t *block_table, pl_kv_geom g,
                                         const pl_bf16 *k_cache, const pl_bf16 *v_cache,
                                         pl_bf16 *out, int n_seqs, int max_seq_rows,
                                         int n_heads, float scale, bool mma, cudaStream_t st)
{
    PL_CUDA_ARG(q && positions && seq_first_row && seq_n_rows && block_table);
    PL_CUDA_ARG(k_cache && v_cache && out && n_seqs >= 0 && max_seq_rows >= 0);
    PL_CUDA_ARG(g.head_dim % 32 == 0 && g.head_dim <= 256 && g.block_size > 0);
    PL_CUDA_ARG(n_heads > 0 && g.n_kv_heads > 0 && n_heads % g.n_kv_heads == 0);
    PL_CUDA_ARG(q_stride >= n_heads * g.head_dim);
    PL_CUDA_ARG(!mma || (pl_cuda_attn_prefill_mma_supported(g.head_dim) && q_stride % 2 == 0));
    if (n_seqs == 0 || max_seq_rows == 0)
        return 0;
    if (g.head_dim / 32 < 1 || g.head_dim / 32 > 8)
        return pl_cuda_fail_(__FILE__, __LINE__, "head_dim %d unsupported", g.head_dim);
    /* grid.z is at most 65535: more sequences are launched in tiles of it. */
    for (int s0 = 0; s0 < n_seqs; s0 += PF_MAX_Z) {
        int n = n_seqs - s0 < PF_MAX_Z ? n_seqs - s0 : PF_MAX_Z, rc = 0;
        dim3 grid((max_seq_rows + PF_BQ - 1) / PF_BQ, n_heads, n);
        if (mma)
            rc = pl_cuda_attn_prefill_mma_tile_(q, q_stride, positions, seqs, s0, n,
                                                seq_first_row, seq_n_rows, block_table, g,
                                                k_cache, v_cache, out, max_seq_rows, n_heads,
                                                scale, st);
#define PF_CASE(E) case E: rc = launch_prefill<E>(grid, st, q, q_stride, positions, seqs, s0, \
        seq_first_row, seq_n_rows, block_table, g, k_cache, v_cache, out, n_heads, scale); break
        else switch (g.head_dim / 32) {
        PF_CASE(1); PF_CASE(2); PF_CASE(3); PF_CASE(4);
        PF_CASE(5); PF_CASE(6); PF_CASE(7); PF_CASE(8);
        }
#undef PF_CASE
        if (rc != 0)
            return rc;
    }
    return 0;
}
