/* ssm.cuh - the Gated DeltaNet kernels (Qwen3.5's recurrent layers:
 * model.h's pl_layer.recurrent; the CPU's forward_deltanet.c and their
 * references in cpu/ops_ssm.h), over a step's sequences: rows of sequence
 * s are rows[off[s] .. off[s + 1]) in order, its state in slot slot_of[s]
 * (reset[s]: it starts at position 0, the state from zero).
 *
 * conv: the causal depthwise conv with its K - 1 inputs of history, then
 * SiLU, in place over the qkv projection's C channels. rule: per (sequence,
 * value head) the L2 norms of q and k (key head h % nk; q by 1/sqrt(d)),
 * the decay g = exp(a[h] softplus(alpha + dt[h])) and beta = sigmoid(beta),
 * the delta rule's recurrent step row after row (pl_op_gdn_step_ref's
 * order: a thread per value dim, fused multiply-adds down its state
 * column) or, for a sequence of at least chunk_min rows, its chunked
 * form over chunks of up to 64 rows (pl_op_gdn_chunk_ref's algebra and
 * order), then the gated RMSNorm with z into out. copy: a slot's states
 * into another (a checkpoint, or its restore). */
#ifndef PL_CUDA_SSM_CUH
#define PL_CUDA_SSM_CUH

#include "backends/engine/cuda/common.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/** Largest conv kernel and head size the kernels take. */
#define PL_CUDA_SSM_MAX_K 8
#define PL_CUDA_SSM_MAX_D 256
/** Rows from which a sequence takes the chunked form by default. */
#define PL_CUDA_GDN_CHUNK_MIN 8

/** The step's sequences (device arrays). */
typedef struct pl_cuda_ssm_seqs {
    const int32_t *rows;         /**< (rows) row indices, sequence after sequence */
    const int32_t *off;          /**< (n + 1) */
    const int32_t *slot_of;      /**< (n) */
    const uint8_t *reset;        /**< (n) */
    int n;
    int max_len;                 /**< host-side bound on any sequence's rows,
                                  *   0 unknown (the rule's launch choice) */
} pl_cuda_ssm_seqs;

/**
 * w (K, C) tap-major; conv_state (slots, K - 1, C); qkv (rows, C) in place:
 * qkv[r][c] = silu(sum_{j < K-1} w[j][c] hist[j][c] + w[K-1][c] qkv[r][c]),
 * the history shifting by one row each time. 2 <= K <= PL_CUDA_SSM_MAX_K.
 */
int pl_cuda_ssm_conv(const float *w, float *conv_state, float *qkv, pl_cuda_ssm_seqs s,
                     int C, int K, cudaStream_t st);

/** A recurrent layer's rule inputs and outputs. */
typedef struct pl_cuda_gdn_args {
    const float *qkv;            /**< (rows, C): q (nk d) | k (nk d) | v (nv d) after the conv */
    const float *z;              /**< (rows, nv d) the output gate's projection */
    const float *beta, *alpha;   /**< (rows, nv) their projections */
    const float *a, *dt;         /**< (nv) -exp(A_log), dt_bias */
    const float *norm_w;         /**< (d) the gated RMSNorm's weight */
    float *state;                /**< (slots, nv, d, d) */
    float *out;                  /**< (rows, nv d) */
    int C, nk, nv, d;
    float eps;
    int chunk_min;               /**< rows from which a sequence takes the chunked
                                  *   form; 0 PL_CUDA_GDN_CHUNK_MIN, INT_MAX never */
} pl_cuda_gdn_args;

/** The delta rule over the step's sequences; d <= PL_CUDA_SSM_MAX_D and a
 *  multiple of 32, nv a multiple of nk. Sequences of fewer than chunk_min
 *  rows go row by row, the others in chunks; the two agree within float
 *  tolerance (the chunked form reassociates the sums). With s.max_len
 *  set below chunk_min only the row-by-row kernel is launched, and it
 *  takes every sequence. */
int pl_cuda_gdn_rule(const pl_cuda_gdn_args *a, pl_cuda_ssm_seqs s, cudaStream_t st);

/** n_layers blocks of `bytes`, layer_stride bytes apart, from slot src to
 *  slot dst of a state array whose slots are slot_stride bytes apart. */
int pl_cuda_ssm_copy_slot(void *states, size_t bytes, size_t slot_stride, size_t layer_stride,
                          int n_layers, int src, int dst, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
