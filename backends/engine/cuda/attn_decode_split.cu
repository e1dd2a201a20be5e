/* attn_decode_split.cu - split-KV, GQA-grouped decode attention.
 *
 * grid (n_rows, n_kv_heads, n_splits), 4 warps. A block takes one KV head
 * of one row and the split's share of the keys; it loads each key and
 * value once for the G = n_heads / n_kv_heads query heads of the group
 * (the classic kernel re-reads K/V per query head). Each warp walks every
 * 4th key of the split with one online softmax per query head; the warps
 * are merged in shared memory. With one split the block writes the output;
 * otherwise it writes (max, sum, unnormalised accumulator) per query head
 * to the workspace and a second kernel merges the splits. The split count
 * comes from the batch (fixed for a CUDA graph's bucket): enough blocks
 * to fill the GPU at batch 1. Two variants share the launch and the
 * merge: split16 (16 lanes per key) and mma (tensor cores). */
#include <math.h>

#include "backends/engine/cuda/attn_decode.cuh"
#include "backends/engine/cuda/mma.cuh"

#define SP_WARPS 4
#define SP_MAX_SPLITS 32

/* One key (k, v: this lane's pairs) into the online softmax of each of the
 * G query heads: score by warp sum, rescale by the new max, accumulate. */
template <int NP, int G>
static __device__ __forceinline__ void online_update(const float2 (&qv)[G][NP],
                                                     const float2 (&k)[NP],
                                                     const float2 (&v)[NP], float (&m)[G],
                                                     float (&l)[G], float2 (&acc)[G][NP])
{
#pragma unroll
    for (int j = 0; j < G; j++) {
        float s = 0.0f;
#pragma unroll
        for (int p = 0; p < NP; p++)
            s += qv[j][p].x * k[p].x + qv[j][p].y * k[p].y;
        s = pl_warp_sum(s);
        float mn = fmaxf(m[j], s);
        float corr = expf(m[j] - mn), pw = expf(s - mn);
        l[j] = l[j] * corr + pw;
#pragma unroll
        for (int p = 0; p < NP; p++) {
            acc[j][p].x = acc[j][p].x * corr + pw * v[p].x;
            acc[j][p].y = acc[j][p].y * corr + pw * v[p].y;
        }
        m[j] = mn;
    }
}

/* Merge the NV partial softmax states of one block (shared memory) per
 * query head of the group: the output when the block has the row's only
 * split, else (max, sum, accumulator) into the workspace. */
template <int NV, int G, int HD>
static __device__ __forceinline__ void merge_partials(const float (&sm_m)[NV][G],
                                                      const float (&sm_l)[NV][G],
                                                      const float (&sm_acc)[NV][G][HD], int r,
                                                      int kvh, int sp, int ns,
                                                      __nv_bfloat16 *out, float *ws,
                                                      int n_heads)
{
    for (int i = threadIdx.x; i < G * HD; i += blockDim.x) {
        int j = i / HD, d = i % HD, h = kvh * G + j;
        float gm = -INFINITY, gl = 0.0f, a = 0.0f;
        for (int x = 0; x < NV; x++)
            gm = fmaxf(gm, sm_m[x][j]);
        for (int x = 0; x < NV; x++) {
            float f = sm_m[x][j] == -INFINITY ? 0.0f : expf(sm_m[x][j] - gm);
            gl += sm_l[x][j] * f;
            a += sm_acc[x][j][d] * f;
        }
        if (ns == 1) {
            out[(size_t)r * n_heads * HD + (size_t)h * HD + d] =
                __float2bfloat16(gl > 0.0f ? a / gl : 0.0f);
            continue;
        }
        float *o = ws + (((size_t)blockIdx.x * n_heads + h) * ns + sp) * (HD + 2);
        if (d == 0) {
            o[0] = gm;
            o[1] = gl;
        }
        o[2 + d] = a;
    }
}

template <int NP, int G> /* NP: bf16 pairs per lane (head_dim / 64); G: group size */
static __global__ void attn_split_kernel(const float *q, int q_stride,
                                         const int32_t *positions, const int32_t *rows,
                                         const int32_t *row_seq, const int32_t *bt,
                                         pl_kv_geom g,
                                         const __nv_bfloat16 *kc, const __nv_bfloat16 *vc,
                                         __nv_bfloat16 *out, float *ws, int n_heads,
                                         float scale)
{
    __shared__ float sm_m[SP_WARPS][G], sm_l[SP_WARPS][G];
    __shared__ float sm_acc[SP_WARPS][G][NP * 64];
    const int hd = NP * 64, ns = gridDim.z;
    int r = rows ? rows[blockIdx.x] : blockIdx.x, kvh = blockIdx.y, sp = blockIdx.z;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int n_keys = positions[r] + 1;
    int chunk = (n_keys + ns - 1) / ns, t0 = sp * chunk;
    int t1 = min(n_keys, t0 + chunk);
    const int32_t *tab = bt + (size_t)row_seq[r] * g.max_blocks_per_seq;
    float2 qv[G][NP], acc[G][NP];
    float m[G], l[G];
#pragma unroll
    for (int j = 0; j < G; j++) {
        const float *qr = q + (size_t)r * q_stride + (size_t)(kvh * G + j) * hd;
#pragma unroll
        for (int p = 0; p < NP; p++) {
            qv[j][p] = make_float2(qr[2 * lane + 64 * p] * scale,
                                   qr[2 * lane + 64 * p + 1] * scale);
            acc[j][p] = make_float2(0.0f, 0.0f);
        }
        m[j] = -INFINITY;
        l[j] = 0.0f;
    }
    for (int t = t0 + w; t < t1; t += SP_WARPS) {
        int blk = tab[t / g.block_size];
        if (blk < 0 || blk >= g.n_blocks)
            continue;
        size_t base = (((size_t)blk * g.block_size + t % g.block_size) * g.n_kv_heads
                       + kvh) * hd;
        const __nv_bfloat162 *k2 = (const __nv_bfloat162 *)(kc + base);
        const __nv_bfloat162 *v2 = (const __nv_bfloat162 *)(vc + base);
        float2 k[NP], v[NP];
#pragma unroll
        for (int p = 0; p < NP; p++) {
            k[p] = __bfloat1622float2(k2[lane + 32 * p]);
            v[p] = __bfloat1622float2(v2[lane + 32 * p]);
        }
        online_update<NP, G>(qv, k, v, m, l, acc);
    }
#pragma unroll
    for (int j = 0; j < G; j++) {
        if (lane == 0) {
            sm_m[w][j] = m[j];
            sm_l[w][j] = l[j];
        }
#pragma unroll
        for (int p = 0; p < NP; p++) {
            sm_acc[w][j][2 * lane + 64 * p] = acc[j][p].x;
            sm_acc[w][j][2 * lane + 64 * p + 1] = acc[j][p].y;
        }
    }
    __syncthreads();
    merge_partials<SP_WARPS, G, NP * 64>(sm_m, sm_l, sm_acc, r, kvh, sp, ns, out, ws, n_heads);
}

/* DPL contiguous bf16 of a K or V row, as one load (split16 kernel). */
template <int DPL> struct kv_load;
template <> struct kv_load<4> { typedef uint2 t; };
template <> struct kv_load<8> { typedef uint4 t; };

/* The split16 variant: a warp is two half-warps of 16 lanes, each with a
 * key stream and an online softmax of its own, and a lane holds DPL =
 * head_dim / 16 contiguous dims (one 8- or 16-byte load per key). Against
 * the 32-lane kernel a key costs 4 shuffle levels per query head instead
 * of 5, shared by two keys, and half the exponentials per key. The
 * 2 x SP_WARPS partial states are merged as the warps' are. Up to 4
 * query heads per group, the registers are capped for 5 blocks per SM
 * (96; a few bytes spill). The loop
 * bound is the same for every lane of a warp (full-mask shuffles); the
 * half-warp whose key is past the split's end skips the update. */
template <int DPL, int G>
static __global__ void __launch_bounds__(32 * SP_WARPS, G >= 8 ? 1 : 5)
attn_split16_kernel(const float *q, int q_stride,
                                           const int32_t *positions, const int32_t *rows,
                                           const int32_t *row_seq, const int32_t *bt,
                                           pl_kv_geom g, const __nv_bfloat16 *kc,
                                           const __nv_bfloat16 *vc, __nv_bfloat16 *out,
                                           float *ws, int n_heads, float scale)
{
    typedef typename kv_load<DPL>::t vec;
    enum { HD = 16 * DPL, NV = 2 * SP_WARPS };
    __shared__ float sm_m[NV][G], sm_l[NV][G];
    __shared__ float sm_acc[NV][G][HD];
    const int ns = gridDim.z;
    int r = rows ? rows[blockIdx.x] : blockIdx.x, kvh = blockIdx.y, sp = blockIdx.z;
    int lane = threadIdx.x & 31, vw = threadIdx.x >> 4, sl = lane & 15;
    int n_keys = positions[r] + 1;
    int chunk = (n_keys + ns - 1) / ns, t0 = sp * chunk;
    int t1 = min(n_keys, t0 + chunk);
    const int32_t *tab = bt + (size_t)row_seq[r] * g.max_blocks_per_seq;
    float qv[G][DPL], acc[G][DPL], m[G], l[G];
#pragma unroll
    for (int j = 0; j < G; j++) {
        const float *qr = q + (size_t)r * q_stride + (size_t)(kvh * G + j) * HD + sl * DPL;
#pragma unroll
        for (int d = 0; d < DPL; d++) {
            qv[j][d] = qr[d] * scale;
            acc[j][d] = 0.0f;
        }
        m[j] = -INFINITY;
        l[j] = 0.0f;
    }
    for (int base = t0; base < t1; base += NV) {
        int t = base + vw, blk = t < t1 ? tab[t / g.block_size] : -1;
        bool ok = blk >= 0 && blk < g.n_blocks;
        size_t off = ok ? (((size_t)blk * g.block_size + t % g.block_size) * g.n_kv_heads
                           + kvh) * HD + sl * DPL : 0;
        vec kr = ok ? *(const vec *)(kc + off) : vec(), vr = ok ? *(const vec *)(vc + off) : vec();
        float k[DPL], v[DPL], s[G];
#pragma unroll
        for (int d = 0; d < DPL / 2; d++) {
            float2 kf = __bfloat1622float2(((const __nv_bfloat162 *)&kr)[d]);
            float2 vf = __bfloat1622float2(((const __nv_bfloat162 *)&vr)[d]);
            k[2 * d] = kf.x;
            k[2 * d + 1] = kf.y;
            v[2 * d] = vf.x;
            v[2 * d + 1] = vf.y;
        }
#pragma unroll
        for (int j = 0; j < G; j++) {
            s[j] = 0.0f;
#pragma unroll
            for (int d = 0; d < DPL; d++)
                s[j] += qv[j][d] * k[d];
        }
#pragma unroll
        for (int o = 8; o > 0; o >>= 1)
#pragma unroll
            for (int j = 0; j < G; j++)
                s[j] += __shfl_xor_sync(0xffffffffu, s[j], o);
        if (!ok)
            continue;
#pragma unroll
        for (int j = 0; j < G; j++) {
            float mn = fmaxf(m[j], s[j]);
            float corr = expf(m[j] - mn), pw = expf(s[j] - mn);
            l[j] = l[j] * corr + pw;
#pragma unroll
            for (int d = 0; d < DPL; d++)
                acc[j][d] = acc[j][d] * corr + pw * v[d];
            m[j] = mn;
        }
    }
#pragma unroll
    for (int j = 0; j < G; j++) {
        if (sl == 0) {
            sm_m[vw][j] = m[j];
            sm_l[vw][j] = l[j];
        }
#pragma unroll
        for (int d = 0; d < DPL; d++)
            sm_acc[vw][j][sl * DPL + d] = acc[j][d];
    }
    __syncthreads();
    merge_partials<NV, G, HD>(sm_m, sm_l, sm_acc, r, kvh, sp, ns, out, ws, n_heads);
}

/* ---- the mma variant: scores and P.V on tensor cores ---- */

#define MM_BK 32                 /* keys per warp tile */
#define MM_PAD 8                 /* bf16 of padding per transposed V row */

/* A warp's tile of MM_BK keys from t: the KV offsets of the keys this lane
 * reads K for (key n*8 + lane/4 of the tile; -1: masked), and V copied
 * transposed into the warp's sv[dim][key]. */
template <int HD>
static __device__ __forceinline__ void mm_tile_load(long (&koff)[MM_BK / 8],
                                                    __nv_bfloat16 *sv, int t, int t1,
                                                    const int32_t *tab, pl_kv_geom g, int kvh,
                                                    const __nv_bfloat16 *vc, int lane)
{
#pragma unroll
    for (int n = 0; n < MM_BK / 8; n++) {
        int tt = t + n * 8 + (lane >> 2), blk = tt < t1 ? tab[tt / g.block_size] : -1;
        koff[n] = blk >= 0 && blk < g.n_blocks
            ? (((long)blk * g.block_size + tt % g.block_size) * g.n_kv_heads + kvh) * HD : -1;
    }
    __syncwarp();
    for (int i = lane; i < MM_BK * HD / 8; i += 32) {
        int j = i / (HD / 8), c = i % (HD / 8), tt = t + j;
        uint4 vv = make_uint4(0, 0, 0, 0);
        int blk = tt < t1 ? tab[tt / g.block_size] : -1;
        if (blk >= 0 && blk < g.n_blocks)
            vv = *(const uint4 *)(vc + (((size_t)blk * g.block_size + tt % g.block_size)
                                        * g.n_kv_heads + kvh) * HD + 8 * c);
        const __nv_bfloat16 *ve = (const __nv_bfloat16 *)&vv;
#pragma unroll
        for (int e = 0; e < 8; e++)
            sv[(8 * c + e) * (MM_BK + MM_PAD) + j] = ve[e];
    }
    __syncwarp();
}

/* The tile's scores of row lane/4 (K read from the cache as B operands;
 * keys with koff < 0 masked), then its online softmax: new max m, l and O
 * rescaled, the scores replaced by their exp2 probabilities. */
template <int HD>
static __device__ __forceinline__ void mm_scores_softmax(float (&s)[MM_BK / 8][4],
                                                         const uint32_t (&qa)[HD / 16][4],
                                                         const __nv_bfloat16 *kc,
                                                         const long (&koff)[MM_BK / 8],
                                                         int lane, float &m, float &l,
                                                         float (&o)[HD / 8][4])
{
    int c2 = 2 * (lane & 3);
#pragma unroll
    for (int n = 0; n < MM_BK / 8; n++) {
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
        const __nv_bfloat16 *kr = kc + (koff[n] < 0 ? 0 : koff[n]) + c2;
#pragma unroll
        for (int k = 0; k < HD / 16; k++)
            pl_mma16816(s[n], qa[k], *(const uint32_t *)(kr + 16 * k),
                        *(const uint32_t *)(kr + 16 * k + 8));
    }
    /* Column c2 (+1) of tile n is key n*8 + c2 (+1): its offset is lane
     * 4*(c2 (+1))'s. */
    float mt = -INFINITY;
#pragma unroll
    for (int n = 0; n < MM_BK / 8; n++) {
#pragma unroll
        for (int x = 0; x < 2; x++) {
            long ko = __shfl_sync(0xffffffffu, koff[n], 4 * (c2 + x));
            if (ko < 0)
                s[n][x] = -INFINITY;
            mt = fmaxf(mt, s[n][x]);
        }
    }
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
    float mn = fmaxf(m, mt), base = mn == -INFINITY ? 0.0f : mn;
    float corr = exp2f(m - base), sum = 0.0f;
#pragma unroll
    for (int n = 0; n < MM_BK / 8; n++) {
        s[n][0] = exp2f(s[n][0] - base);
        s[n][1] = exp2f(s[n][1] - base);
        sum += s[n][0] + s[n][1];
    }
    l = l * corr + sum;
    m = mn;
#pragma unroll
    for (int d = 0; d < HD / 8; d++) {
        o[d][0] *= corr;
        o[d][1] *= corr;
    }
}

/* grid (n_rows, n_kv_heads, n_splits), 4 warps. The G query heads of the
 * group are rows 0..G-1 of a 16-row MMA tile (the rest zero); warp w takes
 * every 4th tile of 32 keys of the split: scores (16 x 32) by MMA with K
 * read from the cache as B operands, the online softmax of row lane/4 in
 * registers, P.V by MMA with V staged transposed in shared memory. Masked
 * keys (past the split, unmapped blocks) score -inf. The 4 warps' states
 * are merged as the split kernel's. */
template <int HD, int G>
static __global__ void __launch_bounds__(32 * SP_WARPS)
attn_mma_kernel(const float *q, int q_stride, const int32_t *positions, const int32_t *rows,
                const int32_t *row_seq, const int32_t *bt, pl_kv_geom g,
                const __nv_bfloat16 *kc, const __nv_bfloat16 *vc, __nv_bfloat16 *out,
                float *ws, int n_heads, float scale)
{
    enum { STAGE = SP_WARPS * HD * (MM_BK + MM_PAD) * 2,
           MERGE = SP_WARPS * G * (HD + 2) * 4 };
    __shared__ __align__(16) unsigned char smem[STAGE > MERGE ? STAGE : MERGE];
    const int ns = gridDim.z;
    int r = rows ? rows[blockIdx.x] : blockIdx.x, kvh = blockIdx.y, sp = blockIdx.z;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, gq = lane >> 2, c2 = 2 * (lane & 3);
    int n_keys = positions[r] + 1;
    int chunk = (n_keys + ns - 1) / ns, t0 = sp * chunk;
    int t1 = min(n_keys, t0 + chunk);
    const int32_t *tab = bt + (size_t)row_seq[r] * g.max_blocks_per_seq;
    __nv_bfloat16 *sv = (__nv_bfloat16 *)smem + w * HD * (MM_BK + MM_PAD);
    /* Q of head gq as the A operand (rows >= G and 8-15 zero), scaled for
     * exp2. */
    const float qs = scale * PL_LOG2E;
    uint32_t qa[HD / 16][4];
#pragma unroll
    for (int k = 0; k < HD / 16; k++) {
        const float *qr = q + (size_t)r * q_stride + (size_t)(kvh * G + gq) * HD + 16 * k + c2;
        qa[k][0] = gq < G ? pl_pack_bf16(qr[0] * qs, qr[1] * qs) : 0u;
        qa[k][2] = gq < G ? pl_pack_bf16(qr[8] * qs, qr[9] * qs) : 0u;
        qa[k][1] = qa[k][3] = 0u;
    }
    float o[HD / 8][4], m = -INFINITY, l = 0.0f;
#pragma unroll
    for (int d = 0; d < HD / 8; d++)
        o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
    for (int t = t0 + w * MM_BK; t < t1; t += SP_WARPS * MM_BK) {
        long koff[MM_BK / 8];
        mm_tile_load<HD>(koff, sv, t, t1, tab, g, kvh, vc, lane);
        float s[MM_BK / 8][4];
        mm_scores_softmax<HD>(s, qa, kc, koff, lane, m, l, o);
        /* P rows 8-15 are scores of zero query rows: they only reach O rows
         * 8-15, which are never read. */
        pl_mma_pv<HD, MM_BK, MM_BK + MM_PAD>(o, s, sv, lane);
        __syncwarp();   /* sv is rewritten by the next tile */
    }
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    __syncthreads();    /* the staging area becomes the merge area */
    float (&sm_m)[SP_WARPS][G] = *reinterpret_cast<float (*)[SP_WARPS][G]>(smem);
    float (&sm_l)[SP_WARPS][G] =
        *reinterpret_cast<float (*)[SP_WARPS][G]>(smem + sizeof(float) * SP_WARPS * G);
    float (&sm_acc)[SP_WARPS][G][HD] = *reinterpret_cast<float (*)[SP_WARPS][G][HD]>(
        smem + 2 * sizeof(float) * SP_WARPS * G);
    if (gq < G) {
        if ((lane & 3) == 0) {
            /* merge_partials and the split merge take maxima in natural-log
             * units (expf); m is in log2 units (ln 2 = 0.693...). */
            sm_m[w][gq] = m == -INFINITY ? m : m * 0.6931471805599453f;
            sm_l[w][gq] = l;
        }
#pragma unroll
        for (int d = 0; d < HD / 8; d++) {
            sm_acc[w][gq][d * 8 + c2] = o[d][0];
            sm_acc[w][gq][d * 8 + c2 + 1] = o[d][1];
        }
    }
    __syncthreads();
    merge_partials<SP_WARPS, G, HD>(sm_m, sm_l, sm_acc, r, kvh, sp, ns, out, ws, n_heads);
}

/* Merge the splits of (row, head): grid (n_rows, n_heads), head_dim threads. */
static __global__ void attn_split_merge(const float *ws, const int32_t *rows,
                                        __nv_bfloat16 *out, int n_heads, int hd, int ns)
{
    int r = rows ? rows[blockIdx.x] : blockIdx.x, h = blockIdx.y, d = threadIdx.x;
    const float *p = ws + ((size_t)blockIdx.x * n_heads + h) * ns * (hd + 2);
    float gm = -INFINITY, gl = 0.0f, a = 0.0f;
    for (int s = 0; s < ns; s++)
        gm = fmaxf(gm, p[s * (hd + 2)]);
    for (int s = 0; s < ns; s++) {
        float m = p[s * (hd + 2)];
        float f = m == -INFINITY ? 0.0f : expf(m - gm);
        gl += p[s * (hd + 2) + 1] * f;
        a += p[s * (hd + 2) + 2 + d] * f;
    }
    out[(size_t)r * n_heads * hd + (size_t)h * hd + d] = __float2bfloat16(gl > 0.0f ? a / gl
                                                                                  : 0.0f);
}

extern "C" int pl_cuda_attn_split_count(int n_rows, int n_kv_heads, int n_sm)
{
    int blocks = n_rows * n_kv_heads;
    if (blocks <= 0)
        return 1;
    int ns = (2 * n_sm + blocks - 1) / blocks;
    return ns < 1 ? 1 : ns > SP_MAX_SPLITS ? SP_MAX_SPLITS : ns;
}

extern "C" size_t pl_cuda_attn_split_ws(int n_rows, int n_heads, int head_dim, int n_splits)
{
    return n_splits <= 1 ? 0 : (size_t)n_rows * n_heads * n_splits * (head_dim + 2);
}

extern "C" int pl_cuda_attn_split_supported(int n_heads, int n_kv_heads, int head_dim)
{
    int G = n_kv_heads > 0 ? n_heads / n_kv_heads : 0;
    return (head_dim == 64 || head_dim == 128) && (G == 1 || G == 2 || G == 4 || G == 8)
           && n_heads == G * n_kv_heads;
}

template <int NP, int G>
static void launch_split(dim3 grid, cudaStream_t st, pl_split_kind kind, const float *q,
                         int q_stride,
                         const int32_t *pos, const int32_t *rows, const int32_t *rs,
                         const int32_t *bt,
                         pl_kv_geom g, const pl_bf16 *kc, const pl_bf16 *vc, pl_bf16 *out,
                         float *ws, int n_heads, float scale)
{
    const __nv_bfloat16 *k = (const __nv_bfloat16 *)kc, *v = (const __nv_bfloat16 *)vc;
    __nv_bfloat16 *o = (__nv_bfloat16 *)out;
    if (kind == PL_SPLIT_HALF)
        attn_split16_kernel<4 * NP, G><<<grid, 32 * SP_WARPS, 0, st>>>(q, q_stride, pos, rows,
            rs, bt, g, k, v, o, ws, n_heads, scale);
    else if (kind == PL_SPLIT_MMA)
        attn_mma_kernel<64 * NP, G><<<grid, 32 * SP_WARPS, 0, st>>>(q, q_stride, pos, rows, rs,
            bt, g, k, v, o, ws, n_heads, scale);
    else
        attn_split_kernel<NP, G><<<grid, 32 * SP_WARPS, 0, st>>>(q, q_stride, pos, rows, rs,
            bt, g, k, v, o, ws, n_heads, scale);
}

extern "C" int pl_cuda_attn_decode_split(const float *q, int q_stride,
                                         const int32_t *positions, const int32_t *rows,
                                         const int32_t *row_seq,
                                         const int32_t *block_table, pl_kv_geom g,
                                         const pl_bf16 *k_cache, const pl_bf16 *v_cache,
                                         pl_bf16 *out, int n_rows, int n_heads, float scale,
                                         int n_splits, float *ws, pl_split_kind kind,
                                         cudaStream_t st)
{
    PL_CUDA_ARG(q && positions && row_seq && block_table && k_cache && v_cache && out);
    PL_CUDA_ARG(pl_cuda_attn_split_supported(n_heads, g.n_kv_heads, g.head_dim));
    PL_CUDA_ARG(g.block_size > 0 && q_stride >= n_heads * g.head_dim && n_rows >= 0);
    PL_CUDA_ARG(n_splits >= 1 && n_splits <= SP_MAX_SPLITS && (n_splits == 1 || ws));
    PL_CUDA_ARG(kind == PL_SPLIT_WARP || kind == PL_SPLIT_HALF || kind == PL_SPLIT_MMA);
    if (n_rows == 0)
        return 0;
    dim3 grid(n_rows, g.n_kv_heads, n_splits);
    int key = (g.head_dim / 64) * 16 + n_heads / g.n_kv_heads;
#define SP_CASE(NP, G) case NP * 16 + G: launch_split<NP, G>(grid, st, kind, q, q_stride, \
        positions, rows, row_seq, block_table, g, k_cache, v_cache, out, ws, n_heads, scale); \
        break
    switch (key) {
    SP_CASE(1, 1); SP_CASE(1, 2); SP_CASE(1, 4); SP_CASE(1, 8);
    SP_CASE(2, 1); SP_CASE(2, 2); SP_CASE(2, 4); SP_CASE(2, 8);
    default: return pl_cuda_fail_(__FILE__, __LINE__, "split decode: unsupported shape");
    }
#undef SP_CASE
    PL_CUDA_LAUNCHED();
    if (n_splits > 1) {
        attn_split_merge<<<dim3(n_rows, n_heads), g.head_dim, 0, st>>>(
            ws, rows, (__nv_bfloat16 *)out, n_heads, g.head_dim, n_splits);
        PL_CUDA_LAUNCHED();
    }
    return 0;
}
