/* kv_write.cu - paged KV cache write kernel. */
#include "backends/engine/cuda/kv_write.cuh"

/* One block per row; threads over the n_kv_heads * head_dim values. */
static __global__ void kv_write_kernel(const float *qkv, int row_stride, int k_off,
                                       int v_off, const int32_t *positions,
                                       const int32_t *row_seq, const int32_t *bt,
                                       pl_kv_geom g, __nv_bfloat16 *kc,
                                       __nv_bfloat16 *vc)
{
    int r = blockIdx.x;
    int pos = positions[r];
    int bi = pos / g.block_size;
    if (pos < 0 || bi >= g.max_blocks_per_seq)
        return;
    int blk = bt[(size_t)row_seq[r] * g.max_blocks_per_seq + bi];
    if (blk < 0 || blk >= g.n_blocks)
        return;
    int width = g.n_kv_heads * g.head_dim;
    size_t dst = ((size_t)blk * g.block_size + pos % g.block_size) * width;
    const float *src = qkv + (size_t)r * row_stride;
    for (int i = threadIdx.x; i < width; i += blockDim.x) {
        kc[dst + i] = __float2bfloat16(src[k_off + i]);
        vc[dst + i] = __float2bfloat16(src[v_off + i]);
    }
}

extern "C" int pl_cuda_kv_write(const float *qkv, int row_stride, int k_off, int v_off,
                                const int32_t *positions, const int32_t *row_seq,
                                const int32_t *block_table, pl_kv_geom g,
                                pl_bf16 *k_cache, pl_bf16 *v_cache, int n_rows,
                                cudaStream_t st)
{
    PL_CUDA_ARG(qkv && positions && row_seq && block_table && k_cache && v_cache);
    PL_CUDA_ARG(g.n_kv_heads > 0 && g.head_dim > 0 && g.block_size > 0);
    PL_CUDA_ARG(g.max_blocks_per_seq > 0 && g.n_blocks > 0 && n_rows >= 0);
    int width = g.n_kv_heads * g.head_dim;
    PL_CUDA_ARG(k_off + width <= row_stride && v_off + width <= row_stride);
    if (n_rows == 0)
        return 0;
    kv_write_kernel<<<n_rows, 128, 0, st>>>(qkv, row_stride, k_off, v_off, positions,
                                            row_seq, block_table, g,
                                            (__nv_bfloat16 *)k_cache,
                                            (__nv_bfloat16 *)v_cache);
    PL_CUDA_LAUNCHED();
    return 0;
}
