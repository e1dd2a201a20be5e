/* moe_plan.cuh - a step's rows grouped by expert on the GPU: the grouping
 * (pl_op_moe_group's stable counting sort, cpu/ops_moe.c), the tiles of the
 * grouped GEMM, the gather of each place's input row and the weighted sum
 * of each row's expert outputs. Nothing is read back to the host: the
 * GEMM's grid covers the most tiles a step can have and idle blocks exit. */
#ifndef PL_CUDA_MOE_PLAN_CUH
#define PL_CUDA_MOE_PLAN_CUH

#include "backends/engine/cuda/common.cuh"

#ifdef __cplusplus
extern "C" {
#endif

#define PL_CUDA_MOE_TILE_ROWS 32     /**< places per grouped-GEMM tile */

/** Device buffers of one step's grouping (sizes for n_pairs = rows * k). */
typedef struct pl_cuda_moe_plan {
    int32_t *counts;             /**< (n_expert) pairs per expert */
    int32_t *offsets;            /**< (n_expert + 1) each expert's first place */
    int32_t *slot_of;            /**< (n_pairs) the place of pair (row, rank) */
    int32_t *row_of;             /**< (n_pairs) the row at each place */
    int32_t *tile_e;             /**< (max_tiles) each tile's expert */
    int32_t *tile_p0;            /**< (max_tiles) its first place */
    int32_t *n_tiles;            /**< (1) tiles in use */
    int max_tiles;               /**< pl_cuda_moe_max_tiles(n_pairs, n_expert) */
} pl_cuda_moe_plan;

/** The most grouped-GEMM tiles n_pairs pairs over n_expert experts need:
 *  ceil(n_pairs / PL_CUDA_MOE_TILE_ROWS) + min(n_expert, n_pairs) (host). */
int pl_cuda_moe_max_tiles(int n_pairs, int n_expert);

/** The grouping of sel (n_pairs expert ids, k per row, row-major) into p,
 *  and its tiles (each expert's places in runs of PL_CUDA_MOE_TILE_ROWS).
 *  One block; n_expert <= 512. */
int pl_cuda_moe_group(const int32_t *sel, int n_pairs, int k, int n_expert,
                      const pl_cuda_moe_plan *p, cudaStream_t st);

/** x_perm[s] = x[row_of[s]] for the n_pairs places (bf16 rows of dim). */
int pl_cuda_moe_permute(const pl_bf16 *x, const int32_t *row_of, pl_bf16 *x_perm,
                        int n_pairs, int dim, cudaStream_t st);

/** out[r] = sum over j < k, in rank order, of wt[r, j] * y[slot_of[r * k + j]]
 *  (fp32 rows of dim), for r < n. */
int pl_cuda_moe_combine(const float *y, const int32_t *slot_of, const float *wt, float *out,
                        int n, int k, int dim, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
