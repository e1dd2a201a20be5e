/* attn_prefill_mma.cu - prefill attention on tensor cores (bf16 MMA,
 * fp32 accumulation), flash-style over the paged KV cache.
 *
 * grid (row tiles of 64, n_heads, n_seqs; tiled by 65535), 4 warps of 16
 * query rows. Per tile of 64 keys, K (row-major) and V (transposed) are
 * copied to shared memory as they are in the cache (bf16). A warp computes
 * its 16 x 64 scores with mma.sync.m16n8k16, masks them by position,
 * updates its rows' online softmax in registers (the accumulator layout of
 * the MMA is fixed by PTX: lane l holds rows l/4 and l/4 + 8, columns
 * 2*(l%4) and +1 of each 8-column tile), turns the probabilities into the
 * A operand of P.V without leaving registers, and accumulates O with
 * more MMAs. Q is scaled by softmax_scale * log2(e) before its bf16
 * rounding, so the softmax uses exp2. head_dim 64 or 128; sm_80 and up.
 *
 * Against pl_cuda_attn_prefill (fp32, SIMT): Q and P are rounded to bf16
 * (K and V already are), so results agree to bf16 precision, not bit for
 * bit. Unmapped cache blocks read as zero keys, as there. */
#include <math.h>
#include <stdint.h>

#include "backends/engine/cuda/attn_prefill.cuh"
#include "backends/engine/cuda/mma.cuh"

#define PM_WARPS 4
#define PM_BQ 64                 /* query rows per block, 16 per warp */
#define PM_BK 64                 /* keys per tile */
#define PM_PAD 8                 /* bf16 of padding per shared row (banks) */

/* Keys t0 .. t0 + PM_BK - 1 of KV head kvh: K as sk[key][dim], V as
 * sv[dim][key] (the B operand of P.V wants a key pair per register). Keys
 * past n_keys or in unmapped blocks are zero. All threads take part. */
template <int HD>
static __device__ __forceinline__ void load_tile(__nv_bfloat16 *sk, __nv_bfloat16 *sv, int t0,
                                                 int n_keys, const int32_t *tab, pl_kv_geom g,
                                                 int kvh, const __nv_bfloat16 *kc,
                                                 const __nv_bfloat16 *vc)
{
    const int per_row = HD / 8;  /* 16-byte chunks of a key's row */
    for (int i = threadIdx.x; i < PM_BK * per_row; i += blockDim.x) {
        int j = i / per_row, c = i % per_row, t = t0 + j;
        uint4 kv = make_uint4(0, 0, 0, 0), vv = kv;
        int blk = t < n_keys ? tab[t / g.block_size] : -1;
        if (blk >= 0 && blk < g.n_blocks) {
            size_t off = (((size_t)blk * g.block_size + t % g.block_size) * g.n_kv_heads
                          + kvh) * HD + 8 * c;
            kv = *(const uint4 *)(kc + off);
            vv = *(const uint4 *)(vc + off);
        }
        *(uint4 *)(sk + j * (HD + PM_PAD) + 8 * c) = kv;
        const __nv_bfloat16 *ve = (const __nv_bfloat16 *)&vv;
#pragma unroll
        for (int e = 0; e < 8; e++)
            sv[(8 * c + e) * (PM_BK + PM_PAD) + j] = ve[e];
    }
}

/* The 16 x 64 scores of a warp's rows against the tile, masked by
 * position (-inf past a row's own position). */
template <int HD>
static __device__ __forceinline__ void tile_scores(float (&s)[PM_BK / 8][4],
                                                   const uint32_t (&qa)[HD / 16][4],
                                                   const __nv_bfloat16 *sk, int lane, int t0,
                                                   int pos_lo, int pos_hi)
{
    int gq = lane >> 2, c2 = 2 * (lane & 3);
#pragma unroll
    for (int n = 0; n < PM_BK / 8; n++) {
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
        const __nv_bfloat16 *kr = sk + (n * 8 + gq) * (HD + PM_PAD) + c2;
#pragma unroll
        for (int k = 0; k < HD / 16; k++)
            pl_mma16816(s[n], qa[k], *(const uint32_t *)(kr + 16 * k),
                     *(const uint32_t *)(kr + 16 * k + 8));
        int t = t0 + n * 8 + c2;
        if (t > pos_lo) s[n][0] = -INFINITY;
        if (t + 1 > pos_lo) s[n][1] = -INFINITY;
        if (t > pos_hi) s[n][2] = -INFINITY;
        if (t + 1 > pos_hi) s[n][3] = -INFINITY;
    }
}

/* Online softmax of the tile's scores for the lane's two rows (h = 0: row
 * lane/4, h = 1: row lane/4 + 8): new max, rescale of l and O, and the
 * scores replaced by their exp2 probabilities. */
template <int HD>
static __device__ __forceinline__ void tile_softmax(float (&s)[PM_BK / 8][4], float (&m)[2],
                                                    float (&l)[2], float (&o)[HD / 8][4])
{
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float mt = -INFINITY;
#pragma unroll
        for (int n = 0; n < PM_BK / 8; n++)
            mt = fmaxf(mt, fmaxf(s[n][2 * h], s[n][2 * h + 1]));
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
        float mn = fmaxf(m[h], mt);
        float base = mn == -INFINITY ? 0.0f : mn;  /* nothing seen yet: p = 0 */
        float corr = exp2f(m[h] - base);
        float sum = 0.0f;
#pragma unroll
        for (int n = 0; n < PM_BK / 8; n++) {
            s[n][2 * h] = exp2f(s[n][2 * h] - base);
            s[n][2 * h + 1] = exp2f(s[n][2 * h + 1] - base);
            sum += s[n][2 * h] + s[n][2 * h + 1];
        }
        l[h] = l[h] * corr + sum;  /* this lane's columns; summed over the quad at the end */
#pragma unroll
        for (int d = 0; d < HD / 8; d++) {
            o[d][2 * h] *= corr;
            o[d][2 * h + 1] *= corr;
        }
        m[h] = mn;
    }
}

template <int HD>
static __global__ void __launch_bounds__(32 * PM_WARPS)
attn_prefill_mma_kernel(const float *q, int q_stride, const int32_t *positions,
                        const int32_t *seqs, int s0, const int32_t *first_row,
                        const int32_t *n_rows_of, const int32_t *bt, pl_kv_geom g,
                        const __nv_bfloat16 *kc, const __nv_bfloat16 *vc,
                        __nv_bfloat16 *out, int n_heads, float scale)
{
    extern __shared__ __align__(16) unsigned char pm_smem[];
    __nv_bfloat16 *sk = (__nv_bfloat16 *)pm_smem;               /* [BK][HD + PAD] */
    __nv_bfloat16 *sv = sk + PM_BK * (HD + PM_PAD);             /* [HD][BK + PAD] */
    __nv_bfloat16 *sq = sv + HD * (PM_BK + PM_PAD);             /* [BQ][HD + PAD] */
    int s = seqs ? seqs[s0 + blockIdx.z] : s0 + blockIdx.z, h = blockIdx.y;
    int r0 = blockIdx.x * PM_BQ, nr = n_rows_of[s];
    if (r0 >= nr)
        return;
    int row0 = first_row[s] + r0, rows = min(PM_BQ, nr - r0);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, gq = lane >> 2, c2 = 2 * (lane & 3);
    int kvh = h / (n_heads / g.n_kv_heads);
    const int32_t *tab = bt + (size_t)s * g.max_blocks_per_seq;
    const float qs = scale * PL_LOG2E;
    for (int i = threadIdx.x; i < PM_BQ * HD / 2; i += blockDim.x) {
        int rr = i / (HD / 2), d = 2 * (i % (HD / 2));
        const float *qr = q + (size_t)(row0 + rr) * q_stride + (size_t)h * HD + d;
        *(uint32_t *)(sq + rr * (HD + PM_PAD) + d) =
            rr < rows ? pl_pack_bf16(qr[0] * qs, qr[1] * qs) : 0u;
    }
    int lo = w * 16 + gq, hi = lo + 8;   /* the lane's two rows in the block */
    int pos_lo = lo < rows ? positions[row0 + lo] : -1;
    int pos_hi = hi < rows ? positions[row0 + hi] : -1;
    int wmax = max(pos_lo, pos_hi);
#pragma unroll
    for (int x = 16; x > 0; x >>= 1)
        wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, x));
    __syncthreads();
    uint32_t qa[HD / 16][4];
#pragma unroll
    for (int k = 0; k < HD / 16; k++) {
        const __nv_bfloat16 *ql = sq + lo * (HD + PM_PAD) + 16 * k + c2;
        const __nv_bfloat16 *qh = sq + hi * (HD + PM_PAD) + 16 * k + c2;
        qa[k][0] = *(const uint32_t *)ql;
        qa[k][1] = *(const uint32_t *)qh;
        qa[k][2] = *(const uint32_t *)(ql + 8);
        qa[k][3] = *(const uint32_t *)(qh + 8);
    }
    float o[HD / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int d = 0; d < HD / 8; d++)
        o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
    int n_keys = positions[row0 + rows - 1] + 1;
    for (int t0 = 0; t0 < n_keys; t0 += PM_BK) {
        __syncthreads();
        load_tile<HD>(sk, sv, t0, n_keys, tab, g, kvh, kc, vc);
        __syncthreads();
        if (wmax < t0)   /* no row of this warp sees the tile (warp-uniform) */
            continue;
        float sc[PM_BK / 8][4];
        tile_scores<HD>(sc, qa, sk, lane, t0, pos_lo, pos_hi);
        tile_softmax<HD>(sc, m, l, o);
        pl_mma_pv<HD, PM_BK, PM_BK + PM_PAD>(o, sc, sv, lane);
    }
#pragma unroll
    for (int x = 0; x < 2; x++) {
        l[x] += __shfl_xor_sync(0xffffffffu, l[x], 1);
        l[x] += __shfl_xor_sync(0xffffffffu, l[x], 2);
    }
#pragma unroll
    for (int x = 0; x < 2; x++) {
        int rr = x ? hi : lo;
        if (rr >= rows)
            continue;
        float inv = l[x] > 0.0f ? 1.0f / l[x] : 0.0f;
        __nv_bfloat16 *orow = out + (size_t)(row0 + rr) * n_heads * HD + (size_t)h * HD + c2;
#pragma unroll
        for (int d = 0; d < HD / 8; d++)
            *(__nv_bfloat162 *)(orow + d * 8) =
                __floats2bfloat162_rn(o[d][2 * x] * inv, o[d][2 * x + 1] * inv);
    }
}

template <int HD>
static int launch_mma(dim3 grid, cudaStream_t st, const float *q, int q_stride,
                      const int32_t *pos, const int32_t *seqs, int s0, const int32_t *fr,
                      const int32_t *nr, const int32_t *bt, pl_kv_geom g, const pl_bf16 *kc,
                      const pl_bf16 *vc, pl_bf16 *out, int n_heads, float scale)
{
    size_t sm = sizeof(__nv_bfloat16) * ((size_t)PM_BK * (HD + PM_PAD)
                                         + (size_t)HD * (PM_BK + PM_PAD)
                                         + (size_t)PM_BQ * (HD + PM_PAD));
    PL_CUDA_CHECK(cudaFuncSetAttribute(attn_prefill_mma_kernel<HD>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    attn_prefill_mma_kernel<HD><<<grid, 32 * PM_WARPS, sm, st>>>(q, q_stride, pos, seqs, s0,
        fr, nr, bt, g, (const __nv_bfloat16 *)kc, (const __nv_bfloat16 *)vc,
        (__nv_bfloat16 *)out, n_heads, scale);
    PL_CUDA_LAUNCHED();
    return 0;
}

extern "C" int pl_cuda_attn_prefill_mma_supported(int head_dim)
{
    return head_dim == 64 || head_dim == 128;
}

/* One launch over sequences s0 .. s0 + n (n <= 65535), arguments checked
 * by pl_cuda_attn_prefill_seqs (attn_prefill.cu). */
extern "C" int pl_cuda_attn_prefill_mma_tile_(const float *q, int q_stride,
                                              const int32_t *positions, const int32_t *seqs,
                                              int s0, int n, const int32_t *seq_first_row,
                                              const int32_t *seq_n_rows,
                                              const int32_t *block_table, pl_kv_geom g,
                                              const pl_bf16 *k_cache, const pl_bf16 *v_cache,
                                              pl_bf16 *out, int max_seq_rows, int n_heads,
                                              float scale, cudaStream_t st)
{
    dim3 grid((max_seq_rows + PM_BQ - 1) / PM_BQ, n_heads, n);
    return g.head_dim == 64
        ? launch_mma<64>(grid, st, q, q_stride, positions, seqs, s0, seq_first_row,
                         seq_n_rows, block_table, g, k_cache, v_cache, out, n_heads, scale)
        : launch_mma<128>(grid, st, q, q_stride, positions, seqs, s0, seq_first_row,
                          seq_n_rows, block_table, g, k_cache, v_cache, out, n_heads, scale);
}
