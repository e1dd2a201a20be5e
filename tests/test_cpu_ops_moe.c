/* test_cpu_ops_moe.c - the operations of backends/engine/cpu/ that the
 * mixture-of-experts models brought: MXFP4 dot products at every E8M0
 * scale, gpt-oss's clamped SwiGLU and the softmax with an attention sink
 * against their definitions in double, and attention with sinks, whole and
 * in its parts (the split attention's), against a double computation; the
 * router's choice, the grouping of rows by expert, its gather and the
 * weighted sum.
 * (MXFP4 is also among the block-order types of test_cpu_ops, which runs
 * under each PARLEY_CPU_ISA cap.) */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/cpu/ops.h"
#include "backends/engine/model/quant.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static float frand(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng_state >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static void fill(float *x, int n, float scale)
{
    for (int i = 0; i < n; i++)
        x[i] = scale * frand();
}

/* MXFP4's every E8M0 scale, the subnormal ones (e = 0, 1) included, in
 * the 8-row kernels (one and two activation rows) as in the reference;
 * and the dequantised values are the scale times the doubled FP4 value. */
Test(cpu_ops_moe, mxfp4_every_scale)
{
    uint8_t w[8 * 17 * 2];
    float x[128], y[2 * 8], f[32];
    pl_q8_act a[4];
    fill(x, 128, 1.0f);               /* two rows of 64 */
    pl_op_quantize_row_q8(x, a, 128);
    for (int base = 0; base < 256; base += 8) {
        for (int r = 0; r < 8; r++)
            for (int b = 0; b < 2; b++) {
                uint8_t *blk = w + (r * 2 + b) * 17;
                blk[0] = (uint8_t)(base + r < 250 ? base + r : 250 - b);
                memset(blk + 1, b ? 0x9f : 0x71, 16);   /* values 1, 12 | -12, -1 */
            }
        for (int nr = 1; nr <= 2; nr++) {
            pl_op_qmatmul_rows(PL_GGML_TYPE_MXFP4, w, 34, a, 2, nr, y, 8, 0, 8);
            for (int r = 0; r < nr * 8; r++) {
                float ref = pl_op_qdot_ref(PL_GGML_TYPE_MXFP4, w + (r % 8) * 34, a + r / 8 * 2, 64);
                cr_assert(memcmp(&y[r], &ref, 4) == 0, "e %d: %.9g, reference %.9g",
                          base + r % 8, y[r], ref);
            }
        }
        cr_assert_eq(pl_dequant_row(PL_GGML_TYPE_MXFP4, w, f, 32), 0);
        cr_assert(f[0] == ldexpf(1.0f, w[0] - 128) && f[16] == 12.0f * f[0],
                  "e %d: %g", w[0], f[0]);
    }
}

/* The clamped SwiGLU against its definition in double, on both sides of
 * both clamps. */
Test(cpu_ops_moe, swiglu_oai)
{
    enum { N = 401 };
    float g[N], u[N], g0[N];
    for (int i = 0; i < N; i++) {
        g[i] = g0[i] = (float)(i - N / 2) * 0.05f;       /* -10 .. 10 */
        u[i] = (float)(N / 2 - i) * 0.047f;
    }
    pl_op_swiglu_oai(g, u, N, 1.702f, 7.0f);
    for (int i = 0; i < N; i++) {
        double x = fmin(g0[i], 7.0), y = fmax(fmin(u[i], 7.0), -7.0);
        double want = x / (1 + exp(-1.702 * x)) * (y + 1);
        cr_assert_float_eq(g[i], want, 2e-6 * (1 + fabs(want)), "g %g u %g: %g vs %g", g0[i],
                           u[i], g[i], want);
    }
}

/* A sink is one more term of the denominator: the probabilities sum to
 * 1 - p(sink), and a sink far below the logits changes nothing. */
Test(cpu_ops_moe, softmax_sink)
{
    enum { N = 37 };
    float x[N], y[N], z[N];
    fill(x, N, 4.0f);
    memcpy(y, x, sizeof x);
    memcpy(z, x, sizeof x);
    float sink = 1.5f;
    pl_op_softmax_sink(y, N, sink);
    double mx = sink, den = 0;
    for (int i = 0; i < N; i++)
        mx = fmax(mx, x[i]);
    for (int i = 0; i < N; i++)
        den += exp(x[i] - mx);
    den += exp(sink - mx);
    for (int i = 0; i < N; i++)
        cr_assert_float_eq(y[i], exp(x[i] - mx) / den, 1e-7, "p[%d]", i);
    pl_op_softmax(z, N);
    memcpy(y, x, sizeof x);
    pl_op_softmax_sink(y, N, -200.0f);
    for (int i = 0; i < N; i++)
        cr_assert_float_eq(y[i], z[i], 1e-7);
}

/* Attention of 4 query heads with their sinks over a window of a paged
 * cache (f32 and f16): pl_op_attention, its reference and its parts
 * (scores, pl_op_softmax_sink, values) against double. */
Test(cpu_ops_moe, attention_with_sinks)
{
    enum { HD = 64, G = 4, BS = 8, CTX = 45, NB = 8, FIRST = 13 };
    static float kc[NB * BS * HD], vc[NB * BS * HD], q[G * HD], out[3][G * HD];
    static float scr[G * CTX], sc[G * CTX];
    static uint16_t kh[NB * BS * HD], vh[NB * BS * HD];
    int32_t bt[NB];
    float sinks[G] = {0.5f, -1.0f, 3.0f, -30.0f};
    for (int i = 0; i < NB; i++)
        bt[i] = (i * 5 + 3) % NB;
    for (int f16 = 0; f16 < 2; f16++) {
        fill(kc, NB * BS * HD, 1.0f);
        fill(vc, NB * BS * HD, 1.0f);
        fill(q, G * HD, 2.0f);
        pl_op_f32_to_f16_row(kh, kc, NB * BS * HD);
        pl_op_f32_to_f16_row(vh, vc, NB * BS * HD);
        for (int i = 0; f16 && i < NB * BS * HD; i++) {
            kc[i] = pl_op_fp16_to_f32(kh[i]);
            vc[i] = pl_op_fp16_to_f32(vh[i]);
        }
        pl_attn_args a = {.k_base = f16 ? (void *)kh : (void *)kc,
                          .v_base = f16 ? (void *)vh : (void *)vc, .kv_f16 = f16,
                          .block_table = bt, .block_size = BS, .block_stride = BS * HD,
                          .row_stride = HD, .head_dim = HD, .scale = 0.125f, .first = FIRST,
                          .sinks = sinks};
        pl_op_attention(&a, q, G, CTX, out[0], scr);
        pl_op_attention_ref(&a, q, G, CTX, out[1], scr);
        pl_op_attn_scores(&a, q, G, FIRST, CTX, sc, CTX);
        for (int h = 0; h < G; h++)
            pl_op_softmax_sink(sc + h * CTX + FIRST, CTX - FIRST, sinks[h]);
        pl_op_attn_values(&a, sc, CTX, G, CTX, 0, HD, out[2]);
        cr_assert(!memcmp(out[0], out[2], sizeof out[0]), "the parts give the whole's bits");
        for (int h = 0; h < G; h++) {
            double s[CTX], mx = sinks[h], den = 0;
            for (int t = FIRST; t < CTX; t++) {
                const float *k = kc + ((size_t)bt[t / BS] * BS + t % BS) * HD;
                s[t] = 0;
                for (int i = 0; i < HD; i++)
                    s[t] += (double)q[h * HD + i] * k[i];
                s[t] *= 0.125;
                mx = fmax(mx, s[t]);
            }
            for (int t = FIRST; t < CTX; t++)
                den += s[t] = exp(s[t] - mx);
            den += exp(sinks[h] - mx);
            for (int i = 0; i < HD; i++) {
                double o = 0;
                for (int t = FIRST; t < CTX; t++)
                    o += s[t] / den * vc[((size_t)bt[t / BS] * BS + t % BS) * HD + i];
                cr_assert_float_eq(out[0][h * HD + i], o, 2e-6, "f16 %d h %d i %d", f16, h, i);
                cr_assert_float_eq(out[1][h * HD + i], o, 2e-6, "ref f16 %d h %d i %d", f16, h,
                                   i);
            }
        }
    }
}

/* The router against its definition in double: softmax (or not), the k
 * largest in order with ties to the lower index, weights renormalised (or
 * a softmax over the k). */
Test(cpu_ops_moe, moe_route)
{
    enum { E = 40, K = 6 };
    for (int mode = 0; mode < 3; mode++)
        for (int rep = 0; rep < 20; rep++) {
            float lg[E], orig[E], w[K];
            int32_t sel[K];
            fill(orig, E, 3.0f);
            orig[7] = orig[3] = 5.0f;               /* a tie at the top: 3 first */
            memcpy(lg, orig, sizeof lg);
            int topk = mode == 2, norm = mode == 1;
            pl_op_moe_route(lg, E, K, topk, norm, sel, w);
            cr_assert(sel[0] == 3 && sel[1] == 7, "ties go to the lower index");
            double mx = -1e30, z = 0, zk = 0, sk = 0;
            for (int e = 0; e < E; e++)
                mx = fmax(mx, orig[e]);
            for (int e = 0; e < E; e++)
                z += exp(orig[e] - mx);
            for (int j = 0; j < K; j++) {
                if (j)
                    cr_assert_geq(orig[sel[j - 1]], orig[sel[j]], "rank order");
                zk += exp(orig[sel[j]] - orig[sel[0]]);
                sk += exp(orig[sel[j]] - mx) / z;
            }
            for (int e = 0; e < E; e++) {          /* nothing left out beats the k-th */
                int in = 0;
                for (int j = 0; j < K; j++)
                    in |= sel[j] == e;
                cr_assert(in || orig[e] <= orig[sel[K - 1]], "expert %d left out", e);
            }
            for (int j = 0; j < K; j++) {
                double p = exp(orig[sel[j]] - mx) / z;
                double want = topk ? exp(orig[sel[j]] - orig[sel[0]]) / zk : norm ? p / sk : p;
                cr_assert_float_eq(w[j], want, 1e-6, "mode %d rank %d", mode, j);
            }
        }
}

/* The grouping: each expert's places are one run, in the pairs' order;
 * slot_of and row_of are inverse. */
Test(cpu_ops_moe, moe_group)
{
    enum { E = 13, K = 3, N = 50 };
    int32_t sel[N * K], counts[E], off[E + 1], slot[N * K], row[N * K];
    for (int i = 0; i < N * K; i++)
        sel[i] = (int32_t)((i * 7 + i / 5) % (E - 2));   /* two experts unused */
    pl_op_moe_group(sel, N * K, K, E, counts, off, slot, row);
    cr_assert_eq(off[0], 0);
    cr_assert_eq(off[E], N * K);
    for (int e = 0; e < E; e++) {
        cr_assert_eq(off[e + 1] - off[e], counts[e]);
        int last = -1;
        for (int i = 0; i < N * K; i++)
            if (sel[i] == e) {
                cr_assert(slot[i] >= off[e] && slot[i] < off[e + 1], "pair %d", i);
                cr_assert_gt(slot[i], last, "pair %d out of order", i);
                last = slot[i];
            }
    }
    cr_assert(counts[E - 1] == 0 && counts[E - 2] == 0);
    for (int i = 0; i < N * K; i++)
        cr_assert_eq(row[slot[i]], i / K);
}

/* The gather copies each place's row whole, whatever the row's bytes; the
 * places outside [s0, s1) are left alone. */
Test(cpu_ops_moe, moe_gather)
{
    enum { N = 6, S = 9, B = 36 };              /* 36 bytes: a q8 block's size */
    uint8_t x[N * B], out[S * B];
    int32_t row_of[S] = {5, 0, 0, 3, 1, 5, 2, 4, 0};
    for (int i = 0; i < N * B; i++)
        x[i] = (uint8_t)(i * 13 + 7);
    memset(out, 0xAB, sizeof out);
    pl_op_moe_gather(x, B, row_of, 2, 8, out);
    for (int s = 0; s < S; s++)
        for (int c = 0; c < B; c++)
            cr_assert_eq(out[s * B + c], s < 2 || s >= 8 ? 0xAB : x[row_of[s] * B + c],
                         "place %d byte %d", s, c);
}

/* The combine: within float rounding of the double sum (k roundings of
 * the magnitudes' sum); with one expert, exactly w * y. */
Test(cpu_ops_moe, moe_combine)
{
    enum { P = 12, K = 4, D = 33 };
    float y[P * D], w[K], out[D];
    int32_t slot[K] = {7, 2, 11, 0};
    fill(y, P * D, 3.0f);
    fill(w, K, 1.0f);
    pl_op_moe_combine(y, slot, w, K, D, out);
    for (int c = 0; c < D; c++) {
        double s = 0.0, a = 0.0;
        for (int j = 0; j < K; j++) {
            s += (double)w[j] * y[slot[j] * D + c];
            a += fabs((double)w[j] * y[slot[j] * D + c]);
        }
        cr_assert_leq(fabs(out[c] - s), 4 * 1.2e-7 * a + 1e-30, "c %d", c);
    }
    pl_op_moe_combine(y, slot + 2, w + 2, 1, D, out);
    for (int c = 0; c < D; c++)
        cr_assert_eq(out[c], w[2] * y[11 * D + c]);
}
