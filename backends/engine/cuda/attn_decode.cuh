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

/** The same for the rows rows[0..n_rows) only (the decode rows of a mixed
 *  step); rows NULL: rows 0..n_rows. */
int pl_cuda_attn_decode_rows(const float *q, int q_stride, const int32_t *positions,
                             const int32_t *rows, const int32_t *row_seq,
                             const int32_t *block_table, pl_kv_geom g,
                             const pl_bf16 *k_cache, const pl_bf16 *v_cache, pl_bf16 *out,
                             int n_rows, int n_heads, float scale, cudaStream_t st);

/** Kernels of the split-KV decode attention: 32 lanes per key (the
 *  default), 16 lanes per key (two key streams per warp: fewer shuffles and
 *  exponentials per key), and tensor cores (the group's query heads as rows
 *  of a 16-row MMA tile, bf16 scores and probabilities, fp32 accumulation;
 *  sm_80 and up). */
typedef enum pl_split_kind { PL_SPLIT_WARP, PL_SPLIT_HALF, PL_SPLIT_MMA } pl_split_kind;

/**
 * The same result (rows as pl_cuda_attn_decode_rows) from the split-KV,
 * GQA-grouped kernel of the given kind (one block per (row, kv head, split),
 * K/V read once per group): n_splits from pl_cuda_attn_split_count; ws
 * (device, pl_cuda_attn_split_ws floats) is needed when n_splits > 1.
 * Shapes: pl_cuda_attn_split_supported.
 */
int pl_cuda_attn_decode_split(const float *q, int q_stride, const int32_t *positions,
                              const int32_t *rows, const int32_t *row_seq,
                              const int32_t *block_table,
                              pl_kv_geom g, const pl_bf16 *k_cache, const pl_bf16 *v_cache,
                              pl_bf16 *out, int n_rows, int n_heads, float scale,
                              int n_splits, float *ws, pl_split_kind kind, cudaStream_t st);
/** Splits that give about 2 blocks per SM for n_rows rows (1..32). */
int pl_cuda_attn_split_count(int n_rows, int n_kv_heads, int n_sm);
/** Workspace floats for pl_cuda_attn_decode_split (0 for one split). */
size_t pl_cuda_attn_split_ws(int n_rows, int n_heads, int head_dim, int n_splits);
/** head_dim 64 or 128 and a group of 1, 2, 4 or 8 query heads per KV head. */
int pl_cuda_attn_split_supported(int n_heads, int n_kv_heads, int head_dim);

#ifdef __cplusplus
}
#endif
#endif
