/* weights.c - dequantise a pl_model's matrices to bf16 on the host, in
 * chunks of rows on several threads (weights_host.c), and upload them
 * through two pinned buffers with asynchronous copies. Norm weights, biases and rope
 * frequencies stay fp32. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/engine/cuda/moe_weights.h"
#include "backends/engine/cuda/weights.h"
#include "backends/engine/model/quant.h"
#include "src/base/log.h"

#define CHUNK_BYTES (32u << 20)  /* each of the two pinned staging buffers */

typedef struct upload_ctx {
    pl_bf16 *stage[2];           /* pinned */
    cudaEvent_t done[2];         /* the copy out of stage[i] finished */
    cudaStream_t st;
    size_t stage_elems;
    int next, threads;
    size_t *bytes;
} upload_ctx;

/* Rows [0, wt->rows) of wt into dst (device, rows x cols bf16): chunks
 * dequantised on u->threads threads into the pinned buffer whose last copy
 * has finished, then copied asynchronously while the next chunk is made. */
static int upload_matrix(pl_bf16 *dst, const pl_weight *wt, upload_ctx *u)
{
    size_t cols = (size_t)wt->cols;
    size_t chunk = u->stage_elems / cols ? u->stage_elems / cols : 1;
    for (size_t r0 = 0; r0 < (size_t)wt->rows; r0 += chunk) {
        size_t n = (size_t)wt->rows - r0 < chunk ? (size_t)wt->rows - r0 : chunk;
        int b = u->next;
        u->next ^= 1;
        PL_CUDA_CHECK(cudaEventSynchronize(u->done[b]));
        if (pl_cuda_dequant_bf16(wt, r0, n, u->stage[b], u->threads) != 0)
            return pl_cuda_fail_(__FILE__, __LINE__, "cannot dequantise type %s",
                                 pl_ggml_type_name(wt->type));
        PL_CUDA_CHECK(cudaMemcpyAsync(dst + r0 * cols, u->stage[b], n * cols * sizeof(pl_bf16),
                                      cudaMemcpyHostToDevice, u->st));
        PL_CUDA_CHECK(cudaEventRecord(u->done[b], u->st));
    }
    return 0;
}

int pl_cuda_upload_f32(float **dst, const float *src, size_t n, size_t *bytes)
{
    *dst = NULL;
    if (!src)
        return 0;
    PL_CUDA_CHECK(cudaMalloc((void **)dst, n * sizeof(float)));
    *bytes += n * sizeof(float);
    PL_CUDA_CHECK(cudaMemcpy(*dst, src, n * sizeof(float), cudaMemcpyHostToDevice));
    return 0;
}

/* Stack the matrices ws[0..n) (same cols) into one device matrix. */
static int upload_stack(pl_bf16 **dst, const pl_weight *const *ws, int n, upload_ctx *u)
{
    size_t rows = 0, cols = (size_t)ws[0]->cols;
    for (int i = 0; i < n; i++) {
        if ((size_t)ws[i]->cols != cols)
            return pl_cuda_fail_(__FILE__, __LINE__, "stacked matrices differ in width");
        rows += (size_t)ws[i]->rows;
    }
    PL_CUDA_CHECK(cudaMalloc((void **)dst, rows * cols * sizeof(pl_bf16)));
    *u->bytes += rows * cols * sizeof(pl_bf16);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (upload_matrix(*dst + off * cols, ws[i], u) != 0)
            return -1;
        off += (size_t)ws[i]->rows;
    }
    return 0;
}

static int upload_bias(float **dst, const pl_model *m, const pl_layer *L, size_t *bytes)
{
    *dst = NULL;
    if (!L->bq || !L->bk || !L->bv)
        return 0;
    size_t q = (size_t)m->n_head * m->head_dim, kv = (size_t)m->n_head_kv * m->head_dim;
    float *cat = malloc((q + 2 * kv) * sizeof(float));
    if (!cat)
        return pl_cuda_fail_(__FILE__, __LINE__, "out of memory");
    memcpy(cat, L->bq, q * sizeof(float));
    memcpy(cat + q, L->bk, kv * sizeof(float));
    memcpy(cat + q + kv, L->bv, kv * sizeof(float));
    int rc = pl_cuda_upload_f32(dst, cat, q + 2 * kv, bytes);
    free(cat);
    return rc;
}

/* A layer's router and experts (moe_weights.c: MXFP4 kept packed, the
 * rest dequantised to bf16), each matrix with its biases. */
static int upload_experts(pl_cuda_layer *d, const pl_model *m, const pl_layer *L,
                          size_t *bytes)
{
    char e[200];
    const pl_experts *x[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
    const float *b[3] = {L->gate_exps_b, L->up_exps_b, L->down_exps_b};
    pl_cuda_moe_w *out[3] = {&d->gate_exps, &d->up_exps, &d->down_exps};
    if (!L->gate_inp.f32)
        return pl_cuda_fail_(__FILE__, __LINE__, "the router is not kept in f32");
    if (pl_cuda_upload_f32(&d->router, L->gate_inp.f32, (size_t)m->n_expert * m->n_embd, bytes) != 0
        || pl_cuda_upload_f32(&d->router_b, L->gate_inp_b, (size_t)m->n_expert, bytes) != 0)
        return -1;
    for (int i = 0; i < 3; i++) {
        if (pl_cuda_moe_upload(x[i], b[i], out[i], e, sizeof e) != 0)
            return pl_cuda_fail_(__FILE__, __LINE__, "%s", e);
        *bytes += pl_cuda_moe_bytes(x[i]) +
                  (b[i] ? sizeof(float) * (size_t)x[i]->n * (size_t)x[i]->w.rows : 0);
    }
    return 0;
}

static int upload_layer(pl_cuda_layer *d, const pl_model *m, const pl_layer *L,
                        upload_ctx *u)
{
    const pl_weight *qkv[3] = {&L->wq, &L->wk, &L->wv};
    const pl_weight *gu[2] = {&L->w_gate, &L->w_up};
    const pl_weight *wo[1] = {&L->wo}, *wd[1] = {&L->w_down};
    d->n_swa = L->n_swa;
    if (pl_cuda_upload_f32(&d->attn_norm, L->attn_norm, (size_t)m->n_embd, u->bytes) != 0
        || pl_cuda_upload_f32(&d->ffn_norm, L->ffn_norm, (size_t)m->n_embd, u->bytes) != 0
        || pl_cuda_upload_f32(&d->q_norm, L->attn_q_norm, (size_t)m->head_dim, u->bytes) != 0
        || pl_cuda_upload_f32(&d->k_norm, L->attn_k_norm, (size_t)m->head_dim, u->bytes) != 0
        || pl_cuda_upload_f32(&d->attn_post_norm, L->attn_post_norm, (size_t)m->n_embd,
                              u->bytes) != 0
        || pl_cuda_upload_f32(&d->ffn_post_norm, L->ffn_post_norm, (size_t)m->n_embd,
                              u->bytes) != 0
        || upload_bias(&d->bqkv, m, L, u->bytes) != 0
        || pl_cuda_upload_f32(&d->bo, L->bo, (size_t)m->n_embd, u->bytes) != 0
        || pl_cuda_upload_f32(&d->sinks, L->attn_sinks, (size_t)m->n_head, u->bytes) != 0
        || upload_stack(&d->wqkv, qkv, 3, u) != 0
        || upload_stack(&d->wo, wo, 1, u) != 0)
        return -1;
    if (m->n_expert > 0)
        return upload_experts(d, m, L, u->bytes);
    if (upload_stack(&d->w_gu, gu, 2, u) != 0 || upload_stack(&d->w_down, wd, 1, u) != 0)
        return -1;
    return 0;
}

static int upload_all(pl_cuda_weights *w, const pl_model *m, upload_ctx *u)
{
    const pl_weight *emb[1] = {&m->tok_embd}, *out[1] = {&m->output};
    if (upload_stack(&w->tok_embd, emb, 1, u) != 0)
        return -1;
    if (m->tied || m->output.q == m->tok_embd.q)
        w->output = w->tok_embd;
    else if (upload_stack(&w->output, out, 1, u) != 0)
        return -1;
    if (pl_cuda_upload_f32(&w->output_norm, m->output_norm, (size_t)m->n_embd, u->bytes) != 0
        || pl_cuda_upload_f32(&w->rope_inv_freq, m->rope_inv_freq, (size_t)m->n_rot / 2,
                              u->bytes) != 0
        || pl_cuda_upload_f32(&w->rope_inv_freq_swa, m->rope_inv_freq_swa, (size_t)m->n_rot / 2,
                              u->bytes) != 0)
        return -1;
    for (int l = 0; l < m->n_layer; l++) {
        const pl_layer *L = &m->layers[l];
        if (upload_layer(&w->layers[l], m, L, u) != 0)
            return -1;
        w->layers[l].rope_inv_freq = m->rope_inv_freq_swa && L->rope_inv_freq
                                     == m->rope_inv_freq_swa ? w->rope_inv_freq_swa
                                                             : w->rope_inv_freq;
    }
    return 0;
}

static void ctx_free(upload_ctx *u)
{
    if (u->st)
        cudaStreamSynchronize(u->st);
    for (int i = 0; i < 2; i++) {
        if (u->stage[i])
            cudaFreeHost(u->stage[i]);
        if (u->done[i])
            cudaEventDestroy(u->done[i]);
    }
    if (u->st)
        cudaStreamDestroy(u->st);
}

static int ctx_init(upload_ctx *u, const pl_model *m, int threads)
{
    size_t max_cols = (size_t)(m->n_ff > m->n_embd ? m->n_ff : m->n_embd);
    if ((size_t)m->n_head * m->head_dim > max_cols)
        max_cols = (size_t)m->n_head * m->head_dim;
    u->stage_elems = CHUNK_BYTES / sizeof(pl_bf16) > max_cols ? CHUNK_BYTES / sizeof(pl_bf16)
                                                              : max_cols;
    u->threads = pl_cuda_weights_threads(threads);
    PL_CUDA_CHECK(cudaStreamCreateWithFlags(&u->st, cudaStreamNonBlocking));
    for (int i = 0; i < 2; i++) {
        PL_CUDA_CHECK(cudaHostAlloc((void **)&u->stage[i], u->stage_elems * sizeof(pl_bf16),
                                    cudaHostAllocDefault));
        PL_CUDA_CHECK(cudaEventCreateWithFlags(&u->done[i], cudaEventDisableTiming));
    }
    return 0;
}

int pl_cuda_weights_init(pl_cuda_weights *w, const pl_model *m, int threads, char *err,
                         size_t errlen)
{
    memset(w, 0, sizeof *w);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    upload_ctx u = {.bytes = &w->bytes};
    w->n_layer = m->n_layer;
    w->layers = calloc((size_t)m->n_layer, sizeof *w->layers);
    if (!w->layers) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (ctx_init(&u, m, threads) != 0 || upload_all(w, m, &u) != 0
        || pl_cuda_check_(cudaStreamSynchronize(u.st), __FILE__, __LINE__)) {
        snprintf(err, errlen, "uploading weights: %s", pl_cuda_last_error());
        goto fail;
    }
    ctx_free(&u);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    w->load_s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    pl_info("cuda: %.2f GiB of weights dequantised and uploaded in %.2f s (%d threads)",
            w->bytes / 1073741824.0, w->load_s, u.threads);
    return 0;
fail:
    ctx_free(&u);
    pl_cuda_weights_free(w);
    return -1;
}

void pl_cuda_weights_free(pl_cuda_weights *w)
{
    if (w->output && w->output != w->tok_embd)
        cudaFree(w->output);
    cudaFree(w->tok_embd);
    cudaFree(w->output_norm);
    cudaFree(w->rope_inv_freq);
    cudaFree(w->rope_inv_freq_swa);
    for (int l = 0; w->layers && l < w->n_layer; l++) {
        pl_cuda_layer *d = &w->layers[l];
        cudaFree(d->attn_norm);
        cudaFree(d->ffn_norm);
        cudaFree(d->bqkv);
        cudaFree(d->bo);
        cudaFree(d->sinks);
        cudaFree(d->wqkv);
        cudaFree(d->wo);
        cudaFree(d->w_gu);
        cudaFree(d->w_down);
        cudaFree(d->router);
        cudaFree(d->router_b);
        pl_cuda_moe_w_free(&d->gate_exps);
        pl_cuda_moe_w_free(&d->up_exps);
        pl_cuda_moe_w_free(&d->down_exps);
        cudaFree(d->q_norm);
        cudaFree(d->k_norm);
        cudaFree(d->attn_post_norm);
        cudaFree(d->ffn_post_norm);
    }
    free(w->layers);
    memset(w, 0, sizeof *w);
}
