/* weights.h - a pl_model's weights on the GPU: matrices dequantised on the
 * host to bf16 (any type pl_dequant_row reads) and uploaded with cudaMalloc;
 * q/k/v and gate/up fused into one matrix each so each is one GEMM. */
#ifndef PL_CUDA_WEIGHTS_H
#define PL_CUDA_WEIGHTS_H

#include "backends/engine/cuda/common.cuh"
#include "backends/engine/cuda/moe_gemm.cuh"
#include "backends/engine/model/model.h"

typedef struct pl_cuda_layer {
    float *attn_norm;            /**< (n_embd) */
    pl_bf16 *wqkv;               /**< (q_dim + 2*kv_dim, n_embd): wq, wk, wv rows */
    float *bqkv;                 /**< (q_dim + 2*kv_dim) qwen2 biases, else NULL */
    pl_bf16 *wo;                 /**< (n_embd, q_dim) */
    float *bo;                   /**< (n_embd) output bias (gpt-oss), else NULL */
    float *sinks;                /**< (n_head) attention sinks (gpt-oss), else NULL */
    float *ffn_norm;             /**< (n_embd) */
    pl_bf16 *w_gu;               /**< (2*n_ff, n_embd): gate rows then up rows;
                                      NULL in a layer with experts */
    pl_bf16 *w_down;             /**< (n_embd, n_ff), or NULL (experts) */
    /* Experts (the model's n_expert > 0), moe_weights.h's upload. */
    float *router;               /**< (n_expert, n_embd) f32, as the CPU keeps it */
    float *router_b;             /**< (n_expert) router bias, or NULL */
    pl_cuda_moe_w gate_exps, up_exps, down_exps; /**< their biases inside */
    float *q_norm, *k_norm;      /**< (head_dim) per-head RMSNorm of q / k (qwen3,
                                      gemma3), else NULL */
    float *attn_post_norm;       /**< (n_embd) gemma's post-norms, else NULL */
    float *ffn_post_norm;
    const float *rope_inv_freq;  /**< (n_rot/2) this layer's table: one of the
                                      model's (borrowed) */
    int n_swa;                   /**< sliding window, 0: none */
} pl_cuda_layer;

typedef struct pl_cuda_weights {
    pl_bf16 *tok_embd;           /**< (n_vocab, n_embd) */
    pl_bf16 *output;             /**< (n_vocab, n_embd); == tok_embd when tied */
    float *output_norm;          /**< (n_embd) */
    float *rope_inv_freq;        /**< (n_rot/2) global layers */
    float *rope_inv_freq_swa;    /**< (n_rot/2) sliding layers' own table, or NULL */
    pl_cuda_layer *layers;       /**< (n_layer), host array of device pointers */
    int n_layer;
    size_t bytes;                /**< device bytes held */
    double load_s;               /**< dequantise + upload wall time */
} pl_cuda_weights;

#define PL_CUDA_LOAD_MAX_THREADS 32

/** Rows [r0, r0+n) of wt as bf16 into dst (host, n x cols), on n_threads
 *  threads. 0, or -1 when wt's type cannot be dequantised. */
int pl_cuda_dequant_bf16(const pl_weight *wt, size_t r0, size_t n, pl_bf16 *dst,
                         int n_threads);
/** cudaMalloc + copy of n floats into *dst, n * 4 added to *bytes (NULL
 *  src: *dst NULL). 0, or -1 (pl_cuda_last_error). */
int pl_cuda_upload_f32(float **dst, const float *src, size_t n, size_t *bytes);
/** Threads for model load: want (--load-threads) when > 0, else the online
 *  CPUs; at most PL_CUDA_LOAD_MAX_THREADS. */
int pl_cuda_weights_threads(int want);

/** Upload m (borrowed) to the current device: dequantised on
 *  pl_cuda_weights_threads(threads) threads into two pinned staging buffers
 *  that alternate with asynchronous copies; the time is logged. 0, or -1
 *  with a message in err; on failure w holds nothing (freed). */
int pl_cuda_weights_init(pl_cuda_weights *w, const pl_model *m, int threads, char *err,
                         size_t errlen);
void pl_cuda_weights_free(pl_cuda_weights *w);

#endif
