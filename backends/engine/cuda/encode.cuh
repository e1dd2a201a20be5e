/* encode.cuh - the kernels of an encoder's forward pass (BERT:
 * model/encoder.h's formula, cpu/encode.c on the CPU): the embeddings'
 * sum and LayerNorm, bias and GELU after a GEMM, the residual add and
 * LayerNorm, bidirectional attention per text and head over texts stacked
 * without padding, and pooling with L2 normalisation. Sums are fp32; the
 * next GEMM's input is written as bf16 beside the fp32 residual stream. */
#ifndef PL_CUDA_ENCODE_CUH
#define PL_CUDA_ENCODE_CUH

#include "backends/engine/cuda/common.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/** Largest text the attention kernel takes (its scores live in shared
 *  memory: ENC_ATTN_WARPS rows of this many floats). */
#define PL_CUDA_ENC_MAX_LEN 3072

/**
 * Row r of x (n_rows, d) = LayerNorm(tok[ids[r]] + pos[positions[r]] +
 * type0) with weight w and bias b; xb gets it as bf16. ids and positions
 * are checked by the caller (in range).
 */
int pl_cuda_enc_embed_norm(const int32_t *ids, const int32_t *positions, const float *tok,
                           const float *pos, const float *type0, const float *w,
                           const float *b, float eps, float *x, pl_bf16 *xb, int n_rows,
                           int d, cudaStream_t st);

/**
 * y (n_rows, o) += bias, then GELU's erf form when gelu; yb (may be NULL)
 * gets the result as bf16.
 */
int pl_cuda_enc_bias(float *y, const float *bias, int gelu, pl_bf16 *yb, int n_rows, int o,
                     cudaStream_t st);

/**
 * x (n_rows, d) = LayerNorm(x + y + bias) with weight w and bias b (y and
 * bias may be NULL); xb gets it as bf16.
 */
int pl_cuda_enc_add_norm(float *x, const float *y, const float *bias, const float *w,
                         const float *b, float eps, pl_bf16 *xb, int n_rows, int d,
                         cudaStream_t st);

/**
 * Bidirectional attention: qkv (rows, 3 d) fp32, each row [q | k | v] of
 * n_head heads of head_dim; text t is rows [start[t], start[t] + lens[t])
 * (device arrays, lens[t] <= max_len <= PL_CUDA_ENC_MAX_LEN), each of its
 * rows attending to all of its rows: out_h = softmax(q_h k_h^T scale) v_h
 * into out (rows, d) bf16.
 */
int pl_cuda_enc_attention(const float *qkv, const int32_t *start, const int32_t *lens,
                          int n_texts, int max_len, int n_head, int head_dim, float scale,
                          pl_bf16 *out, cudaStream_t st);

/**
 * Text t's vector from its rows of x (rows, d): their mean (pooling 1), the
 * first (2) or the last (3), scaled to unit L2 norm (eps 1e-12, as
 * sentence-transformers' Normalize) when normalize; into out (n_texts, d).
 */
int pl_cuda_enc_pool(const float *x, const int32_t *start, const int32_t *lens, int n_texts,
                     int d, int pooling, int normalize, float *out, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
