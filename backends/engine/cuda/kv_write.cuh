/* kv_write.cuh - write this step's k and v rows into the paged KV cache. */
#ifndef PL_CUDA_KV_WRITE_CUH
#define PL_CUDA_KV_WRITE_CUH

#include "backends/engine/cuda/common.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/** Paged KV cache geometry of one layer. A cache holds n_blocks blocks of
 *  (block_size, n_kv_heads, head_dim) bf16; token t of a sequence lives in
 *  block block_table[seq * max_blocks_per_seq + t / block_size] at offset
 *  t % block_size. */
typedef struct pl_kv_geom {
    int n_kv_heads;
    int head_dim;
    int block_size;
    int max_blocks_per_seq;
    int n_blocks;
} pl_kv_geom;

/**
 * For each row r (sequence row_seq[r], position positions[r]) store
 * k = qkv[r, k_off .. k_off + n_kv_heads*head_dim) and the same at v_off
 * into k_cache / v_cache (bf16). qkv: (n_rows, row_stride) fp32.
 * Rows whose block id is out of range are skipped (never a wild write).
 */
int pl_cuda_kv_write(const float *qkv, int row_stride, int k_off, int v_off,
                     const int32_t *positions, const int32_t *row_seq,
                     const int32_t *block_table, pl_kv_geom g, pl_bf16 *k_cache,
                     pl_bf16 *v_cache, int n_rows, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
