/* attn_plan.h - how many splits a split-KV decode attention launch takes
 * (host arithmetic, no CUDA: unit-tested without a GPU). */
#ifndef PL_CUDA_ATTN_PLAN_H
#define PL_CUDA_ATTN_PLAN_H

/**
 * Splits per (row, KV head) for a launch of work = rows x KV heads units
 * on n_sm SMs that hold blocks_per_sm of the kernel's blocks at once
 * (cudaOccupancyMaxActiveBlocksPerMultiprocessor): the fewest splits
 * (1..max_splits) whose blocks fill the waves of blocks_per_sm x n_sm
 * slots to at least 90 % (work x splits / (waves x slots)); when none
 * does, the one that fills them best (fewest on ties). A batch that fills
 * many waves alone keeps 1 split; a small one gets as many as fill the
 * GPU. Arguments below 1 count as 1.
 */
int pl_cuda_attn_split_plan(int work, int blocks_per_sm, int n_sm, int max_splits);

#endif
