/* hf_weights.c - decoding, scaling, permuting and quantising Hugging Face
 * tensors (hf_weights.h). Rows go through a float buffer: decoded from
 * the source dtype, times their FP8 scales, plus the shift, checked
 * finite, then written as the target type.
 */
#include "backends/engine/model/hf_weights.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/engine/model/quantize.h"
#include "src/base/half.h"
#include "src/base/le.h"

#define ROW_CHUNK_ELEMS (1 << 18)   /* rows per job: about this many elements */

/* e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities,
 * S.1111.111 is NaN. */
static float e4m3_(uint8_t b)
{
    int e = (b >> 3) & 15, m = b & 7;
    float v = e == 0 ? ldexpf((float)m / 8.0f, -6) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
    if (e == 15 && m == 7)
        v = NAN;
    return b & 0x80 ? -v : v;
}

/* e5m2 is the high byte of an IEEE half. */
static float e5m2_(uint8_t b) { return pl_fp16_to_fp32((uint16_t)(b << 8)); }

bool pl_hf_dtype_supported(pl_st_dtype t)
{
    return t == PL_ST_F32 || t == PL_ST_F16 || t == PL_ST_BF16 || t == PL_ST_F64 ||
           t == PL_ST_F8_E4M3 || t == PL_ST_F8_E5M2;
}

static float elem_(const pl_st_tensor *t, uint64_t i)
{
    const uint8_t *p = t->data + i * pl_st_dtype_size(t->dtype);
    switch (t->dtype) {
    case PL_ST_F32: {
        uint32_t u = pl_le32(p);
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    case PL_ST_F64: {
        uint64_t u = pl_le64(p);
        double d;
        memcpy(&d, &u, 8);
        return (float)d;
    }
    case PL_ST_F16: return pl_fp16_to_fp32(pl_le16(p));
    case PL_ST_BF16: return pl_bf16_to_fp32(pl_le16(p));
    case PL_ST_F8_E4M3: return e4m3_(p[0]);
    case PL_ST_F8_E5M2: return e5m2_(p[0]);
    default: return NAN;
    }
}

/* The element of c->src at (source row sr, column j). */
static uint64_t at_(const pl_hf_conv *c, int sr, int j)
{
    uint64_t rs = c->row_step ? c->row_step : (uint64_t)c->cols;
    return c->offset + (uint64_t)sr * rs + (uint64_t)j * (c->col_step ? c->col_step : 1);
}

/* Whether c's rows are src's rows, in order and whole. */
static bool plain_(const pl_hf_conv *c)
{
    return c->offset == 0 && (c->row_step == 0 || c->row_step == (uint64_t)c->cols) &&
           c->col_step <= 1;
}

/* Hugging Face's row for row r of the permuted (interleaved) layout. */
static int src_row_(int r, int rows, int heads)
{
    if (heads <= 0)
        return r;
    int hd = rows / heads, h = r / hd, i = (r % hd) / 2, j = r % 2;
    return h * hd + j * (hd / 2) + i;
}

/* The source index of value-head-reordered index i (pl_hf_conv's vh_*):
 * tiled [j][k][e] from grouped [k][j][e]. */
static int vh_src_(const pl_hf_conv *c, int i)
{
    if (c->vh_n_k <= 0 || i < c->vh_start)
        return i;
    int d = i - c->vh_start, hw = c->vh_width, head = d / hw;
    int j = head / c->vh_n_k, k = head % c->vh_n_k;
    return c->vh_start + (k * c->vh_per_k + j) * hw + d % hw;
}

/* The source row of converted row r. */
static int conv_src_row_(const pl_hf_conv *c, int r)
{
    int sr = src_row_(r, c->rows, c->rows > 1 ? c->permute_heads : 0);
    return c->vh_cols ? sr : vh_src_(c, sr);
}

typedef enum scale_kind { SCALE_NONE, SCALE_TENSOR, SCALE_CHANNEL, SCALE_BLOCK } scale_kind;

static scale_kind scale_kind_(const pl_hf_conv *c)
{
    const pl_st_tensor *s = c->scale;
    if (!s)
        return SCALE_NONE;
    if (s->nelem == 1)
        return SCALE_TENSOR;
    if (s->nelem == (uint64_t)c->rows && (s->n_dims == 1 || (s->n_dims == 2 && s->shape[1] == 1)))
        return SCALE_CHANNEL;
    if (c->block_rows > 0 && c->block_cols > 0 && s->n_dims == 2 &&
        s->shape[0] == (uint64_t)((c->rows + c->block_rows - 1) / c->block_rows) &&
        s->shape[1] == (uint64_t)((c->cols + c->block_cols - 1) / c->block_cols))
        return SCALE_BLOCK;
    return (scale_kind)-1;
}

int pl_hf_conv_check(const pl_hf_conv *c, char *err, size_t errlen)
{
    bool fp8 = c->src->dtype == PL_ST_F8_E4M3 || c->src->dtype == PL_ST_F8_E5M2;
    if (c->rows < 1 || c->cols < 1 || at_(c, c->rows - 1, c->cols - 1) >= c->src->nelem)
        return snprintf(err, errlen, "%s: tensor '%s': a %dx%d matrix at element %llu does "
                        "not fit its %llu elements", c->src->file, c->src->name, c->rows,
                        c->cols, (unsigned long long)c->offset,
                        (unsigned long long)c->src->nelem), -1;
    int extent = c->vh_cols ? c->cols : c->rows;
    if (c->vh_n_k > 0 && (c->vh_per_k < 1 || c->vh_width < 1 || c->vh_start < 0 ||
                          c->vh_start + c->vh_n_k * c->vh_per_k * c->vh_width != extent))
        return snprintf(err, errlen, "%s: tensor '%s': %d x %d value heads of %d from %d do "
                        "not cover its %d %s", c->src->file, c->src->name, c->vh_n_k,
                        c->vh_per_k, c->vh_width, c->vh_start, extent,
                        c->vh_cols ? "columns" : "rows"), -1;
    if (!pl_hf_dtype_supported(c->src->dtype))
        return snprintf(err, errlen, "%s: tensor '%s': dtype %s is not a weight type parley "
                        "reads (F32, F16, BF16, F8_E4M3, F8_E5M2)", c->src->file,
                        c->src->name, pl_st_dtype_name(c->src->dtype)), -1;
    if (fp8 && !c->scale)
        return snprintf(err, errlen, "%s: tensor '%s': FP8 weights without a scale tensor "
                        "(%s_scale)", c->src->file, c->src->name, c->src->name), -1;
    if (!c->scale)
        return 0;
    const pl_st_tensor *s = c->scale;
    if (!fp8)
        return snprintf(err, errlen, "%s: tensor '%s': a scale for %s weights (scales are for "
                        "FP8)", s->file, s->name, pl_st_dtype_name(c->src->dtype)), -1;
    if (!pl_hf_dtype_supported(s->dtype) || (int)scale_kind_(c) < 0)
        return snprintf(err, errlen, "%s: tensor '%s': a %s scale of %llu elements fits "
                        "neither per tensor, per channel (%d) nor per block of %dx%d",
                        s->file, s->name, pl_st_dtype_name(s->dtype),
                        (unsigned long long)s->nelem, c->rows, c->block_rows,
                        c->block_cols), -1;
    return 0;
}

float pl_hf_conv_value(const pl_hf_conv *c, int r, int j)
{
    int sr = conv_src_row_(c, r);
    if (c->rows == 1 && c->permute_heads > 0)
        j = src_row_(j, c->cols, c->permute_heads);
    if (c->vh_cols)
        j = vh_src_(c, j);
    float v = elem_(c->src, at_(c, sr, j));
    switch (scale_kind_(c)) {
    case SCALE_TENSOR: v *= elem_(c->scale, 0); break;
    case SCALE_CHANNEL: v *= elem_(c->scale, (uint64_t)sr); break;
    case SCALE_BLOCK: {
        uint64_t nbc = c->scale->shape[1];
        v *= elem_(c->scale, (uint64_t)(sr / c->block_rows) * nbc + (uint64_t)(j / c->block_cols));
        break;
    }
    default: break;
    }
    return c->neg_exp ? -expf(v) : v + c->shift;
}

size_t pl_hf_conv_bytes(const pl_hf_conv *c)
{
    size_t be = 1, bb = 4;
    pl_ggml_type_block(c->type, &be, &bb);
    return (size_t)c->rows * ((size_t)c->cols / be * bb);
}

/* Source row sr decoded into buf, one loop per dtype (the hot path). */
static void decode_row_(const pl_hf_conv *c, int sr, float *buf)
{
    const pl_st_tensor *t = c->src;
    int cols = c->cols;
    const uint8_t *p = t->data + at_(c, sr, 0) * pl_st_dtype_size(t->dtype);
    if (c->col_step > 1) {       /* a strided view (experts stored transposed) */
        for (int j = 0; j < cols; j++)
            buf[j] = elem_(t, at_(c, sr, j));
        return;
    }
    switch (t->dtype) {
    case PL_ST_BF16:
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        for (int j = 0; j < cols; j++) {   /* a shift the compiler vectorises */
            uint16_t h;
            uint32_t u;
            memcpy(&h, p + 2 * (size_t)j, 2);
            u = (uint32_t)h << 16;
            memcpy(&buf[j], &u, 4);
        }
#else
        for (int j = 0; j < cols; j++)
            buf[j] = pl_bf16_to_fp32(pl_le16(p + 2 * (size_t)j));
#endif
        break;
    case PL_ST_F16:
        for (int j = 0; j < cols; j++)
            buf[j] = pl_fp16_to_fp32(pl_le16(p + 2 * (size_t)j));
        break;
    case PL_ST_F32:
        memcpy(buf, p, sizeof(float) * (size_t)cols);
        break;
    default:
        for (int j = 0; j < cols; j++)
            buf[j] = elem_(t, at_(c, sr, j));
    }
}

/* Row r of the converted tensor, as floats. */
static void value_row_(const pl_hf_conv *c, int r, float *buf)
{
    /* a permuted bias, columns in another order, -exp: element by element */
    if ((c->rows == 1 && c->permute_heads > 0) || c->vh_cols || c->neg_exp) {
        for (int j = 0; j < c->cols; j++)
            buf[j] = pl_hf_conv_value(c, r, j);
        return;
    }
    int sr = conv_src_row_(c, r);
    decode_row_(c, sr, buf);
    scale_kind k = scale_kind_(c);
    if (k == SCALE_TENSOR || k == SCALE_CHANNEL) {
        float s = elem_(c->scale, k == SCALE_TENSOR ? 0 : (uint64_t)sr);
        for (int j = 0; j < c->cols; j++)
            buf[j] *= s;
    } else if (k == SCALE_BLOCK) {
        uint64_t nbc = c->scale->shape[1], row = (uint64_t)(sr / c->block_rows) * nbc;
        for (int j = 0; j < c->cols; j++)
            buf[j] *= elem_(c->scale, row + (uint64_t)(j / c->block_cols));
    }
    for (int j = 0; c->shift != 0.0f && j < c->cols; j++)
        buf[j] += c->shift;
}

/* Rows [r0, r1) of c into its destination; buf holds cols floats. */
static int convert_rows_(const pl_hf_conv *c, int r0, int r1, float *buf, char *err,
                         size_t errlen)
{
    size_t row_bytes = pl_hf_conv_bytes(c) / (size_t)c->rows;
    for (int r = r0; r < r1; r++) {
        value_row_(c, r, buf);
        float acc = 0.0f;
        for (int j = 0; j < c->cols; j++)
            acc += buf[j] * 0.0f;         /* NaN or inf anywhere makes it NaN */
        for (int j = 0; acc != 0.0f && j < c->cols; j++)
            if (!isfinite(buf[j]))
                return snprintf(err, errlen, "%s: tensor '%s': element %d of row %d is not "
                                "a finite number", c->src->file, c->src->name, j,
                                conv_src_row_(c, r)), -1;
        if (pl_quantize_row(c->type, buf, (uint8_t *)c->dst + (size_t)r * row_bytes,
                            c->cols) < 0)
            return snprintf(err, errlen, "%s: tensor '%s': cannot write %d columns as %s",
                            c->src->file, c->src->name, c->cols,
                            pl_ggml_type_name(c->type)), -1;
    }
    /* Rows read in order are read once: their pages can go now, which keeps
     * a large checkpoint's peak memory near its converted size. */
    if (!c->permute_heads && !c->vh_n_k && c->rows > 1 && plain_(c)) {
        size_t sb = (size_t)c->cols * pl_st_dtype_size(c->src->dtype);
        pl_safetensors_drop(c->src->data + (size_t)r0 * sb, (uint64_t)(r1 - r0) * sb);
    }
    return 0;
}

typedef struct job {
    int conv, r0, r1;
} job;

typedef struct pool {
    pl_hf_conv *c;
    job *jobs;
    int n_jobs, max_cols;
    atomic_int next;
    atomic_int failed;
    pthread_mutex_t mu;
    char *err;
    size_t errlen;
} pool;

static void *worker_(void *arg)
{
    pool *p = arg;
    char e[512];
    float *buf = malloc(sizeof(float) * (size_t)p->max_cols);
    if (!buf) {
        if (atomic_exchange(&p->failed, 1) == 0)
            snprintf(p->err, p->errlen, "out of memory converting weights");
        return NULL;
    }
    for (;;) {
        int i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n_jobs || atomic_load(&p->failed))
            break;
        const job *j = &p->jobs[i];
        if (convert_rows_(&p->c[j->conv], j->r0, j->r1, buf, e, sizeof e) < 0) {
            pthread_mutex_lock(&p->mu);
            if (!atomic_exchange(&p->failed, 1))
                snprintf(p->err, p->errlen, "%s", e);
            pthread_mutex_unlock(&p->mu);
            break;
        }
    }
    free(buf);
    return NULL;
}

static int make_jobs_(pool *p, int n)
{
    int total = 0;
    p->max_cols = 1;
    for (int i = 0; i < n; i++) {
        int step = p->c[i].cols >= ROW_CHUNK_ELEMS ? 1 : ROW_CHUNK_ELEMS / p->c[i].cols;
        total += (p->c[i].rows + step - 1) / step;
        p->max_cols = p->c[i].cols > p->max_cols ? p->c[i].cols : p->max_cols;
    }
    p->jobs = malloc(sizeof *p->jobs * (size_t)(total ? total : 1));
    if (!p->jobs)
        return -1;
    for (int i = 0; i < n; i++) {
        int step = p->c[i].cols >= ROW_CHUNK_ELEMS ? 1 : ROW_CHUNK_ELEMS / p->c[i].cols;
        for (int r = 0; r < p->c[i].rows; r += step)
            p->jobs[p->n_jobs++] = (job){i, r, r + step < p->c[i].rows ? r + step : p->c[i].rows};
    }
    return 0;
}

int pl_hf_convert_all(pl_hf_conv *c, int n, int threads, char *err, size_t errlen)
{
    pool p = {.c = c, .err = err, .errlen = errlen};
    pthread_t th[64];
    int nt = threads > 0 ? threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    nt = nt < 1 ? 1 : nt > 64 ? 64 : nt;
    if (make_jobs_(&p, n) < 0)
        return snprintf(err, errlen, "out of memory converting weights"), -1;
    pthread_mutex_init(&p.mu, NULL);
    int started = 0;
    for (; started < nt - 1; started++)
        if (pthread_create(&th[started], NULL, worker_, &p) != 0)
            break;
    worker_(&p);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&p.mu);
    free(p.jobs);
    return atomic_load(&p.failed) ? -1 : 0;
}
