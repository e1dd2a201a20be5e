/* cuda_attn_fix.c - the attention kernels' test fixture and float64
 * reference (see cuda_attn_fix.h). */
#include "tests/cuda_attn_fix.h"

#include "backends/engine/cuda/kv_write.cuh"
#include "src/base/fp8.h"

#define LOG2E_F 1.4426950408889634f

static int gcd(int a, int b)
{
    while (b) {
        int t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Scattered block ids (an injective map, not in order); holes: every
 * holes-th page unmapped, alternately -1 and an id past the pool. */
static void make_table(attn_fix *f)
{
    int n = f->c.n_seqs * f->mb, mul = 7;
    while (gcd(mul, f->n_blocks) != 1)
        mul += 2;
    f->bt = malloc(sizeof(int32_t) * n);
    for (int i = 0; i < n; i++) {
        int page = i % f->mb;
        bool hole = f->c.holes > 0 && page % f->c.holes == f->c.holes - 1;
        f->bt[i] = !hole ? (int32_t)(((long)i * mul + 3) % f->n_blocks)
                   : (page / f->c.holes) % 2 ? f->n_blocks + 5 : -1;
    }
}

static float head_scale(float base, int h)
{
    return (base > 0.0f ? base : 1.0f) * (1.0f + 0.25f * (float)h);
}

/* The cache's byte(s) for value x of KV head h and what it decodes to
 * (unscaled for fp8: value = decoded * scale). */
static float encode(const attn_fix *f, float x, float scale, unsigned char *raw, size_t i)
{
    float b = pl_bf16_to_fp32(pl_fp32_to_bf16(x));
    if (f->c.dtype == PL_KV_FP8) {
        raw[i] = pl_fp32_to_e4m3(b / scale);
        return pl_e4m3_to_fp32(raw[i]);
    }
    uint16_t h = pl_fp32_to_bf16(x);
    memcpy(raw + 2 * i, &h, 2);
    return b;
}

/* One token's K and V (kvw values each) into the pools at slot. */
static void put_token(attn_fix *f, size_t slot, const float *k, const float *v)
{
    int kvw = f->c.n_kv * f->c.hd;
    for (int i = 0; i < kvw; i++) {
        int h = i / f->c.hd;
        size_t at = slot * kvw + i;
        f->kpool[at] = encode(f, k[i], head_scale(f->c.kscale, h), f->kraw, at);
        f->vpool[at] = encode(f, v[i], head_scale(f->c.vscale, h), f->vraw, at);
    }
}

static int32_t block_of(const attn_fix *f, int s, int t)
{
    int32_t b = f->bt[s * f->mb + t / f->bs];
    return b >= 0 && b < f->n_blocks ? b : -1;
}

static void fill_rows(attn_fix *f, unsigned char *dk0, unsigned char *dv0)
{
    const attn_case *c = &f->c;
    int kvw = c->n_kv * c->hd, r = 0;
    size_t eb = pl_kv_elem_bytes(c->dtype);
    float *tk = malloc(sizeof(float) * kvw), *tv = malloc(sizeof(float) * kvw);
    for (int s = 0; s < c->n_seqs; s++) {
        f->first[s] = r;
        f->nrows[s] = c->new_rows[s];
        for (int t = 0; t < c->ctx[s]; t++) {
            int32_t blk = block_of(f, s, t);
            size_t slot = blk < 0 ? 0 : (size_t)blk * f->bs + t % f->bs;
            bool is_new = t >= c->ctx[s] - c->new_rows[s];
            const float *k = tk, *v = tv;
            if (is_new) {
                f->pos[r] = t;
                f->row_seq[r] = s;
                k = f->qkv + (size_t)r * f->qkv_dim + c->n_head * c->hd;
                v = k + kvw;
                r++;
            } else {
                tu_fill(tk, kvw, 1.0f);
                tu_fill(tv, kvw, 1.0f);
            }
            if (blk < 0)
                continue;            /* an unmapped page holds nothing */
            put_token(f, slot, k, v);
            if (!is_new) {           /* the cached prefix goes straight to the device */
                memcpy(dk0 + slot * kvw * eb, f->kraw + slot * kvw * eb, kvw * eb);
                memcpy(dv0 + slot * kvw * eb, f->vraw + slot * kvw * eb, kvw * eb);
            }
        }
    }
    free(tk);
    free(tv);
}

float af_sink(float sink, int h)
{
    return sink * (float)(h % 4 - 1) * 0.75f;   /* -0.75, 0, 0.75, 1.5 times sink */
}

void af_init(attn_fix *f, attn_case c)
{
    memset(f, 0, sizeof *f);
    f->c = c;
    f->bs = c.bs > 0 ? c.bs : 16;
    int mx = 1;
    for (int s = 0; s < c.n_seqs; s++) {
        mx = c.ctx[s] > mx ? c.ctx[s] : mx;
        f->n_rows += c.new_rows[s];
    }
    f->mb = (mx + f->bs - 1) / f->bs + 1;
    f->n_blocks = c.n_seqs * f->mb + 3;
    make_table(f);
    int kvw = c.n_kv * c.hd;
    size_t eb = pl_kv_elem_bytes(c.dtype);
    f->qkv_dim = (c.n_head + 2 * c.n_kv) * c.hd;
    f->pool_elems = (size_t)f->n_blocks * f->bs * kvw;
    f->kpool = calloc(f->pool_elems, sizeof(float));
    f->vpool = calloc(f->pool_elems, sizeof(float));
    f->kraw = calloc(f->pool_elems, eb);
    f->vraw = calloc(f->pool_elems, eb);
    f->pos = malloc(sizeof(int32_t) * f->n_rows);
    f->row_seq = malloc(sizeof(int32_t) * f->n_rows);
    f->first = malloc(sizeof(int32_t) * c.n_seqs);
    f->nrows = malloc(sizeof(int32_t) * c.n_seqs);
    f->qkv = malloc(sizeof(float) * f->n_rows * f->qkv_dim);
    for (int r = 0; r < f->n_rows; r++) {
        float *row = f->qkv + (size_t)r * f->qkv_dim;
        tu_fill(row, (size_t)c.n_head * c.hd, c.qmag > 0 ? c.qmag : 1.0f);
        tu_fill(row + c.n_head * c.hd, 2 * (size_t)kvw, 1.0f);
    }
    unsigned char *dk0 = calloc(f->pool_elems, eb), *dv0 = calloc(f->pool_elems, eb);
    fill_rows(f, dk0, dv0);
    f->dk = tu_dev(dk0, f->pool_elems * eb);
    f->dv = tu_dev(dv0, f->pool_elems * eb);
    free(dk0);
    free(dv0);
    float ks[64], vs[64];
    for (int h = 0; h < c.n_kv && h < 64; h++) {
        ks[h] = head_scale(c.kscale, h);
        vs[h] = head_scale(c.vscale, h);
    }
    f->dks = tu_dev(ks, sizeof(float) * c.n_kv);
    f->dvs = tu_dev(vs, sizeof(float) * c.n_kv);
    f->dqkv = tu_dev(f->qkv, sizeof(float) * f->n_rows * f->qkv_dim);
    f->dbt = tu_dev(f->bt, sizeof(int32_t) * c.n_seqs * f->mb);
    f->dpos = tu_dev(f->pos, sizeof(int32_t) * f->n_rows);
    f->drs = tu_dev(f->row_seq, sizeof(int32_t) * f->n_rows);
    f->dfirst = tu_dev(f->first, sizeof(int32_t) * c.n_seqs);
    f->dnrows = tu_dev(f->nrows, sizeof(int32_t) * c.n_seqs);
    float sinks[256];
    for (int h = 0; h < c.n_head && h < 256; h++)
        sinks[h] = af_sink(c.sink, h);
    f->dsinks = c.sink != 0.0f ? tu_dev(sinks, sizeof(float) * c.n_head) : NULL;
    f->o = (pl_attn_opts){.scale = 1.0f / sqrtf((float)c.hd), .softcap = c.softcap,
                          .window = c.window, .sinks = f->dsinks};
}

void af_free(attn_fix *f)
{
    void *d[] = {f->dk, f->dv, f->dqkv, f->dks, f->dvs, f->dbt, f->dpos, f->drs, f->dfirst,
                 f->dnrows, f->dsinks};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        cudaFree(d[i]);
    void *h[] = {f->bt, f->pos, f->row_seq, f->first, f->nrows, f->qkv, f->kpool, f->vpool,
                 f->kraw, f->vraw};
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
        free(h[i]);
}

pl_kv_geom af_geom(const attn_fix *f)
{
    return (pl_kv_geom){.n_kv_heads = f->c.n_kv, .head_dim = f->c.hd, .block_size = f->bs,
                        .max_blocks_per_seq = f->mb, .n_blocks = f->n_blocks,
                        .dtype = f->c.dtype};
}

pl_kv_layer af_layer(const attn_fix *f)
{
    bool fp8 = f->c.dtype == PL_KV_FP8;
    return (pl_kv_layer){.k = f->dk, .v = f->dv, .k_scale = fp8 ? f->dks : NULL,
                         .v_scale = fp8 ? f->dvs : NULL};
}

pl_attn_step af_step(const attn_fix *f, pl_bf16 *out)
{
    return (pl_attn_step){.q = f->dqkv, .q_stride = f->qkv_dim, .n_heads = f->c.n_head,
                          .positions = f->dpos, .row_seq = f->drs, .block_table = f->dbt,
                          .out = out};
}

void af_write_and_check(attn_fix *f)
{
    const attn_case *c = &f->c;
    OK(pl_cuda_kv_write(f->dqkv, f->qkv_dim, c->n_head * c->hd, (c->n_head + c->n_kv) * c->hd,
                        f->dpos, f->drs, f->dbt, af_geom(f), af_layer(f), f->n_rows, 0));
    size_t bytes = f->pool_elems * pl_kv_elem_bytes(c->dtype);
    unsigned char *got = malloc(bytes);
    tu_get(got, f->dk, bytes);
    cr_assert_eq(memcmp(got, f->kraw, bytes), 0, "kv_write: K bytes differ (dtype %d)",
                 (int)c->dtype);
    tu_get(got, f->dv, bytes);
    cr_assert_eq(memcmp(got, f->vraw, bytes), 0, "kv_write: V bytes differ (dtype %d)",
                 (int)c->dtype);
    free(got);
}

static double round_q(float x, af_qround qr)
{
    if (qr == AF_Q_BF16)
        return pl_bf16_to_fp32(pl_fp32_to_bf16(x));
    if (qr == AF_Q_F16)
        return pl_fp16_to_fp32(pl_fp32_to_fp16(x));
    return x;
}

/* One row and query head: out[0..hd) in double, then stored as float. */
static void ref_head(const attn_fix *f, af_qround qr, int r, int h, double *sc, float *out)
{
    const attn_case *c = &f->c;
    int kvh = h / (c->n_head / c->n_kv), hd = c->hd, kvw = c->n_kv * hd;
    int s = f->row_seq[r], p = f->pos[r];
    int lo = c->window > 0 && p - c->window + 1 > 0 ? p - c->window + 1 : 0;
    bool fp8 = c->dtype == PL_KV_FP8;
    float ks = fp8 ? head_scale(c->kscale, kvh) : 1.0f;
    float vs = fp8 ? head_scale(c->vscale, kvh) : 1.0f;
    float qs = (c->softcap > 0.0f ? f->o.scale / c->softcap : f->o.scale * LOG2E_F) * ks;
    const float *q = f->qkv + (size_t)r * f->qkv_dim + (size_t)h * hd;
    double mx = -INFINITY, sum = 0.0;
    for (int t = lo; t <= p; t++) {
        int32_t blk = block_of(f, s, t);
        sc[t - lo] = -INFINITY;
        if (blk < 0)
            continue;
        const float *k = f->kpool + ((size_t)blk * f->bs + t % f->bs) * kvw + (size_t)kvh * hd;
        double d = 0.0;
        for (int x = 0; x < hd; x++)
            d += round_q(q[x] * qs, qr) * k[x];
        sc[t - lo] = c->softcap > 0.0f ? (double)(c->softcap * LOG2E_F) * tanh(d) : d;
        mx = sc[t - lo] > mx ? sc[t - lo] : mx;
    }
    /* the sink (natural units; the scores are log2 units) joins the max
     * and the sum, and adds no value */
    double sk = c->sink != 0.0f ? (double)af_sink(c->sink, h) * LOG2E_F : -INFINITY;
    if (mx > -INFINITY && sk > mx)
        mx = sk;
    if (mx > -INFINITY && sk > -INFINITY)
        sum = exp2(sk - mx);
    double acc[512] = {0};
    for (int t = lo; t <= p && mx > -INFINITY; t++) {
        if (sc[t - lo] == -INFINITY)
            continue;
        int32_t blk = block_of(f, s, t);
        const float *v = f->vpool + ((size_t)blk * f->bs + t % f->bs) * kvw + (size_t)kvh * hd;
        double w = exp2(sc[t - lo] - mx);
        sum += w;
        for (int x = 0; x < hd; x++)
            acc[x] += w * v[x];
    }
    for (int x = 0; x < hd; x++)
        out[x] = sum > 0.0 ? (float)(acc[x] * vs / sum) : 0.0f;
}

void af_reference(const attn_fix *f, af_qround qr, float *out)
{
    int mx = 1;
    for (int s = 0; s < f->c.n_seqs; s++)
        mx = f->c.ctx[s] > mx ? f->c.ctx[s] : mx;
    double *sc = malloc(sizeof(double) * mx);
    size_t w = (size_t)f->c.n_head * f->c.hd;
    for (int r = 0; r < f->n_rows; r++)
        for (int h = 0; h < f->c.n_head; h++)
            ref_head(f, qr, r, h, sc, out + r * w + (size_t)h * f->c.hd);
    free(sc);
}

pl_bf16 *af_poisoned_out(const attn_fix *f)
{
    size_t n = (size_t)f->n_rows * f->c.n_head * f->c.hd;
    pl_bf16 *d = tu_dev(NULL, n * sizeof(pl_bf16));
    CU(cudaMemset(d, 0xff, n * sizeof(pl_bf16)));
    return d;
}

void af_check(const attn_fix *f, const pl_bf16 *dout, const float *ref, const bool *on,
              double tol, const char *what)
{
    size_t w = (size_t)f->c.n_head * f->c.hd, n = (size_t)f->n_rows * w;
    pl_bf16 *raw = malloc(n * sizeof(pl_bf16));
    tu_get(raw, dout, n * sizeof(pl_bf16));
    double md = 0.0, mb = 1e-6;
    for (int r = 0; r < f->n_rows; r++) {
        for (size_t i = 0; i < w; i++) {
            uint16_t b = raw[r * w + i];
            if (on && !on[r]) {
                cr_assert_eq(b, 0xffff, "%s: row %d (not asked for) was written", what, r);
                continue;
            }
            double d = fabs((double)pl_bf16_to_fp32(b) - ref[r * w + i]);
            md = isnan(d) || d > md ? (isnan(d) ? INFINITY : d) : md;
            mb = fabs(ref[r * w + i]) > mb ? fabs(ref[r * w + i]) : mb;
        }
    }
    free(raw);
    cr_assert_leq(md / mb, tol, "%s: normalised error %.3g (heads %d/%d hd %d bs %d window %d "
                  "softcap %g holes %d qmag %g dtype %d sink %g)", what, md / mb, f->c.n_head,
                  f->c.n_kv, f->c.hd, f->bs, f->c.window, f->c.softcap, f->c.holes,
                  f->c.qmag, (int)f->c.dtype, f->c.sink);
}
