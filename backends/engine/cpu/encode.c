/* encode.c - an encoder's forward pass (encode.h), as the bert family's
 * formula (families/bert.c) and transformers' BertModel compute it:
 *
 *   x = LN(tok[id] + pos[p] + type[0])
 *   per layer: q, k, v = x W^T + b;  a = softmax(q_h k_h^T / sqrt(hd)) v_h
 *              per text and head;  x = LN(x + a Wo^T + bo);
 *              x = LN(x + gelu(x Wu^T + bu) Wd^T + bd)
 *
 * The texts' rows are stacked (no padding): a matrix product is one GEMM
 * over all of them, split by blocks of rows over the pool's threads (by
 * output features when the rows are few; each thread's BLAS call
 * single-threaded, as the CPU runner sets OpenBLAS), bias and GELU applied
 * to each block as it comes out. Attention runs per (text, head), taken
 * dynamically. GELU's erf and softmax's exp are branch-free plain C
 * (exp_, gelu_) so that their loops vectorise. */
#include "backends/engine/cpu/encode.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#define SPLIT 64                 /* output features per GEMM work item (few rows) */
#define ROWS 64                  /* fewest rows of a row-split GEMM work item */

/* The elementwise loops compiled for wider vectors too, chosen at load
 * (ifunc): the same operations in the same order on every clone (ISO C
 * contracts no FMA), so the same bits whatever the CPU. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define WIDE __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define WIDE
#endif

/* Float bits as an int and back (memcpy: no aliasing questions). */
static inline int32_t bits_(float f)
{
    int32_t i;
    memcpy(&i, &f, sizeof i);
    return i;
}

static inline float float_(int32_t i)
{
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}

/* e^x for x <= 0 (Cephes' expf: its range reduction and polynomial, within
 * 2 ulp; e^-87 and below as e^-87), in branch-free plain C with integer
 * selects only, so that loops over it vectorise (float compares do not
 * under ISO C's trapping math) and every ISA gets the same bits. */
static inline float exp_(float x)
{
    int32_t a = bits_(x) & 0x7fffffff, lim = 0x42ae0000;   /* |x|, 87.0f */
    x = -float_(a < lim ? a : lim);
    float n = x * 1.44269504088896341f - 12582912.0f;   /* round to nearest */
    n += 12582912.0f;
    float r = x - n * 0.693359375f;
    r -= n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    return p * float_(((int32_t)n + 127) * (1 << 23));
}

/* GELU's erf form, 0.5 v (1 + erf(v / sqrt 2)), erf by Abramowitz and
 * Stegun 7.1.26 (absolute error under 1.5e-7), its sign by bits. */
static inline float gelu_(float v)
{
    float x = v * (float)M_SQRT1_2;
    int32_t xb = bits_(x);
    float a = float_(xb & 0x7fffffff);
    float t = 1.0f / (1.0f + 0.3275911f * a);
    float p = 1.061405429f;
    p = p * t - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    float e = 1.0f - p * t * exp_(-a * a);
    return 0.5f * v * (1.0f + float_(bits_(e) ^ (xb & (int32_t)0x80000000)));
}

/* The largest of n finite floats, as ordered ints (an int max vectorises). */
static float max_(const float *x, int n)
{
    int32_t m = INT32_MIN;
    for (int i = 0; i < n; i++) {
        int32_t b = bits_(x[i]), k = b ^ ((b >> 31) & 0x7fffffff);
        m = k > m ? k : m;
    }
    return float_(m ^ ((m >> 31) & 0x7fffffff));
}

typedef struct gemm_job {
    pl_pool *pool;
    const float *x;              /* (rows, k) */
    const float *w, *b;          /* (o, k), (o) */
    float *y;                    /* (rows, o) */
    int rows, k, o;
    int chunk;                   /* rows per work item; 0: split by features */
    bool gelu;
} gemm_job;

/* y[r0..r1) columns [o0, o1): + bias, then GELU when asked. */
WIDE static void bias_(const gemm_job *j, int r0, int r1, int o0, int o1)
{
    for (int r = r0; r < r1; r++) {
        float *y = j->y + (size_t)r * j->o;
        if (j->gelu)
            for (int c = o0; c < o1; c++)
                y[c] = gelu_(y[c] + j->b[c]);
        else
            for (int c = o0; c < o1; c++)
                y[c] += j->b[c];
    }
}

/* Work items: blocks of rows with every feature (each thread's BLAS call
 * packs its own rows once and the weights once), or with few rows blocks
 * of features (every call then packs all rows again, cheap when few). */
static void gemm_worker(void *arg, int ith, int nth)
{
    gemm_job *j = arg;
    (void)nth;
    int items = j->chunk ? (j->rows + j->chunk - 1) / j->chunk : (j->o + SPLIT - 1) / SPLIT;
    for (int it; (it = j->pool ? pl_pool_take(j->pool) : ith++) < items;) {
        if (j->chunk) {
            int r0 = it * j->chunk, r1 = r0 + j->chunk < j->rows ? r0 + j->chunk : j->rows;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, j->o, j->k, 1.0f,
                        j->x + (size_t)r0 * j->k, j->k, j->w, j->k, 0.0f,
                        j->y + (size_t)r0 * j->o, j->o);
            bias_(j, r0, r1, 0, j->o);
        } else {
            int o0 = it * SPLIT, o1 = o0 + SPLIT < j->o ? o0 + SPLIT : j->o;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->rows, o1 - o0, j->k, 1.0f,
                        j->x, j->k, j->w + (size_t)o0 * j->k, j->k, 0.0f, j->y + o0, j->o);
            bias_(j, 0, j->rows, o0, o1);
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
    int threads = pool ? pl_pool_size(pool) : 1, chunk = 0;
    if (rows >= 2 * ROWS * threads) {  /* one item a thread: each packs the weights */
        chunk = (rows + threads - 1) / threads;
        chunk = chunk < ROWS ? ROWS : chunk;
    }
    gemm_job j = {.pool = pool, .x = x, .w = w, .b = b, .y = y, .rows = rows, .k = k, .o = o,
                  .chunk = chunk, .gelu = gelu};
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

/* Each of the L rows of s (L, L) in place: its softmax. */
WIDE static void softmax_rows_(float *s, int L)
{
    for (int r = 0; r < L; r++) {
        float *row = s + (size_t)r * L, mx = max_(row, L), sum = 0;
        for (int c = 0; c < L; c++)
            row[c] = exp_(row[c] - mx);
        for (int c = 0; c < L; c++)
            sum += row[c];
        float inv = 1.0f / sum;
        for (int c = 0; c < L; c++)
            row[c] *= inv;
    }
}

/* Text t, head h: out_h = softmax(q_h k_h^T * scale) v_h. */
static void attn_one_(const attn_job *j, int t, int h, float *s)
{
    int d = j->m->n_embd, hd = j->m->head_dim, L = j->lens[t];
    size_t off = (size_t)j->start[t] * d + (size_t)h * hd;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, hd,
                1.0f / sqrtf((float)hd), j->q + off, d, j->k + off, d, 0.0f, s, L);
    softmax_rows_(s, L);
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

typedef struct norm_job {
    pl_pool *pool;
    float *x;
    const float *add, *w, *b;
    int rows, d;
    float eps;
} norm_job;

#define NORM_ROWS 64             /* rows per LayerNorm work item */

static void norm_worker(void *arg, int ith, int nth)
{
    norm_job *j = arg;
    (void)nth;
    int items = (j->rows + NORM_ROWS - 1) / NORM_ROWS;
    for (int it; (it = j->pool ? pl_pool_take(j->pool) : ith++) < items;) {
        int r0 = it * NORM_ROWS, r1 = r0 + NORM_ROWS < j->rows ? r0 + NORM_ROWS : j->rows;
        add_norm_(j->x + (size_t)r0 * j->d, j->add ? j->add + (size_t)r0 * j->d : NULL,
                  r1 - r0, j->d, j->w, j->b, j->eps);
    }
}

/* add_norm_ over the pool's threads, by blocks of rows. */
static void add_norm_par_(pl_pool *pool, float *x, const float *add, int rows, int d,
                          const float *w, const float *b, float eps)
{
    norm_job j = {.pool = pool, .x = x, .add = add, .w = w, .b = b, .rows = rows, .d = d,
                  .eps = eps};
    run_(pool, norm_worker, &j);
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
    add_norm_par_(pool, b->x, b->q, rows, d, y->attn_norm_w, y->attn_norm_b, m->eps);
    linear_(pool, b->x, rows, d, y->w_up, y->b_up, ff, b->h, true);
    linear_(pool, b->h, rows, ff, y->w_down, y->b_down, d, b->q, false);
    add_norm_par_(pool, b->x, b->q, rows, d, y->out_norm_w, y->out_norm_b, m->eps);
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
    add_norm_par_(pool, b.x, NULL, rows, d, m->embd_norm_w, m->embd_norm_b, m->eps);
    for (int l = 0; l < m->n_layer; l++)
        layer_(m, pool, &b, rows, lens, n, max_len, &m->layers[l]);
    for (int t = 0; t < n; t++)
        pool_(b.x + (size_t)b.start[t] * d, lens[t], d, pooling, normalize,
              out + (size_t)t * d);
    bufs_free_(&b);
    return 0;
}
