/* test_cuda_attn.c - the paged KV write and every attention kernel kind
 * (decode: one block per row, over a row list, split-KV with a warp per
 * key, with 16 lanes per key, on tensor cores, each with 1, 3, 8 splits and
 * the planned count; prefill: tiled on CUDA cores and on tensor cores, over
 * all sequences and over a sequence list) through the same cases, against
 * the float64 reference of cuda_attn_fix.c: cached prefixes, contexts to
 * 4,096 (many tiles per warp), unmapped blocks (-1 and past the pool),
 * large logits, sliding windows, soft-capping, attention sinks, head_dim
 * 64/128/256 (512 on the rows kernel), block sizes 8 to 64, bf16 and fp8
 * caches. Outputs are poisoned first: a row not asked for must stay
 * poisoned, every other must be within TOL_ATTN (normalised max error; the
 * outputs are bf16). Host-only tests (argument checks, the split plan) run
 * without a GPU. */
#include "tests/cuda_attn_fix.h"

#include "backends/engine/cuda/attn_decode.cuh"
#include "backends/engine/cuda/attn_plan.h"
#include "backends/engine/cuda/attn_prefill.cuh"
#include "backends/engine/cuda/kv_write.cuh"

#define TOL_ATTN 1e-2

static const char *const split_name[] = {"split", "split16", "mma"};

/* Every other row (decode lists) or the rows of every other sequence
 * (prefill lists). */
static bool *alternate(const attn_fix *f, bool by_seq)
{
    bool *on = malloc(sizeof(bool) * f->n_rows);
    for (int r = 0; r < f->n_rows; r++)
        on[r] = by_seq ? f->row_seq[r] % 2 == 0 : r % 2 == 0;
    return on;
}

static void check_rows_kernel(attn_fix *f, const float *ref, bool list)
{
    pl_bf16 *dout = af_poisoned_out(f);
    pl_attn_step s = af_step(f, dout);
    int32_t *rows = malloc(sizeof(int32_t) * f->n_rows);
    int n = 0;
    for (int r = 0; r < f->n_rows && list; r += 2)
        rows[n++] = r;
    int32_t *dl = list ? tu_dev(rows, sizeof(int32_t) * n) : NULL;
    free(rows);
    OK(pl_cuda_attn_decode_rows(&s, af_geom(f), af_layer(f), f->o, dl, list ? n : f->n_rows, 0));
    bool *on = list ? alternate(f, false) : NULL;
    af_check(f, dout, ref, on, TOL_ATTN, list ? "rows (row list)" : "rows");
    free(on);
    cudaFree(dl);
    cudaFree(dout);
}

/* ns 0: the planned count for this GPU. */
static void check_split_kernel(attn_fix *f, const float *ref, pl_split_kind kind, int ns)
{
    const attn_case *c = &f->c;
    if (!pl_cuda_attn_split_supported(kind, c->n_head, c->n_kv, c->hd))
        return;
    if (ns == 0) {
        int n_sm = 0, bpsm = pl_cuda_attn_split_occupancy(kind, c->n_head, c->n_kv, c->hd,
                                                          c->dtype);
        cr_assert_gt(bpsm, 0, "occupancy: %s", pl_cuda_last_error());
        CU(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0));
        ns = pl_cuda_attn_split_plan(f->n_rows * c->n_kv, bpsm, n_sm, PL_ATTN_MAX_SPLITS);
    }
    size_t wsn = pl_cuda_attn_split_ws(f->n_rows, c->n_head, c->hd, ns);
    float *ws = wsn ? tu_dev(NULL, wsn * sizeof(float)) : NULL;
    pl_bf16 *dout = af_poisoned_out(f);
    pl_attn_step s = af_step(f, dout);
    OK(pl_cuda_attn_decode_split(&s, af_geom(f), af_layer(f), f->o, NULL, f->n_rows, ns, ws,
                                 kind, 0));
    char what[64];
    snprintf(what, sizeof what, "%s, %d splits", split_name[kind], ns);
    af_check(f, dout, ref, NULL, TOL_ATTN, what);
    cudaFree(ws);
    cudaFree(dout);
}

static void check_prefill_kernel(attn_fix *f, const float *ref, bool mma, bool list)
{
    const attn_case *c = &f->c;
    if (mma && !pl_cuda_attn_prefill_mma_supported(c->hd))
        return;
    int32_t seqs[AF_MAX_SEQS];
    int n = 0, mx = 0;
    for (int q = 0; q < c->n_seqs; q += list ? 2 : 1) {
        seqs[n++] = q;
        mx = c->new_rows[q] > mx ? c->new_rows[q] : mx;
    }
    int32_t *dl = list ? tu_dev(seqs, sizeof(int32_t) * n) : NULL;
    pl_bf16 *dout = af_poisoned_out(f);
    pl_attn_step s = af_step(f, dout);
    OK(pl_cuda_attn_prefill_seqs(&s, af_geom(f), af_layer(f), f->o, dl, f->dfirst, f->dnrows,
                                 n, mx, mma, 0));
    bool *on = list ? alternate(f, true) : NULL;
    af_check(f, dout, ref, on, TOL_ATTN,
             mma ? (list ? "prefill mma (list)" : "prefill mma")
                 : (list ? "prefill tiled (list)" : "prefill tiled"));
    free(on);
    cudaFree(dl);
    cudaFree(dout);
}

/* One case through every kind: the cache written once (and its bytes
 * checked), the references by q rounding (fp32 for CUDA cores, 16 bits
 * for tensor cores). */
static void run_all_kinds(attn_case c)
{
    attn_fix f;
    af_init(&f, c);
    af_write_and_check(&f);
    size_t n = (size_t)f.n_rows * c.n_head * c.hd;
    float *ref32 = malloc(sizeof(float) * n), *ref16 = malloc(sizeof(float) * n);
    af_reference(&f, AF_Q_F32, ref32);
    af_reference(&f, c.dtype == PL_KV_FP8 ? AF_Q_F16 : AF_Q_BF16, ref16);
    check_rows_kernel(&f, ref32, false);
    check_rows_kernel(&f, ref32, true);
    int splits[] = {1, 3, 8, 0};
    for (int i = 0; i < 4; i++) {
        check_split_kernel(&f, ref32, PL_SPLIT_WARP, splits[i]);
        check_split_kernel(&f, ref32, PL_SPLIT_HALF, splits[i]);
        check_split_kernel(&f, ref16, PL_SPLIT_MMA, splits[i]);
    }
    for (int list = 0; list < 2; list++) {
        check_prefill_kernel(&f, ref32, false, list);
        check_prefill_kernel(&f, ref16, true, list);
    }
    free(ref32);
    free(ref16);
    af_free(&f);
}

#define CASE(...) ((attn_case){__VA_ARGS__})

/* The decode shapes and cached-prefix prefills of earlier issues: groups
 * of 1, 3, 4, 8 query heads, MQA, odd key counts against the 16- and
 * 32-key tiles and the two key streams of split16. */
Test(cuda_attn, base_cases_every_kind)
{
    SKIP_WITHOUT_GPU();
    tu_seed(7);
    run_all_kinds(CASE(9, 3, 64, 3, {1, 17, 100}, {1, 1, 1}));
    run_all_kinds(CASE(32, 8, 128, 2, {33, 128}, {1, 1}));
    run_all_kinds(CASE(8, 1, 64, 1, {128}, {1}));
    run_all_kinds(CASE(4, 4, 64, 2, {5, 77}, {1, 1}));
    run_all_kinds(CASE(64, 8, 128, 3, {2, 3, 31}, {1, 1, 1}));
    run_all_kinds(CASE(9, 3, 64, 3, {70, 5, 128}, {70, 1, 40}));
    run_all_kinds(CASE(32, 8, 128, 2, {100, 37}, {64, 37}));
    run_all_kinds(CASE(8, 1, 64, 1, {33}, {33}));
    run_all_kinds(CASE(16, 4, 128, 3, {1, 65, 127}, {1, 65, 3}));
}

/* Contexts to 4,096: a warp's many tiles (the rescaling across tiles and
 * the cp.async stages), several splits of many pages. */
Test(cuda_attn, long_contexts_many_tiles_per_warp)
{
    SKIP_WITHOUT_GPU();
    tu_seed(11);
    run_all_kinds(CASE(32, 8, 128, 3, {4096, 1500, 544}, {1, 1, 1}));
    run_all_kinds(CASE(8, 2, 64, 2, {4096, 2049}, {1, 1}));
    run_all_kinds(CASE(8, 2, 128, 1, {1500}, {200}));
}

/* Unmapped pages (-1 and ids past the pool) are left out of the softmax,
 * in the prefix and under this step's rows. */
Test(cuda_attn, unmapped_blocks_are_left_out)
{
    SKIP_WITHOUT_GPU();
    tu_seed(13);
    run_all_kinds(CASE(8, 2, 128, 2, {700, 300}, {1, 1}, .holes = 3));
    run_all_kinds(CASE(8, 2, 64, 1, {300}, {150}, .holes = 4));
    run_all_kinds(CASE(4, 1, 128, 2, {40, 16}, {1, 16}, .holes = 1));  /* nothing mapped */
}

/* Scores in the hundreds: the online softmax must not overflow. */
Test(cuda_attn, large_logits)
{
    SKIP_WITHOUT_GPU();
    tu_seed(17);
    run_all_kinds(CASE(16, 4, 128, 2, {1024, 77}, {1, 1}, .qmag = 60.0f));
    run_all_kinds(CASE(8, 8, 64, 1, {200}, {100}, .qmag = 100.0f));
}

/* Gemma's attention: head_dim 256, sliding windows, soft-capping, alone
 * and together, decode and prefill. */
Test(cuda_attn, head_dim_256_window_and_softcap)
{
    SKIP_WITHOUT_GPU();
    tu_seed(19);
    run_all_kinds(CASE(4, 1, 256, 2, {300, 2049}, {1, 1}));
    run_all_kinds(CASE(16, 8, 256, 2, {1000, 40}, {1, 1}, .window = 256));
    run_all_kinds(CASE(8, 4, 256, 1, {600}, {1}, .softcap = 50.0f, .qmag = 30.0f));
    run_all_kinds(CASE(8, 4, 256, 2, {600, 100}, {300, 100}, .window = 128, .softcap = 50.0f,
                       .qmag = 8.0f));
    run_all_kinds(CASE(32, 8, 128, 2, {900, 70}, {1, 70}, .window = 64));
}

/* Gemma 4's global layers: head_dim 512, which only the rows kernel takes,
 * for decode rows and for prefill rows (each at its own position), with
 * the fp8 cache too; the other kernels refuse it. */
static void run_rows_only(attn_case c)
{
    attn_fix f;
    af_init(&f, c);
    af_write_and_check(&f);
    size_t n = (size_t)f.n_rows * c.n_head * c.hd;
    float *ref = malloc(sizeof(float) * n);
    af_reference(&f, AF_Q_F32, ref);
    check_rows_kernel(&f, ref, false);
    check_rows_kernel(&f, ref, true);
    free(ref);
    af_free(&f);
}

Test(cuda_attn, head_dim_512_rows_kernel)
{
    SKIP_WITHOUT_GPU();
    tu_seed(29);
    run_rows_only(CASE(8, 1, 512, 2, {300, 1025}, {1, 1}));
    run_rows_only(CASE(8, 2, 512, 2, {200, 70}, {100, 70}, .softcap = 30.0f, .qmag = 8.0f));
    run_rows_only(CASE(4, 1, 512, 1, {600}, {1}, .dtype = PL_KV_FP8));
    cr_assert(pl_cuda_attn_rows_supported(512));
    cr_assert(!pl_cuda_attn_rows_supported(320));
    cr_assert(!pl_cuda_attn_split_supported(PL_SPLIT_WARP, 8, 1, 512));
    cr_assert(!pl_cuda_attn_split_supported(PL_SPLIT_MMA, 8, 1, 512));
    cr_assert(!pl_cuda_attn_prefill_mma_supported(512));
}

/* gpt-oss's attention sinks: a logit per query head in every softmax's
 * denominator (both signs, small and dominant), through every kind and
 * split count, with its sliding window, GQA groups of 8, the fp8 cache, a
 * first row that sees one key, nothing mapped (zeros), head_dim 512. */
Test(cuda_attn, attention_sinks_every_kind)
{
    SKIP_WITHOUT_GPU();
    tu_seed(37);
    run_all_kinds(CASE(64, 8, 64, 3, {1, 300, 129}, {1, 1, 129}, .sink = 2.0f));
    run_all_kinds(CASE(16, 2, 64, 2, {1000, 200}, {1, 200}, .window = 128, .sink = 3.0f));
    run_all_kinds(CASE(8, 2, 128, 2, {2049, 64}, {1, 64}, .sink = 8.0f));
    run_all_kinds(CASE(16, 4, 128, 2, {600, 40}, {1, 40}, .dtype = PL_KV_FP8, .kscale = 0.05f,
                       .vscale = 0.02f, .sink = 2.0f));
    run_all_kinds(CASE(8, 4, 256, 1, {500}, {100}, .softcap = 50.0f, .qmag = 8.0f,
                       .sink = 4.0f));
    run_all_kinds(CASE(4, 1, 128, 2, {40, 16}, {1, 16}, .holes = 1, .sink = 2.0f));
    run_rows_only(CASE(8, 1, 512, 2, {300, 40}, {1, 40}, .sink = 2.0f));
}

Test(cuda_attn, block_sizes)
{
    SKIP_WITHOUT_GPU();
    tu_seed(23);
    run_all_kinds(CASE(16, 4, 128, 2, {333, 64}, {1, 64}, .bs = 8));
    run_all_kinds(CASE(16, 4, 128, 2, {333, 64}, {1, 64}, .bs = 32));
    run_all_kinds(CASE(8, 8, 64, 2, {1000, 3}, {1, 3}, .bs = 64, .holes = 2));
}

/* fp8 caches: kv_write's bytes equal the host codec's (src/base/fp8.h),
 * every kernel reads them with the per-head scales; at a K scale of 0.001
 * the stored values reach 1000 and many saturate at 448 (the reference
 * reads the same saturated codes). */
Test(cuda_attn, fp8_cache_every_kind)
{
    SKIP_WITHOUT_GPU();
    tu_seed(29);
    run_all_kinds(CASE(32, 8, 128, 2, {33, 128}, {1, 1}, .dtype = PL_KV_FP8, .kscale = 0.05f,
                       .vscale = 0.02f));
    run_all_kinds(CASE(32, 8, 128, 3, {4096, 700, 544}, {1, 1, 1}, .dtype = PL_KV_FP8,
                       .holes = 5));
    run_all_kinds(CASE(9, 3, 64, 3, {70, 5, 128}, {70, 1, 40}, .dtype = PL_KV_FP8,
                       .kscale = 0.01f, .vscale = 0.01f));
    run_all_kinds(CASE(8, 4, 256, 2, {600, 100}, {300, 100}, .window = 128, .softcap = 50.0f,
                       .dtype = PL_KV_FP8, .kscale = 0.001f, .vscale = 0.5f));
}

/* More sequences than gridDim.z allows (65535): every sequence one row at
 * position 0, so each output head is bf16(v) of its own row. */
Test(cuda_attn, prefill_grid_tiles_past_65535_sequences)
{
    SKIP_WITHOUT_GPU();
    tu_seed(31);
    const int S = 65535 + 700, H = 2, KV = 1, HD = 64, QKV = (H + 2 * KV) * HD, BS = 16;
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
    pl_kv_layer kv = {.k = tu_dev(NULL, sizeof(pl_bf16) * (size_t)S * BS * KV * HD),
                      .v = tu_dev(NULL, sizeof(pl_bf16) * (size_t)S * BS * KV * HD)};
    pl_bf16 *dout = tu_dev(NULL, sizeof(pl_bf16) * (size_t)S * H * HD);
    OK(pl_cuda_kv_write(dq, QKV, H * HD, (H + KV) * HD, dpos, drs, dbt, g, kv, S, 0));
    pl_attn_step st = {.q = dq, .q_stride = QKV, .n_heads = H, .positions = dpos,
                       .row_seq = drs, .block_table = dbt, .out = dout};
    float *got = malloc(sizeof(float) * (size_t)S * H * HD);
    for (int mma = 0; mma < 2; mma++) {
        CU(cudaMemset(dout, 0xff, sizeof(pl_bf16) * (size_t)S * H * HD));
        OK(pl_cuda_attn_prefill_seqs(&st, g, kv, pl_attn_plain(0.125f), NULL, drs, dn, S, 1,
                                     mma, 0));
        tu_get_bf16(got, dout, (size_t)S * H * HD);
        double worst = 0;
        for (int s = 0; s < S; s++)
            for (int h = 0; h < H; h++)
                for (int d = 0; d < HD; d++) {
                    float v = pl_bf16_to_fp32(pl_fp32_to_bf16(qkv[(size_t)s * QKV
                                                                  + (H + KV) * HD + d]));
                    double e = fabs(got[((size_t)s * H + h) * HD + d] - v);
                    worst = e > worst || isnan(e) ? (isnan(e) ? INFINITY : e) : worst;
                }
        cr_assert_leq(worst, 0.0, "mma %d: sequence past 65535 not computed (max error %g)",
                      mma, worst);
    }
    cudaFree(dq); cudaFree(dbt); cudaFree(drs); cudaFree(dpos); cudaFree(dn);
    cudaFree(kv.k); cudaFree(kv.v); cudaFree(dout);
    free(qkv); free(idx); free(zero); free(ones); free(got);
}

/* ---- host only: no GPU needed ---- */

/* The entry points refuse what their kernels cannot do before touching
 * the device: a block size that is not a power of two, head sizes and
 * groups without a kernel, options out of range. */
Test(cuda_attn, bad_arguments_are_refused_without_touching_the_device)
{
    int32_t dummy[4];
    pl_bf16 out[4];
    float q[4];
    pl_attn_step s = {.q = q, .q_stride = 8 * 128, .n_heads = 8, .positions = dummy,
                      .row_seq = dummy, .block_table = dummy, .out = out};
    pl_kv_layer kv = {.k = dummy, .v = dummy};
    pl_kv_geom g = {.n_kv_heads = 2, .head_dim = 128, .block_size = 24, .max_blocks_per_seq = 4,
                    .n_blocks = 8};
    pl_attn_opts o = pl_attn_plain(0.1f);
    cr_assert_eq(pl_cuda_attn_decode_rows(&s, g, kv, o, NULL, 1, 0), -1);
    cr_assert(strstr(pl_cuda_last_error(), "block_size"), "%s", pl_cuda_last_error());
    cr_assert_eq(pl_cuda_attn_decode_split(&s, g, kv, o, NULL, 1, 1, NULL, PL_SPLIT_MMA, 0), -1);
    cr_assert_eq(pl_cuda_attn_prefill_seqs(&s, g, kv, o, NULL, dummy, dummy, 1, 1, true, 0), -1);
    g.block_size = 16;
    g.head_dim = 96;
    cr_assert_eq(pl_cuda_attn_decode_split(&s, g, kv, o, NULL, 1, 1, NULL, PL_SPLIT_WARP, 0),
                 -1);
    cr_assert_eq(pl_cuda_attn_prefill_seqs(&s, g, kv, o, NULL, dummy, dummy, 1, 1, true, 0), -1);
    g.head_dim = 128;
    o.softcap = -1.0f;
    cr_assert_eq(pl_cuda_attn_decode_rows(&s, g, kv, o, NULL, 1, 0), -1);
    o = pl_attn_plain(0.1f);
    cr_assert_eq(pl_cuda_attn_decode_split(&s, g, kv, o, NULL, 1, PL_ATTN_MAX_SPLITS + 1, q,
                                           PL_SPLIT_WARP, 0), -1);
    cr_assert_eq(pl_cuda_attn_decode_split(&s, g, kv, o, NULL, 1, 2, NULL, PL_SPLIT_WARP, 0),
                 -1, "several splits need a workspace");
    g.dtype = (pl_kv_dtype)7;
    cr_assert_eq(pl_cuda_kv_write(q, 1024, 0, 512, dummy, dummy, dummy, g, kv, 1, 0), -1);
}

Test(cuda_attn, kernel_shapes_supported)
{
    cr_assert(pl_cuda_attn_split_supported(PL_SPLIT_WARP, 32, 8, 128));
    cr_assert(pl_cuda_attn_split_supported(PL_SPLIT_WARP, 16, 8, 256));
    cr_assert(!pl_cuda_attn_split_supported(PL_SPLIT_WARP, 9, 3, 64), "no G = 3 kernel");
    cr_assert(pl_cuda_attn_split_supported(PL_SPLIT_MMA, 9, 3, 64), "MMA: any G <= 8");
    cr_assert(!pl_cuda_attn_split_supported(PL_SPLIT_MMA, 16, 1, 64), "MMA: G > 8");
    cr_assert(!pl_cuda_attn_split_supported(PL_SPLIT_HALF, 32, 4, 256));
    cr_assert(pl_cuda_attn_split_supported(PL_SPLIT_HALF, 16, 4, 256));
    cr_assert(!pl_cuda_attn_split_supported(PL_SPLIT_MMA, 8, 3, 128), "not a multiple");
    cr_assert(pl_cuda_attn_prefill_mma_supported(256));
    cr_assert(!pl_cuda_attn_prefill_mma_supported(96));
}

/* The split plan (attn_plan.c): the fewest splits filling >= 90 % of the
 * waves, else the best fill. H100: 132 SMs. */
Test(cuda_attn_plan, splits_fill_whole_waves)
{
    /* 8B at 256 rows: 2048 units, 7 blocks/SM: 1 split is 2.22 waves (74 %),
     * 2 give 4.43 (89 %), 3 give 6.65 waves of 7 (95 %). */
    cr_assert_eq(pl_cuda_attn_split_plan(256 * 8, 7, 132, 32), 3);
    /* exactly one full wave: no split */
    cr_assert_eq(pl_cuda_attn_split_plan(924, 7, 132, 32), 1);
    /* 64 rows x 8: 512 units; 5 splits fill 2560 / 2772 = 92 % */
    cr_assert_eq(pl_cuda_attn_split_plan(64 * 8, 7, 132, 32), 5);
    /* batch 1: the most splits (the GPU is never full) */
    cr_assert_eq(pl_cuda_attn_split_plan(8, 7, 132, 32), 32);
    cr_assert_eq(pl_cuda_attn_split_plan(8, 7, 132, 4), 4);
    /* many waves alone: 1 split already fills 95 % */
    cr_assert_eq(pl_cuda_attn_split_plan(20 * 924 - 900, 7, 132, 32), 1);
    /* degenerate arguments count as 1 */
    cr_assert_eq(pl_cuda_attn_split_plan(0, 0, 0, 0), 1);
    cr_assert_eq(pl_cuda_attn_split_plan(1, 1, 1, 32), 1);
}

Test(cuda_attn_plan, plan_is_never_worse_than_one_split)
{
    for (int work = 1; work < 5000; work += 37)
        for (int bpsm = 1; bpsm <= 16; bpsm += 3) {
            int ns = pl_cuda_attn_split_plan(work, bpsm, 132, 32);
            long slots = (long)bpsm * 132, b1 = work, bn = (long)work * ns;
            double f1 = (double)b1 / (double)(((b1 + slots - 1) / slots) * slots);
            double fn = (double)bn / (double)(((bn + slots - 1) / slots) * slots);
            cr_assert(ns >= 1 && ns <= 32, "work %d bpsm %d: %d splits", work, bpsm, ns);
            cr_assert_geq(fn + 1e-12, f1 < 0.9 ? f1 : 0.9, "work %d bpsm %d: %d splits fill "
                          "%.3f, 1 split %.3f", work, bpsm, ns, fn, f1);
        }
}
