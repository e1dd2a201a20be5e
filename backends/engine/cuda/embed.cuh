/* embed.cuh - embedding gather: x[r] = table[tokens[r]] (bf16 -> fp32). */
#ifndef PL_CUDA_EMBED_CUH
#define PL_CUDA_EMBED_CUH

#include "backends/engine/cuda/common.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Gather rows of the embedding table, times scale (1, or Gemma's
 * sqrt(n_embd)). table: (n_vocab, dim) bf16; tokens: (n_rows) device ids;
 * x: (n_rows, dim) fp32. An id outside [0, n_vocab) gives a zero row (never
 * a wild read). Returns 0, or -1 (pl_cuda_last_error()).
 */
int pl_cuda_embed(const pl_bf16 *table, const int32_t *tokens, float *x,
                  int n_rows, int dim, int n_vocab, float scale, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
