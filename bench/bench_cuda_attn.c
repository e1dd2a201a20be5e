/* bench_cuda_attn.c - each attention kernel alone on random K/V: decode
 * (one block per row, split-KV with a warp per key, with 16 lanes per key,
 * on tensor cores) at 1/64/256 rows x contexts 544 and 4,096, and prefill
 * (tiled, tensor cores) of 256 x 512 and 16 x 4,096 rows, at the 8B shape
 * (32 query / 8 KV heads of 128) and the 1B shape (32 / 8 of 64), with a
 * bf16 and an fp8 cache. Decode rows rotate over enough copies of their
 * K/V that the pool is far larger than L2 (>= 512 MiB read in turn); pages
 * are scattered. Each kernel is timed with events (median of REPS
 * launches after WARM) and checked against the row kernel (decode) or
 * the tiled kernel (prefill) on the same inputs. Prints one JSON line per
 * measurement (GB/s of K/V read, TFLOP/s of QK^T and PV) and a table last.
 *
 * usage: bench_cuda_attn [--shape 8b|1b|all] [--dtype bf16|fp8|all]
 *                        [--only decode|prefill] [--reps N]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/cuda/attn_decode.cuh"
#include "backends/engine/cuda/attn_plan.h"
#include "backends/engine/cuda/attn_prefill.cuh"
#include "src/base/fp8.h"

#define WARM 3
#define BS 16
#define ROTATE_BYTES (512ull << 20)

typedef struct shape {
    const char *name;
    int n_head, n_kv, hd;
} shape;

typedef struct bench {
    int reps;
    int n_sm;
    char table[16384];
    size_t tlen;
    int failures;
} bench;

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
        fprintf(stderr, "bench_cuda_attn: %s:%d: %s\n", __FILE__, __LINE__, \
                cudaGetErrorString(e_)); exit(1); } } while (0)
#define OKC(call) do { if ((call) != 0) { \
        fprintf(stderr, "bench_cuda_attn: %s:%d: %s\n", __FILE__, __LINE__, \
                pl_cuda_last_error()); exit(1); } } while (0)

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float uni(void)  /* [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

static void *dalloc(size_t bytes)
{
    void *p = NULL;
    CK(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}

/* bytes of random cache elements (never NaN), tiled from a 32 MiB host chunk. */
static void fill_cache(void *d, size_t bytes, pl_kv_dtype dt)
{
    size_t chunk = 32u << 20;
    unsigned char *h = malloc(chunk);
    for (size_t i = 0; i < chunk; i += pl_kv_elem_bytes(dt)) {
        if (dt == PL_KV_FP8) {
            h[i] = pl_fp32_to_e4m3(uni() * 4.0f);
        } else {
            uint16_t b = pl_fp32_to_bf16(uni());
            memcpy(h + i, &b, 2);
        }
    }
    CK(cudaMemcpy(d, h, bytes < chunk ? bytes : chunk, cudaMemcpyHostToDevice));
    for (size_t off = chunk; off < bytes; off += chunk)
        CK(cudaMemcpy((unsigned char *)d + off, d, bytes - off < chunk ? bytes - off : chunk,
                      cudaMemcpyDeviceToDevice));
    free(h);
}

/* n random floats in [-1, 1), tiled from a 32 MiB host chunk (q rows
 * repeat past it: harmless for timing, and every kernel reads the same). */
static float *rand_dev_f32(size_t n)
{
    size_t chunk = (8u << 20) < n ? (8u << 20) : n;
    float *h = malloc(chunk * sizeof(float));
    for (size_t i = 0; i < chunk; i++)
        h[i] = uni();
    float *d = dalloc(n * sizeof(float));
    CK(cudaMemcpy(d, h, chunk * sizeof(float), cudaMemcpyHostToDevice));
    for (size_t off = chunk; off < n; off += chunk)
        CK(cudaMemcpy(d + off, d, (n - off < chunk ? n - off : chunk) * sizeof(float),
                      cudaMemcpyDeviceToDevice));
    free(h);
    return d;
}

static int32_t *dev_i32(const int32_t *h, size_t n)
{
    int32_t *d = dalloc(n * sizeof(int32_t));
    CK(cudaMemcpy(d, h, n * sizeof(int32_t), cudaMemcpyHostToDevice));
    return d;
}

/* K and V pools of bytes each, filled, and fp8 scales of 0.25 per head. */
static void alloc_kv(void **k, void **v, float **ks, float **vs, size_t bytes, pl_kv_dtype dt)
{
    float sc[64];
    for (int i = 0; i < 64; i++)
        sc[i] = 0.25f;
    *k = dalloc(bytes);
    *v = dalloc(bytes);
    fill_cache(*k, bytes, dt);
    fill_cache(*v, bytes, dt);
    *ks = dalloc(sizeof sc);
    *vs = dalloc(sizeof sc);
    CK(cudaMemcpy(*ks, sc, sizeof sc, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(*vs, sc, sizeof sc, cudaMemcpyHostToDevice));
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* max |a - b| / max |b| over n bf16 values (NaN: infinite). */
static double nerr_bf16(const pl_bf16 *da, const pl_bf16 *db, size_t n)
{
    uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
    CK(cudaMemcpy(a, da, n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b, db, n * 2, cudaMemcpyDeviceToHost));
    double md = 0, mb = 1e-6;
    for (size_t i = 0; i < n; i++) {
        double x = pl_bf16_to_fp32(a[i]), y = pl_bf16_to_fp32(b[i]), d = fabs(x - y);
        md = isnan(d) ? INFINITY : d > md ? d : md;
        mb = fabs(y) > mb ? fabs(y) : mb;
    }
    free(a);
    free(b);
    return md / mb;
}

/* One decode problem: n_sets copies of rows x ctx keys in one pool. */
typedef struct dec_prob {
    shape sh;
    pl_kv_dtype dt;
    int rows, ctx, mb, n_sets;
    size_t set_blocks;
    pl_kv_geom g;
    void *k, *v;
    float *q, *ks, *vs, *ws;
    int32_t *pos, *row_seq, *bt;   /* bt: n_sets tables of rows x mb */
    pl_bf16 *out, *ref;
} dec_prob;

static void dec_init(dec_prob *p, shape sh, pl_kv_dtype dt, int rows, int ctx)
{
    memset(p, 0, sizeof *p);
    p->sh = sh;
    p->dt = dt;
    p->rows = rows;
    p->ctx = ctx;
    p->mb = (ctx + BS - 1) / BS;
    p->set_blocks = (size_t)rows * p->mb;
    size_t blk_bytes = (size_t)BS * sh.n_kv * sh.hd * pl_kv_elem_bytes(dt);
    size_t set_bytes = 2 * p->set_blocks * blk_bytes;
    p->n_sets = (int)((ROTATE_BYTES + set_bytes - 1) / set_bytes);
    size_t nb = p->set_blocks * p->n_sets;
    p->g = (pl_kv_geom){.n_kv_heads = sh.n_kv, .head_dim = sh.hd, .block_size = BS,
                        .max_blocks_per_seq = p->mb, .n_blocks = (int)nb, .dtype = dt};
    alloc_kv(&p->k, &p->v, &p->ks, &p->vs, nb * blk_bytes, dt);
    int32_t *bt = malloc(sizeof(int32_t) * nb), *pos = malloc(sizeof(int32_t) * rows);
    for (size_t i = 0; i < nb; i++)
        bt[i] = (int32_t)i;
    for (size_t i = nb - 1; i > 0; i--) {   /* scattered pages */
        size_t j = (size_t)(rng = rng * 6364136223846793005ull + 1) % (i + 1);
        int32_t t = bt[i];
        bt[i] = bt[j];
        bt[j] = t;
    }
    for (int r = 0; r < rows; r++)
        pos[r] = ctx - 1;
    int32_t *rs = malloc(sizeof(int32_t) * rows);
    for (int r = 0; r < rows; r++)
        rs[r] = r;
    p->bt = dev_i32(bt, nb);
    p->pos = dev_i32(pos, rows);
    p->row_seq = dev_i32(rs, rows);
    free(bt);
    free(pos);
    free(rs);
    p->q = rand_dev_f32((size_t)rows * (sh.n_head + 2 * sh.n_kv) * sh.hd);
    p->ws = dalloc(pl_cuda_attn_split_ws(rows, sh.n_head, sh.hd, PL_ATTN_MAX_SPLITS)
                   * sizeof(float));
    p->out = dalloc((size_t)rows * sh.n_head * sh.hd * 2);
    p->ref = dalloc((size_t)rows * sh.n_head * sh.hd * 2);
}

static void dec_free(dec_prob *p)
{
    void *d[] = {p->k, p->v, p->q, p->ks, p->vs, p->ws, p->pos, p->row_seq, p->bt, p->out,
                 p->ref};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        cudaFree(d[i]);
}

enum { K_ROWS = -1 };            /* else a pl_split_kind */

/* Launch kind on set `set` into out; ns: splits. */
static void dec_launch(dec_prob *p, int kind, int set, int ns, pl_bf16 *out)
{
    pl_attn_step s = {.q = p->q, .q_stride = (p->sh.n_head + 2 * p->sh.n_kv) * p->sh.hd,
                      .n_heads = p->sh.n_head, .positions = p->pos, .row_seq = p->row_seq,
                      .block_table = p->bt + (size_t)set * p->set_blocks, .out = out};
    pl_kv_layer kv = {.k = p->k, .v = p->v, .k_scale = p->ks, .v_scale = p->vs};
    pl_attn_opts o = pl_attn_plain(1.0f / sqrtf((float)p->sh.hd));
    if (kind == K_ROWS)
        OKC(pl_cuda_attn_decode_rows(&s, p->g, kv, o, NULL, p->rows, 0));
    else
        OKC(pl_cuda_attn_decode_split(&s, p->g, kv, o, NULL, p->rows, ns, p->ws,
                                      (pl_split_kind)kind, 0));
}

static const char *kind_name(int kind)
{
    return kind == K_ROWS ? "rows" : kind == PL_SPLIT_WARP ? "split"
         : kind == PL_SPLIT_HALF ? "split16" : "mma";
}

/* One measured line: JSON to stdout, a row of the closing table. */
static void report(bench *b, const char *what, const shape *sh, pl_kv_dtype dt,
                   const char *kind, int a, int c, int ns, float ms, double bytes,
                   double flops, double err, double tol)
{
    bool ok = err <= tol;
    b->failures += !ok;
    printf("{\"bench\":\"%s\",\"shape\":\"%s\",\"kv\":\"%s\",\"kernel\":\"%s\",\"rows\":%d,"
           "\"ctx\":%d,\"splits\":%d,\"ms\":%.4f,\"kv_gb_s\":%.1f,\"tflop_s\":%.2f,"
           "\"err_vs_ref\":%.3g,\"check\":\"%s\"}\n", what, sh->name,
           dt == PL_KV_FP8 ? "fp8" : "bf16", kind, a, c, ns, ms, bytes / ms / 1e6,
           flops / ms / 1e9, err, ok ? "ok" : "FAIL");
    if (b->tlen < sizeof b->table)
        b->tlen += (size_t)snprintf(b->table + b->tlen, sizeof b->table - b->tlen,
                                    "%-7s %-3s %-4s %-8s %5d %5d %3d %9.4f %8.1f %7.2f %s\n",
                                    what, sh->name, dt == PL_KV_FP8 ? "fp8" : "bf16", kind, a,
                                    c, ns, ms, bytes / ms / 1e6, flops / ms / 1e9,
                                    ok ? "ok" : "FAIL");
}

static float median_ms(float *ms, int n)
{
    qsort(ms, (size_t)n, sizeof *ms, cmp_float);
    return ms[n / 2];
}

static void dec_measure(bench *b, dec_prob *p, int kind)
{
    const shape *sh = &p->sh;
    if (kind != K_ROWS && !pl_cuda_attn_split_supported((pl_split_kind)kind, sh->n_head,
                                                        sh->n_kv, sh->hd))
        return;
    int ns = 1;
    if (kind != K_ROWS) {
        int bpsm = pl_cuda_attn_split_occupancy((pl_split_kind)kind, sh->n_head, sh->n_kv,
                                                sh->hd, p->dt);
        OKC(bpsm < 0 ? -1 : 0);
        ns = pl_cuda_attn_split_plan(p->rows * sh->n_kv, bpsm, b->n_sm, PL_ATTN_MAX_SPLITS);
    }
    dec_launch(p, kind, 0, ns, p->out);
    CK(cudaDeviceSynchronize());
    double err = nerr_bf16(p->out, p->ref, (size_t)p->rows * sh->n_head * sh->hd);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float *ms = malloc(sizeof(float) * b->reps);
    for (int i = 0; i < WARM + b->reps; i++) {
        CK(cudaEventRecord(e0, 0));
        dec_launch(p, kind, (i + 1) % p->n_sets, ns, p->out);
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        if (i >= WARM)
            CK(cudaEventElapsedTime(&ms[i - WARM], e0, e1));
    }
    double eb = (double)pl_kv_elem_bytes(p->dt);
    double bytes = 2.0 * p->rows * p->ctx * sh->n_kv * sh->hd * eb;
    double flops = 4.0 * p->rows * sh->n_head * (double)p->ctx * sh->hd;
    report(b, "decode", sh, p->dt, kind_name(kind), p->rows, p->ctx, ns,
           median_ms(ms, b->reps), bytes, flops, err, 1e-2);
    free(ms);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

static void bench_decode(bench *b, shape sh, pl_kv_dtype dt)
{
    int rows[] = {1, 64, 256}, ctx[] = {544, 4096};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) {
            dec_prob p;
            dec_init(&p, sh, dt, rows[i], ctx[j]);
            dec_launch(&p, K_ROWS, 0, 1, p.ref);
            CK(cudaDeviceSynchronize());
            dec_measure(b, &p, K_ROWS);
            dec_measure(b, &p, PL_SPLIT_WARP);
            dec_measure(b, &p, PL_SPLIT_HALF);
            dec_measure(b, &p, PL_SPLIT_MMA);
            dec_free(&p);
        }
}

/* One prefill problem: n_seqs prompts of len rows (positions 0..len-1). */
typedef struct pf_prob {
    shape sh;
    pl_kv_dtype dt;
    int n_seqs, len, mb;
    pl_kv_geom g;
    void *k, *v;
    float *q, *ks, *vs;
    int32_t *pos, *first, *nrows, *bt;
    pl_bf16 *out, *ref;
} pf_prob;

static void pf_init(pf_prob *p, shape sh, pl_kv_dtype dt, int n_seqs, int len)
{
    memset(p, 0, sizeof *p);
    p->sh = sh;
    p->dt = dt;
    p->n_seqs = n_seqs;
    p->len = len;
    p->mb = (len + BS - 1) / BS;
    size_t nb = (size_t)n_seqs * p->mb, rows = (size_t)n_seqs * len;
    size_t blk_bytes = (size_t)BS * sh.n_kv * sh.hd * pl_kv_elem_bytes(dt);
    p->g = (pl_kv_geom){.n_kv_heads = sh.n_kv, .head_dim = sh.hd, .block_size = BS,
                        .max_blocks_per_seq = p->mb, .n_blocks = (int)nb, .dtype = dt};
    alloc_kv(&p->k, &p->v, &p->ks, &p->vs, nb * blk_bytes, dt);
    int32_t *bt = malloc(sizeof(int32_t) * nb), *pos = malloc(sizeof(int32_t) * rows);
    int32_t *first = malloc(sizeof(int32_t) * n_seqs), *nr = malloc(sizeof(int32_t) * n_seqs);
    for (size_t i = 0; i < nb; i++)
        bt[i] = (int32_t)i;
    for (size_t r = 0; r < rows; r++)
        pos[r] = (int32_t)(r % len);
    for (int s = 0; s < n_seqs; s++) {
        first[s] = s * len;
        nr[s] = len;
    }
    p->bt = dev_i32(bt, nb);
    p->pos = dev_i32(pos, rows);
    p->first = dev_i32(first, n_seqs);
    p->nrows = dev_i32(nr, n_seqs);
    free(bt); free(pos); free(first); free(nr);
    p->q = rand_dev_f32(rows * (sh.n_head + 2 * sh.n_kv) * sh.hd);
    p->out = dalloc(rows * sh.n_head * sh.hd * 2);
    p->ref = dalloc(rows * sh.n_head * sh.hd * 2);
}

static void pf_free(pf_prob *p)
{
    void *d[] = {p->k, p->v, p->q, p->ks, p->vs, p->pos, p->first, p->nrows, p->bt, p->out,
                 p->ref};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        cudaFree(d[i]);
}

static void pf_launch(pf_prob *p, bool mma, pl_bf16 *out)
{
    pl_attn_step s = {.q = p->q, .q_stride = (p->sh.n_head + 2 * p->sh.n_kv) * p->sh.hd,
                      .n_heads = p->sh.n_head, .positions = p->pos, .block_table = p->bt,
                      .out = out};
    pl_kv_layer kv = {.k = p->k, .v = p->v, .k_scale = p->ks, .v_scale = p->vs};
    OKC(pl_cuda_attn_prefill_seqs(&s, p->g, kv, pl_attn_plain(1.0f / sqrtf((float)p->sh.hd)),
                                  NULL, p->first, p->nrows, p->n_seqs, p->len, mma, 0));
}

static void pf_measure(bench *b, pf_prob *p, bool mma)
{
    if (mma && !pl_cuda_attn_prefill_mma_supported(p->sh.hd))
        return;
    pf_launch(p, mma, p->out);
    CK(cudaDeviceSynchronize());
    size_t n = (size_t)p->n_seqs * p->len * p->sh.n_head * p->sh.hd;
    double err = mma ? nerr_bf16(p->out, p->ref, n) : 0.0;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    int reps = b->reps < 5 ? b->reps : 5;
    float ms[5];
    for (int i = 0; i < 1 + reps; i++) {
        CK(cudaEventRecord(e0, 0));
        pf_launch(p, mma, p->out);
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        if (i >= 1)
            CK(cudaEventElapsedTime(&ms[i - 1], e0, e1));
    }
    double keys = (double)p->len * (p->len + 1) / 2.0 * p->n_seqs;  /* causal */
    double flops = 4.0 * keys * p->sh.n_head * p->sh.hd;
    double bytes = 2.0 * p->n_seqs * (double)p->len * p->sh.n_kv * p->sh.hd
                   * (double)pl_kv_elem_bytes(p->dt);
    report(b, "prefill", &p->sh, p->dt, mma ? "mma" : "tiled", p->n_seqs, p->len, 0,
           median_ms(ms, reps), bytes, flops, err, 2e-2);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

static void bench_prefill(bench *b, shape sh, pl_kv_dtype dt)
{
    int seqs[] = {256, 16}, len[] = {512, 4096};
    for (int i = 0; i < 2; i++) {
        pf_prob p;
        pf_init(&p, sh, dt, seqs[i], len[i]);
        pf_launch(&p, false, p.ref);
        CK(cudaDeviceSynchronize());
        pf_measure(b, &p, false);
        pf_measure(b, &p, true);
        pf_free(&p);
    }
}

static void header(bench *b, int argc, char **argv)
{
    struct cudaDeviceProp pr;
    int drv = 0, rt = 0;
    CK(cudaGetDeviceProperties(&pr, 0));
    CK(cudaDriverGetVersion(&drv));
    CK(cudaRuntimeGetVersion(&rt));
    b->n_sm = pr.multiProcessorCount;
    printf("# command:");
    for (int i = 0; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\n# gpu: %s, %d SMs, L2 %.0f MiB, driver %d, runtime %d; K/V pools rotate over "
           ">= %llu MiB; median of %d launches\n", pr.name, pr.multiProcessorCount,
           pr.l2CacheSize / 1048576.0, drv, rt, ROTATE_BYTES >> 20, b->reps);
}

int main(int argc, char **argv)
{
    const char *shape_arg = "all", *dtype_arg = "all", *only = "";
    bench b = {.reps = 20};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--shape") && v) shape_arg = argv[++i];
        else if (!strcmp(a, "--dtype") && v) dtype_arg = argv[++i];
        else if (!strcmp(a, "--only") && v) only = argv[++i];
        else if (!strcmp(a, "--reps") && v) b.reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--shape 8b|1b|all] [--dtype bf16|fp8|all] "
                    "[--only decode|prefill] [--reps N]\n", argv[0]);
            return 2;
        }
    }
    char why[256];
    if (!pl_cuda_available(why, sizeof why) || b.reps < 1) {
        fprintf(stderr, "bench_cuda_attn: %s\n", b.reps < 1 ? "--reps >= 1" : why);
        return 2;
    }
    header(&b, argc, argv);
    shape shapes[] = {{"8b", 32, 8, 128}, {"1b", 32, 8, 64}};
    pl_kv_dtype dts[] = {PL_KV_BF16, PL_KV_FP8};
    for (int s = 0; s < 2; s++)
        for (int d = 0; d < 2; d++) {
            if ((strcmp(shape_arg, "all") && strcmp(shape_arg, shapes[s].name))
                || (strcmp(dtype_arg, "all") && strcmp(dtype_arg, d ? "fp8" : "bf16")))
                continue;
            if (strcmp(only, "prefill"))
                bench_decode(&b, shapes[s], dts[d]);
            if (strcmp(only, "decode"))
                bench_prefill(&b, shapes[s], dts[d]);
        }
    printf("# %-5s %-3s %-4s %-8s %5s %5s %3s %9s %8s %7s %s\n%s", "bench", "shp", "kv",
           "kernel", "rows", "ctx", "ns", "ms", "KV GB/s", "TFLOP/s", "check", b.table);
    printf("# %d check(s) failed\n", b.failures);
    return b.failures ? 1 : 0;
}
