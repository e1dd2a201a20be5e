/* attn_split.cuh - what the split-KV decode kernels share (device code;
 * attn_decode_split.cu and attn_decode_mma.cu): the keys of a split, the
 * merge of a block's partial softmax states, and the tensor-core kernel's
 * launch. Not for use outside backends/engine/cuda/. */
#ifndef PL_CUDA_ATTN_SPLIT_CUH
#define PL_CUDA_ATTN_SPLIT_CUH

#include "backends/engine/cuda/attn_decode.cuh"

#define PL_SPLIT_WARPS 4
#define PL_SPLIT_MAX_G 8

/* Keys [*t0, *t1) of split sp of ns over the row's range [lo, hi): equal
 * shares rounded up to whole pages (page = 1 << shift), so a page is read
 * by one split only. Empty (t0 >= t1) for the splits past the end. */
static __device__ __forceinline__ void pl_split_range(int lo, int hi, int sp, int ns,
                                                      int shift, int *t0, int *t1)
{
    int chunk = (hi - lo + ns - 1) / ns;
    chunk = ((chunk + (1 << shift) - 1) >> shift) << shift;
    int base = (lo >> shift) << shift;
    *t0 = max(lo, base + sp * chunk);
    *t1 = min(hi, base + (sp + 1) * chunk);
}

/* Merge the nv partial softmax states of a block (shared memory, m in
 * log2 units: sm_m[x * G + j], sm_l likewise, sm_acc[(x * G + j) * hd + d])
 * per query head j of the group: the output (times vscale, the head's sink
 * in its sum) when the block has the row's only split, else (max, sum,
 * accumulator) into the workspace for attn_split_merge, which adds the
 * sink once. */
static __device__ __forceinline__ void pl_merge_partials(const float *sm_m, const float *sm_l,
                                                         const float *sm_acc, int nv, int G,
                                                         int hd, int r, int kvh, int sp,
                                                         int ns, __nv_bfloat16 *out, float *ws,
                                                         int n_heads, float vscale,
                                                         const float *sinks)
{
    for (int i = threadIdx.x; i < G * hd; i += blockDim.x) {
        int j = i / hd, d = i % hd, h = kvh * G + j;
        float gm = -INFINITY, gl = 0.0f, a = 0.0f;
        for (int x = 0; x < nv; x++)
            gm = fmaxf(gm, sm_m[x * G + j]);
        for (int x = 0; x < nv; x++) {
            float mx = sm_m[x * G + j];
            float f = mx == -INFINITY ? 0.0f : exp2f(mx - gm);
            gl += sm_l[x * G + j] * f;
            a += sm_acc[(x * G + j) * hd + d] * f;
        }
        if (ns == 1) {
            gl = pl_sink_sum(gl, gm, sinks, h);
            out[(size_t)r * n_heads * hd + (size_t)h * hd + d] =
                __float2bfloat16(gl > 0.0f ? a * vscale / gl : 0.0f);
            continue;
        }
        float *o = ws + (((size_t)blockIdx.x * n_heads + h) * ns + sp) * (hd + 2);
        if (d == 0) {
            o[0] = gm;
            o[1] = gl;
        }
        o[2 + d] = a * vscale;
    }
}

/* attn_decode_mma.cu: launch the tensor-core kernel (arguments checked by
 * pl_cuda_attn_decode_split), and its blocks per SM. */
int pl_attn_mma_launch_(const pl_attn_step *s, pl_kv_geom g, pl_kv_layer kv, pl_attn_opts o,
                        const int32_t *rows, int n_rows, int ns, float *ws, cudaStream_t st);
int pl_attn_mma_occupancy_(int head_dim, pl_kv_dtype dtype);

#endif
