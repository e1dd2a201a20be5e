/* moe_weights.h - a mixture-of-experts layer's experts on the GPU: how
 * each expert tensor is kept (MXFP4 packed as the file has it, dequantised
 * in the grouped GEMM's tile loads; every other type dequantised to bf16 on
 * the host, as the dense weights are), its host image and its upload. For
 * gpt-oss-20b (24 layers of 32 experts, 3 matrices of 2,880 x 2,880) the
 * experts take 10.1 GB packed against 38.2 GB as bf16
 * (pl_cuda_moe_model_bytes; test_cuda_moe_host checks the figures). The
 * host functions need no GPU. */
#ifndef PL_CUDA_MOE_WEIGHTS_H
#define PL_CUDA_MOE_WEIGHTS_H

#include <stddef.h>

#include "backends/engine/cuda/moe_gemm.cuh"
#include "backends/engine/model/model.h"

/** How the device keeps experts of file type t. */
pl_cuda_moe_wfmt pl_cuda_moe_format(pl_ggml_type t);

/** Device bytes of x as kept. */
size_t pl_cuda_moe_bytes(const pl_experts *x);

/** x's device image into dst (pl_cuda_moe_bytes(x) bytes, host): MXFP4
 *  blocks copied, anything else dequantised to bf16 (pl_dequant_row, then
 *  round to nearest even). 0, or -1 when the type cannot be dequantised. */
int pl_cuda_moe_pack(const pl_experts *x, void *dst);

/** Device bytes of all of m's experts as kept, and what they would take
 *  as bf16 (either may be NULL). */
void pl_cuda_moe_model_bytes(const pl_model *m, size_t *kept, size_t *as_bf16);

/** Upload x and its biases (host, (x->n, x->w.rows), or NULL) into *out
 *  (device memory owned by it). 0, or -1 with a message in err; free with
 *  pl_cuda_moe_w_free. */
int pl_cuda_moe_upload(const pl_experts *x, const float *bias, pl_cuda_moe_w *out, char *err,
                       size_t errlen);
void pl_cuda_moe_w_free(pl_cuda_moe_w *w);

#endif
