/* encode.c - an encoder's forward pass (encode.h), as the bert family's
 * formula (families/bert.c) and transformers' BertModel compute it:
 *
 *   x = LN(tok[id] + pos[p] + type[0])
 *   per layer: q, k, v = x W^T + b;  a = softmax(q_h k_h^T / sqrt(hd)) v_h
 *              per text and head;  x = LN(x + a Wo^T + bo);
 *              x = LN(x + gelu(x Wu^T + bu) Wd^T + bd)
 *
 * The texts' rows are stacked: a matrix product is one GEMM over all of
 * them, split by output features over the pool's threads (each thread's
 * BLAS call single-threaded, as the CPU runner sets OpenBLAS). Attention
 * runs per (text, head), taken dynamically. */
#include "backends/engine/cpu/encode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#define SPLIT 16                 /* output features per GEMM work item */

typedef struct gemm_job {
    pl_pool *pool;
    const float *x;              /* (rows, k) */
    const float *w, *b;          /* (o, k), (o) */
    float *y;                    /* (rows, o) */
    int rows, k, o;
    bool gelu;
} gemm_job;

static void gemm_worker(void *arg, int ith, int nth)
{
    gemm_job *j = arg;
    (void)ith, (void)nth;
    int items = (j->o + SPLIT * 4 - 1) / (SPLIT * 4);
    for (int it; (it = j->pool ? pl_pool_take(j->pool) : ith++) < items;) {
        int o0 = it * SPLIT * 4, o1 = o0 + SPLIT * 4 < j->o ? o0 + SPLIT * 4 : j->o;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->rows, o1 - o0, j->k, 1.0f,
                    j->x, j->k, j->w + (size_t)o0 * j->k, j->k, 0.0f, j->y + o0, j->o);
        for (int r = 0; r < j->rows; r++) {
            float *y = j->y + (size_t)r * j->o;
            for (int c = o0; c < o1; c++) {
                float v = y[c] + j->b[c];
                y[c] = j->gelu ? 0.5f * v * (1.0f + erff(v * (float)M_SQRT1_2)) : v;
            }
        }
    }
}

static void run_(pl_pool *pool, pl_pool_fn fn, void *arg)
{
    if (pool)
        pl_pool_run(pool, fn, arg);
    else
        fn(arg, 0, 1);
}

/* y (rows, o) = x (rows, k) w^T + b, then GELU when gelu. */
static void linear_(pl_pool *pool, const float *x, int rows, int k, const float *w,
                    const float *b, int o, float *y, bool gelu)
{
    gemm_job j = {.pool = pool, .x = x, .w = w, .b = b, .y = y, .rows = rows, .k = k, .o = o,
                  .gelu = gelu};
    run_(pool, gemm_worker, &j);
}

typedef struct attn_job {
    pl_pool *pool;
    const pl_encoder *m;
    const float *q, *k, *v;      /* (rows, d) */
    float *out;                  /* (rows, d) */
    const int *start, *lens;     /* each text's first row and length */
    int n;
    float *scratch;              /* (threads, max_len^2) */
    int max_len;
} attn_job;

/* Text t, head h: out_h = softmax(q_h k_h^T * scale) v_h. */
static void attn_one_(const attn_job *j, int t, int h, float *s)
{
    int d = j->m->n_embd, hd = j->m->head_dim, L = j->lens[t];
    size_t off = (size_t)j->start[t] * d + (size_t)h * hd;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, hd,
                1.0f / sqrtf((float)hd), j->q + off, d, j->k + off, d, 0.0f, s, L);
    for (int r = 0; r < L; r++) {
        float *row = s + (size_t)r * L, mx = row[0], sum = 0;
        for (int c = 1; c < L; c++)
            mx = row[c] > mx ? row[c] : mx;
        for (int c = 0; c < L; c++)
            sum += row[c] = expf(row[c] - mx);
        for (int c = 0; c < L; c++)
            row[c] /= sum;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, hd, L, 1.0f, s, L,
                j->v + off, d, 0.0f, j->out + off, d);
}

static void attn_worker(void *arg, int ith, int nth)
{
    attn_job *j = arg;
    (void)nth;
    float *s = j->scratch + (size_t)ith * j->max_len * j->max_len;
    int items = j->n * j->m->n_head, local = 0;
    for (int it; (it = j->pool ? pl_pool_take(j->pool) : local++) < items;)
        attn_one_(j, it / j->m->n_head, it % j->m->n_head, s);
}

/* x = LayerNorm(x + add) per row (add may be NULL). */
static void add_norm_(float *x, const float *add, int rows, int d, const float *w,
                      const float *b, float eps)
{
    for (int r = 0; r < rows; r++) {
        float *row = x + (size_t)r * d;
        double mean = 0, var = 0;
        for (int c = 0; c < d; c++) {
            if (add)
                row[c] += add[(size_t)r * d + c];
            mean += row[c];
        }
        mean /= d;
        for (int c = 0; c < d; c++)
            var += (row[c] - mean) * (row[c] - mean);
        float inv = (float)(1.0 / sqrt(var / d + eps));
        for (int c = 0; c < d; c++)
            row[c] = (float)(row[c] - mean) * inv * w[c] + b[c];
    }
}

static void embed_(const pl_encoder *m, const int32_t *const *ids, const int *lens, int n,
                   float *x)
{
    int d = m->n_embd;
    for (int t = 0; t < n; t++)
        for (int p = 0; p < lens[t]; p++, x += d) {
            const float *te = m->tok_embd + (size_t)ids[t][p] * d,
                        *pe = m->pos_embd + (size_t)p * d;
            for (int c = 0; c < d; c++)
                x[c] = te[c] + pe[c] + m->type_embd[c];
        }
}

/* Text t's vector from its rows x (lens rows). */
static void pool_(const float *x, int len, int d, pl_pooling p, bool normalize, float *out)
{
    if (p == PL_POOLING_CLS || p == PL_POOLING_LAST) {
        memcpy(out, x + (size_t)(p == PL_POOLING_CLS ? 0 : len - 1) * d, sizeof(float) * d);
    } else {
        for (int c = 0; c < d; c++) {
            double s = 0;
            for (int r = 0; r < len; r++)
                s += x[(size_t)r * d + c];
            out[c] = (float)(s / len);
        }
    }
    if (!normalize)
        return;
    double ss = 0;
    for (int c = 0; c < d; c++)
        ss += (double)out[c] * out[c];
    /* sentence-transformers' Normalize: F.normalize's eps 1e-12 */
    double inv = 1.0 / fmax(sqrt(ss), 1e-12);
    for (int c = 0; c < d; c++)
        out[c] = (float)(out[c] * inv);
}

typedef struct bufs {
    float *x, *q, *k, *v, *a, *h, *s;
    int *start;
} bufs;

static void bufs_free_(bufs *b)
{
    free(b->x), free(b->q), free(b->k), free(b->v), free(b->a), free(b->h), free(b->s);
    free(b->start);
}

static int layer_(const pl_encoder *m, pl_pool *pool, bufs *b, int rows, const int *lens,
                  int n, int max_len, const pl_enc_layer *y)
{
    int d = m->n_embd, ff = m->n_ff;
    linear_(pool, b->x, rows, d, y->wq, y->bq, d, b->q, false);
    linear_(pool, b->x, rows, d, y->wk, y->bk, d, b->k, false);
    linear_(pool, b->x, rows, d, y->wv, y->bv, d, b->v, false);
    attn_job aj = {.pool = pool, .m = m, .q = b->q, .k = b->k, .v = b->v, .out = b->a,
                   .start = b->start, .lens = lens, .n = n, .scratch = b->s,
                   .max_len = max_len};
    run_(pool, attn_worker, &aj);
    linear_(pool, b->a, rows, d, y->wo, y->bo, d, b->q, false);
    add_norm_(b->x, b->q, rows, d, y->attn_norm_w, y->attn_norm_b, m->eps);
    linear_(pool, b->x, rows, d, y->w_up, y->b_up, ff, b->h, true);
    linear_(pool, b->h, rows, ff, y->w_down, y->b_down, d, b->q, false);
    add_norm_(b->x, b->q, rows, d, y->out_norm_w, y->out_norm_b, m->eps);
    return 0;
}

int pl_encode_batch(const pl_encoder *m, pl_pool *pool, const int32_t *const *ids,
                    const int *lens, int n, pl_pooling pooling, bool normalize, float *out)
{
    int rows = 0, max_len = 1, d = m->n_embd;
    for (int t = 0; t < n; t++) {
        rows += lens[t];
        max_len = lens[t] > max_len ? lens[t] : max_len;
    }
    size_t rd = (size_t)rows * d, threads = pool ? (size_t)pl_pool_size(pool) : 1;
    bufs b = {.x = malloc(sizeof(float) * rd), .q = malloc(sizeof(float) * rd),
              .k = malloc(sizeof(float) * rd), .v = malloc(sizeof(float) * rd),
              .a = malloc(sizeof(float) * rd),
              .h = malloc(sizeof(float) * (size_t)rows * m->n_ff),
              .s = malloc(sizeof(float) * threads * max_len * max_len),
              .start = malloc(sizeof(int) * (size_t)(n + 1))};
    if (!b.x || !b.q || !b.k || !b.v || !b.a || !b.h || !b.s || !b.start) {
        bufs_free_(&b);
        return -1;
    }
    b.start[0] = 0;
    for (int t = 0; t < n; t++)
        b.start[t + 1] = b.start[t] + lens[t];
    embed_(m, ids, lens, n, b.x);
    add_norm_(b.x, NULL, rows, d, m->embd_norm_w, m->embd_norm_b, m->eps);
    for (int l = 0; l < m->n_layer; l++)
        layer_(m, pool, &b, rows, lens, n, max_len, &m->layers[l]);
    for (int t = 0; t < n; t++)
        pool_(b.x + (size_t)b.start[t] * d, lens[t], d, pooling, normalize,
              out + (size_t)t * d);
    bufs_free_(&b);
    return 0;
}
