/* kv_write.cuh - the paged KV cache's geometry and element types, and the
 * write of this step's k and v rows into it. */
#ifndef PL_CUDA_KV_WRITE_CUH
#define PL_CUDA_KV_WRITE_CUH

#include "backends/engine/cuda/common.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/** Element type of the KV cache. */
typedef enum pl_kv_dtype {
    PL_KV_BF16 = 0,              /**< bfloat16 */
    PL_KV_FP8 = 1,               /**< OCP FP8 E4M3 (src/base/fp8.h) with a scale per
                                      KV head: stored = bf16 value / scale, saturated */
} pl_kv_dtype;

/** Paged KV cache geometry of one layer. A cache holds n_blocks blocks of
 *  (block_size, n_kv_heads, head_dim) elements of dtype; token t of a
 *  sequence lives in block block_table[seq * max_blocks_per_seq + t /
 *  block_size] at offset t % block_size. The attention kernels want
 *  block_size a power of two (page index by shift). */
typedef struct pl_kv_geom {
    int n_kv_heads;
    int head_dim;
    int block_size;
    int max_blocks_per_seq;
    int n_blocks;
    pl_kv_dtype dtype;           /**< 0 (bf16) unless set */
} pl_kv_geom;

/** One layer's cache (device addresses). */
typedef struct pl_kv_layer {
    void *k, *v;                 /**< (n_blocks, block_size, n_kv_heads, head_dim) */
    /** PL_KV_FP8: (n_kv_heads) dequantisation scales (value = stored * scale;
     *  a per-tensor scale is n_kv_heads equal values); NULL: 1 (vLLM's
     *  default for a checkpoint without scales). Unused for bf16. */
    const float *k_scale, *v_scale;
} pl_kv_layer;

/** Bytes of one cache element. */
static inline size_t pl_kv_elem_bytes(pl_kv_dtype d)
{
    return d == PL_KV_FP8 ? 1 : 2;
}

/**
 * For each row r (sequence row_seq[r], position positions[r]) store
 * k = qkv[r, k_off .. k_off + n_kv_heads*head_dim) and the same at v_off
 * into kv.k / kv.v: bf16(k), or for PL_KV_FP8 e4m3(bf16(k) / k_scale[head])
 * (round to nearest even, saturated at +-448; the bf16 rounding first makes
 * the cache a function of what a bf16 cache would hold). qkv: (n_rows,
 * row_stride) fp32. Rows whose block id is out of range are skipped (never
 * a wild write).
 */
int pl_cuda_kv_write(const float *qkv, int row_stride, int k_off, int v_off,
                     const int32_t *positions, const int32_t *row_seq,
                     const int32_t *block_table, pl_kv_geom g, pl_kv_layer kv,
                     int n_rows, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
