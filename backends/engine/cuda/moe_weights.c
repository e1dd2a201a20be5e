/* moe_weights.c - the experts' device image and upload (moe_weights.h). */
#include "backends/engine/cuda/moe_weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/cuda/weights.h"

pl_cuda_moe_wfmt pl_cuda_moe_format(pl_ggml_type t)
{
    return t == PL_GGML_TYPE_MXFP4 ? PL_CUDA_MOE_W_MXFP4 : PL_CUDA_MOE_W_BF16;
}

size_t pl_cuda_moe_bytes(const pl_experts *x)
{
    return (size_t)x->n * (size_t)x->w.rows *
           pl_cuda_moe_row_bytes(pl_cuda_moe_format(x->w.type), x->w.cols);
}

int pl_cuda_moe_pack(const pl_experts *x, void *dst)
{
    if (pl_cuda_moe_format(x->w.type) == PL_CUDA_MOE_W_MXFP4) {
        memcpy(dst, x->w.q, x->stride * (size_t)x->n);
        return 0;
    }
    size_t per = (size_t)x->w.rows * (size_t)x->w.cols;
    for (int e = 0; e < x->n; e++) {
        pl_weight w = pl_experts_at(x, e);
        if (pl_cuda_dequant_bf16(&w, 0, (size_t)w.rows, (pl_bf16 *)dst + per * e,
                                 pl_cuda_weights_threads(0)) != 0)
            return -1;
    }
    return 0;
}

void pl_cuda_moe_model_bytes(const pl_model *m, size_t *kept, size_t *as_bf16)
{
    size_t k = 0, b = 0;
    for (int l = 0; m->n_expert > 0 && l < m->n_layer; l++) {
        const pl_layer *y = &m->layers[l];
        const pl_experts *x[] = {&y->gate_exps, &y->up_exps, &y->down_exps};
        for (int i = 0; i < 3; i++) {
            k += pl_cuda_moe_bytes(x[i]);
            b += (size_t)x[i]->n * (size_t)x[i]->w.rows * (size_t)x[i]->w.cols * 2;
        }
    }
    if (kept)
        *kept = k;
    if (as_bf16)
        *as_bf16 = b;
}

/* The copies of an upload; -1 with the CUDA error recorded. */
static int copy_up(const void *host, size_t bytes, const float *bias, size_t nb, void **dw,
                   float **db)
{
    PL_CUDA_CHECK(cudaMalloc(dw, bytes ? bytes : 1));
    PL_CUDA_CHECK(cudaMemcpy(*dw, host, bytes, cudaMemcpyHostToDevice));
    if (!bias)
        return 0;
    PL_CUDA_CHECK(cudaMalloc((void **)db, nb));
    PL_CUDA_CHECK(cudaMemcpy(*db, bias, nb, cudaMemcpyHostToDevice));
    return 0;
}

int pl_cuda_moe_upload(const pl_experts *x, const float *bias, pl_cuda_moe_w *out, char *err,
                       size_t errlen)
{
    size_t bytes = pl_cuda_moe_bytes(x), nb = sizeof(float) * (size_t)x->n * x->w.rows;
    void *host = malloc(bytes ? bytes : 1), *dw = NULL;
    float *db = NULL;
    *out = (pl_cuda_moe_w){.fmt = pl_cuda_moe_format(x->w.type), .n_expert = x->n,
                           .rows = x->w.rows, .cols = x->w.cols};
    if (!host) {
        snprintf(err, errlen, "out of memory for the experts' host image");
        goto fail;
    }
    if (pl_cuda_moe_pack(x, host) != 0) {
        snprintf(err, errlen, "experts of type %s cannot be dequantised",
                 pl_ggml_type_name(x->w.type));
        goto fail;
    }
    if (copy_up(host, bytes, bias, nb, &dw, &db) != 0) {
        snprintf(err, errlen, "experts upload: %s", pl_cuda_last_error());
        goto fail;
    }
    free(host);
    out->w = dw;
    out->bias = db;
    return 0;
fail:
    free(host);
    cudaFree(dw);
    cudaFree(db);
    return -1;
}

void pl_cuda_moe_w_free(pl_cuda_moe_w *w)
{
    cudaFree((void *)w->w);
    cudaFree((void *)w->bias);
    *w = (pl_cuda_moe_w){0};
}
