/* attn_decode_mma.cu - split-KV decode attention on tensor cores.
 *
 * grid (n_rows, n_kv_heads, n_splits), 4 warps, G <= 8 query heads per KV
 * head. The MMA is taken transposed: a warp's tile of 16 keys gives the 16
 * rows and the group's query heads the 8 columns, so no MMA row is wasted
 * on padding: S^T = K Q^T (K from shared memory by ldmatrix, Q^T held as B
 * fragments), the online softmax of each head (column) in registers, P^T
 * moved from the accumulator layout to a B operand by movmatrix, and
 * O^T += V^T P^T (V^T by ldmatrix.trans). Warp w takes the split's tiles
 * w, w + 4, ...: each warp streams its own tiles through 2 shared-memory
 * stages with 16-byte cp.async (zero fill for masked keys), with the
 * cache slots of its keys (page ids) looked up a tile ahead, so nothing in
 * the loop waits on another warp. K and V stay in the cache's layout in
 * shared memory (rows padded by 16 bytes against bank conflicts); nothing
 * is transposed by hand.
 *
 * fp8 caches: the tiles are staged as e4m3 and widened to fp16 in shared
 * memory by the warp (16-byte stores), and the MMAs run on fp16 (exact for
 * e4m3; Q and P rounded to fp16); the K scale is folded into Q, the V scale
 * into the output. bf16 caches: bf16 MMAs, Q and P rounded to bf16. */
#include <math.h>

#include "backends/engine/cuda/attn_split.cuh"
#include "backends/engine/cuda/mma.cuh"

#define DM_KT 16                 /* keys per warp tile */
#define DM_STAGES 2

/* Shared memory of one warp, in bytes: the staged tiles (K then V per
 * stage) and, for fp8, the fp16 tile the MMAs read. */
template <int HD, bool FP8>
struct dm_layout {
    enum {
        PITCH = FP8 ? HD + 16 : 2 * HD + 16,       /* bytes per staged key row */
        TILE = DM_KT * PITCH,                      /* one K (or V) tile */
        STAGE = 2 * TILE,
        WIDE_PITCH = 2 * HD + 16,                  /* bytes per fp16 row */
        WIDE = FP8 ? 2 * DM_KT * WIDE_PITCH : 0,
        WARP = DM_STAGES * STAGE + WIDE,
        MERGE = PL_SPLIT_WARPS * PL_SPLIT_MAX_G * (HD + 2) * 4,
        BLOCK = PL_SPLIT_WARPS * WARP > MERGE ? PL_SPLIT_WARPS * WARP : MERGE,
    };
};

/* The cache slot (block * block_size + offset) of key t, -1 when masked. */
static __device__ __forceinline__ int dm_slot(int t, int t1, const pl_pages &pg, int bs)
{
    int b = t < t1 ? pg.blk(t >> pg.shift) : -1;
    return b < 0 ? -1 : b * bs + (t & (bs - 1));
}

/* Issue the cp.async of a tile into stage st: lane kk % 16 holds the slot
 * of key kk; each key's K and V rows, 16 bytes at a time. */
template <int HD, bool FP8>
static __device__ __forceinline__ void dm_issue(unsigned char *st, const unsigned char *kc,
                                                const unsigned char *vc, int slot,
                                                size_t tok_bytes, size_t head_off, int lane)
{
    typedef dm_layout<HD, FP8> L;
    enum { ROW = FP8 ? HD : 2 * HD, CH = ROW / 16, PER_LANE = DM_KT * CH / 32 };
#pragma unroll
    for (int j = 0; j < PER_LANE; j++) {
        int c = lane + 32 * j, key = c / CH, col = c % CH;
        int sl = __shfl_sync(0xffffffffu, slot, key);
        size_t off = sl < 0 ? 0 : (size_t)sl * tok_bytes + head_off + 16 * col;
        pl_cp_async16(st + key * L::PITCH + 16 * col, kc + off, sl >= 0);
        pl_cp_async16(st + L::TILE + key * L::PITCH + 16 * col, vc + off, sl >= 0);
    }
}

/* fp8: the staged e4m3 tile (K and V) widened to fp16 for ldmatrix. */
template <int HD>
static __device__ __forceinline__ void dm_widen(const unsigned char *st, unsigned char *wide,
                                                int lane)
{
    typedef dm_layout<HD, true> L;
    enum { CH = HD / 16, PER_LANE = 2 * DM_KT * CH / 32 };
#pragma unroll
    for (int j = 0; j < PER_LANE; j++) {
        int c = lane + 32 * j, row = c / CH, col = c % CH;   /* rows: K keys, then V keys */
        pl_e4m3x16_to_f16(st + row * L::PITCH + 16 * col, wide + row * L::WIDE_PITCH + 32 * col);
    }
}

/* One tile: S^T, mask, soft-cap, online softmax of the lane's two heads
 * (2c, 2c + 1; m, l per lane, l summed over the lane's keys only), P^T by
 * movmatrix, O^T += V^T P^T. ks/vs: the tile's K and V rows (pitch bytes). */
template <int HD, bool F16>
static __device__ __forceinline__ void dm_tile(const unsigned char *ks, const unsigned char *vs,
                                               int pitch, const uint32_t (&qb)[HD / 16][2],
                                               int slot, pl_score sc, float (&m)[2],
                                               float (&l)[2], float (&ot)[HD / 16][4], int lane)
{
    int g = lane >> 2;
    int krow = (lane & 7) + ((lane >> 3) & 1) * 8, kcol = (lane >> 4) * 16;
    int vrow = (lane & 7) + (lane >> 4) * 8, vcol = ((lane >> 3) & 1) * 16;
    float st[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int k = 0; k < HD / 16; k++) {
        uint32_t a[4];
        pl_ldmatrix_x4(a, ks + krow * pitch + 32 * k + kcol);
        pl_mma16816<F16>(st, a, qb[k][0], qb[k][1]);
    }
    bool v0 = __shfl_sync(0xffffffffu, slot, g) >= 0;
    bool v1 = __shfl_sync(0xffffffffu, slot, g + 8) >= 0;
    float mt[2];
#pragma unroll
    for (int x = 0; x < 2; x++) {
        st[x] = v0 ? pl_score_fix(st[x], sc) : -INFINITY;
        st[2 + x] = v1 ? pl_score_fix(st[2 + x], sc) : -INFINITY;
        mt[x] = fmaxf(st[x], st[2 + x]);
#pragma unroll
        for (int o = 4; o < 32; o <<= 1)
            mt[x] = fmaxf(mt[x], __shfl_xor_sync(0xffffffffu, mt[x], o));
        float mn = fmaxf(m[x], mt[x]), base = mn == -INFINITY ? 0.0f : mn;
        float corr = exp2f(m[x] - base);
        st[x] = exp2f(st[x] - base);
        st[2 + x] = exp2f(st[2 + x] - base);
        l[x] = l[x] * corr + st[x] + st[2 + x];
        m[x] = mn;
#pragma unroll
        for (int d = 0; d < HD / 16; d++) {
            ot[d][x] *= corr;
            ot[d][2 + x] *= corr;
        }
    }
    uint32_t pb0 = pl_movmatrix_trans(pl_pack2<F16>(st[0], st[1]));
    uint32_t pb1 = pl_movmatrix_trans(pl_pack2<F16>(st[2], st[3]));
#pragma unroll
    for (int d = 0; d < HD / 16; d++) {
        uint32_t a[4];
        pl_ldmatrix_x4_trans(a, vs + vrow * pitch + 32 * d + vcol);
        pl_mma16816<F16>(ot[d], a, pb0, pb1);
    }
}

/* Q^T of the group as B fragments (lane: head g, dims 16k + 2c, +1 and +8,
 * +9), scaled for log2-unit scores; heads >= G are zero. */
template <int HD, bool F16>
static __device__ __forceinline__ void dm_load_q(uint32_t (&qb)[HD / 16][2], const float *q,
                                                 int G, float qs, int lane)
{
    int g = lane >> 2, c2 = 2 * (lane & 3);
#pragma unroll
    for (int k = 0; k < HD / 16; k++) {
        const float *qr = q + (size_t)g * HD + 16 * k + c2;
        qb[k][0] = g < G ? pl_pack2<F16>(qr[0] * qs, qr[1] * qs) : 0u;
        qb[k][1] = g < G ? pl_pack2<F16>(qr[8] * qs, qr[9] * qs) : 0u;
    }
}

template <int HD, bool FP8>
static __global__ void __launch_bounds__(32 * PL_SPLIT_WARPS)
attn_mma_dec_kernel(pl_attn_step s, const int32_t *rows, pl_kv_geom g,
                    const unsigned char *kc, const unsigned char *vc, const float *ks,
                    const float *vs, float *ws, pl_attn_opts o, int G)
{
    typedef dm_layout<HD, FP8> L;
    extern __shared__ __align__(16) unsigned char dm_smem[];
    int r = rows ? rows[blockIdx.x] : blockIdx.x, kvh = blockIdx.y, sp = blockIdx.z;
    int ns = gridDim.z, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int pos = s.positions[r], t0, t1;
    pl_pages pg = pl_pages_of(s.block_table, s.row_seq[r], g);
    pl_split_range(pl_window_lo(pos, o.window), pos + 1, sp, ns, pg.shift, &t0, &t1);
    pl_score sc = pl_score_of(o, ks ? ks[kvh] : 1.0f);
    uint32_t qb[HD / 16][2];
    dm_load_q<HD, FP8>(qb, s.q + (size_t)r * s.q_stride + (size_t)kvh * G * HD, G, sc.qs, lane);
    float ot[HD / 16][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int d = 0; d < HD / 16; d++)
        ot[d][0] = ot[d][1] = ot[d][2] = ot[d][3] = 0.0f;
    unsigned char *my = dm_smem + w * L::WARP;
    size_t eb = FP8 ? 1 : 2, tok_bytes = (size_t)g.n_kv_heads * HD * eb;
    size_t head_off = (size_t)kvh * HD * eb;
    int first = t0 + DM_KT * w, step = DM_KT * PL_SPLIT_WARPS, kk = lane & 15;
    int n = first < t1 ? (t1 - first + step - 1) / step : 0;
    int slot = dm_slot(first + kk, t1, pg, g.block_size);             /* tile i */
    int slot1 = dm_slot(first + step + kk, t1, pg, g.block_size);     /* tile i + 1 */
    dm_issue<HD, FP8>(my, kc, vc, slot, tok_bytes, head_off, lane);
    pl_cp_async_commit();
    if (n > 1)
        dm_issue<HD, FP8>(my + L::STAGE, kc, vc, slot1, tok_bytes, head_off, lane);
    pl_cp_async_commit();
    int slot2 = dm_slot(first + 2 * step + kk, t1, pg, g.block_size); /* a tile ahead */
    for (int i = 0; i < n; i++) {
        unsigned char *stg = my + (i & 1) * L::STAGE;
        pl_cp_async_wait<1>();
        __syncwarp();
        if constexpr (FP8) {
            unsigned char *wide = my + DM_STAGES * L::STAGE;
            dm_widen<HD>(stg, wide, lane);
            __syncwarp();
            dm_tile<HD, true>(wide, wide + DM_KT * L::WIDE_PITCH, L::WIDE_PITCH, qb, slot, sc,
                              m, l, ot, lane);
        } else {
            dm_tile<HD, false>(stg, stg + L::TILE, L::PITCH, qb, slot, sc, m, l, ot, lane);
        }
        __syncwarp();   /* the stage (and the fp16 tile) are rewritten next */
        if (i + 2 < n)
            dm_issue<HD, FP8>(stg, kc, vc, slot2, tok_bytes, head_off, lane);
        pl_cp_async_commit();
        slot = slot1;
        slot1 = slot2;
        slot2 = dm_slot(first + (i + 3) * step + kk, t1, pg, g.block_size);
    }
    pl_cp_async_wait<0>();
#pragma unroll
    for (int x = 0; x < 2; x++)
#pragma unroll
        for (int o2 = 4; o2 < 32; o2 <<= 1)
            l[x] += __shfl_xor_sync(0xffffffffu, l[x], o2);
    __syncthreads();    /* the staging area becomes the merge area */
    float *sm_m = (float *)dm_smem, *sm_l = sm_m + PL_SPLIT_WARPS * G;
    float *sm_acc = sm_l + PL_SPLIT_WARPS * G;
    int c2 = 2 * (lane & 3), gq = lane >> 2;
#pragma unroll
    for (int x = 0; x < 2; x++) {
        int h = c2 + x;
        if (h >= G)
            continue;
        if (gq == 0) {
            sm_m[w * G + h] = m[x];
            sm_l[w * G + h] = l[x];
        }
#pragma unroll
        for (int d = 0; d < HD / 16; d++) {
            sm_acc[(w * G + h) * HD + 16 * d + gq] = ot[d][x];
            sm_acc[(w * G + h) * HD + 16 * d + gq + 8] = ot[d][2 + x];
        }
    }
    __syncthreads();
    pl_merge_partials(sm_m, sm_l, sm_acc, PL_SPLIT_WARPS, G, HD, r, kvh, sp, ns,
                      (__nv_bfloat16 *)s.out, ws, s.n_heads, vs ? vs[kvh] : 1.0f, o.sinks);
}

template <int HD, bool FP8>
static const void *dm_kernel(int *smem)
{
    *smem = dm_layout<HD, FP8>::BLOCK;
    return (const void *)attn_mma_dec_kernel<HD, FP8>;
}

/* The kernel for (head_dim, dtype), with its shared memory raised to what
 * it needs (once per kernel: the attribute is set before any graph
 * capture, by the runner's occupancy query or the first eager launch). */
static const void *dm_pick(int hd, pl_kv_dtype dt, int *smem)
{
    static bool raised[3][2];
    int hi = hd == 64 ? 0 : hd == 128 ? 1 : 2, fi = dt == PL_KV_FP8;
    const void *f = hi == 0 ? (fi ? dm_kernel<64, true>(smem) : dm_kernel<64, false>(smem))
                  : hi == 1 ? (fi ? dm_kernel<128, true>(smem) : dm_kernel<128, false>(smem))
                            : (fi ? dm_kernel<256, true>(smem) : dm_kernel<256, false>(smem));
    if (!raised[hi][fi]) {
        if (pl_cuda_check_(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                *smem), __FILE__, __LINE__))
            return NULL;
        raised[hi][fi] = true;
    }
    return f;
}

int pl_attn_mma_occupancy_(int head_dim, pl_kv_dtype dtype)
{
    int smem, n = 0;
    const void *f = dm_pick(head_dim, dtype, &smem);
    if (!f)
        return -1;
    PL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, 32 * PL_SPLIT_WARPS,
                                                                (size_t)smem));
    return n;
}

int pl_attn_mma_launch_(const pl_attn_step *s, pl_kv_geom g, pl_kv_layer kv, pl_attn_opts o,
                        const int32_t *rows, int n_rows, int ns, float *ws, cudaStream_t st)
{
    int smem, G = s->n_heads / g.n_kv_heads;
    const void *f = dm_pick(g.head_dim, g.dtype, &smem);
    if (!f)
        return -1;
    bool fp8 = g.dtype == PL_KV_FP8;
    const void *kc = kv.k, *vc = kv.v;
    const float *ks = fp8 ? kv.k_scale : NULL, *vs = fp8 ? kv.v_scale : NULL;
    void *args[] = {(void *)s, &rows, &g, &kc, &vc, &ks, &vs, &ws, &o, &G};
    PL_CUDA_CHECK(cudaLaunchKernel(f, dim3(n_rows, g.n_kv_heads, ns), dim3(32 * PL_SPLIT_WARPS),
                                   args, (size_t)smem, st));
    return 0;
}
