/* kv_write.cu - paged KV cache write kernel: bf16, or fp8 e4m3 with a
 * dequantisation scale per KV head. */
#include <string.h>
#include <cuda_fp8.h>

#include "backends/engine/cuda/kv_write.cuh"

/* The cache slot of row r, or -1 when its block id is out of range. */
static __device__ __forceinline__ long kv_slot(int r, const int32_t *positions,
                                               const int32_t *row_seq, const int32_t *bt,
                                               pl_kv_geom g)
{
    int pos = positions[r], bi = pos / g.block_size;
    if (pos < 0 || bi >= g.max_blocks_per_seq)
        return -1;
    int blk = bt[(size_t)row_seq[r] * g.max_blocks_per_seq + bi];
    if (blk < 0 || blk >= g.n_blocks)
        return -1;
    return (long)blk * g.block_size + pos % g.block_size;
}

/* e4m3(bf16(x) / scale), saturated. */
static __device__ __forceinline__ __nv_fp8_storage_t to_e4m3(float x, float scale)
{
    float b = __bfloat162float(__float2bfloat16(x));
    return __nv_cvt_float_to_fp8(b / scale, __NV_SATFINITE, __NV_E4M3);
}

/* One block per row; threads over the n_kv_heads * head_dim values. FP8:
 * e4m3 with the head's scale, else bf16. */
template <bool FP8>
static __global__ void kv_write_kernel(const float *qkv, int row_stride, int k_off, int v_off,
                                       const int32_t *positions, const int32_t *row_seq,
                                       const int32_t *bt, pl_kv_geom g, void *kc, void *vc,
                                       const float *ks, const float *vs)
{
    long slot = kv_slot(blockIdx.x, positions, row_seq, bt, g);
    if (slot < 0)
        return;
    int width = g.n_kv_heads * g.head_dim;
    size_t dst = (size_t)slot * width;
    const float *src = qkv + (size_t)blockIdx.x * row_stride;
    for (int i = threadIdx.x; i < width; i += blockDim.x) {
        if constexpr (FP8) {
            int h = i / g.head_dim;
            ((__nv_fp8_storage_t *)kc)[dst + i] = to_e4m3(src[k_off + i], ks ? ks[h] : 1.0f);
            ((__nv_fp8_storage_t *)vc)[dst + i] = to_e4m3(src[v_off + i], vs ? vs[h] : 1.0f);
        } else {
            ((__nv_bfloat16 *)kc)[dst + i] = __float2bfloat16(src[k_off + i]);
            ((__nv_bfloat16 *)vc)[dst + i] = __float2bfloat16(src[v_off + i]);
        }
    }
}

extern "C" int pl_cuda_kv_write(const float *qkv, int row_stride, int k_off, int v_off,
                                const int32_t *positions, const int32_t *row_seq,
                                const int32_t *block_table, pl_kv_geom g, pl_kv_layer kv,
                                int n_rows, cudaStream_t st)
{
    PL_CUDA_ARG(qkv && positions && row_seq && block_table && kv.k && kv.v);
    PL_CUDA_ARG(g.n_kv_heads > 0 && g.head_dim > 0 && g.block_size > 0);
    PL_CUDA_ARG(g.max_blocks_per_seq > 0 && g.n_blocks > 0 && n_rows >= 0);
    int dtype;                  /* read as an int: a C caller may pass any value, and */
    memcpy(&dtype, &g.dtype, sizeof dtype);    /* C++ may not load it as the enum */
    PL_CUDA_ARG(dtype == PL_KV_BF16 || dtype == PL_KV_FP8);
    int width = g.n_kv_heads * g.head_dim;
    PL_CUDA_ARG(k_off + width <= row_stride && v_off + width <= row_stride);
    if (n_rows == 0)
        return 0;
    if (g.dtype == PL_KV_FP8)
        kv_write_kernel<true><<<n_rows, 128, 0, st>>>(qkv, row_stride, k_off, v_off, positions,
            row_seq, block_table, g, kv.k, kv.v, kv.k_scale, kv.v_scale);
    else
        kv_write_kernel<false><<<n_rows, 128, 0, st>>>(qkv, row_stride, k_off, v_off,
            positions, row_seq, block_table, g, kv.k, kv.v, NULL, NULL);
    PL_CUDA_LAUNCHED();
    return 0;
}
