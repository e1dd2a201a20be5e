/* test_cuda_moe.c - the CUDA runner's expert kernels (backends/engine/
 * cuda/moe_*.cu) against the CPU runner's references (cpu/ops.h): the
 * router's choice (pl_op_moe_route: the same experts, weights within
 * 1e-6), the grouping (pl_op_moe_group: the same places, exactly), the
 * grouped GEMM on bf16 and MXFP4 experts (a float64 product of the
 * dequantised weights and the bf16 inputs: 1e-4 normalised, fp32 order
 * only), the activations (pl_op_swiglu, pl_op_geglu, pl_op_swiglu_oai:
 * bf16 outputs, 8e-3), the permute (pl_op_moe_gather: the same bytes)
 * and the weighted sum (pl_op_moe_combine: 1e-6); then a whole expert block of
 * tiny_gptoss_mxfp4's layer 0 against the same steps in float64 on the
 * host (1e-2: bf16 activations between the GEMMs). Skipped without a GPU.
 */
#include <stdio.h>

#include "tests/cuda_test_util.h"

#include "backends/engine/cpu/ops.h"
#include "backends/engine/cuda/moe_gemm.cuh"
#include "backends/engine/cuda/moe_plan.cuh"
#include "backends/engine/cuda/moe_route.cuh"
#include "backends/engine/cuda/moe_weights.h"
#include "backends/formats/gguf.h"
#include "backends/engine/model/quant.h"

/* Logits whose sorted values are at least 0.01 apart (no near ties). */
static void spaced_logits(float *lg, int n, int E)
{
    for (int r = 0; r < n; r++)
        for (int e = 0; e < E; e++)
            lg[r * E + e] = 0.01f * (float)((e * 37 + r * 11) % E) + 0.002f * tu_uniform();
}

Test(cuda_moe, route_matches_reference)
{
    SKIP_WITHOUT_GPU();
    enum { N = 37 };
    static const int experts[] = {8, 32, 128, 512}, ks[] = {2, 4, 8, 32};
    for (int c = 0; c < 4; c++)
        for (int mode = 0; mode < 4; mode++) {
            /* mode 3: mode 0's rule with Gemma 4's per-expert scales */
            int E = experts[c], k = ks[c];
            float *lg = malloc(sizeof(float) * N * E), *tmp = malloc(sizeof(float) * E);
            float *es = malloc(sizeof(float) * E);
            float w[N * 32], wr[32];
            int32_t sel[N * 32], sr[32];
            spaced_logits(lg, N, E);
            for (int e = 0; e < E; e++)
                es[e] = 0.5f + (float)((e * 13) % 7) * 0.25f;
            float *dl = tu_dev(lg, sizeof(float) * N * E), *dw = tu_dev(NULL, sizeof w);
            float *des = tu_dev(es, sizeof(float) * E);
            int32_t *ds = tu_dev(NULL, sizeof sel);
            OK(pl_cuda_moe_route(dl, N, E, k, mode == 2, mode == 1, mode == 3 ? des : NULL, ds,
                                 dw, 0));
            tu_get(sel, ds, sizeof(int32_t) * N * k);
            tu_get(w, dw, sizeof(float) * N * k);
            for (int r = 0; r < N; r++) {
                memcpy(tmp, lg + r * E, sizeof(float) * E);
                pl_op_moe_route(tmp, E, k, mode == 2, mode == 1, sr, wr);
                for (int j = 0; mode == 3 && j < k; j++)   /* as pl_fwd_moe_route_ */
                    wr[j] *= es[sr[j]];
                for (int j = 0; j < k; j++) {
                    cr_assert_eq(sel[r * k + j], sr[j], "E %d mode %d row %d rank %d", E, mode,
                                 r, j);
                    cr_assert_float_eq(w[r * k + j], wr[j], 2e-6, "E %d mode %d row %d", E, mode,
                                       r);
                }
            }
            cudaFree(dl); cudaFree(dw); cudaFree(ds); cudaFree(des);
            free(lg); free(tmp); free(es);
        }
}

/* Device buffers of a plan for n_pairs over E experts. */
static pl_cuda_moe_plan plan_new(int n_pairs, int E)
{
    pl_cuda_moe_plan p = {.max_tiles = pl_cuda_moe_max_tiles(n_pairs, E)};
    p.counts = tu_dev(NULL, sizeof(int32_t) * E);
    p.offsets = tu_dev(NULL, sizeof(int32_t) * (E + 1));
    p.slot_of = tu_dev(NULL, sizeof(int32_t) * n_pairs);
    p.row_of = tu_dev(NULL, sizeof(int32_t) * n_pairs);
    p.tile_e = tu_dev(NULL, sizeof(int32_t) * p.max_tiles);
    p.tile_p0 = tu_dev(NULL, sizeof(int32_t) * p.max_tiles);
    p.n_tiles = tu_dev(NULL, sizeof(int32_t));
    return p;
}

static void plan_free(pl_cuda_moe_plan *p)
{
    cudaFree(p->counts); cudaFree(p->offsets); cudaFree(p->slot_of); cudaFree(p->row_of);
    cudaFree(p->tile_e); cudaFree(p->tile_p0); cudaFree(p->n_tiles);
}

/* Expert ids for n rows of k distinct experts, skewed: low ids more often. */
static void random_sel(int32_t *sel, int n, int k, int E)
{
    for (int r = 0; r < n; r++)
        for (int j = 0; j < k; j++) {
            int e, dup;
            do {
                float u = 0.5f * (tu_uniform() + 1.0f);
                e = (int)(u * u * E) % E;
                dup = 0;
                for (int i = 0; i < j; i++)
                    dup |= sel[r * k + i] == e;
            } while (dup);
            sel[r * k + j] = e;
        }
}

Test(cuda_moe, group_matches_reference)
{
    SKIP_WITHOUT_GPU();
    static const int rows[] = {1, 3, 40, 513}, experts[] = {8, 64, 128, 512}, ks[] = {2, 8, 4, 8};
    for (int c = 0; c < 4; c++) {
        int n = rows[c], E = experts[c], k = ks[c], np = n * k;
        int32_t *sel = malloc(sizeof(int32_t) * np);
        int32_t *buf = malloc(sizeof(int32_t) * (2 * (size_t)E + 1 + 2 * (size_t)np));
        int32_t *cnt = buf, *off = cnt + E, *slot = off + E + 1, *row = slot + np;
        int32_t *got = malloc(sizeof(int32_t) * (np * 2 + E * 2 + 1));
        random_sel(sel, n, k, E);
        pl_op_moe_group(sel, np, k, E, cnt, off, slot, row);
        pl_cuda_moe_plan p = plan_new(np, E);
        int32_t *ds = tu_dev(sel, sizeof(int32_t) * np);
        OK(pl_cuda_moe_group(ds, np, k, E, &p, 0));
        tu_get(got, p.offsets, sizeof(int32_t) * (E + 1));
        cr_assert(!memcmp(got, off, sizeof(int32_t) * (E + 1)), "offsets, case %d", c);
        tu_get(got, p.slot_of, sizeof(int32_t) * np);
        cr_assert(!memcmp(got, slot, sizeof(int32_t) * np), "slot_of, case %d", c);
        tu_get(got, p.row_of, sizeof(int32_t) * np);
        cr_assert(!memcmp(got, row, sizeof(int32_t) * np), "row_of, case %d", c);
        int nt, *te = malloc(sizeof(int) * p.max_tiles), *tp = malloc(sizeof(int) * p.max_tiles);
        tu_get(&nt, p.n_tiles, sizeof nt);
        tu_get(te, p.tile_e, sizeof(int) * p.max_tiles);
        tu_get(tp, p.tile_p0, sizeof(int) * p.max_tiles);
        int covered = 0;
        for (int t = 0; t < nt; t++) {           /* the tiles cover each place once */
            cr_assert(tp[t] >= off[te[t]] && tp[t] < off[te[t] + 1]);
            int end = tp[t] + PL_CUDA_MOE_TILE_ROWS;
            covered += (end < off[te[t] + 1] ? end : off[te[t] + 1]) - tp[t];
        }
        cr_assert_eq(covered, np);
        cr_assert_leq(nt, p.max_tiles);
        plan_free(&p);
        cudaFree(ds);
        free(sel); free(buf); free(got); free(te); free(tp);
    }
}

/* Random weights of E experts (rows, cols) in fmt: the device image in img
 * (pl_cuda_moe_row_bytes per row) and the values in wf. */
static void random_experts(pl_cuda_moe_wfmt fmt, int E, int rows, int cols, uint8_t *img,
                           float *wf)
{
    size_t rb = pl_cuda_moe_row_bytes(fmt, cols), n = (size_t)E * rows;
    for (size_t r = 0; r < n; r++) {
        uint8_t *row = img + r * rb;
        if (fmt == PL_CUDA_MOE_W_MXFP4) {
            for (size_t i = 0; i < rb; i++)
                row[i] = (uint8_t)((tu_uniform() + 1.0f) * 127.9f);
            for (int b = 0; b < cols / 32; b++)      /* scales 2^-9 .. 2^-4 */
                row[b * 17] = (uint8_t)(119 + row[b * 17] % 6);
            pl_dequant_row(PL_GGML_TYPE_MXFP4, row, wf + r * cols, cols);
        } else {
            tu_fill(wf + r * cols, cols, 0.5f);
            tu_round_bf16(wf + r * cols, cols);
            for (int c = 0; c < cols; c++)
                ((pl_bf16 *)(void *)row)[c] = pl_fp32_to_bf16(wf[r * cols + c]);
        }
    }
}

static void check_gemm(pl_cuda_moe_wfmt fmt, int n, int k, int E, int rows, int cols, int bias)
{
    int np = n * k;
    size_t rb = pl_cuda_moe_row_bytes(fmt, cols);
    uint8_t *img = malloc(rb * E * rows);
    float *wf = malloc(sizeof(float) * E * rows * cols), *x = malloc(sizeof(float) * n * cols);
    float *b = malloc(sizeof(float) * E * rows), *y = malloc(sizeof(float) * np * rows);
    float *ref = malloc(sizeof(float) * np * rows);
    int32_t *sel = malloc(sizeof(int32_t) * np), *scr = malloc(sizeof(int32_t) * (np * 2 + 2 * E + 1));
    random_experts(fmt, E, rows, cols, img, wf);
    tu_fill(x, (size_t)n * cols, 1.0f);
    tu_round_bf16(x, (size_t)n * cols);
    tu_fill(b, (size_t)E * rows, 0.3f);
    random_sel(sel, n, k, E);
    int32_t *cnt = scr, *off = cnt + E, *slot = off + E + 1, *row = slot + np;
    pl_op_moe_group(sel, np, k, E, cnt, off, slot, row);
    for (int i = 0; i < np; i++)
        for (int o = 0; o < rows; o++) {
            const float *we = wf + ((size_t)sel[i] * rows + o) * cols, *xr = x + (size_t)(i / k) * cols;
            double s = bias ? b[sel[i] * rows + o] : 0.0;
            for (int c = 0; c < cols; c++)
                s += (double)xr[c] * we[c];
            ref[(size_t)slot[i] * rows + o] = (float)s;
        }
    pl_cuda_moe_plan p = plan_new(np, E);
    int32_t *ds = tu_dev(sel, sizeof(int32_t) * np);
    pl_bf16 *dx = tu_dev_bf16(x, (size_t)n * cols), *da = tu_dev(NULL, sizeof(pl_bf16) * np * cols);
    float *dy = tu_dev(NULL, sizeof(float) * np * rows), *db = tu_dev(b, sizeof(float) * E * rows);
    pl_cuda_moe_w w = {.w = tu_dev(img, rb * E * rows), .fmt = fmt, .n_expert = E, .rows = rows,
                       .cols = cols, .bias = bias ? db : NULL};
    OK(pl_cuda_moe_group(ds, np, k, E, &p, 0));
    OK(pl_cuda_moe_permute(dx, p.row_of, da, np, cols, 0));
    OK(pl_cuda_moe_gemm(&w, da, dy, &p, 0));
    tu_get(y, dy, sizeof(float) * np * rows);
    cr_assert_leq(tu_nerr(y, ref, (size_t)np * rows), 1e-4, "fmt %d n %d k %d E %d %dx%d",
                  fmt, n, k, E, rows, cols);
    plan_free(&p);
    cudaFree(ds); cudaFree(dx); cudaFree(da); cudaFree(dy); cudaFree(db); cudaFree((void *)w.w);
    free(img); free(wf); free(x); free(b); free(y); free(ref); free(sel); free(scr);
}

/* Decode-like (1 and 3 rows) and prefill-like (70 rows: tiles of several
 * experts, partial tiles) shapes, outputs not a multiple of the tile. */
Test(cuda_moe, grouped_gemm_matches_reference)
{
    SKIP_WITHOUT_GPU();
    for (int fmt = 0; fmt < 2; fmt++) {
        check_gemm(fmt, 1, 4, 8, 96, 64, 1);
        check_gemm(fmt, 3, 8, 64, 200, 128, 0);
        check_gemm(fmt, 70, 4, 16, 130, 96, 1);
    }
}

Test(cuda_moe, activations_match_reference)
{
    SKIP_WITHOUT_GPU();
    enum { S = 7, F = 160 };
    float g[S * F], u[S * F], ref[S * F], got[S * F];
    for (int act = 0; act < 3; act++) {
        tu_fill(g, S * F, 9.0f);                   /* both sides of the clamp at 7 */
        tu_fill(u, S * F, 9.0f);
        memcpy(ref, g, sizeof g);
        if (act == 2)
            pl_op_swiglu_oai(ref, u, S * F, 1.702f, 7.0f);
        else if (act == 1)
            pl_op_geglu(ref, u, S * F);
        else
            pl_op_swiglu(ref, u, S * F);
        float *dg = tu_dev(g, sizeof g), *du = tu_dev(u, sizeof u);
        pl_bf16 *dh = tu_dev(NULL, sizeof(pl_bf16) * S * F);
        OK(pl_cuda_moe_act(dg, du, dh, S, F, act, 0));
        tu_get_bf16(got, dh, S * F);
        cr_assert_leq(tu_nerr(got, ref, S * F), 8e-3, "act %d", act);
        cudaFree(dg); cudaFree(du); cudaFree(dh);
    }
}

/* The permute is a copy: pl_op_moe_gather's bytes, a plan's places. */
Test(cuda_moe, permute_matches_reference)
{
    SKIP_WITHOUT_GPU();
    enum { N = 9, K = 4, E = 16, D = 96, NP = N * K };
    float x[N * D];
    pl_bf16 xb[N * D], ref[NP * D], got[NP * D];
    int32_t sel[NP], cnt[E], off[E + 1], slot[NP], row[NP];
    tu_fill(x, N * D, 4.0f);
    for (int i = 0; i < N * D; i++)
        xb[i] = pl_fp32_to_bf16(x[i]);
    random_sel(sel, N, K, E);
    pl_op_moe_group(sel, NP, K, E, cnt, off, slot, row);
    pl_op_moe_gather(xb, sizeof(pl_bf16) * D, row, 0, NP, ref);
    pl_bf16 *dx = tu_dev(xb, sizeof xb), *dp = tu_dev(NULL, sizeof got);
    int32_t *dr = tu_dev(row, sizeof row);
    OK(pl_cuda_moe_permute(dx, dr, dp, NP, D, 0));
    tu_get(got, dp, sizeof got);
    cr_assert(!memcmp(got, ref, sizeof got));
    cudaFree(dx); cudaFree(dp); cudaFree(dr);
}

/* The weighted sum against pl_op_moe_combine, row by row (the device may
 * fuse the multiply-adds: 1e-6 normalised). */
Test(cuda_moe, combine_matches_reference)
{
    SKIP_WITHOUT_GPU();
    enum { N = 5, K = 3, D = 70 };
    float y[N * K * D], wt[N * K], out[N * D], ref[N * D];
    int32_t slot[N * K];
    tu_fill(y, N * K * D, 2.0f);
    tu_fill(wt, N * K, 1.0f);
    for (int i = 0; i < N * K; i++)
        slot[i] = (i * 7) % (N * K);               /* a permutation */
    for (int r = 0; r < N; r++)
        pl_op_moe_combine(y, slot + r * K, wt + r * K, K, D, ref + r * D);
    float *dy = tu_dev(y, sizeof y), *dw = tu_dev(wt, sizeof wt), *dout = tu_dev(NULL, sizeof out);
    int32_t *dsl = tu_dev(slot, sizeof slot);
    OK(pl_cuda_moe_combine(dy, dsl, dw, dout, N, K, D, 0));
    tu_get(out, dout, sizeof out);
    cr_assert_leq(tu_nerr(out, ref, N * D), 1e-6);
    cudaFree(dy); cudaFree(dw); cudaFree(dout); cudaFree(dsl);
}

/* Host float64 of one expert's block for row x (bf16-rounded inputs). */
static void expert_ref(const pl_layer *y, int e, const float *x, int D, int F, double *out)
{
    float *wr = malloc(sizeof(float) * (D > F ? D : F));
    double *a = malloc(sizeof(double) * F);
    for (int i = 0; i < F; i++) {
        double g = y->gate_exps_b[e * F + i], u = y->up_exps_b[e * F + i];
        pl_weight wg = pl_experts_at(&y->gate_exps, e), wu = pl_experts_at(&y->up_exps, e);
        pl_dequant_row(wg.type, (const uint8_t *)wg.q + (size_t)i * wg.row_bytes, wr, D);
        for (int c = 0; c < D; c++)
            g += (double)wr[c] * x[c];
        pl_dequant_row(wu.type, (const uint8_t *)wu.q + (size_t)i * wu.row_bytes, wr, D);
        for (int c = 0; c < D; c++)
            u += (double)wr[c] * x[c];
        g = g < 7 ? g : 7;
        u = u < -7 ? -7 : u > 7 ? 7 : u;
        a[i] = g / (1 + exp(-1.702 * g)) * (u + 1);
    }
    pl_weight wd = pl_experts_at(&y->down_exps, e);
    for (int o = 0; o < D; o++) {
        pl_dequant_row(wd.type, (const uint8_t *)wd.q + (size_t)o * wd.row_bytes, wr, F);
        double s = y->down_exps_b[e * D + o];
        for (int i = 0; i < F; i++)
            s += (double)wr[i] * a[i];
        out[o] = s;
    }
    free(wr);
    free(a);
}

/* Layer 0 of tiny_gptoss_mxfp4 (8 MXFP4 experts, top 4, biases, the
 * clamped SwiGLU) on 6 rows: logits, route, group, gather, gate, up,
 * activation, down, weighted sum - against float64 on the host. */
Test(cuda_moe, gptoss_expert_block_matches_reference)
{
    SKIP_WITHOUT_GPU();
    const char *src = getenv("PARLEY_SRC");
    char p[1024], err[256];
    snprintf(p, sizeof p, "%s/tests/fixtures/tiny_gptoss_mxfp4.gguf", src ? src : ".");
    pl_gguf *g = pl_gguf_open(p, err, sizeof err);
    cr_assert(g, "%s", err);
    pl_model_opts mo = {.keep_f32 = false, .keep_packed = pl_keep_packed_all};
    pl_model *m = pl_model_load(g, &mo, err, sizeof err);
    cr_assert(m, "%s", err);
    const pl_layer *y = &m->layers[0];
    enum { N = 6 };
    int D = m->n_embd, F = m->n_ff_exp, E = m->n_expert, K = m->n_expert_used, np = N * K;
    float *x = malloc(sizeof(float) * N * D), *out = malloc(sizeof(float) * N * D);
    float *ref = malloc(sizeof(float) * N * D), lg[64], wt[32];
    double *o = malloc(sizeof(double) * D);
    int32_t sel[32];
    tu_fill(x, (size_t)N * D, 1.5f);
    tu_round_bf16(x, (size_t)N * D);
    for (int r = 0; r < N; r++) {
        for (int e = 0; e < E; e++)
            lg[e] = pl_op_dot_f32(y->gate_inp.f32 + (size_t)e * D, x + r * D, D) +
                    y->gate_inp_b[e];
        pl_op_moe_route(lg, E, K, 1, 0, sel, wt);
        for (int c = 0; c < D; c++)
            ref[r * D + c] = 0;
        for (int j = 0; j < K; j++) {
            expert_ref(y, sel[j], x + r * D, D, F, o);
            for (int c = 0; c < D; c++)
                ref[r * D + c] += (float)(wt[j] * o[c]);
        }
    }
    pl_cuda_moe_w wg, wu, wd;
    cr_assert_eq(pl_cuda_moe_upload(&y->gate_exps, y->gate_exps_b, &wg, err, sizeof err), 0, "%s", err);
    cr_assert_eq(pl_cuda_moe_upload(&y->up_exps, y->up_exps_b, &wu, err, sizeof err), 0, "%s", err);
    cr_assert_eq(pl_cuda_moe_upload(&y->down_exps, y->down_exps_b, &wd, err, sizeof err), 0, "%s", err);
    cr_assert_eq(wg.fmt, PL_CUDA_MOE_W_MXFP4);
    pl_cuda_moe_plan pl = plan_new(np, E);
    float *dx = tu_dev(x, sizeof(float) * N * D), *dr = tu_dev(y->gate_inp.f32, sizeof(float) * E * D);
    float *drb = tu_dev(y->gate_inp_b, sizeof(float) * E), *dlg = tu_dev(NULL, sizeof(float) * N * E);
    float *dwt = tu_dev(NULL, sizeof(float) * np), *dg = tu_dev(NULL, sizeof(float) * np * F);
    float *du = tu_dev(NULL, sizeof(float) * np * F), *dy = tu_dev(NULL, sizeof(float) * np * D);
    float *dout = tu_dev(NULL, sizeof(float) * N * D);
    int32_t *dsel = tu_dev(NULL, sizeof(int32_t) * np);
    pl_bf16 *dxb = tu_dev_bf16(x, (size_t)N * D), *da = tu_dev(NULL, sizeof(pl_bf16) * np * D);
    pl_bf16 *dh = tu_dev(NULL, sizeof(pl_bf16) * np * F);
    OK(pl_cuda_moe_logits(dx, dr, drb, dlg, N, D, E, 0));
    OK(pl_cuda_moe_route(dlg, N, E, K, 1, 0, NULL, dsel, dwt, 0));
    OK(pl_cuda_moe_group(dsel, np, K, E, &pl, 0));
    OK(pl_cuda_moe_permute(dxb, pl.row_of, da, np, D, 0));
    OK(pl_cuda_moe_gemm(&wg, da, dg, &pl, 0));
    OK(pl_cuda_moe_gemm(&wu, da, du, &pl, 0));
    OK(pl_cuda_moe_act(dg, du, dh, np, F, 2, 0));
    OK(pl_cuda_moe_gemm(&wd, dh, dy, &pl, 0));
    OK(pl_cuda_moe_combine(dy, pl.slot_of, dwt, dout, N, K, D, 0));
    tu_get(out, dout, sizeof(float) * N * D);
    cr_assert_leq(tu_nerr(out, ref, (size_t)N * D), 1e-2);
    void *bufs[] = {dx, dr, drb, dlg, dwt, dg, du, dy, dout, dsel, dxb, da, dh};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        cudaFree(bufs[i]);
    plan_free(&pl);
    pl_cuda_moe_w_free(&wg); pl_cuda_moe_w_free(&wu); pl_cuda_moe_w_free(&wd);
    free(x); free(out); free(ref); free(o);
    pl_model_free(m);
    pl_gguf_free(g);
}
