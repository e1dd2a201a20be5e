/* attn_prefill_mma.cu - prefill attention on tensor cores (m16n8k16,
 * fp32 accumulation), flash-style over the paged KV cache.
 *
 * grid (row tiles of 64, n_heads, n_seqs; tiled by 65535), 4 warps of 16
 * query rows. Tiles of BK keys (64; 32 at head_dim 256) are staged in 2
 * shared-memory stages by 16-byte cp.async in the cache's own layout (key
 * rows padded by 16 bytes against bank conflicts; zero fill for keys in
 * unmapped blocks), the cache slots of tile i + 2 looked up while tile i
 * is computed. A warp computes its 16 x BK scores with K from ldmatrix,
 * masks them by position (causal, window, unmapped), soft-caps them,
 * updates its rows' online softmax in registers in log2 units, turns the
 * probabilities into the A operand of P.V without leaving registers and
 * accumulates O with V from ldmatrix.trans. Q is scaled (scale * log2(e),
 * or scale / softcap) before its 16-bit rounding; at head_dim 256 its
 * fragments are re-read from shared memory per tile (registers).
 *
 * fp8 caches: the e4m3 tiles are widened to fp16 in shared memory by the
 * block (16-byte stores) and the MMAs run on fp16; the K scale is folded
 * into Q, the V scale into the output. */
#include <math.h>
#include <stdint.h>

#include "backends/engine/cuda/attn_prefill.cuh"
#include "backends/engine/cuda/mma.cuh"

#define PM_WARPS 4
#define PM_BQ 64                 /* query rows per block, 16 per warp */
#define PM_STAGES 2

template <int HD, bool FP8>
struct pm_layout {
    enum {
        BK = HD == 256 ? 32 : 64,                  /* keys per tile */
        PITCH = FP8 ? HD + 16 : 2 * HD + 16,       /* bytes per staged key row */
        TILE = BK * PITCH,                         /* one K (or V) tile */
        STAGE = 2 * TILE,
        WPITCH = 2 * HD + 16,                      /* bytes per 16-bit row */
        WIDE = FP8 ? 2 * BK * WPITCH : 0,          /* fp8: the widened K and V tiles */
        Q = PM_BQ * WPITCH,
        SLOTS = PM_STAGES * BK * 4,
        BYTES = PM_STAGES * STAGE + WIDE + Q + SLOTS,
        QREG = HD <= 128,                          /* Q fragments kept in registers */
    };
};

/* The cache slot of key t (below t1), -1 when masked. */
static __device__ __forceinline__ int pm_slot(int t, int t1, const pl_pages &pg, int bs)
{
    int b = t < t1 ? pg.blk(t >> pg.shift) : -1;
    return b < 0 ? -1 : b * bs + (t & (bs - 1));
}

/* The block's copies of one tile into stage st, slots from shared memory. */
template <int HD, bool FP8>
static __device__ __forceinline__ void pm_issue(unsigned char *st, const int *slots,
                                                const unsigned char *kc,
                                                const unsigned char *vc, size_t tok_bytes,
                                                size_t head_off)
{
    typedef pm_layout<HD, FP8> L;
    enum { CH = (FP8 ? HD : 2 * HD) / 16 };
    for (int c = threadIdx.x; c < L::BK * CH; c += 32 * PM_WARPS) {
        int key = c / CH, col = c % CH, sl = slots[key];
        size_t off = sl < 0 ? 0 : (size_t)sl * tok_bytes + head_off + 16 * col;
        pl_cp_async16(st + key * L::PITCH + 16 * col, kc + off, sl >= 0);
        pl_cp_async16(st + L::TILE + key * L::PITCH + 16 * col, vc + off, sl >= 0);
    }
}

/* Q rows of the block, scaled, as 16-bit values (8 per 16-byte store). */
template <int HD, bool F16>
static __device__ __forceinline__ void pm_stage_q(unsigned char *sq, const pl_attn_step &s,
                                                  int row0, int rows, int h, float qs)
{
    typedef pm_layout<HD, F16> L;
    for (int i = threadIdx.x; i < PM_BQ * HD / 8; i += 32 * PM_WARPS) {
        int rr = i / (HD / 8), d = 8 * (i % (HD / 8));
        uint32_t v[4] = {0u, 0u, 0u, 0u};
        if (rr < rows) {
            const float *qr = s.q + (size_t)(row0 + rr) * s.q_stride + (size_t)h * HD + d;
#pragma unroll
            for (int x = 0; x < 4; x++)
                v[x] = pl_pack2<F16>(qr[2 * x] * qs, qr[2 * x + 1] * qs);
        }
        *(uint4 *)(sq + rr * L::WPITCH + 2 * d) = make_uint4(v[0], v[1], v[2], v[3]);
    }
}

/* A fragments of the warp's 16 Q rows at k-step k. */
static __device__ __forceinline__ void pm_q_frag(uint32_t (&a)[4], const unsigned char *sq,
                                                 int pitch, int w, int k, int lane)
{
    int row = 16 * w + (lane & 7) + ((lane >> 3) & 1) * 8, col = (lane >> 4) * 16;
    pl_ldmatrix_x4(a, sq + row * pitch + 32 * k + col);
}

/* The warp's scores of one tile, masked: key t0 + j is seen by a row at p
 * when lo(p) <= t0 + j <= p and its slot is mapped. */
template <int HD, int BK, bool F16, bool QREG>
static __device__ __forceinline__ void pm_scores(float (&s)[BK / 8][4],
                                                 const uint32_t (&qa)[QREG ? HD / 16 : 1][4],
                                                 const unsigned char *sq, const unsigned char *sk,
                                                 int pitch, const int *slots, int t0,
                                                 const int (&pos)[2], const int (&lo)[2],
                                                 pl_score sc, int w, int lane)
{
    int krow = (lane & 7) + (lane >> 4) * 8, kcol = ((lane >> 3) & 1) * 16;
#pragma unroll
    for (int n = 0; n < BK / 8; n++)
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int k = 0; k < HD / 16; k++) {
        uint32_t a[4];
        if constexpr (QREG) {
            a[0] = qa[k][0]; a[1] = qa[k][1]; a[2] = qa[k][2]; a[3] = qa[k][3];
        } else {
            pm_q_frag(a, sq, 2 * HD + 16, w, k, lane);
        }
#pragma unroll
        for (int n = 0; n < BK / 16; n++) {
            uint32_t b[4];
            pl_ldmatrix_x4(b, sk + (16 * n + krow) * pitch + 32 * k + kcol);
            pl_mma16816<F16>(s[2 * n], a, b[0], b[1]);
            pl_mma16816<F16>(s[2 * n + 1], a, b[2], b[3]);
        }
    }
    int c2 = 2 * (lane & 3);
#pragma unroll
    for (int n = 0; n < BK / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int j = 8 * n + c2 + (e & 1), t = t0 + j, x = e >> 1;
            bool ok = t <= pos[x] && t >= lo[x] && slots[j] >= 0;
            s[n][e] = ok ? pl_score_fix(s[n][e], sc) : -INFINITY;
        }
}

/* Online softmax of the tile for the lane's rows (x = 0: row g, 1: g + 8):
 * new max, l and O rescaled, the scores replaced by probabilities. */
template <int HD, int BK>
static __device__ __forceinline__ void pm_softmax(float (&s)[BK / 8][4], float (&m)[2],
                                                  float (&l)[2], float (&o)[HD / 8][4])
{
#pragma unroll
    for (int x = 0; x < 2; x++) {
        float mt = -INFINITY;
#pragma unroll
        for (int n = 0; n < BK / 8; n++)
            mt = fmaxf(mt, fmaxf(s[n][2 * x], s[n][2 * x + 1]));
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
        float mn = fmaxf(m[x], mt), base = mn == -INFINITY ? 0.0f : mn;
        float corr = exp2f(m[x] - base), sum = 0.0f;
#pragma unroll
        for (int n = 0; n < BK / 8; n++) {
            s[n][2 * x] = exp2f(s[n][2 * x] - base);
            s[n][2 * x + 1] = exp2f(s[n][2 * x + 1] - base);
            sum += s[n][2 * x] + s[n][2 * x + 1];
        }
        l[x] = l[x] * corr + sum;   /* this lane's columns; summed over the quad at the end */
#pragma unroll
        for (int d = 0; d < HD / 8; d++) {
            o[d][2 * x] *= corr;
            o[d][2 * x + 1] *= corr;
        }
        m[x] = mn;
    }
}

/* O += P V: P from the score registers, V by ldmatrix.trans. */
template <int HD, int BK, bool F16>
static __device__ __forceinline__ void pm_pv(float (&o)[HD / 8][4], const float (&p)[BK / 8][4],
                                             const unsigned char *sv, int pitch, int lane)
{
    int vrow = (lane & 7) + ((lane >> 3) & 1) * 8, vcol = (lane >> 4) * 16;
#pragma unroll
    for (int k = 0; k < BK / 16; k++) {
        uint32_t a[4] = {pl_pack2<F16>(p[2 * k][0], p[2 * k][1]),
                         pl_pack2<F16>(p[2 * k][2], p[2 * k][3]),
                         pl_pack2<F16>(p[2 * k + 1][0], p[2 * k + 1][1]),
                         pl_pack2<F16>(p[2 * k + 1][2], p[2 * k + 1][3])};
#pragma unroll
        for (int d = 0; d < HD / 16; d++) {
            uint32_t b[4];
            pl_ldmatrix_x4_trans(b, sv + (16 * k + vrow) * pitch + 32 * d + vcol);
            pl_mma16816<F16>(o[2 * d], a, b[0], b[1]);
            pl_mma16816<F16>(o[2 * d + 1], a, b[2], b[3]);
        }
    }
}

/* The lane's two rows (g, g + 8 of the warp's 16): positions (-1: no row)
 * and first keys; the tile range [t_lo, t_hi) of the block. */
struct pm_rows {
    int pos[2], lo[2], wmax, wlo;
};

static __device__ __forceinline__ pm_rows pm_rows_of(const pl_attn_step &s, int row0, int rows,
                                                     int w, int lane, int window)
{
    pm_rows R;
    int g = lane >> 2;
    R.wmax = -1;
    R.wlo = INT32_MAX;
#pragma unroll
    for (int x = 0; x < 2; x++) {
        int rr = 16 * w + g + 8 * x;
        R.pos[x] = rr < rows ? s.positions[row0 + rr] : -1;
        R.lo[x] = rr < rows ? pl_window_lo(R.pos[x], window) : INT32_MAX;
        R.wmax = max(R.wmax, R.pos[x]);
        R.wlo = min(R.wlo, R.lo[x]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        R.wmax = max(R.wmax, __shfl_xor_sync(0xffffffffu, R.wmax, o));
        R.wlo = min(R.wlo, __shfl_xor_sync(0xffffffffu, R.wlo, o));
    }
    return R;
}

/* fp8: the staged e4m3 tile (K rows, then V rows) widened to fp16 by the
 * block, 16 bytes read and 32 written per chunk. */
template <int HD>
static __device__ __forceinline__ void pm_widen(const unsigned char *stg, unsigned char *wide)
{
    typedef pm_layout<HD, true> L;
    for (int c = threadIdx.x; c < 2 * L::BK * HD / 16; c += 32 * PM_WARPS) {
        int row = c / (HD / 16), col = c % (HD / 16);
        pl_e4m3x16_to_f16(stg + row * L::PITCH + 16 * col, wide + row * L::WPITCH + 32 * col);
    }
}

/* The lane's two rows of output: O / l (l summed over the quad, the head's
 * sink added against the row's max m) times the V scale, as bf16 pairs. */
template <int HD>
static __device__ __forceinline__ void pm_store(const pl_attn_step &s, float (&acc)[HD / 8][4],
                                                float (&l)[2], const float (&m)[2],
                                                const float *sinks, int row0, int rows, int h,
                                                float vsc, int w, int lane)
{
    int g8 = lane >> 2, c2 = 2 * (lane & 3);
#pragma unroll
    for (int x = 0; x < 2; x++) {
        l[x] += __shfl_xor_sync(0xffffffffu, l[x], 1);
        l[x] += __shfl_xor_sync(0xffffffffu, l[x], 2);
        int rr = 16 * w + g8 + 8 * x;
        if (rr >= rows)
            continue;
        float lx = pl_sink_sum(l[x], m[x], sinks, h);
        float inv = lx > 0.0f ? vsc / lx : 0.0f;
        __nv_bfloat16 *orow = (__nv_bfloat16 *)s.out + (size_t)(row0 + rr) * s.n_heads * HD
                              + (size_t)h * HD + c2;
#pragma unroll
        for (int d = 0; d < HD / 8; d++)
            *(__nv_bfloat162 *)(orow + d * 8) =
                __floats2bfloat162_rn(acc[d][2 * x] * inv, acc[d][2 * x + 1] * inv);
    }
}

template <int HD, bool FP8>
static __global__ void __launch_bounds__(32 * PM_WARPS)
attn_prefill_mma_kernel(pl_attn_step s, const int32_t *seqs, int s0, const int32_t *first_row,
                        const int32_t *n_rows_of, pl_kv_geom g, const unsigned char *kc,
                        const unsigned char *vc, const float *ks, const float *vs,
                        pl_attn_opts o)
{
    typedef pm_layout<HD, FP8> L;
    enum { BK = L::BK };
    extern __shared__ __align__(16) unsigned char pm_smem[];
    unsigned char *wide = pm_smem + PM_STAGES * L::STAGE, *sq = wide + L::WIDE;
    int *slots = (int *)(sq + L::Q);                            /* [stage][BK] */
    int sid = seqs ? seqs[s0 + blockIdx.z] : s0 + blockIdx.z, h = blockIdx.y;
    int r0 = blockIdx.x * PM_BQ, nr = n_rows_of[sid];
    if (r0 >= nr)
        return;
    int row0 = first_row[sid] + r0, rows = min(PM_BQ, nr - r0);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, tid = threadIdx.x;
    int kvh = h / (s.n_heads / g.n_kv_heads);
    pl_pages pg = pl_pages_of(s.block_table, sid, g);
    pl_score sc = pl_score_of(o, ks ? ks[kvh] : 1.0f);
    int t_lo = pl_window_lo(s.positions[row0], o.window);
    int t_hi = s.positions[row0 + rows - 1] + 1, n = (t_hi - t_lo + BK - 1) / BK;
    size_t eb = FP8 ? 1 : 2, tok_bytes = (size_t)g.n_kv_heads * HD * eb;
    size_t head_off = (size_t)kvh * HD * eb;
    if (tid < BK) {
        slots[tid] = pm_slot(t_lo + tid, t_hi, pg, g.block_size);
        slots[BK + tid] = pm_slot(t_lo + BK + tid, t_hi, pg, g.block_size);
    }
    pm_stage_q<HD, FP8>(sq, s, row0, rows, h, sc.qs);
    __syncthreads();
    for (int st = 0; st < PM_STAGES; st++) {   /* tiles 0 and 1 */
        if (st < n)
            pm_issue<HD, FP8>(pm_smem + st * L::STAGE, slots + st * BK, kc, vc, tok_bytes,
                              head_off);
        pl_cp_async_commit();
    }
    int next = tid < BK ? pm_slot(t_lo + 2 * BK + tid, t_hi, pg, g.block_size) : -1;
    pm_rows R = pm_rows_of(s, row0, rows, w, lane, o.window);
    uint32_t qa[L::QREG ? HD / 16 : 1][4];
    if constexpr (L::QREG) {
#pragma unroll
        for (int k = 0; k < HD / 16; k++)
            pm_q_frag(qa[k], sq, L::WPITCH, w, k, lane);
    }
    float acc[HD / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int d = 0; d < HD / 8; d++)
        acc[d][0] = acc[d][1] = acc[d][2] = acc[d][3] = 0.0f;
    for (int i = 0; i < n; i++) {
        int t0 = t_lo + i * BK;
        unsigned char *stg = pm_smem + (i & 1) * L::STAGE;
        const int *sl = slots + (i & 1) * BK;
        pl_cp_async_wait<1>();
        __syncthreads();
        const unsigned char *sk = stg, *sv = stg + L::TILE;
        int pitch = L::PITCH;
        if constexpr (FP8) {
            pm_widen<HD>(stg, wide);
            __syncthreads();
            sk = wide;
            sv = wide + BK * L::WPITCH;
            pitch = L::WPITCH;
        }
        /* warp-uniform: none of the warp's rows sees this tile */
        if (R.wmax >= t0 && R.wlo < t0 + BK) {
            float sc_[BK / 8][4];
            pm_scores<HD, BK, FP8, L::QREG>(sc_, qa, sq, sk, pitch, sl, t0, R.pos, R.lo, sc, w,
                                            lane);
            pm_softmax<HD, BK>(sc_, m, l, acc);
            pm_pv<HD, BK, FP8>(acc, sc_, sv, pitch, lane);
        }
        __syncthreads();   /* the stage, its slots (and the fp16 tiles) are free */
        if (tid < BK)
            slots[(i & 1) * BK + tid] = next;
        __syncthreads();
        if (i + 2 < n)
            pm_issue<HD, FP8>(stg, sl, kc, vc, tok_bytes, head_off);
        pl_cp_async_commit();
        next = tid < BK ? pm_slot(t0 + 3 * BK + tid, t_hi, pg, g.block_size) : -1;
    }
    pl_cp_async_wait<0>();
    pm_store<HD>(s, acc, l, m, o.sinks, row0, rows, h, vs ? vs[kvh] : 1.0f, w, lane);
}

template <int HD, bool FP8>
static int launch_mma(dim3 grid, cudaStream_t st, const pl_attn_step *s, pl_kv_geom g,
                      pl_kv_layer kv, pl_attn_opts o, const int32_t *seqs, int s0,
                      const int32_t *fr, const int32_t *nr)
{
    int sm = pm_layout<HD, FP8>::BYTES;
    PL_CUDA_CHECK(cudaFuncSetAttribute(attn_prefill_mma_kernel<HD, FP8>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, sm));
    attn_prefill_mma_kernel<HD, FP8><<<grid, 32 * PM_WARPS, sm, st>>>(*s, seqs, s0, fr, nr, g,
        (const unsigned char *)kv.k, (const unsigned char *)kv.v, FP8 ? kv.k_scale : NULL,
        FP8 ? kv.v_scale : NULL, o);
    PL_CUDA_LAUNCHED();
    return 0;
}

extern "C" int pl_cuda_attn_prefill_mma_supported(int head_dim)
{
    return head_dim == 64 || head_dim == 128 || head_dim == 256;
}

extern "C" int pl_cuda_attn_prefill_mma_tile_(const pl_attn_step *s, pl_kv_geom g,
                                              pl_kv_layer kv, pl_attn_opts o,
                                              const int32_t *seqs, int s0, int n,
                                              const int32_t *seq_first_row,
                                              const int32_t *seq_n_rows, int max_seq_rows,
                                              cudaStream_t st)
{
    dim3 grid((max_seq_rows + PM_BQ - 1) / PM_BQ, s->n_heads, n);
    const int32_t *fr = seq_first_row, *nr = seq_n_rows;
    bool fp8 = g.dtype == PL_KV_FP8;
    switch (g.head_dim) {
    case 64: return fp8 ? launch_mma<64, true>(grid, st, s, g, kv, o, seqs, s0, fr, nr)
                        : launch_mma<64, false>(grid, st, s, g, kv, o, seqs, s0, fr, nr);
    case 128: return fp8 ? launch_mma<128, true>(grid, st, s, g, kv, o, seqs, s0, fr, nr)
                         : launch_mma<128, false>(grid, st, s, g, kv, o, seqs, s0, fr, nr);
    default: return fp8 ? launch_mma<256, true>(grid, st, s, g, kv, o, seqs, s0, fr, nr)
                        : launch_mma<256, false>(grid, st, s, g, kv, o, seqs, s0, fr, nr);
    }
}
