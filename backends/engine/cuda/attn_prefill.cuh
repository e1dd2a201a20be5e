/* attn_prefill.cuh - tiled (flash-style) causal attention of many query
 * rows per sequence over the paged KV cache, cached prefix included. */
#ifndef PL_CUDA_ATTN_PREFILL_CUH
#define PL_CUDA_ATTN_PREFILL_CUH

#include <stdbool.h>

#include "backends/engine/cuda/kv_write.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Same result as pl_cuda_attn_decode for every row (row r attends to keys
 * 0..positions[r] of its sequence), computed per sequence in tiles of 32
 * query rows x 32 keys so each K/V tile is read once per 32 rows.
 * Sequence s owns rows seq_first_row[s] .. + seq_n_rows[s]; max_seq_rows is
 * the largest seq_n_rows (host value, sizes the grid). Keys of cached
 * prefix blocks are read like any other. head_dim: multiple of 32, <= 256.
 */
int pl_cuda_attn_prefill(const float *q, int q_stride, const int32_t *positions,
                         const int32_t *seq_first_row, const int32_t *seq_n_rows,
                         const int32_t *block_table, pl_kv_geom g,
                         const pl_bf16 *k_cache, const pl_bf16 *v_cache, pl_bf16 *out,
                         int n_seqs, int max_seq_rows, int n_heads, float scale,
                         cudaStream_t st);

/** The same for the sequences seqs[0..n_seqs) only (the prefill sequences of
 *  a mixed step; block_table and the per-sequence arrays are indexed by
 *  those ids); seqs NULL: 0..n_seqs. Any n_seqs (the grid is tiled). mma:
 *  on tensor cores (bf16 MMA, fp32 accumulation; Q and the probabilities
 *  rounded to bf16; 64 query rows x 64 keys per tile; head_dim 64 or 128,
 *  pl_cuda_attn_prefill_mma_supported; sm_80 and up;
 *  PARLEY_CUDA_PREFILL_ATTN=mma in the runner). */
int pl_cuda_attn_prefill_seqs(const float *q, int q_stride, const int32_t *positions,
                              const int32_t *seqs, const int32_t *seq_first_row,
                              const int32_t *seq_n_rows, const int32_t *block_table,
                              pl_kv_geom g, const pl_bf16 *k_cache, const pl_bf16 *v_cache,
                              pl_bf16 *out, int n_seqs, int max_seq_rows, int n_heads,
                              float scale, bool mma, cudaStream_t st);

int pl_cuda_attn_prefill_mma_supported(int head_dim);
/* attn_prefill_mma.cu's launch of one grid tile (<= 65535 sequences). */
int pl_cuda_attn_prefill_mma_tile_(const float *q, int q_stride, const int32_t *positions,
                                   const int32_t *seqs, int s0, int n,
                                   const int32_t *seq_first_row, const int32_t *seq_n_rows,
                                   const int32_t *block_table, pl_kv_geom g,
                                   const pl_bf16 *k_cache, const pl_bf16 *v_cache,
                                   pl_bf16 *out, int max_seq_rows, int n_heads, float scale,
                                   cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
