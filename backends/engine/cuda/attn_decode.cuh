/* attn_decode.cuh - attention of single query rows over the paged KV cache
 * (decode), GQA-aware. */
#ifndef PL_CUDA_ATTN_DECODE_CUH
#define PL_CUDA_ATTN_DECODE_CUH

#include "backends/engine/cuda/kv_write.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * For each row r and query head h: out[r, h] = softmax(scale * q.K^T) V over
 * the keys at positions 0..positions[r] of sequence row_seq[r], read from the
 * paged cache through block_table (kv head h / (n_heads / n_kv_heads)).
 * q: (n_rows, q_stride) fp32, head h at h*head_dim; out: (n_rows,
 * n_heads*head_dim) bf16. head_dim must be a multiple of 64, at most 256.
 * The row's own k/v must already be in the cache (pl_cuda_kv_write).
 */
int pl_cuda_attn_decode(const float *q, int q_stride, const int32_t *positions,
                        const int32_t *row_seq, const int32_t *block_table,
                        pl_kv_geom g, const pl_bf16 *k_cache, const pl_bf16 *v_cache,
                        pl_bf16 *out, int n_rows, int n_heads, float scale,
                        cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
