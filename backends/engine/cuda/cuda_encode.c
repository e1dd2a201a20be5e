/* cuda_encode.c - the encoder on the GPU (cuda_encode.h): its weights on
 * the device, its buffers sized for max_rows, and a batch's pass:
 *
 *   x = LN(tok[id] + pos[p] + type[0])                (embed_norm)
 *   per layer: qkv = x [Wq|Wk|Wv]^T + b               (one GEMM, bias)
 *              a = attention per text and head        (bf16 out)
 *              x = LN(x + a Wo^T + bo)                (GEMM, add_norm)
 *              h = gelu(x Wu^T + bu)                  (GEMM, bias+gelu)
 *              x = LN(x + h Wd^T + bd)                (GEMM, add_norm)
 *   out = pool(x), normalised
 *
 * on one stream, synchronised once when the vectors are read back. */
#include "backends/engine/cuda/cuda_encode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/cuda/common.cuh"
#include "backends/engine/cuda/encode.cuh"
#include "backends/engine/cuda/gemm.h"
#include "backends/engine/cuda/weights.h"

typedef struct enc_layer {
    pl_bf16 *wqkv, *wo, *w_up, *w_down;
    float *bqkv, *bo, *b_up, *b_down;
    float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
} enc_layer;

struct pl_cuda_encoder {
    const pl_encoder *m;
    int max_rows;
    cudaStream_t st;
    pl_cuda_gemm *gemm;
    float *tok, *pos, *type0, *ln0_w, *ln0_b;
    enc_layer *layers;
    float *x, *qkv, *y, *out;    /* (rows, d), (rows, 3d), (rows, max(d, ff)), (rows, d) */
    pl_bf16 *xb, *ab, *hb;       /* (rows, d), (rows, d), (rows, ff) */
    int32_t *ids, *positions, *start, *lens;   /* device (rows) each */
    int32_t *h_ids, *h_positions, *h_start, *h_lens;   /* their host copies */
};

/* Matrices a, b, c (each rows x cols) stacked, as bf16 (b, c may be NULL);
 * their bytes added to *bytes. */
static int up_bf16(pl_bf16 **dst, const float *a, const float *b, const float *c, size_t rows,
                   size_t cols, size_t *bytes)
{
    const float *parts[3] = {a, b, c};
    size_t k = c ? 3 : b ? 2 : 1, n = rows * cols;
    pl_bf16 *h = malloc(sizeof *h * n * k);
    if (!h)
        return pl_cuda_fail_(__FILE__, __LINE__, "out of host memory");
    for (size_t p = 0; p < k; p++)
        for (size_t i = 0; i < n; i++)
            h[p * n + i] = pl_fp32_to_bf16(parts[p][i]);
    int rc = pl_cuda_check_(cudaMalloc((void **)dst, sizeof *h * n * k), __FILE__, __LINE__);
    *bytes += rc == 0 ? sizeof *h * n * k : 0;
    if (rc == 0)
        rc = pl_cuda_check_(cudaMemcpy(*dst, h, sizeof *h * n * k, cudaMemcpyHostToDevice),
                            __FILE__, __LINE__);
    free(h);
    return rc;
}

static int up_layer(enc_layer *g, const pl_enc_layer *y, int d, int ff, size_t *b)
{
    size_t D = (size_t)d, F = (size_t)ff;
    float *bqkv = malloc(sizeof(float) * 3 * D);
    if (!bqkv)
        return pl_cuda_fail_(__FILE__, __LINE__, "out of host memory");
    memcpy(bqkv, y->bq, sizeof(float) * D);
    memcpy(bqkv + D, y->bk, sizeof(float) * D);
    memcpy(bqkv + 2 * D, y->bv, sizeof(float) * D);
    int rc = pl_cuda_upload_f32(&g->bqkv, bqkv, 3 * D, b);
    free(bqkv);
    if (rc || up_bf16(&g->wqkv, y->wq, y->wk, y->wv, D, D, b) ||
        up_bf16(&g->wo, y->wo, NULL, NULL, D, D, b) ||
        up_bf16(&g->w_up, y->w_up, NULL, NULL, F, D, b) ||
        up_bf16(&g->w_down, y->w_down, NULL, NULL, D, F, b) ||
        pl_cuda_upload_f32(&g->bo, y->bo, D, b) || pl_cuda_upload_f32(&g->b_up, y->b_up, F, b) ||
        pl_cuda_upload_f32(&g->b_down, y->b_down, D, b) ||
        pl_cuda_upload_f32(&g->ln1_w, y->attn_norm_w, D, b) ||
        pl_cuda_upload_f32(&g->ln1_b, y->attn_norm_b, D, b) ||
        pl_cuda_upload_f32(&g->ln2_w, y->out_norm_w, D, b) ||
        pl_cuda_upload_f32(&g->ln2_b, y->out_norm_b, D, b))
        return -1;
    return 0;
}

static void layer_free(enc_layer *g)
{
    void *p[] = {g->wqkv, g->wo, g->w_up, g->w_down, g->bqkv, g->bo, g->b_up,
                 g->b_down, g->ln1_w, g->ln1_b, g->ln2_w, g->ln2_b};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        cudaFree(p[i]);
}

void pl_cuda_encoder_free(pl_cuda_encoder *e)
{
    if (!e)
        return;
    for (int l = 0; e->layers && l < e->m->n_layer; l++)
        layer_free(&e->layers[l]);
    free(e->layers);
    void *p[] = {e->tok, e->pos, e->type0, e->ln0_w, e->ln0_b, e->x, e->qkv, e->y, e->out,
                 e->xb, e->ab, e->hb, e->ids, e->positions, e->start, e->lens};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        cudaFree(p[i]);
    free(e->h_ids), free(e->h_positions), free(e->h_start), free(e->h_lens);
    pl_cuda_gemm_free(e->gemm);
    if (e->st)
        cudaStreamDestroy(e->st);
    free(e);
}

static int alloc_bufs(pl_cuda_encoder *e)
{
    size_t R = (size_t)e->max_rows, D = (size_t)e->m->n_embd, F = (size_t)e->m->n_ff;
    size_t W = F > D ? F : D;
    PL_CUDA_CHECK(cudaMalloc((void **)&e->x, R * D * 4));
    PL_CUDA_CHECK(cudaMalloc((void **)&e->qkv, R * 3 * D * 4));
    PL_CUDA_CHECK(cudaMalloc((void **)&e->y, R * W * 4));
    PL_CUDA_CHECK(cudaMalloc((void **)&e->out, R * D * 4));
    PL_CUDA_CHECK(cudaMalloc((void **)&e->xb, R * D * 2));
    PL_CUDA_CHECK(cudaMalloc((void **)&e->ab, R * D * 2));
    PL_CUDA_CHECK(cudaMalloc((void **)&e->hb, R * F * 2));
    PL_CUDA_CHECK(cudaMalloc((void **)&e->ids, R * 4));
    PL_CUDA_CHECK(cudaMalloc((void **)&e->positions, R * 4));
    PL_CUDA_CHECK(cudaMalloc((void **)&e->start, R * 4));
    PL_CUDA_CHECK(cudaMalloc((void **)&e->lens, R * 4));
    e->h_ids = malloc(R * 4);
    e->h_positions = malloc(R * 4);
    e->h_start = malloc(R * 4);
    e->h_lens = malloc(R * 4);
    if (!e->h_ids || !e->h_positions || !e->h_start || !e->h_lens)
        return pl_cuda_fail_(__FILE__, __LINE__, "out of host memory");
    return 0;
}

pl_cuda_encoder *pl_cuda_encoder_new(const pl_encoder *m, int max_rows, char *err,
                                     size_t errlen)
{
    char why[256];
    if (!pl_cuda_available(why, sizeof why)) {
        snprintf(err, errlen, "no CUDA device: %s", why);
        return NULL;
    }
    if (max_rows < 1 || m->n_embd % m->n_head || m->n_pos < 1) {
        snprintf(err, errlen, "encoder: bad shape (max_rows %d, n_embd %d, n_head %d)",
                 max_rows, m->n_embd, m->n_head);
        return NULL;
    }
    pl_cuda_encoder *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    e->m = m;
    e->max_rows = max_rows;
    size_t D = (size_t)m->n_embd;
    if (pl_cuda_check_(cudaStreamCreateWithFlags(&e->st, cudaStreamNonBlocking), __FILE__,
                       __LINE__))
        goto fail;
    if (!(e->gemm = pl_cuda_gemm_new(e->st, err, errlen)))
        goto fail_msg;
    size_t bytes = 0, *b = &bytes;   /* the uploads' count (not reported) */
    if (pl_cuda_upload_f32(&e->tok, m->tok_embd, (size_t)m->n_vocab * D, b) ||
        pl_cuda_upload_f32(&e->pos, m->pos_embd, (size_t)m->n_pos * D, b) ||
        pl_cuda_upload_f32(&e->type0, m->type_embd, D, b) ||
        pl_cuda_upload_f32(&e->ln0_w, m->embd_norm_w, D, b) ||
        pl_cuda_upload_f32(&e->ln0_b, m->embd_norm_b, D, b))
        goto fail;
    if (!(e->layers = calloc((size_t)m->n_layer, sizeof *e->layers)))
        goto fail;
    for (int l = 0; l < m->n_layer; l++)
        if (up_layer(&e->layers[l], &m->layers[l], m->n_embd, m->n_ff, b))
            goto fail;
    if (alloc_bufs(e))
        goto fail;
    return e;
fail:
    snprintf(err, errlen, "encoder on the GPU: %s", pl_cuda_last_error());
fail_msg:
    pl_cuda_encoder_free(e);
    return NULL;
}

static int layer_pass(pl_cuda_encoder *e, const enc_layer *g, int rows, int n, int max_len)
{
    const pl_encoder *m = e->m;
    int d = m->n_embd, ff = m->n_ff, hd = d / m->n_head;
    cudaStream_t st = e->st;
    if (pl_cuda_gemm_bf16(e->gemm, e->xb, g->wqkv, e->qkv, rows, 3 * d, d) ||
        pl_cuda_enc_bias(e->qkv, g->bqkv, 0, NULL, rows, 3 * d, st) ||
        pl_cuda_enc_attention(e->qkv, e->start, e->lens, n, max_len, m->n_head, hd,
                              1.0f / sqrtf((float)hd), e->ab, st) ||
        pl_cuda_gemm_bf16(e->gemm, e->ab, g->wo, e->y, rows, d, d) ||
        pl_cuda_enc_add_norm(e->x, e->y, g->bo, g->ln1_w, g->ln1_b, m->eps, e->xb, rows, d,
                             st) ||
        pl_cuda_gemm_bf16(e->gemm, e->xb, g->w_up, e->y, rows, ff, d) ||
        pl_cuda_enc_bias(e->y, g->b_up, 1, e->hb, rows, ff, st) ||
        pl_cuda_gemm_bf16(e->gemm, e->hb, g->w_down, e->y, rows, d, ff) ||
        pl_cuda_enc_add_norm(e->x, e->y, g->b_down, g->ln2_w, g->ln2_b, m->eps, e->xb, rows,
                             d, st))
        return -1;
    return 0;
}

int pl_cuda_encode_batch(pl_cuda_encoder *e, const int32_t *const *ids, const int *lens,
                         int n, pl_pooling pooling, bool normalize, float *out)
{
    const pl_encoder *m = e->m;
    int rows = 0, max_len = 1, d = m->n_embd;
    PL_CUDA_ARG(n >= 1 && ids && lens && out);
    for (int t = 0; t < n; t++) {
        PL_CUDA_ARG(lens[t] >= 1 && lens[t] <= m->n_pos && lens[t] <= PL_CUDA_ENC_MAX_LEN &&
                    rows + lens[t] <= e->max_rows);
        e->h_start[t] = rows;
        e->h_lens[t] = lens[t];
        for (int p = 0; p < lens[t]; p++) {
            PL_CUDA_ARG(ids[t][p] >= 0 && ids[t][p] < m->n_vocab);
            e->h_ids[rows + p] = ids[t][p];
            e->h_positions[rows + p] = p;
        }
        rows += lens[t];
        max_len = lens[t] > max_len ? lens[t] : max_len;
    }
    int pk = pooling == PL_POOLING_CLS ? 2 : pooling == PL_POOLING_LAST ? 3 : 1;
    cudaStream_t st = e->st;
    PL_CUDA_CHECK(cudaMemcpyAsync(e->ids, e->h_ids, (size_t)rows * 4, cudaMemcpyHostToDevice, st));
    PL_CUDA_CHECK(cudaMemcpyAsync(e->positions, e->h_positions, (size_t)rows * 4,
                                  cudaMemcpyHostToDevice, st));
    PL_CUDA_CHECK(cudaMemcpyAsync(e->start, e->h_start, (size_t)n * 4, cudaMemcpyHostToDevice, st));
    PL_CUDA_CHECK(cudaMemcpyAsync(e->lens, e->h_lens, (size_t)n * 4, cudaMemcpyHostToDevice, st));
    if (pl_cuda_enc_embed_norm(e->ids, e->positions, e->tok, e->pos, e->type0, e->ln0_w,
                               e->ln0_b, m->eps, e->x, e->xb, rows, d, st))
        return -1;
    for (int l = 0; l < m->n_layer; l++)
        if (layer_pass(e, &e->layers[l], rows, n, max_len))
            return -1;
    if (pl_cuda_enc_pool(e->x, e->start, e->lens, n, d, pk, normalize, e->out, st))
        return -1;
    PL_CUDA_CHECK(cudaMemcpyAsync(out, e->out, (size_t)n * d * 4, cudaMemcpyDeviceToHost, st));
    PL_CUDA_CHECK(cudaStreamSynchronize(st));
    return 0;
}
