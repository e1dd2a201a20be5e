/* attn_decode.cuh - attention of single query rows over the paged KV cache
 * (decode), GQA-aware: the one-block-per-(row, head) kernel and the
 * split-KV, GQA-grouped kernels, bf16 or fp8 cache. */
#ifndef PL_CUDA_ATTN_DECODE_CUH
#define PL_CUDA_ATTN_DECODE_CUH

#include "backends/engine/cuda/attn_common.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * For the rows rows[0..n_rows) of s (rows NULL: 0..n_rows) and each query
 * head h: out[r, h] = softmax(scores) V over the keys the row at
 * positions[r] sees (0..positions[r], or its window; o's soft-capping
 * applied to the scores, its sinks in the denominators), read from the paged cache of sequence
 * row_seq[r] (KV head h / (n_heads / n_kv_heads)). Keys in unmapped blocks
 * (ids out of range) are left out of the softmax; a row that sees no key
 * gets zeros. head_dim 64, 128, 192, 256 or 512 (Gemma 4's global layers,
 * which no other kernel takes: their prefill rows go through this one
 * too, each row at its own position); block_size a power of two. The row's
 * own k/v must already be in the cache (pl_cuda_kv_write).
 */
int pl_cuda_attn_decode_rows(const pl_attn_step *s, pl_kv_geom g, pl_kv_layer kv,
                             pl_attn_opts o, const int32_t *rows, int n_rows,
                             cudaStream_t st);
/** Whether pl_cuda_attn_decode_rows takes head_dim. */
int pl_cuda_attn_rows_supported(int head_dim);

/** Kernels of the split-KV decode attention: 32 lanes per key (the
 *  default), 16 lanes per key (two key streams per warp: fewer shuffles and
 *  exponentials per key), and tensor cores (attn_decode_mma.cu: the keys of
 *  a 16-key tile as rows of the MMA, the group's query heads as its 8
 *  columns, K/V staged by 16-byte cp.async; sm_80 and up). */
typedef enum pl_split_kind { PL_SPLIT_WARP, PL_SPLIT_HALF, PL_SPLIT_MMA } pl_split_kind;

/**
 * The same result (as pl_cuda_attn_decode_rows) from the split-KV,
 * GQA-grouped kernel of the given kind: one block per (row, KV head,
 * split), K/V read once per group. n_splits from pl_cuda_attn_split_plan;
 * ws (device, pl_cuda_attn_split_ws floats) is needed when n_splits > 1.
 * Shapes: pl_cuda_attn_split_supported.
 */
int pl_cuda_attn_decode_split(const pl_attn_step *s, pl_kv_geom g, pl_kv_layer kv,
                              pl_attn_opts o, const int32_t *rows, int n_rows, int n_splits,
                              float *ws, pl_split_kind kind, cudaStream_t st);

/** Most splits per row. */
#define PL_ATTN_MAX_SPLITS 32

/** Workspace floats for pl_cuda_attn_decode_split (0 for one split). */
size_t pl_cuda_attn_split_ws(int n_rows, int n_heads, int head_dim, int n_splits);
/** Does kind have a kernel for this shape? head_dim 64, 128 or 256 and a
 *  group of 1, 2, 4 or 8 query heads per KV head (the 16-lane kernel: head
 *  dims 64 and 128, and groups up to 4 at 256). */
int pl_cuda_attn_split_supported(pl_split_kind kind, int n_heads, int n_kv_heads,
                                 int head_dim);
/**
 * Blocks of the kind's kernel for this shape that one SM holds at once
 * (cudaOccupancyMaxActiveBlocksPerMultiprocessor on the current device),
 * for pl_cuda_attn_split_plan; -1 on error (unsupported shape).
 */
int pl_cuda_attn_split_occupancy(pl_split_kind kind, int n_heads, int n_kv_heads,
                                 int head_dim, pl_kv_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif
