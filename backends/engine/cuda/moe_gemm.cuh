/* moe_gemm.cuh - the grouped GEMM of a mixture-of-experts layer: every
 * place (a row's pair with one expert, grouped by moe_plan.cuh) times its
 * expert's matrix, over the active experts only, in one launch whose tiles
 * come from the device-side plan. Weights are bf16, or MXFP4 as the file
 * carries them (gpt-oss), dequantised as each tile is loaded. */
#ifndef PL_CUDA_MOE_GEMM_CUH
#define PL_CUDA_MOE_GEMM_CUH

#include "backends/engine/cuda/common.cuh"
#include "backends/engine/cuda/moe_plan.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/** How a layer's experts are kept on the device. */
typedef enum pl_cuda_moe_wfmt {
    PL_CUDA_MOE_W_BF16 = 0,      /**< dequantised on upload */
    PL_CUDA_MOE_W_MXFP4,         /**< the file's 17-byte blocks, kept packed */
} pl_cuda_moe_wfmt;

/** One matrix of every expert of a layer, on the device. */
typedef struct pl_cuda_moe_w {
    const void *w;               /**< n_expert matrices (rows, cols), one after
                                      another, rows of pl_cuda_moe_row_bytes */
    pl_cuda_moe_wfmt fmt;
    int n_expert, rows, cols;    /**< cols a multiple of 32 */
    const float *bias;           /**< (n_expert, rows), or NULL */
} pl_cuda_moe_w;

/** Bytes of one row of cols weights kept as fmt (host). */
size_t pl_cuda_moe_row_bytes(pl_cuda_moe_wfmt fmt, int cols);

/**
 * y[s, o] = a[s] . W_e[o] (+ bias[e, o]) for every place s of the plan,
 * e its expert, o < w->rows: a (n_pairs, cols) bf16 in place order, y
 * (n_pairs, rows) fp32. The grid covers p->max_tiles tiles of
 * PL_CUDA_MOE_TILE_ROWS places by 64 outputs; tiles past *p->n_tiles exit.
 * fp32 accumulation on the CUDA cores.
 */
int pl_cuda_moe_gemm(const pl_cuda_moe_w *w, const pl_bf16 *a, float *y,
                     const pl_cuda_moe_plan *p, cudaStream_t st);

/** h[s, i] = act(g[s, i], u[s, i]) as bf16, for s < n_pairs, i < ff: act
 *  0 SwiGLU, 1 GELU-tanh GeGLU, 2 gpt-oss's clamped SwiGLU (alpha 1.702,
 *  limit 7), pl_ffn_act's values; the C references are pl_op_swiglu,
 *  pl_op_geglu and pl_op_swiglu_oai. */
int pl_cuda_moe_act(const float *g, const float *u, pl_bf16 *h, int n_pairs, int ff, int act,
                    cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
