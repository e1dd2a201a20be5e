/* attn_common.cuh - what every attention kernel shares: the options of a
 * model's attention (scale, logit soft-capping, sliding window), and, for
 * device code, the score transform, the page lookup by shift, and K/V
 * element loads from a bf16 or fp8 cache.
 *
 * Scores are kept in log2 units (the softmax is taken with exp2): q is
 * multiplied once by scale * log2(e) (times the fp8 K scale), so each key
 * costs one exp2 and no multiply. With soft-capping, q is multiplied by
 * scale / softcap and a score becomes softcap * log2(e) * tanh(q.k). A row
 * that sees no key gets zeros; unmapped blocks' keys are not seen. A sink
 * enters at the very end, where a row's softmax is normalised: its share
 * 2^(sink * log2(e) - m) joins the sum l kept relative to the running max m
 * (pl_sink_sum), so the partial states of warps and splits merge as they
 * did without it. */
#ifndef PL_CUDA_ATTN_COMMON_CUH
#define PL_CUDA_ATTN_COMMON_CUH

#include "backends/engine/cuda/kv_write.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/** A layer's attention, as every kernel applies it. */
typedef struct pl_attn_opts {
    float scale;                 /**< of q.k (1/sqrt(head_dim), or the model's) */
    float softcap;               /**< > 0: a score s becomes softcap * tanh(s / softcap)
                                      after the scale (Gemma 2) */
    int window;                  /**< > 0: the row at position p sees the keys at
                                      p - window + 1 .. p only (sliding window) */
    const float *sinks;          /**< (n_heads) device, or NULL: a logit per query head
                                      (natural units, as the scores after scale and cap)
                                      that joins each softmax's denominator and adds no
                                      value (gpt-oss's attention sinks) */
} pl_attn_opts;

/** One step's rows as the attention kernels read them (device arrays). */
typedef struct pl_attn_step {
    const float *q;              /**< (rows, q_stride) fp32; head h at h * head_dim */
    int q_stride;
    int n_heads;                 /**< query heads, a multiple of the KV heads */
    const int32_t *positions;    /**< (rows) position of each row */
    const int32_t *row_seq;      /**< (rows) the row's sequence: its block-table row
                                      (decode kernels) */
    const int32_t *block_table;  /**< (sequences, max_blocks_per_seq) */
    pl_bf16 *out;                /**< (rows, n_heads * head_dim) bf16 */
} pl_attn_step;

/** The plain options: scale only. */
static inline pl_attn_opts pl_attn_plain(float scale)
{
    pl_attn_opts o = {scale, 0.0f, 0, NULL};
    return o;
}

/** Options a kernel can apply: finite scale, softcap >= 0, window >= 0. */
static inline int pl_attn_opts_ok(pl_attn_opts o)
{
    return o.scale > 0.0f && o.scale < 1e30f && o.softcap >= 0.0f && o.softcap < 1e30f
           && o.window >= 0;
}

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
#include <type_traits>

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#define PL_LOG2E 1.4426950408889634f

/** A head's softmax denominator with its sink: l (the sum relative to the
 *  row's max m, log2 units) plus the sink's share 2^(sink * log2(e) - m).
 *  No key seen (m = -inf, l = 0): l, so the row stays zeros. A sink far
 *  above every score gives +inf and an output of zeros, its limit. */
static __device__ __forceinline__ float pl_sink_sum(float l, float m, const float *sinks, int h)
{
    return sinks && m != -INFINITY ? l + exp2f(sinks[h] * PL_LOG2E - m) : l;
}

/** How raw dot products become log2-unit scores. */
struct pl_score {
    float qs;                    /* multiplies q once */
    float cap;                   /* > 0: score = cap * tanh(dot) */
};

static __device__ __forceinline__ pl_score pl_score_of(pl_attn_opts o, float k_scale)
{
    pl_score s;
    s.qs = (o.softcap > 0.0f ? o.scale / o.softcap : o.scale * PL_LOG2E) * k_scale;
    s.cap = o.softcap > 0.0f ? o.softcap * PL_LOG2E : 0.0f;
    return s;
}

/* The full-precision tanhf: tanh.approx's 2^-11 relative error would be
 * 0.035 log2 units (2.4 % of a probability) at Gemma 2's cap of 50. */
static __device__ __forceinline__ float pl_score_fix(float dot, pl_score s)
{
    return s.cap > 0.0f ? s.cap * tanhf(dot) : dot;
}

/** First key a row at position pos sees. */
static __device__ __forceinline__ int pl_window_lo(int pos, int window)
{
    return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

/** The page table of one sequence, indexed by shift (block_size a power
 *  of two). blk() is -1 for unmapped pages. */
struct pl_pages {
    const int32_t *tab;
    int shift, n_blocks;
    __device__ __forceinline__ int blk(int page) const
    {
        int b = tab[page];
        return b >= 0 && b < n_blocks ? b : -1;
    }
};

static __device__ __forceinline__ pl_pages pl_pages_of(const int32_t *bt, int seq, pl_kv_geom g)
{
    pl_pages p;
    p.tab = bt + (size_t)seq * g.max_blocks_per_seq;
    p.shift = __popc(g.block_size - 1);
    p.n_blocks = g.n_blocks;
    return p;
}

/* K/V element types: bf16 and e4m3 (its storage byte). */
typedef __nv_fp8_storage_t pl_e4m3;

/** N consecutive elements (N even; the address N-element aligned) as floats. */
template <int N>
static __device__ __forceinline__ void pl_kv_load(const __nv_bfloat16 *p, float (&x)[N])
{
    if constexpr (N == 2) {
        float2 f = __bfloat1622float2(*(const __nv_bfloat162 *)p);
        x[0] = f.x;
        x[1] = f.y;
    } else {
        static_assert(N % 4 == 0, "4, 8 or 16 elements");
        typedef typename std::conditional<N == 4, uint2, uint4>::type V;
#pragma unroll
        for (int c = 0; c < N; c += sizeof(V) / 2) {
            V v = *(const V *)(p + c);
            const __nv_bfloat162 *h = (const __nv_bfloat162 *)&v;
#pragma unroll
            for (int i = 0; i < (int)sizeof(V) / 4; i++) {
                float2 f = __bfloat1622float2(h[i]);
                x[c + 2 * i] = f.x;
                x[c + 2 * i + 1] = f.y;
            }
        }
    }
}

/** Two e4m3 as a half2 (exact: every e4m3 value is a half). */
static __device__ __forceinline__ __half2 pl_e4m3x2_to_half2(uint16_t v)
{
    __half2_raw r = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)v, __NV_E4M3);
    return *(__half2 *)&r;
}

template <int N>
static __device__ __forceinline__ void pl_kv_load(const pl_e4m3 *p, float (&x)[N])
{
    static_assert(N % 2 == 0 && N <= 16, "2 to 16 elements");
    typedef typename std::conditional<N == 2, uint16_t,
            typename std::conditional<N == 4, uint32_t,
            typename std::conditional<N == 8, uint2, uint4>::type>::type>::type V;
    V v = *(const V *)p;
    const uint16_t *b = (const uint16_t *)&v;
#pragma unroll
    for (int i = 0; i < N / 2; i++) {
        float2 f = __half22float2(pl_e4m3x2_to_half2(b[i]));
        x[2 * i] = f.x;
        x[2 * i + 1] = f.y;
    }
}

/** The cache's element type as a C++ type. */
template <pl_kv_dtype D> struct pl_kv_type;
template <> struct pl_kv_type<PL_KV_BF16> { typedef __nv_bfloat16 T; };
template <> struct pl_kv_type<PL_KV_FP8> { typedef pl_e4m3 T; };
#endif

#endif
