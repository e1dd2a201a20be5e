/* test_cpu_ops_ssm.c - the Gated DeltaNet kernels of backends/engine/cpu/
 * (ops_ssm.h) against the rule's definition computed step by step in
 * double: the chunked form on every path this CPU has (the file runs
 * again under PARLEY_CPU_ISA=avx2 and scalar), at Qwen3.5's head size,
 * with odd chunk lengths, strided rows and a state carried from chunk to
 * chunk; the scalar chunked form; the recurrent step (its SIMD path the
 * scalar one's bits); the causal conv with its state. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/cpu/ops_ssm.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dULL;

static float frand(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng_state >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

typedef struct {
    int T, d;
    size_t ld_qk, ld_v;
    float *q, *k, *v, *lg, *bt, *S0;
} gdn_case;

/* T rows of normalised q (scaled) and k, v, decays and betas as the layer
 * makes them; an initial state of the size a long prompt leaves. */
static gdn_case make_case(int T, int d)
{
    gdn_case c = {.T = T, .d = d, .ld_qk = (size_t)3 * d, .ld_v = (size_t)2 * d};
    c.q = calloc((size_t)T * c.ld_qk, sizeof(float));
    c.k = calloc((size_t)T * c.ld_qk, sizeof(float));
    c.v = calloc((size_t)T * c.ld_v, sizeof(float));
    c.lg = malloc(sizeof(float) * T);
    c.bt = malloc(sizeof(float) * T);
    c.S0 = malloc(sizeof(float) * d * d);
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < d; i++) {
            c.q[t * c.ld_qk + i] = frand();
            c.k[t * c.ld_qk + i] = frand();
            c.v[t * c.ld_v + i] = 2.0f * frand();
        }
        pl_op_l2norm(c.q + t * c.ld_qk, d, 1e-6f, 1.0f / sqrtf((float)d));
        pl_op_l2norm(c.k + t * c.ld_qk, d, 1e-6f, 1.0f);
        c.lg[t] = -0.3f * (frand() + 1.0f);        /* decays in [e^-0.6, 1] */
        c.bt[t] = 0.5f * (frand() + 1.0f);
    }
    for (int i = 0; i < d * d; i++)
        c.S0[i] = 0.5f * frand();
    return c;
}

static void free_case(gdn_case *c)
{
    free(c->q), free(c->k), free(c->v), free(c->lg), free(c->bt), free(c->S0);
}

/* The definition, one row at a time in double:
 *   S = g S;  u = beta (v - S^T k);  S += k u^T;  o = S^T q */
static void steps_double(const gdn_case *c, double *S, double *o)
{
    int d = c->d;
    double *u = malloc(sizeof(double) * d);
    for (int t = 0; t < c->T; t++) {
        const float *q = c->q + t * c->ld_qk, *k = c->k + t * c->ld_qk, *v = c->v + t * c->ld_v;
        double g = exp((double)c->lg[t]);
        for (int i = 0; i < d * d; i++)
            S[i] *= g;
        for (int j = 0; j < d; j++) {
            double s = 0;
            for (int i = 0; i < d; i++)
                s += S[i * d + j] * k[i];
            u[j] = c->bt[t] * (v[j] - s);
        }
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++)
                S[i * d + j] += k[i] * u[j];
        for (int j = 0; j < d; j++) {
            double s = 0;
            for (int i = 0; i < d; i++)
                s += S[i * d + j] * q[i];
            o[t * d + j] = s;
        }
    }
    free(u);
}

typedef void (*chunk_fn)(float *, const float *, size_t, const float *, const float *, size_t,
                         const float *, const float *, float *, size_t, int, int, int, float *);

/* The rows in chunks of at most `chunk` through fn (outputs ld_o = d + 16
 * apart), against the double steps: the largest error over outputs and
 * final state, relative to the largest reference magnitude. */
static double chunk_error(chunk_fn fn, int T, int d, int chunk)
{
    gdn_case c = make_case(T, d);
    size_t dd = (size_t)d * d, ld_o = (size_t)d + 16;
    double *Sr = malloc(sizeof(double) * dd), *orf = malloc(sizeof(double) * T * d);
    float *S = malloc(sizeof(float) * dd), *o = malloc(sizeof(float) * T * ld_o);
    float *scr = malloc(sizeof(float) * pl_op_gdn_chunk_scratch(chunk, d, d));
    for (size_t i = 0; i < dd; i++)
        Sr[i] = S[i] = c.S0[i];
    steps_double(&c, Sr, orf);
    for (int t0 = 0; t0 < T; t0 += chunk) {
        int n = T - t0 < chunk ? T - t0 : chunk;
        fn(S, c.q + t0 * c.ld_qk, c.ld_qk, c.k + t0 * c.ld_qk, c.v + t0 * c.ld_v, c.ld_v,
           c.lg + t0, c.bt + t0, o + t0 * ld_o, ld_o, n, d, d, scr);
    }
    double err = 0, mag = 0;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < d; j++) {
            err = fmax(err, fabs(o[t * ld_o + j] - orf[t * d + j]));
            mag = fmax(mag, fabs(orf[t * d + j]));
        }
    for (size_t i = 0; i < dd; i++) {
        err = fmax(err, fabs(S[i] - Sr[i]));
        mag = fmax(mag, fabs(Sr[i]));
    }
    free_case(&c);
    free(Sr), free(orf), free(S), free(o), free(scr);
    return err / mag;
}

/* The dispatched chunked form (AVX-512, AVX2 or scalar, as the CPU and
 * PARLEY_CPU_ISA allow) at d = 128 and d = 32, chunks of 64 and of odd
 * lengths (tails of the 16-wide tiles), a state carried across chunks. */
Test(cpu_ops_ssm, chunk_matches_double_steps)
{
    int cases[][3] = {{64, 128, 64}, {150, 128, 64}, {37, 128, 37}, {9, 128, 9},
                      {1, 128, 1}, {40, 32, 24}, {70, 16, 23}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double e = chunk_error(pl_op_gdn_chunk, cases[i][0], cases[i][1], cases[i][2]);
        cr_log_info("chunk T=%d d=%d chunk=%d: rel err %.2e", cases[i][0], cases[i][1],
                    cases[i][2], e);
        cr_expect_lt(e, 5e-6, "T=%d d=%d chunk=%d: relative error %g", cases[i][0],
                     cases[i][1], cases[i][2], e);
    }
}

Test(cpu_ops_ssm, chunk_ref_matches_double_steps)
{
    double e = chunk_error(pl_op_gdn_chunk_ref, 150, 128, 64);
    cr_expect_lt(e, 5e-6, "scalar chunked form: relative error %g", e);
}

static void step_wrap(float *S, const float *q, size_t ld_qk, const float *k, const float *v,
                      size_t ld_v, const float *lg, const float *bt, float *o, size_t ld_o,
                      int T, int dk, int dv, float *scr)
{
    for (int t = 0; t < T; t++)
        pl_op_gdn_step(S, q + t * ld_qk, k + t * ld_qk, v + t * ld_v, expf(lg[t]), bt[t],
                       o + t * ld_o, dk, dv, scr);
}

static void step_ref_wrap(float *S, const float *q, size_t ld_qk, const float *k,
                          const float *v, size_t ld_v, const float *lg, const float *bt,
                          float *o, size_t ld_o, int T, int dk, int dv, float *scr)
{
    for (int t = 0; t < T; t++)
        pl_op_gdn_step_ref(S, q + t * ld_qk, k + t * ld_qk, v + t * ld_v, expf(lg[t]), bt[t],
                           o + t * ld_o, dk, dv, scr);
}

/* The recurrent step against the double steps, and its dispatched path
 * the scalar reference's bits. */
Test(cpu_ops_ssm, step_matches_double_and_scalar_bits)
{
    double e = chunk_error(step_wrap, 100, 128, 100);
    cr_expect_lt(e, 5e-6, "step: relative error %g", e);
    gdn_case c = make_case(20, 128);
    size_t dd = 128 * 128;
    float *S1 = malloc(sizeof(float) * dd), *S2 = malloc(sizeof(float) * dd);
    float *o1 = malloc(sizeof(float) * 20 * 128), *o2 = malloc(sizeof(float) * 20 * 128);
    float scr[128];
    memcpy(S1, c.S0, sizeof(float) * dd);
    memcpy(S2, c.S0, sizeof(float) * dd);
    step_wrap(S1, c.q, c.ld_qk, c.k, c.v, c.ld_v, c.lg, c.bt, o1, 128, 20, 128, 128, scr);
    step_ref_wrap(S2, c.q, c.ld_qk, c.k, c.v, c.ld_v, c.lg, c.bt, o2, 128, 20, 128, 128, scr);
    cr_expect(!memcmp(S1, S2, sizeof(float) * dd), "step state differs from the scalar's");
    cr_expect(!memcmp(o1, o2, sizeof(float) * 20 * 128), "step output differs from the scalar's");
    free_case(&c);
    free(S1), free(S2), free(o1), free(o2);
}

/* The conv over 12 rows with its state (kernel 4, 70 channels: a tail past
 * the vectors), one row a call, against the definition in double:
 * out_t[c] = silu(sum_j w[j][c] x_{t - (K-1) + j}[c]), x before 0 from the
 * initial state. */
Test(cpu_ops_ssm, conv_row_matches_double)
{
    enum { K = 4, N = 70, R = 12, LD = 80 };
    static float w[K * LD], hist[(K - 1) * LD], x[R][N];
    static double seq[K - 1 + R][N];
    for (int i = 0; i < K * LD; i++)
        w[i] = frand();
    for (int j = 0; j < K - 1; j++)
        for (int c = 0; c < N; c++)
            seq[j][c] = hist[j * LD + c] = frand();
    for (int t = 0; t < R; t++)
        for (int c = 0; c < N; c++)
            seq[K - 1 + t][c] = x[t][c] = 2.0f * frand();
    double err = 0;
    for (int t = 0; t < R; t++) {
        pl_op_ssm_conv_row(w, LD, hist, LD, x[t], N, K);
        for (int c = 0; c < N; c++) {
            double a = 0;
            for (int j = 0; j < K; j++)
                a += (double)w[j * LD + c] * seq[t + j][c];
            err = fmax(err, fabs(x[t][c] - a / (1.0 + exp(-a))));
        }
    }
    cr_expect_lt(err, 1e-5, "conv: max error %g", err);
    for (int j = 0; j < K - 1; j++)           /* the state: the last K - 1 inputs */
        for (int c = 0; c < N; c++)
            cr_expect_eq(hist[j * LD + c], (float)seq[R + j][c], "state [%d][%d]", j, c);
}
