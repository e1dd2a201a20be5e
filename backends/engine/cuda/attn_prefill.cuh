/* attn_prefill.cuh - tiled (flash-style) causal attention of many query
 * rows per sequence over the paged KV cache, cached prefix included, on
 * CUDA cores or tensor cores; bf16 or fp8 cache. */
#ifndef PL_CUDA_ATTN_PREFILL_CUH
#define PL_CUDA_ATTN_PREFILL_CUH

#include <stdbool.h>

#include "backends/engine/cuda/attn_common.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Same result as pl_cuda_attn_decode_rows for every row of the sequences
 * seqs[0..n_seqs) (seqs NULL: 0..n_seqs; the prefill sequences of a mixed
 * step): row r attends to the keys its position sees (causal, within o's
 * window), computed per sequence in tiles of query rows x keys so each K/V
 * tile is read once per row tile. Sequence q owns rows seq_first_row[q] ..
 * + seq_n_rows[q] (positions increasing) and block-table row q; max_seq_rows
 * is the largest seq_n_rows (a host value, it sizes the grid). s->row_seq
 * is not read. Keys in unmapped blocks are left out of the softmax.
 * mma: on tensor cores (attn_prefill_mma.cu; bf16 MMAs, fp16 for an fp8
 * cache, fp32 accumulation; Q and the probabilities rounded to 16 bits;
 * pl_cuda_attn_prefill_mma_supported; sm_80 and up), else fp32 on CUDA
 * cores (head_dim a multiple of 32 up to 256). block_size a power of two.
 * Any n_seqs (the grid is tiled).
 */
int pl_cuda_attn_prefill_seqs(const pl_attn_step *s, pl_kv_geom g, pl_kv_layer kv,
                              pl_attn_opts o, const int32_t *seqs,
                              const int32_t *seq_first_row, const int32_t *seq_n_rows,
                              int n_seqs, int max_seq_rows, bool mma, cudaStream_t st);

/** head_dim 64, 128 or 256. */
int pl_cuda_attn_prefill_mma_supported(int head_dim);

/* attn_prefill_mma.cu's launch of one grid tile (<= 65535 sequences), the
 * arguments checked by pl_cuda_attn_prefill_seqs. */
int pl_cuda_attn_prefill_mma_tile_(const pl_attn_step *s, pl_kv_geom g, pl_kv_layer kv,
                                   pl_attn_opts o, const int32_t *seqs, int s0, int n,
                                   const int32_t *seq_first_row, const int32_t *seq_n_rows,
                                   int max_seq_rows, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
