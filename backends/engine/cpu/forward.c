/* forward.c - the llama/qwen2 forward pass over a batch of rows (forward.h).
 *
 * Matmuls run on the thread pool, each thread taking a slice of output
 * features: many rows use single-threaded OpenBLAS sgemm on f32 weights,
 * few rows (decode) use the quantised kernels on q8 activations.
 */
#include "backends/engine/cpu/forward.h"

#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pl_cpu_fwd {
    const pl_model *m;
    pl_pool *pool;
    pl_fwd_opts o;
    int q_dim, kv_dim, max_in;
    float *k_cache, *v_cache;    /* (n_layer, num_blocks, block_size, kv_dim) */
    float *x, *xn, *q, *k, *v, *att, *tmp; /* (max_rows, width) */
    float *gate, *up;            /* (max_rows, n_ff) */
    pl_q8_act *xq;               /* (max_rows, max_in / 32) */
    float *attn_scr;             /* (n_threads, group * max_ctx) */
    float *xo;                   /* (max_out, n_embd) */
    const pl_fwd_batch *b;       /* the call in progress */
    int layer;
    int last_rows;               /* rows of the last pl_cpu_forward, whose
                                    final hidden states x still holds */
};

#define MM_MAX 3

/* Up to MM_MAX matmuls sharing one input: y[i] = x @ w[i]^T. */
typedef struct mm_job {
    pl_cpu_fwd *f;
    int n, n_rows;
    int use_f32[MM_MAX];
    const float *x;
    const pl_weight *w[MM_MAX];
    float *y[MM_MAX];
} mm_job;

#define MM_CHUNK_Q 32            /* output features per work item, quantised */

/* GEMM work items are larger: OpenBLAS packs the whole activation matrix
 * on every call, so a few calls per thread keep that cost small. */
static int mm_chunk(const mm_job *j, int i, int nth)
{
    if (!j->use_f32[i])
        return MM_CHUNK_Q;
    int c = (j->w[i]->rows / (2 * nth) + 15) / 16 * 16;
    return c < 64 ? 64 : c;
}

static void mm_worker(void *arg, int ith, int nth)
{
    mm_job *j = arg;
    int chunks[MM_MAX], size[MM_MAX], total = 0;
    for (int i = 0; i < j->n; i++) {
        size[i] = mm_chunk(j, i, nth);
        total += chunks[i] = (j->w[i]->rows + size[i] - 1) / size[i];
    }
    for (int c = pl_pool_take(j->f->pool); c < total; c = pl_pool_take(j->f->pool)) {
        int i = 0, k = c;
        while (k >= chunks[i])
            k -= chunks[i++];
        const pl_weight *w = j->w[i];
        int o0 = k * size[i], o1 = o0 + size[i] < w->rows ? o0 + size[i] : w->rows;
        if (j->use_f32[i])
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->n_rows, o1 - o0, w->cols,
                        1.0f, j->x, w->cols, w->f32 + (size_t)o0 * w->cols, w->cols,
                        0.0f, j->y[i] + o0, w->rows);
        else
            pl_op_qmatmul_rows(w->type, w->q, w->row_bytes, j->f->xq, w->cols / PL_QK,
                               j->n_rows, j->y[i], w->rows, o0, o1);
    }
}

typedef struct q8_job { pl_cpu_fwd *f; const float *x; int n_rows, cols; } q8_job;

static void q8_worker(void *arg, int ith, int nth)
{
    q8_job *j = arg;
    for (int r = pl_pool_take(j->f->pool); r < j->n_rows; r = pl_pool_take(j->f->pool))
        pl_op_quantize_row_q8(j->x + (size_t)r * j->cols, j->f->xq + (size_t)r * (j->cols / PL_QK),
                              j->cols);
}

/* y[i] = x @ w[i]^T for n weights of the same input width. */
static void matmul(pl_cpu_fwd *f, const float *x, int n_rows, int n,
                   const pl_weight *w0, float *y0, const pl_weight *w1, float *y1,
                   const pl_weight *w2, float *y2)
{
    mm_job j = {.f = f, .n = n, .n_rows = n_rows, .x = x,
                .w = {w0, w1, w2}, .y = {y0, y1, y2}};
    bool any_q = false;
    for (int i = 0; i < n; i++) {
        const pl_weight *w = j.w[i];
        j.use_f32[i] = !pl_op_qdot_supported(w->type) || (w->f32 && n_rows >= f->o.gemm_min_rows);
        any_q |= !j.use_f32[i];
    }
    if (any_q) {
        q8_job q = {f, x, n_rows, w0->cols};
        if (n_rows >= 4)
            pl_pool_run(f->pool, q8_worker, &q);
        else
            for (int r = 0; r < n_rows; r++)
                pl_op_quantize_row_q8(x + (size_t)r * w0->cols,
                                      f->xq + (size_t)r * (w0->cols / PL_QK), w0->cols);
    }
    pl_pool_run(f->pool, mm_worker, &j);
}

static float *kv_at(const pl_cpu_fwd *f, float *cache, int layer, int32_t blk, int slot)
{
    size_t bs = (size_t)f->o.block_size;
    return cache + (((size_t)layer * f->o.num_blocks + blk) * bs + slot) * f->kv_dim;
}

static const int32_t *row_blocks(const pl_fwd_batch *b, int r)
{
    return b->block_table + (size_t)b->row_seq[r] * b->max_blocks_per_seq;
}

/* Rope q/k, add biases, and store k/v rows into their cache slots. */
static void qkv_finish(pl_cpu_fwd *f, const pl_layer *y)
{
    const pl_model *m = f->m;
    const pl_fwd_batch *b = f->b;
    for (int r = 0; r < b->n_rows; r++) {
        float *q = f->q + (size_t)r * f->q_dim, *k = f->k + (size_t)r * f->kv_dim;
        float *v = f->v + (size_t)r * f->kv_dim;
        for (int i = 0; y->bq && i < f->q_dim; i++)
            q[i] += y->bq[i];
        for (int i = 0; y->bk && i < f->kv_dim; i++) {
            k[i] += y->bk[i];
            v[i] += y->bv[i];
        }
        int pos = b->positions[r];
        pl_op_rope(q, m->n_head, m->head_dim, m->n_rot, pos, m->rope_inv_freq, m->rope_neox);
        pl_op_rope(k, m->n_head_kv, m->head_dim, m->n_rot, pos, m->rope_inv_freq, m->rope_neox);
        int32_t blk = row_blocks(b, r)[pos / f->o.block_size];
        int slot = pos % f->o.block_size;
        memcpy(kv_at(f, f->k_cache, f->layer, blk, slot), k, sizeof(float) * f->kv_dim);
        memcpy(kv_at(f, f->v_cache, f->layer, blk, slot), v, sizeof(float) * f->kv_dim);
    }
}

static void attn_worker(void *arg, int ith, int nth)
{
    pl_cpu_fwd *f = arg;
    const pl_model *m = f->m;
    const pl_fwd_batch *b = f->b;
    int group = m->n_head / m->n_head_kv, hd = m->head_dim;
    float *scr = f->attn_scr + (size_t)ith * group * f->o.max_ctx;
    pl_attn_args a = {.block_size = f->o.block_size,
                      .block_stride = (size_t)f->o.block_size * f->kv_dim,
                      .row_stride = (size_t)f->kv_dim, .head_dim = hd,
                      .scale = 1.0f / sqrtf((float)hd)};
    int n_items = b->n_rows * m->n_head_kv;
    for (int it = pl_pool_take(f->pool); it < n_items; it = pl_pool_take(f->pool)) {
        int r = it / m->n_head_kv, kh = it % m->n_head_kv;
        a.k_base = kv_at(f, f->k_cache, f->layer, 0, 0) + (size_t)kh * hd;
        a.v_base = kv_at(f, f->v_cache, f->layer, 0, 0) + (size_t)kh * hd;
        a.block_table = row_blocks(b, r);
        size_t off = (size_t)r * f->q_dim + (size_t)kh * group * hd;
        pl_op_attention(&a, f->q + off, group, b->positions[r] + 1, f->att + off, scr);
    }
}

static void add_rows(float *x, const float *d, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] += d[i];
}

static void layer_forward(pl_cpu_fwd *f, int l)
{
    const pl_model *m = f->m;
    const pl_layer *y = &m->layers[l];
    int n = f->b->n_rows, e = m->n_embd;
    f->layer = l;
    for (int r = 0; r < n; r++)
        pl_op_rmsnorm(f->xn + (size_t)r * e, f->x + (size_t)r * e, y->attn_norm, e, m->rms_eps);
    matmul(f, f->xn, n, 3, &y->wq, f->q, &y->wk, f->k, &y->wv, f->v);
    qkv_finish(f, y);
    pl_pool_run(f->pool, attn_worker, f);
    matmul(f, f->att, n, 1, &y->wo, f->tmp, NULL, NULL, NULL, NULL);
    add_rows(f->x, f->tmp, (size_t)n * e);
    for (int r = 0; r < n; r++)
        pl_op_rmsnorm(f->xn + (size_t)r * e, f->x + (size_t)r * e, y->ffn_norm, e, m->rms_eps);
    matmul(f, f->xn, n, 2, &y->w_gate, f->gate, &y->w_up, f->up, NULL, NULL);
    pl_op_swiglu(f->gate, f->up, n * m->n_ff);
    matmul(f, f->gate, n, 1, &y->w_down, f->tmp, NULL, NULL, NULL, NULL);
    add_rows(f->x, f->tmp, (size_t)n * e);
}

static int check_batch(const pl_cpu_fwd *f, const pl_fwd_batch *b)
{
    if (b->n_rows < 1 || b->n_rows > f->o.max_rows || b->n_out < 0 || b->n_out > f->o.max_out)
        return -1;
    for (int r = 0; r < b->n_rows; r++) {
        int pos = b->positions[r];
        if (b->tokens[r] < 0 || b->tokens[r] >= f->m->n_vocab || pos < 0 ||
            pos >= f->o.max_ctx || pos / f->o.block_size >= b->max_blocks_per_seq)
            return -1;
        int32_t blk = row_blocks(b, r)[pos / f->o.block_size];
        if (blk < 0 || blk >= f->o.num_blocks)
            return -1;
    }
    for (int i = 0; i < b->n_out; i++)
        if (b->out_rows[i] < 0 || b->out_rows[i] >= b->n_rows)
            return -1;
    return 0;
}

static void embed(pl_cpu_fwd *f)
{
    const pl_weight *te = &f->m->tok_embd;
    for (int r = 0; r < f->b->n_rows; r++) {
        float *dst = f->x + (size_t)r * te->cols;
        int32_t id = f->b->tokens[r];
        if (te->f32)
            memcpy(dst, te->f32 + (size_t)id * te->cols, sizeof(float) * te->cols);
        else
            pl_op_dequant_row(te->type, (const uint8_t *)te->q + (size_t)id * te->row_bytes,
                              dst, te->cols);
    }
}

int pl_cpu_forward(pl_cpu_fwd *f, const pl_fwd_batch *b, float *logits)
{
    const pl_model *m = f->m;
    f->last_rows = 0;
    if (check_batch(f, b) != 0)
        return -1;
    f->b = b;
    embed(f);
    for (int l = 0; l < m->n_layer; l++)
        layer_forward(f, l);
    for (int i = 0; i < b->n_out; i++)
        pl_op_rmsnorm(f->xo + (size_t)i * m->n_embd, f->x + (size_t)b->out_rows[i] * m->n_embd,
                      m->output_norm, m->n_embd, m->rms_eps);
    if (b->n_out > 0)
        matmul(f, f->xo, b->n_out, 1, &m->output, logits, NULL, NULL, NULL, NULL);
    f->b = NULL;
    f->last_rows = b->n_rows;
    return 0;
}

int pl_cpu_fwd_row_logits(pl_cpu_fwd *f, const int32_t *rows, int n, float *logits)
{
    const pl_model *m = f->m;
    if (n < 1 || n > f->o.max_out)
        return -1;
    for (int i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= f->last_rows)
            return -1;
    for (int i = 0; i < n; i++)
        pl_op_rmsnorm(f->xo + (size_t)i * m->n_embd, f->x + (size_t)rows[i] * m->n_embd,
                      m->output_norm, m->n_embd, m->rms_eps);
    matmul(f, f->xo, n, 1, &m->output, logits, NULL, NULL, NULL, NULL);
    return 0;
}

void pl_cpu_fwd_copy_block(pl_cpu_fwd *f, int32_t src, int32_t dst)
{
    if (src < 0 || dst < 0 || src >= f->o.num_blocks || dst >= f->o.num_blocks || src == dst)
        return;
    size_t n = sizeof(float) * (size_t)f->o.block_size * f->kv_dim;
    for (int l = 0; l < f->m->n_layer; l++) {
        memcpy(kv_at(f, f->k_cache, l, dst, 0), kv_at(f, f->k_cache, l, src, 0), n);
        memcpy(kv_at(f, f->v_cache, l, dst, 0), kv_at(f, f->v_cache, l, src, 0), n);
    }
}

void pl_cpu_fwd_set_gemm_min_rows(pl_cpu_fwd *f, int rows) { f->o.gemm_min_rows = rows; }

static void *alloc_f(size_t n, int *bad)
{
    void *p = calloc(n ? n : 1, sizeof(float));
    if (!p)
        *bad = 1;
    return p;
}

pl_cpu_fwd *pl_cpu_fwd_new(const pl_model *m, pl_pool *pool, const pl_fwd_opts *o,
                           char *err, size_t errlen)
{
    pl_cpu_fwd *f = calloc(1, sizeof(*f));
    int bad = !f;
    if (bad)
        goto fail;
    f->m = m;
    f->pool = pool;
    f->o = *o;
    f->q_dim = m->n_head * m->head_dim;
    f->kv_dim = m->n_head_kv * m->head_dim;
    f->max_in = m->n_ff > f->q_dim ? m->n_ff : f->q_dim;
    f->max_in = f->max_in > m->n_embd ? f->max_in : m->n_embd;
    size_t R = (size_t)o->max_rows;
    size_t kv = (size_t)m->n_layer * o->num_blocks * o->block_size * f->kv_dim;
    f->k_cache = alloc_f(kv, &bad);
    f->v_cache = alloc_f(kv, &bad);
    f->x = alloc_f(R * m->n_embd, &bad);
    f->xn = alloc_f(R * m->n_embd, &bad);
    f->tmp = alloc_f(R * m->n_embd, &bad);
    f->q = alloc_f(R * f->q_dim, &bad);
    f->att = alloc_f(R * f->q_dim, &bad);
    f->k = alloc_f(R * f->kv_dim, &bad);
    f->v = alloc_f(R * f->kv_dim, &bad);
    f->gate = alloc_f(R * m->n_ff, &bad);
    f->up = alloc_f(R * m->n_ff, &bad);
    f->xo = alloc_f((size_t)o->max_out * m->n_embd + 1, &bad);
    f->attn_scr = alloc_f((size_t)pl_pool_size(pool) * (m->n_head / m->n_head_kv) * o->max_ctx,
                          &bad);
    f->xq = calloc(R * (f->max_in / PL_QK) + 1, sizeof(pl_q8_act));
    if (bad || !f->xq)
        goto fail;
    if (m->n_embd % PL_QK || m->n_ff % PL_QK || f->q_dim % PL_QK) {
        snprintf(err, errlen, "model widths must be multiples of %d", PL_QK);
        pl_cpu_fwd_free(f);
        return NULL;
    }
    return f;
fail:
    snprintf(err, errlen, "out of memory for the CPU forward buffers / KV pool");
    pl_cpu_fwd_free(f);
    return NULL;
}

void pl_cpu_fwd_free(pl_cpu_fwd *f)
{
    if (!f)
        return;
    float *bufs[] = {f->k_cache, f->v_cache, f->x, f->xn, f->tmp, f->q, f->att, f->k,
                     f->v, f->gate, f->up, f->xo, f->attn_scr};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        free(bufs[i]);
    free(f->xq);
    free(f);
}
