/* test_cuda_attn.c - paged KV write, decode attention and prefill
 * attention (with a cached prefix) against pl_op_attention, for GQA
 * shapes with head_dim 64 and 128. The reference reads the same
 * bf16-rounded K/V; the output is bf16, so the bound is TOL_ATTN. */
#include "tests/cuda_test_util.h"

#include "backends/engine/cpu/ops.h"
#include "backends/engine/cuda/attn_decode.cuh"
#include "backends/engine/cuda/attn_prefill.cuh"
#include "backends/engine/cuda/kv_write.cuh"

#define TOL_ATTN 1e-2
#define BS 16

typedef struct attn_case {
    int n_head, n_kv, hd;
    int n_seqs;
    int ctx[3];                  /* tokens in KV per sequence after the step */
    int new_rows[3];             /* rows of this step per sequence (the last ones) */
} attn_case;

typedef struct attn_fix {
    attn_case c;
    int mb, n_blocks, n_rows, qkv_dim;
    int32_t *bt, *pos, *row_seq, *first, *nrows;
    float *qkv;                  /* (n_rows, qkv_dim) this step's rows */
    float *kpool, *vpool;        /* (n_blocks, BS, n_kv, hd) reference, bf16-rounded */
    /* device */
    pl_bf16 *dk, *dv;
    float *dqkv;
    int32_t *dbt, *dpos, *drs, *dfirst, *dnrows;
} attn_fix;

/* Random K/V for every position: earlier positions written straight into
 * the device cache (the "cached prefix"), this step's through kv_write. */
static void fix_init(attn_fix *f, attn_case c)
{
    memset(f, 0, sizeof *f);
    f->c = c;
    f->mb = 8;
    f->n_blocks = c.n_seqs * f->mb + 3;
    int kvw = c.n_kv * c.hd;
    f->qkv_dim = (c.n_head + 2 * c.n_kv) * c.hd;
    size_t pool = (size_t)f->n_blocks * BS * kvw;
    f->kpool = calloc(pool, sizeof(float));
    f->vpool = calloc(pool, sizeof(float));
    f->bt = malloc(sizeof(int32_t) * c.n_seqs * f->mb);
    for (int i = 0; i < c.n_seqs * f->mb; i++)  /* scattered, not in order */
        f->bt[i] = (i * 7 + 3) % f->n_blocks;
    for (int s = 0; s < c.n_seqs; s++)
        f->n_rows += c.new_rows[s];
    f->pos = malloc(sizeof(int32_t) * f->n_rows);
    f->row_seq = malloc(sizeof(int32_t) * f->n_rows);
    f->first = malloc(sizeof(int32_t) * c.n_seqs);
    f->nrows = malloc(sizeof(int32_t) * c.n_seqs);
    f->qkv = malloc(sizeof(float) * f->n_rows * f->qkv_dim);
    tu_fill(f->qkv, (size_t)f->n_rows * f->qkv_dim, 1.0f);
    int r = 0;
    for (int s = 0; s < c.n_seqs; s++) {
        f->first[s] = r;
        f->nrows[s] = c.new_rows[s];
        for (int t = 0; t < c.ctx[s]; t++) {
            int blk = f->bt[s * f->mb + t / BS];
            size_t off = ((size_t)blk * BS + t % BS) * kvw;
            bool is_new = t >= c.ctx[s] - c.new_rows[s];
            if (is_new) {
                f->pos[r] = t;
                f->row_seq[r] = s;
                float *row = f->qkv + (size_t)r * f->qkv_dim;
                memcpy(f->kpool + off, row + c.n_head * c.hd, sizeof(float) * kvw);
                memcpy(f->vpool + off, row + (c.n_head + c.n_kv) * c.hd, sizeof(float) * kvw);
                r++;
            } else {
                tu_fill(f->kpool + off, kvw, 1.0f);
                tu_fill(f->vpool + off, kvw, 1.0f);
            }
        }
    }
    /* The device cache starts with this step's slots zeroed: kv_write fills them. */
    float *zk = malloc(sizeof(float) * pool), *zv = malloc(sizeof(float) * pool);
    memcpy(zk, f->kpool, sizeof(float) * pool);
    memcpy(zv, f->vpool, sizeof(float) * pool);
    for (int i = 0; i < f->n_rows; i++) {
        int t = f->pos[i], blk = f->bt[f->row_seq[i] * f->mb + t / BS];
        memset(zk + ((size_t)blk * BS + t % BS) * kvw, 0, sizeof(float) * kvw);
        memset(zv + ((size_t)blk * BS + t % BS) * kvw, 0, sizeof(float) * kvw);
    }
    f->dk = tu_dev_bf16(zk, pool);
    f->dv = tu_dev_bf16(zv, pool);
    free(zk);
    free(zv);
    tu_round_bf16(f->kpool, pool);
    tu_round_bf16(f->vpool, pool);
    f->dqkv = tu_dev(f->qkv, sizeof(float) * f->n_rows * f->qkv_dim);
    f->dbt = tu_dev(f->bt, sizeof(int32_t) * c.n_seqs * f->mb);
    f->dpos = tu_dev(f->pos, sizeof(int32_t) * f->n_rows);
    f->drs = tu_dev(f->row_seq, sizeof(int32_t) * f->n_rows);
    f->dfirst = tu_dev(f->first, sizeof(int32_t) * c.n_seqs);
    f->dnrows = tu_dev(f->nrows, sizeof(int32_t) * c.n_seqs);
}

static void fix_free(attn_fix *f)
{
    cudaFree(f->dk); cudaFree(f->dv); cudaFree(f->dqkv); cudaFree(f->dbt);
    cudaFree(f->dpos); cudaFree(f->drs); cudaFree(f->dfirst); cudaFree(f->dnrows);
    free(f->bt); free(f->pos); free(f->row_seq); free(f->first); free(f->nrows);
    free(f->qkv); free(f->kpool); free(f->vpool);
}

static pl_kv_geom fix_geom(const attn_fix *f)
{
    return (pl_kv_geom){.n_kv_heads = f->c.n_kv, .head_dim = f->c.hd, .block_size = BS,
                        .max_blocks_per_seq = f->mb, .n_blocks = f->n_blocks};
}

/* Reference output (n_rows, n_head*hd) from the fp32 pools. */
static void reference(const attn_fix *f, float *out)
{
    const attn_case *c = &f->c;
    int g = c->n_head / c->n_kv, kvw = c->n_kv * c->hd;
    float *scratch = malloc(sizeof(float) * g * 128);
    for (int r = 0; r < f->n_rows; r++) {
        int s = f->row_seq[r];
        for (int kh = 0; kh < c->n_kv; kh++) {
            pl_attn_args a = {.k_base = f->kpool + kh * c->hd, .v_base = f->vpool + kh * c->hd,
                              .block_table = f->bt + s * f->mb, .block_size = BS,
                              .block_stride = (size_t)BS * kvw, .row_stride = (size_t)kvw,
                              .head_dim = c->hd, .scale = 1.0f / sqrtf((float)c->hd)};
            const float *q = f->qkv + (size_t)r * f->qkv_dim + (size_t)kh * g * c->hd;
            pl_op_attention(&a, q, g, f->pos[r] + 1,
                            out + (size_t)r * c->n_head * c->hd + (size_t)kh * g * c->hd,
                            scratch);
        }
    }
    free(scratch);
}

enum { MODE_DECODE, MODE_PREFILL, MODE_SPLIT, MODE_ROWS, MODE_SPLIT16, MODE_MMA };

/* Prefill launches (MODE_PREFILL, MODE_ROWS' sequence lists) go through the
 * tensor-core kernel when set (one Criterion test process each). */
static bool g_prefill_mma;

static int prefill_seqs(const float *q, int q_stride, const int32_t *positions,
                        const int32_t *seqs, const int32_t *first, const int32_t *nrows,
                        const int32_t *bt, pl_kv_geom g, const pl_bf16 *kc, const pl_bf16 *vc,
                        pl_bf16 *out, int n_seqs, int max_rows, int n_heads, float scale)
{
    return pl_cuda_attn_prefill_seqs(q, q_stride, positions, seqs, first, nrows, bt, g, kc, vc,
                                     out, n_seqs, max_rows, n_heads, scale, g_prefill_mma, 0);
}

/* MODE_SPLIT (MODE_SPLIT16, MODE_MMA): the split-KV grouped kernel (with 16
 * lanes per key, on tensor cores) with n_splits (0: the heuristic for 132
 * SMs); MODE_ROWS: decode over every other row only (a row list), prefill
 * over every other sequence (a sequence list); the others stay 0. */
static void launch_mode(attn_fix *f, int mode, int n_splits, pl_bf16 *dout, float scale)
{
    const attn_case *c = &f->c;
    pl_kv_geom g = fix_geom(f);
    if (mode == MODE_SPLIT || mode == MODE_SPLIT16 || mode == MODE_MMA) {
        int ns = n_splits ? n_splits : pl_cuda_attn_split_count(f->n_rows, c->n_kv, 132);
        size_t wsn = pl_cuda_attn_split_ws(f->n_rows, c->n_head, c->hd, ns);
        float *ws = wsn ? tu_dev(NULL, wsn * sizeof(float)) : NULL;
        pl_split_kind kind = mode == MODE_SPLIT ? PL_SPLIT_WARP
                             : mode == MODE_MMA ? PL_SPLIT_MMA : PL_SPLIT_HALF;
        OK(pl_cuda_attn_decode_split(f->dqkv, f->qkv_dim, f->dpos, NULL, f->drs, f->dbt, g,
                                     f->dk, f->dv, dout, f->n_rows, c->n_head, scale, ns, ws,
                                     kind, 0));
        CU(cudaDeviceSynchronize());
        cudaFree(ws);
        return;
    }
    int32_t list[64];
    int n = 0;
    if (f->c.new_rows[0] == 1) {     /* decode rows: every other row */
        for (int r = 0; r < f->n_rows; r += 2)
            list[n++] = r;
        int32_t *dl = tu_dev(list, sizeof(int32_t) * n);
        OK(pl_cuda_attn_decode_rows(f->dqkv, f->qkv_dim, f->dpos, dl, f->drs, f->dbt, g, f->dk,
                                    f->dv, dout, n, c->n_head, scale, 0));
        CU(cudaDeviceSynchronize());
        cudaFree(dl);
        return;
    }
    int mx = 0;
    for (int s = 0; s < c->n_seqs; s += 2) {
        list[n++] = s;
        mx = c->new_rows[s] > mx ? c->new_rows[s] : mx;
    }
    int32_t *dl = tu_dev(list, sizeof(int32_t) * n);
    OK(prefill_seqs(f->dqkv, f->qkv_dim, f->dpos, dl, f->dfirst, f->dnrows, f->dbt, g, f->dk,
                    f->dv, dout, n, mx, c->n_head, scale));
    CU(cudaDeviceSynchronize());
    cudaFree(dl);
}

/* Rows the MODE_ROWS launch did not cover are zeroed in the reference. */
static void mask_rows(const attn_fix *f, float *ref)
{
    size_t w = (size_t)f->c.n_head * f->c.hd;
    for (int r = 0; r < f->n_rows; r++) {
        bool on = f->c.new_rows[0] == 1 ? r % 2 == 0 : f->row_seq[r] % 2 == 0;
        if (!on)
            memset(ref + r * w, 0, sizeof(float) * w);
    }
}

static void run_case_mode(attn_case c, int mode, int n_splits)
{
    attn_fix f;
    fix_init(&f, c);
    pl_kv_geom g = fix_geom(&f);
    size_t pool = (size_t)f.n_blocks * BS * c.n_kv * c.hd;
    OK(pl_cuda_kv_write(f.dqkv, f.qkv_dim, c.n_head * c.hd, (c.n_head + c.n_kv) * c.hd,
                        f.dpos, f.drs, f.dbt, g, f.dk, f.dv, f.n_rows, 0));
    float *kb = malloc(sizeof(float) * pool);
    tu_get_bf16(kb, f.dk, pool);
    cr_assert_leq(tu_nerr(kb, f.kpool, pool), 0.0, "kv_write must store exactly bf16(k)");
    tu_get_bf16(kb, f.dv, pool);
    cr_assert_leq(tu_nerr(kb, f.vpool, pool), 0.0, "kv_write must store exactly bf16(v)");
    free(kb);
    size_t on = (size_t)f.n_rows * c.n_head * c.hd;
    float *ref = malloc(sizeof(float) * on), *got = malloc(sizeof(float) * on);
    pl_bf16 *dout = tu_dev(NULL, sizeof(pl_bf16) * on);
    float scale = 1.0f / sqrtf((float)c.hd);
    int prefill = mode == MODE_PREFILL;
    if (mode == MODE_SPLIT || mode == MODE_SPLIT16 || mode == MODE_MMA || mode == MODE_ROWS) {
        launch_mode(&f, mode, n_splits, dout, scale);
    } else if (prefill) {
        int mx = 0;
        for (int s = 0; s < c.n_seqs; s++)
            mx = c.new_rows[s] > mx ? c.new_rows[s] : mx;
        OK(prefill_seqs(f.dqkv, f.qkv_dim, f.dpos, NULL, f.dfirst, f.dnrows, f.dbt, g, f.dk,
                        f.dv, dout, c.n_seqs, mx, c.n_head, scale));
    } else {
        OK(pl_cuda_attn_decode(f.dqkv, f.qkv_dim, f.dpos, f.drs, f.dbt, g, f.dk, f.dv, dout,
                               f.n_rows, c.n_head, scale, 0));
    }
    tu_get_bf16(got, dout, on);
    reference(&f, ref);
    if (mode == MODE_ROWS)
        mask_rows(&f, ref);
    cr_assert_leq(tu_nerr(got, ref, on), TOL_ATTN, "heads %d/%d hd %d mode %d splits %d",
                  c.n_head, c.n_kv, c.hd, mode, n_splits);
    cudaFree(dout);
    free(ref); free(got);
    fix_free(&f);
}

static void run_case(attn_case c, int prefill)
{
    run_case_mode(c, prefill ? MODE_PREFILL : MODE_DECODE, 0);
}

Test(cuda_attn, decode_matches_reference)
{
    SKIP_WITHOUT_GPU();
    tu_seed(7);
    run_case((attn_case){9, 3, 64, 3, {1, 17, 100}, {1, 1, 1}}, 0);
    run_case((attn_case){32, 8, 128, 2, {33, 128}, {1, 1}}, 0);
    run_case((attn_case){4, 4, 64, 1, {16}, {1}}, 0);
}

Test(cuda_attn, decode_kernel_handles_many_rows_per_sequence)
{
    SKIP_WITHOUT_GPU();
    tu_seed(8);  /* the decode kernel is correct (if slower) for prefill rows too */
    run_case((attn_case){9, 3, 64, 2, {20, 50}, {20, 9}}, 0);
}

Test(cuda_attn, prefill_matches_reference_with_cached_prefix)
{
    SKIP_WITHOUT_GPU();
    tu_seed(9);
    run_case((attn_case){9, 3, 64, 3, {70, 5, 128}, {70, 1, 40}}, 1);   /* 88-token prefix */
    run_case((attn_case){32, 8, 128, 2, {100, 37}, {64, 37}}, 1);
    run_case((attn_case){8, 1, 64, 1, {33}, {33}}, 1);                 /* MQA */
}

/* A split-KV decode kernel against the same C reference (pl_op_attention),
 * one split and several (the merge), groups of 1, 4 and 8 query heads,
 * head_dim 64 and 128; contexts shorter than the splits, and odd key
 * counts against the two key streams of a split16 warp and the 32-key
 * tiles of the mma kernel (1, 2, 3, 9, 31 keys per split). */
static void split_variant_cases(int mode)
{
    int splits[] = {1, 3, 8, 0};
    for (int i = 0; i < 4; i++) {
        run_case_mode((attn_case){8, 2, 64, 3, {1, 17, 100}, {1, 1, 1}}, mode, splits[i]);
        run_case_mode((attn_case){32, 8, 128, 2, {33, 128}, {1, 1}}, mode, splits[i]);
        run_case_mode((attn_case){8, 1, 64, 1, {128}, {1}}, mode, splits[i]);
        run_case_mode((attn_case){4, 4, 64, 2, {5, 77}, {1, 1}}, mode, splits[i]);
        run_case_mode((attn_case){64, 8, 128, 3, {2, 3, 31}, {1, 1, 1}}, mode, splits[i]);
    }
}

Test(cuda_attn, split_kv_decode_matches_reference)
{
    SKIP_WITHOUT_GPU();
    tu_seed(17);
    split_variant_cases(MODE_SPLIT);
}

Test(cuda_attn, split16_decode_matches_reference)
{
    SKIP_WITHOUT_GPU();
    tu_seed(21);
    split_variant_cases(MODE_SPLIT16);
}

Test(cuda_attn, mma_decode_matches_reference)
{
    SKIP_WITHOUT_GPU();
    tu_seed(23);
    split_variant_cases(MODE_MMA);
}

/* The tensor-core prefill kernel on the prefill cases: cached prefixes,
 * groups of 3 and 4 query heads, MQA, more than 64 rows and keys (two row
 * and key tiles), a full 128-row prompt at head_dim 128, and a sequence
 * list (a mixed step's prefill part). */
Test(cuda_attn, prefill_mma_matches_reference)
{
    SKIP_WITHOUT_GPU();
    tu_seed(22);
    g_prefill_mma = true;
    run_case((attn_case){9, 3, 64, 3, {70, 5, 128}, {70, 1, 40}}, 1);
    run_case((attn_case){32, 8, 128, 2, {100, 37}, {64, 37}}, 1);
    run_case((attn_case){8, 1, 64, 1, {33}, {33}}, 1);
    run_case((attn_case){32, 8, 128, 1, {128}, {128}}, 1);
    run_case((attn_case){16, 4, 128, 3, {1, 65, 127}, {1, 65, 3}}, 1);
    run_case_mode((attn_case){9, 3, 64, 3, {70, 5, 128}, {70, 1, 40}}, MODE_ROWS, 0);
    g_prefill_mma = false;
}

/* A mixed step's lists: decode over a row list, prefill over a sequence list. */
Test(cuda_attn, row_and_sequence_lists)
{
    SKIP_WITHOUT_GPU();
    tu_seed(18);
    run_case_mode((attn_case){9, 3, 64, 3, {1, 17, 100}, {1, 1, 1}}, MODE_ROWS, 0);
    run_case_mode((attn_case){9, 3, 64, 3, {70, 5, 128}, {70, 1, 40}}, MODE_ROWS, 0);
}

/* More sequences than gridDim.z allows (65535): every sequence one row at
 * position 0, so each output head is bf16(v) of its own row. */
Test(cuda_attn, prefill_grid_tiles_past_65535_sequences)
{
    SKIP_WITHOUT_GPU();
    tu_seed(19);
    const int S = 65535 + 700, H = 2, KV = 1, HD = 64, QKV = (H + 2 * KV) * HD;
    float *qkv = malloc(sizeof(float) * (size_t)S * QKV);
    int32_t *idx = malloc(sizeof(int32_t) * S), *zero = calloc(S, sizeof(int32_t));
    int32_t *ones = malloc(sizeof(int32_t) * S);
    tu_fill(qkv, (size_t)S * QKV, 1.0f);
    for (int s = 0; s < S; s++) {
        idx[s] = s;
        ones[s] = 1;
    }
    pl_kv_geom g = {.n_kv_heads = KV, .head_dim = HD, .block_size = BS, .max_blocks_per_seq = 1,
                    .n_blocks = S};
    float *dq = tu_dev(qkv, sizeof(float) * (size_t)S * QKV);
    int32_t *dbt = tu_dev(idx, sizeof(int32_t) * S), *drs = tu_dev(idx, sizeof(int32_t) * S);
    int32_t *dpos = tu_dev(zero, sizeof(int32_t) * S), *dn = tu_dev(ones, sizeof(int32_t) * S);
    pl_bf16 *dk = tu_dev(NULL, sizeof(pl_bf16) * (size_t)S * BS * KV * HD);
    pl_bf16 *dv = tu_dev(NULL, sizeof(pl_bf16) * (size_t)S * BS * KV * HD);
    pl_bf16 *dout = tu_dev(NULL, sizeof(pl_bf16) * (size_t)S * H * HD);
    OK(pl_cuda_kv_write(dq, QKV, H * HD, (H + KV) * HD, dpos, drs, dbt, g, dk, dv, S, 0));
    OK(pl_cuda_attn_prefill(dq, QKV, dpos, drs, dn, dbt, g, dk, dv, dout, S, 1, H, 0.125f, 0));
    float *got = malloc(sizeof(float) * (size_t)S * H * HD);
    tu_get_bf16(got, dout, (size_t)S * H * HD);
    double worst = 0;
    for (int s = 0; s < S; s++)
        for (int h = 0; h < H; h++)
            for (int d = 0; d < HD; d++) {
                float v = pl_bf16_to_fp32(pl_fp32_to_bf16(qkv[(size_t)s * QKV + (H + KV) * HD + d]));
                double e = fabs(got[((size_t)s * H + h) * HD + d] - v);
                worst = e > worst ? e : worst;
            }
    cr_assert_leq(worst, 0.0, "sequence past 65535 not computed (max error %g)", worst);
    cudaFree(dq); cudaFree(dbt); cudaFree(drs); cudaFree(dpos); cudaFree(dn);
    cudaFree(dk); cudaFree(dv); cudaFree(dout);
    free(qkv); free(idx); free(zero); free(ones); free(got);
}
