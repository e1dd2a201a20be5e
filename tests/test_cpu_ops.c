/* test_cpu_ops.c - backends/engine/cpu/ops.c, qdot.c, pool.c: the C
 * references the CUDA kernels will be checked against, and their AVX2
 * versions, each against a plainer computation with a stated tolerance. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/cpu/ops.h"
#include "backends/engine/cpu/pool.h"
#include "backends/engine/cpu/qdot_avx512.h"
#include "backends/engine/cpu/qdot_block_order.h"
#include "backends/engine/cpu/qdot_k.h"
#include "backends/engine/cpu/qdot_vnni.h"
#include "backends/engine/model/quant.h"
#include "src/base/cpu_features.h"
#include "src/base/half.h"

static uint64_t rng_state = 88172645463325252ULL;

static float frand(void)         /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static void fill(float *x, int n, float scale)
{
    for (int i = 0; i < n; i++)
        x[i] = frand() * scale;
}

/* Random quantised row of n elements of type t (valid fp16 scales). */
static size_t qbytes(pl_ggml_type t)
{
    return t == PL_GGML_TYPE_Q8_0 ? 34 : t == PL_GGML_TYPE_Q5_0 ? 22 : t == PL_GGML_TYPE_Q4_1 ? 20
           : t == PL_GGML_TYPE_MXFP4 ? 17 : 18;
}

static void random_qrow(pl_ggml_type t, uint8_t *dst, int n)
{
    size_t bb = qbytes(t);
    for (int b = 0; b < n / PL_QK; b++) {
        uint8_t *p = dst + b * bb;
        if (t == PL_GGML_TYPE_MXFP4) {  /* E8M0 scales 2^-9 .. 2^-4, 1 in 16 subnormal */
            for (size_t j = 0; j < bb; j++)
                p[j] = (uint8_t)(rng_state = rng_state * 6364136223846793005ULL + 1,
                                 rng_state >> 56);
            p[0] = p[0] % 16 == 0 ? p[0] % 2 : (uint8_t)(119 + p[0] % 6);
            continue;
        }
        uint16_t d = pl_fp32_to_fp16(0.01f + 0.05f * fabsf(frand()));
        uint16_t m = pl_fp32_to_fp16(0.2f * frand());
        memcpy(p, &d, 2);
        if (t == PL_GGML_TYPE_Q4_1)
            memcpy(p + 2, &m, 2);
        for (size_t j = t == PL_GGML_TYPE_Q4_1 ? 4 : 2; j < bb; j++)
            p[j] = (uint8_t)(rng_state = rng_state * 6364136223846793005ULL + 1, rng_state >> 56);
    }
}

#define N_QTYPES 5
static const pl_ggml_type QTYPES[N_QTYPES] = {PL_GGML_TYPE_Q4_0, PL_GGML_TYPE_Q4_1,
                                              PL_GGML_TYPE_Q8_0, PL_GGML_TYPE_Q5_0,
                                              PL_GGML_TYPE_MXFP4};

Test(cpu_ops, fp16_conversions)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = pl_op_fp16_to_f32((uint16_t)h);
        float g = pl_fp16_to_fp32((uint16_t)h);
        if (isnan(f)) {
            cr_assert(isnan(g));
            continue;
        }
        cr_assert_eq(memcmp(&f, &g, 4), 0, "h=%04x", h);
        cr_assert_eq(pl_fp32_to_fp16(f), h, "round trip h=%04x", h);
    }
    cr_assert_eq(pl_fp32_to_fp16(1.0f + 1.0f / 2048), 0x3c00, "ties to even");
}

Test(cpu_ops, dequant_matches_quant_reference)
{
    uint8_t q[34 * 8];
    float a[256], b[256];
    for (int k = 0; k < N_QTYPES; k++) {
        random_qrow(QTYPES[k], q, 256);
        cr_assert_eq(pl_op_dequant_row(QTYPES[k], q, a, 256), 0);
        cr_assert_eq(pl_dequant_row(QTYPES[k], q, b, 256), 0);
        for (int i = 0; i < 256; i++)
            cr_assert_float_eq(a[i], b[i], 1e-7f, "type %d elem %d", QTYPES[k], i);
    }
}

Test(cpu_ops, quantize_q8_error_bound)
{
    float x[128];
    pl_q8_act q[4];
    fill(x, 128, 3.0f);
    pl_op_quantize_row_q8(x, q, 128);
    for (int b = 0; b < 4; b++) {
        int sum = 0;
        for (int j = 0; j < PL_QK; j++) {
            cr_assert_leq(fabsf(x[b * PL_QK + j] - q[b].d * q[b].qs[j]), q[b].d * 0.5001f);
            sum += q[b].qs[j];
        }
        cr_assert_float_eq(q[b].s, q[b].d * sum, 1e-5f);
    }
}

/* qdot (AVX2 where present) == scalar reference == f32 dot of the
 * dequantised operands, to float rounding. */
/* The dispatched quantiser (AVX2 here) against the scalar reference, bit
 * for bit: random rows at several scales, an all-zero block, and halves
 * that must round to even (amax 127 -> d 1: 2.5 -> 2, 3.5 -> 4). */
Test(cpu_ops, quantize_q8_matches_reference)
{
    enum { N = 32 * 24 };
    static float x[N];
    pl_q8_act a[N / PL_QK], b[N / PL_QK];
    const float scales[] = {1e-6f, 0.01f, 1.0f, 37.0f, 1e4f};
    for (size_t k = 0; k < sizeof(scales) / sizeof(scales[0]); k++) {
        fill(x, N, scales[k]);
        memset(x + 64, 0, sizeof(float) * PL_QK);
        for (int j = 0; j < PL_QK; j++)
            x[96 + j] = j == 0 ? 127.0f : (float)((j % 7) - 3) + 0.5f;
        memset(a, 0x55, sizeof(a));
        memset(b, 0xaa, sizeof(b));
        pl_op_quantize_row_q8(x, a, N);
        pl_op_quantize_row_q8_ref(x, b, N);
        cr_assert(memcmp(a, b, sizeof(a)) == 0, "scale %g: quantised rows differ", scales[k]);
    }
    cr_assert_eq(a[3].qs[1], -2, "-1.5 rounds to even (-2)");
    cr_assert_eq(a[3].qs[5], 2, "2.5 rounds to even (2)");
}

Test(cpu_ops, qdot_kernels)
{
    enum { N = 576 };
    uint8_t w[34 * N / PL_QK];
    float x[N], wf[N], xf[N];
    pl_q8_act a[N / PL_QK];
    for (int k = 0; k < N_QTYPES; k++)
        for (int rep = 0; rep < 20; rep++) {
            random_qrow(QTYPES[k], w, N);
            fill(x, N, 2.0f);
            pl_op_quantize_row_q8(x, a, N);
            pl_op_dequant_row(QTYPES[k], w, wf, N);
            double exact = 0, mag = 0;
            for (int i = 0; i < N; i++) {
                xf[i] = a[i / PL_QK].d * a[i / PL_QK].qs[i % PL_QK];
                exact += (double)wf[i] * xf[i];
                mag += fabs((double)wf[i] * xf[i]);
            }
            float ref = pl_op_qdot_ref(QTYPES[k], w, a, N), fast = pl_op_qdot(QTYPES[k], w, a, N);
            cr_assert_leq(fabs(ref - exact), 1e-5 * mag + 1e-6, "type %d", QTYPES[k]);
            cr_assert_leq(fabs(fast - exact), 1e-5 * mag + 1e-6, "type %d", QTYPES[k]);
        }
}

Test(cpu_ops, qmatmul_rows_matches_qdot)
{
    enum { N = 128, O = 40, R = 3 };
    uint8_t w[O * 20 * N / PL_QK];
    float x[R * N], y[R * O];
    pl_q8_act a[R * N / PL_QK];
    size_t rb = 20 * N / PL_QK;
    random_qrow(PL_GGML_TYPE_Q4_1, w, O * N);
    fill(x, R * N, 1.0f);
    for (int r = 0; r < R; r++)
        pl_op_quantize_row_q8(x + r * N, a + r * (N / PL_QK), N);
    pl_op_qmatmul_rows(PL_GGML_TYPE_Q4_1, w, rb, a, N / PL_QK, R, y, O, 8, O);
    for (int r = 0; r < R; r++)
        for (int o = 8; o < O; o++) {
            float one = pl_op_qdot(PL_GGML_TYPE_Q4_1, w + o * rb, a + r * (N / PL_QK), N);
            cr_assert(memcmp(&y[r * O + o], &one, 4) == 0, "row %d out %d", r, o);
        }
}

/* nr random activation rows of n elements (x, a: room for them) against
 * the O weight rows w of type t: outputs [o0, o1) equal the scalar
 * reference bit for bit, the others are left untouched. */
static void expect_block_order(pl_ggml_type t, const uint8_t *w, int n, int O, int nr, int o0,
                               int o1, float *x, pl_q8_act *a, float *y)
{
    size_t rb = qbytes(t) * n / PL_QK;
    fill(x, nr * n, 3.0f);
    for (int r = 0; r < nr; r++)
        pl_op_quantize_row_q8(x + (size_t)r * n, a + (size_t)r * (n / PL_QK), n);
    for (int i = 0; i < nr * O; i++)
        y[i] = -12345.0f;
    pl_op_qmatmul_rows(t, w, rb, a, n / PL_QK, nr, y, O, o0, o1);
    for (int r = 0; r < nr; r++)
        for (int o = 0; o < O; o++) {
            float got = y[r * O + o];
            if (o < o0 || o >= o1) {
                cr_assert_eq(got, -12345.0f, "type %d: y[%d][%d] written", t, r, o);
                continue;
            }
            float ref = pl_op_qdot_ref(t, w + o * rb, a + (size_t)r * (n / PL_QK), n);
            cr_assert(memcmp(&got, &ref, 4) == 0, "type %d n %d rows %d: y[%d][%d] %.9g, "
                      "reference %.9g", t, n, nr, r, o, got, ref);
        }
}

/* Q4_0, Q4_1, Q5_0, Q8_0 and MXFP4 sum in block order on every path (this CPU's, and
 * under PARLEY_CPU_ISA the lesser ones'): the matmul equals the scalar
 * reference bit for bit, for 1 row (decode), a few, and more rows than one
 * chunk of the multi-row kernel (256), over output ranges that do not
 * start or end on its groups of 8; outputs outside the range untouched. */
Test(cpu_ops, qmatmul_block_order_equals_reference)
{
    enum { N = 96, O = 40 };
    static const int rows[] = {1, 2, 3, 5, 8, 17, 260};
    static uint8_t w[O * 34 * N / PL_QK];
    static float x[260 * N], y[260 * O];
    static pl_q8_act a[260 * N / PL_QK];
    for (int k = 0; k < N_QTYPES; k++) {
        random_qrow(QTYPES[k], w, O * N);
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
            expect_block_order(QTYPES[k], w, N, O, rows[ri], 3, 37, x, a, y);
    }
}

/* Rows wide enough that the offset activations of Q8_0 and MXFP4 (the
 * VPDPBUSD paths) come in chunks of a few rows: every chunk, the last one
 * short, still gives the reference bit for bit; and rows wider than the
 * offset buffer holds for one row (the sign trick's path). */
Test(cpu_ops, qmatmul_block_order_wide_rows_in_chunks)
{
    enum { N = 400 * PL_QK, R = 17, WIDE = 3100 * PL_QK, O = 16 };
    static uint8_t w[O * 34 * (WIDE / PL_QK)];
    static float x[R * WIDE], y[R * O];
    static pl_q8_act a[R * (WIDE / PL_QK)];
    const pl_ggml_type types[] = {PL_GGML_TYPE_Q8_0, PL_GGML_TYPE_MXFP4};
    for (int k = 0; k < 2; k++) {
        random_qrow(types[k], w, O * N);
        expect_block_order(types[k], w, N, O, R, 0, O, x, a, y);
        random_qrow(types[k], w, O * WIDE);
        expect_block_order(types[k], w, WIDE, O, 3, 0, O, x, a, y);
    }
}

/* A random row of a Q5 / K-quant type: random bytes with each block's
 * fp16 scales overwritten by sane values (the rest of a block's bytes are
 * all valid as they come). */
static void random_krow(pl_ggml_type t, uint8_t *dst, int n)
{
    size_t bb = pl_qdot_k_block_bytes(t), be = bb > 24 ? 256 : PL_QK;
    for (size_t i = 0; i < (size_t)n / be * bb; i++)
        dst[i] = (uint8_t)(rng_state = rng_state * 6364136223846793005ULL + 1, rng_state >> 56);
    for (int b = 0; b < n / (int)be; b++) {
        uint8_t *p = dst + b * bb;
        uint16_t d = pl_fp32_to_fp16((be == 256 ? 0.002f : 0.01f) + 0.02f * fabsf(frand()));
        bool k = t == PL_GGML_TYPE_Q4_K || t == PL_GGML_TYPE_Q5_K;
        uint16_t m = pl_fp32_to_fp16((k ? 0.01f : 0.2f) * frand());
        if (t == PL_GGML_TYPE_Q6_K) {
            memcpy(p + 208, &d, 2);
            continue;
        }
        memcpy(p, &d, 2);
        if (t != PL_GGML_TYPE_Q5_0)
            memcpy(p + 2, &m, 2);
    }
}

static const pl_ggml_type KTYPES[5] = {PL_GGML_TYPE_Q5_0, PL_GGML_TYPE_Q5_1, PL_GGML_TYPE_Q4_K,
                                       PL_GGML_TYPE_Q5_K, PL_GGML_TYPE_Q6_K};

/* Q5 / K-quant kernels (reference and AVX2) == f64 dot of the operands as
 * model/quant.c dequantises them (itself checked against gguf-py's
 * dequantize in test_quant.c). */
Test(cpu_ops, qdot_k_kernels)
{
    enum { N = 1536 };
    static uint8_t w[N / 256 * 210];
    float x[N], wf[N];
    pl_q8_act a[N / PL_QK];
    for (int k = 0; k < 5; k++) {
        cr_assert(pl_op_qdot_supported(KTYPES[k]));
        for (int rep = 0; rep < 20; rep++) {
            random_krow(KTYPES[k], w, N);
            fill(x, N, 2.0f);
            pl_op_quantize_row_q8(x, a, N);
            cr_assert_eq(pl_dequant_row(KTYPES[k], w, wf, N), 0);
            double exact = 0, mag = 0;
            for (int i = 0; i < N; i++) {
                double xi = (double)a[i / PL_QK].d * a[i / PL_QK].qs[i % PL_QK];
                exact += (double)wf[i] * xi;
                mag += fabs((double)wf[i] * xi);
            }
            float ref = pl_op_qdot_ref(KTYPES[k], w, a, N), fast = pl_op_qdot(KTYPES[k], w, a, N);
            cr_assert_leq(fabs(ref - exact), 1e-5 * mag + 1e-6, "type %d ref %g exact %g",
                          KTYPES[k], ref, exact);
            cr_assert_leq(fabs(fast - exact), 1e-5 * mag + 1e-6, "type %d fast %g exact %g",
                          KTYPES[k], fast, exact);
        }
    }
}

/* Several activation rows through qmatmul_rows give each row exactly its
 * single-row result (batch invariance), for every K type. */
Test(cpu_ops, qmatmul_rows_k_batch_invariant)
{
    enum { N = 512, O = 12, R = 5 };
    static uint8_t w[O * N / 256 * 210];
    float x[R * N], y[R * O];
    pl_q8_act a[R * N / PL_QK];
    fill(x, R * N, 1.0f);
    for (int r = 0; r < R; r++)
        pl_op_quantize_row_q8(x + r * N, a + r * (N / PL_QK), N);
    for (int k = 0; k < 5; k++) {
        size_t bb = pl_qdot_k_block_bytes(KTYPES[k]);
        size_t rb = N / (bb > 24 ? 256 : PL_QK) * bb;
        random_krow(KTYPES[k], w, O * N);
        pl_op_qmatmul_rows(KTYPES[k], w, rb, a, N / PL_QK, R, y, O, 2, O);
        for (int r = 0; r < R; r++)
            for (int o = 2; o < O; o++) {
                float one = pl_op_qdot(KTYPES[k], w + o * rb, a + r * (N / PL_QK), N);
                cr_assert_eq(memcmp(&y[r * O + o], &one, 4), 0, "type %d r %d o %d",
                             KTYPES[k], r, o);
            }
    }
}

/* The VNNI kernels (each level the CPU has; skipped elsewhere) against
 * the scalar reference and the f64 dot, for every type they cover. */
static void check_vnni(pl_vnni_level lv)
{
    enum { N = 1536 };
    static uint8_t w[N / PL_QK * 34];
    float x[N], wf[N];
    pl_q8_act a[N / PL_QK];
    const pl_ggml_type types[4] = {PL_GGML_TYPE_Q5_0, PL_GGML_TYPE_Q5_1, PL_GGML_TYPE_Q4_K,
                                   PL_GGML_TYPE_Q6_K};
    for (int k = 0; k < 4; k++)
        for (int rep = 0; rep < 20; rep++) {
            random_krow(types[k], w, N);
            fill(x, N, 2.0f);
            pl_op_quantize_row_q8(x, a, N);
            cr_assert_eq(pl_dequant_row(types[k], w, wf, N), 0);
            double exact = 0, mag = 0;
            for (int i = 0; i < N; i++) {
                double xi = (double)a[i / PL_QK].d * a[i / PL_QK].qs[i % PL_QK];
                exact += (double)wf[i] * xi;
                mag += fabs((double)wf[i] * xi);
            }
            float v = 0.0f, ref = pl_op_qdot_ref(types[k], w, a, N);
            cr_assert(pl_qdot_vnni(lv, types[k], w, a, N, &v), "type %d", types[k]);
            cr_assert_leq(fabs(v - exact), 1e-5 * mag + 1e-6, "type %d", types[k]);
            cr_assert_leq(fabs(v - ref), 2e-5 * mag + 1e-6, "type %d", types[k]);
            if (!pl_qdot_block_order_type(types[k]))   /* Q5_0 sums in block order */
                cr_assert_eq(memcmp(&v, &(float){pl_op_qdot(types[k], w, a, N)}, 4), 0,
                             "dispatch picks this level");
            float avx2 = 0.0f;
            cr_assert(pl_op_qdot_avx2(types[k], w, a, N, &avx2));
            cr_assert_eq(memcmp(&v, &avx2, 4), 0, "type %d: bit-identical to AVX2 (%g vs %g)",
                         types[k], v, avx2);
        }
}

/* The VNNI kernels' code (VPDPBUSD emulated with AVX2) gives the AVX2
 * kernels' results bit for bit: runs on any AVX2 CPU, so the kernel bodies
 * are checked even where the instruction is absent. */
Test(cpu_ops, qdot_vnni_bodies_emulated)
{
    if (!pl_cpu_has_avx2())
        cr_skip_test("no AVX2");
    enum { N = 1536 };
    static uint8_t w[N / PL_QK * 34];
    float x[N];
    pl_q8_act a[N / PL_QK];
    const pl_ggml_type types[4] = {PL_GGML_TYPE_Q5_0, PL_GGML_TYPE_Q5_1, PL_GGML_TYPE_Q4_K,
                                   PL_GGML_TYPE_Q6_K};
    for (int k = 0; k < 4; k++)
        for (int rep = 0; rep < 20; rep++) {
            random_krow(types[k], w, N);
            fill(x, N, 2.0f);
            pl_op_quantize_row_q8(x, a, N);
            float v = 0.0f, avx2 = 0.0f;
            cr_assert(pl_op_qdot_avx2(types[k], w, a, N, &avx2));
            cr_assert(pl_qdot_vnni_emulated(types[k], w, a, N, &v));
            cr_assert_eq(memcmp(&v, &avx2, 4), 0, "type %d: %g vs %g", types[k], v, avx2);
        }
}

/* pl_qdot_vnni_supported names exactly the types the kernels take (the
 * decode matmul dispatches on it). */
Test(cpu_ops, qdot_vnni_supported_matches_kernels)
{
    if (!pl_cpu_has_avx2())
        cr_skip_test("no AVX2");
    enum { N = 256 };
    static uint8_t w[N / PL_QK * 34];
    pl_q8_act a[N / PL_QK];
    memset(a, 0, sizeof a);
    for (int t = 0; t <= PL_GGML_TYPE_BF16; t++) {
        float v;
        int ran = pl_qdot_vnni_emulated((pl_ggml_type)t, w, a, N, &v);
        cr_assert_eq(pl_qdot_vnni_supported((pl_ggml_type)t), ran, "type %d", t);
    }
    cr_assert(pl_qdot_vnni_supported(PL_GGML_TYPE_Q4_K));
    cr_assert(!pl_qdot_vnni_supported(PL_GGML_TYPE_Q5_K));
}

Test(cpu_ops, qdot_avx512_vnni)
{
    if (pl_qdot_vnni_level() < PL_VNNI_AVX512)
        cr_skip_test("this CPU has no AVX-512 VNNI+VL+BW: path not validated here");
    check_vnni(PL_VNNI_AVX512);
    cr_assert_str_eq(pl_op_kernel_path(), "avx512vnni+avx2+fma+f16c");
}

Test(cpu_ops, qdot_avx_vnni)
{
    const pl_cpu_feature_set *f = pl_cpu_features();
    if (!pl_cpu_has_avx2() || !f->avxvnni)
        cr_skip_test("this CPU has no AVX-VNNI: path not validated here");
    check_vnni(PL_VNNI_AVX); /* also where AVX-512 VNNI is preferred */
}

/* The VNNI multi-row kernels (Q5_0, Q5_1, Q4_K, Q6_K), hardware where the
 * CPU has them and the emulated bodies on any AVX2 CPU: each row's result
 * is the AVX2 single-row kernel's, bit for bit, for 1 to 4 rows. */
Test(cpu_ops, qdot_vnni_rows)
{
    if (!pl_cpu_has_avx2())
        cr_skip_test("no AVX2");
    enum { N = 512, R = 4 };
    static uint8_t w[N / 256 * 210];
    float x[R * N], out[R * 8];
    pl_q8_act a[R * N / PL_QK];
    const pl_ggml_type types[4] = {PL_GGML_TYPE_Q5_0, PL_GGML_TYPE_Q5_1, PL_GGML_TYPE_Q4_K,
                                   PL_GGML_TYPE_Q6_K};
    const pl_cpu_feature_set *f = pl_cpu_features();
    int levels[3] = {-1, f->avxvnni ? PL_VNNI_AVX : 0,
                     pl_qdot_vnni_level() == PL_VNNI_AVX512 ? PL_VNNI_AVX512 : 0};
    int checked = 0;
    for (int k = 0; k < 4; k++)
        for (int rep = 0; rep < 10; rep++) {
            random_krow(types[k], w, N);
            fill(x, R * N, 2.0f);
            for (int r = 0; r < R; r++)
                pl_op_quantize_row_q8(x + r * N, a + r * (N / PL_QK), N);
            for (int li = 0; li < 3; li++)
                for (int nr = 1; nr <= R; nr++) {
                    if (levels[li] == 0)
                        continue;
                    int ok = levels[li] < 0
                                 ? pl_qdot_vnni_rows_emulated(types[k], w, a, N / PL_QK, N, nr,
                                                              out, 8)
                                 : pl_qdot_vnni_rows((pl_vnni_level)levels[li], types[k], w, a,
                                                     N / PL_QK, N, nr, out, 8);
                    cr_assert(ok, "type %d level %d", types[k], levels[li]);
                    for (int r = 0; r < nr; r++) {
                        float ref = 0.0f;
                        cr_assert(pl_op_qdot_avx2(types[k], w, a + r * (N / PL_QK), N, &ref));
                        cr_assert_eq(memcmp(&out[r * 8], &ref, 4), 0,
                                     "type %d level %d rows %d row %d: %g vs %g", types[k],
                                     levels[li], nr, r, out[r * 8], ref);
                        checked++;
                    }
                }
        }
    cr_assert_gt(checked, 0);
}

/* The 512-bit kernels (Q5_0, Q5_1; decode and up to 4 rows) give the AVX2
 * kernel's result bit for bit, for even and odd block counts. */
Test(cpu_ops, qdot_avx512_rows)
{
    if (!pl_qdot512_available())
        cr_skip_test("this CPU has no AVX-512 VNNI+VL+BW: path not validated here");
    enum { NMAX = 1536, O = 6, R = 4 };
    static uint8_t w[O * NMAX / PL_QK * 34];
    float x[R * NMAX], y[O], yr[R * 8];
    pl_q8_act a[R * NMAX / PL_QK];
    const pl_ggml_type types[2] = {PL_GGML_TYPE_Q5_0, PL_GGML_TYPE_Q5_1};
    const int ns[5] = {32, 64, 576, 1504, 1536};
    for (int k = 0; k < 2; k++) {
        pl_ggml_type t = types[k];
        cr_assert(pl_qdot512_supported(t));
        for (int ni = 0; ni < 5; ni++)
            for (int rep = 0; rep < 4; rep++) {
                int n = ns[ni], nb = n / PL_QK;
                size_t rb = (size_t)nb * pl_qdot_k_block_bytes(t);
                random_krow(t, w, O * n);
                fill(x, R * n, 2.0f);
                for (int r = 0; r < R; r++)
                    pl_op_quantize_row_q8(x + r * n, a + r * nb, n);
                pl_qdot512_row1(t, w, rb, a, nb, y, 1, O);
                for (int o = 1; o < O; o++) {
                    float ref = 0.0f;
                    cr_assert(pl_op_qdot_avx2(t, w + o * rb, a, n, &ref));
                    cr_assert_eq(memcmp(&y[o], &ref, 4), 0, "type %d n %d o %d: %g vs %g", t, n,
                                 o, y[o], ref);
                    for (int nr = 1; nr <= R; nr++) {
                        pl_qdot512_rows(t, w + o * rb, a, (size_t)nb, nb, nr, yr, 8);
                        for (int r = 0; r < nr; r++) {
                            cr_assert(pl_op_qdot_avx2(t, w + o * rb, a + r * nb, n, &ref));
                            cr_assert_eq(memcmp(&yr[r * 8], &ref, 4), 0,
                                         "type %d n %d rows %d row %d: %g vs %g", t, n, nr, r,
                                         yr[r * 8], ref);
                        }
                    }
                }
            }
    }
    cr_assert(!pl_qdot512_supported(PL_GGML_TYPE_Q4_K)); /* VNNI-256 was faster (Zen 4) */
    cr_assert(!pl_qdot512_supported(PL_GGML_TYPE_Q4_1)); /* block order was faster */
}

Test(cpu_ops, kernel_path_named)
{
    const char *p = pl_op_kernel_path();
    if (!pl_cpu_has_avx2())
        cr_assert_str_eq(p, "scalar");
    else
        cr_assert(strstr(p, "avx2+fma+f16c"), "%s", p);
    cr_assert_eq(pl_qdot_vnni_level() == PL_VNNI_NONE, strstr(p, "vnni") == NULL);
}

/* Normal rope rotates (2i, 2i+1); NEOX rotates (i, i+half): the same
 * rotation applied to a permuted vector. Norms are preserved, pos 0 is the
 * identity, and rotations compose: rope(p) then rope(q) == rope(p+q). */
Test(cpu_ops, rope_modes)
{
    enum { HD = 64, H = 3 };
    float inv[HD / 2], x[H * HD], y[H * HD], z[H * HD];
    for (int i = 0; i < HD / 2; i++)
        inv[i] = powf(10000.0f, -2.0f * i / HD);
    fill(x, H * HD, 1.0f);
    memcpy(y, x, sizeof(x));
    pl_op_rope(y, H, HD, HD, 0, inv, 0);
    cr_assert_eq(memcmp(x, y, sizeof(x)), 0);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < HD / 2; i++) {   /* z: the NEOX layout of x */
            z[h * HD + i] = x[h * HD + 2 * i];
            z[h * HD + i + HD / 2] = x[h * HD + 2 * i + 1];
        }
    pl_op_rope(y, H, HD, HD, 7, inv, 0);
    pl_op_rope(y, H, HD, HD, 5, inv, 0);
    pl_op_rope(z, H, HD, HD, 12, inv, 1);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < HD / 2; i++) {
            float a = y[h * HD + 2 * i], b = y[h * HD + 2 * i + 1];
            cr_assert_float_eq(a, z[h * HD + i], 1e-4f);
            cr_assert_float_eq(b, z[h * HD + i + HD / 2], 1e-4f);
            float n0 = hypotf(x[h * HD + 2 * i], x[h * HD + 2 * i + 1]);
            cr_assert_float_eq(hypotf(a, b), n0, 1e-5f);
        }
}

/* pl_op_attention in the parts the forward pass splits it into for long
 * contexts (scores of position ranges, values of dim ranges, each head
 * alone or the group together) gives pl_op_attention's outputs bit for
 * bit: the AVX2 path, or the reference under PARLEY_CPU_ISA=scalar (the
 * suite's capped runs). */
static void check_attention_parts(const pl_attn_args *a, const float *q, int g, int ctx,
                                  const float *want)
{
    int hd = a->head_dim;
    size_t stride = (size_t)ctx + 5;
    float *sc = malloc(sizeof(float) * g * stride), *out = malloc(sizeof(float) * g * hd);
    for (int t0 = a->first; t0 < ctx; t0 += 13)   /* ranges not aligned to 8 */
        pl_op_attn_scores(a, q, g, t0, t0 + 13 < ctx ? t0 + 13 : ctx, sc, stride);
    for (int h = 0; h < g; h++)
        pl_op_softmax(sc + (size_t)h * stride + a->first, ctx - a->first);
    for (int d0 = 0; d0 < hd; d0 += 8)        /* each head alone, 8 or 16 dims at a time */
        for (int h = 0; h < g; h++) {
            int d1 = d0 + (h % 2 ? 8 : 16) < hd ? d0 + (h % 2 ? 8 : 16) : hd;
            if (h % 2 == 0 && d0 % 16)
                continue;
            pl_op_attn_values(a, sc + (size_t)h * stride, stride, 1, ctx, d0, d1,
                              out + (size_t)h * hd);
        }
    cr_assert(memcmp(out, want, sizeof(float) * g * hd) == 0, "hd %d g %d ctx %d: parts differ",
              hd, g, ctx);
    memset(out, 0, sizeof(float) * g * hd);
    pl_op_attn_values(a, sc, stride, g, ctx, 0, hd, out);
    cr_assert(memcmp(out, want, sizeof(float) * g * hd) == 0, "hd %d g %d ctx %d", hd, g, ctx);
    free(sc), free(out);
}

/* Paged attention (AVX2 and reference) against a direct computation in
 * double on contiguous K/V, with the sequence's blocks scattered in the
 * pool: group sizes 1 (decode items) and 3, head dims 40 (a partial
 * register chunk), 64 and 128 (two chunks), contexts with and without a
 * tail of fewer than 8 positions, short and longer than the prefetch
 * distance. */
/* ... over positions [first, ctx) (a sliding window), scores soft-capped
 * at cap when cap > 0. */
static void check_attention_wc(int hd, int g, int bs, int ctx, int f16, float qscale,
                               int first, float cap)
{
    enum { NKV = 2, NB = 64 };
    int kvd = NKV * hd, kh = 1;
    size_t pool = (size_t)NB * bs * kvd;
    float *kc = malloc(sizeof(float) * pool), *vc = malloc(sizeof(float) * pool);
    float *q = malloc(sizeof(float) * g * hd), *out = malloc(sizeof(float) * g * hd);
    float *out2 = malloc(sizeof(float) * g * hd), *scr = malloc(sizeof(float) * g * ctx);
    double *s = malloc(sizeof(double) * ctx);
    int32_t bt[NB];
    cr_assert(ctx <= NB * bs);
    for (int i = 0; i < NB; i++)
        bt[i] = (i * 37 + 11) % NB;     /* a permutation: blocks scattered */
    uint16_t *kh16 = malloc(2 * pool), *vh16 = malloc(2 * pool);
    fill(kc, (int)pool, 1.0f);
    fill(vc, (int)pool, 1.0f);
    fill(q, g * hd, qscale);
    pl_op_f32_to_f16_row(kh16, kc, (int)pool);
    pl_op_f32_to_f16_row(vh16, vc, (int)pool);
    for (size_t i = 0; f16 && i < pool; i++) {  /* the reference sees the halves */
        kc[i] = pl_op_fp16_to_f32(kh16[i]);
        vc[i] = pl_op_fp16_to_f32(vh16[i]);
    }
    pl_attn_args a = {.k_base = f16 ? (void *)(kh16 + kh * hd) : (void *)(kc + kh * hd),
                      .v_base = f16 ? (void *)(vh16 + kh * hd) : (void *)(vc + kh * hd),
                      .kv_f16 = f16, .block_table = bt,
                      .block_size = bs, .block_stride = (size_t)bs * kvd, .row_stride = kvd,
                      .head_dim = hd, .scale = 1.0f / sqrtf((float)hd), .first = first,
                      .softcap = cap};
    pl_op_attention_ref(&a, q, g, ctx, out2, scr);
    pl_op_attention(&a, q, g, ctx, out, scr);
    check_attention_parts(&a, q, g, ctx, out);
    for (int h = 0; h < g; h++) {
        double mx = -1e30, z = 0;
        for (int t = first; t < ctx; t++) {
            const float *k = kc + ((size_t)bt[t / bs] * bs + t % bs) * kvd + kh * hd;
            s[t] = 0;
            for (int i = 0; i < hd; i++)
                s[t] += (double)q[h * hd + i] * k[i];
            s[t] *= 1.0 / sqrt((double)hd);
            if (cap > 0)
                s[t] = cap * tanh(s[t] / cap);
            mx = fmax(mx, s[t]);
        }
        for (int t = first; t < ctx; t++)
            z += s[t] = exp(s[t] - mx);
        for (int i = 0; i < hd; i++) {
            double o = 0;
            for (int t = first; t < ctx; t++)
                o += s[t] / z * vc[((size_t)bt[t / bs] * bs + t % bs) * kvd + kh * hd + i];
            cr_assert_float_eq(out[h * hd + i], o, 1e-5, "f16 %d hd %d g %d ctx %d h %d i %d: "
                               "%g vs %g", f16, hd, g, ctx, h, i, out[h * hd + i], o);
            cr_assert_float_eq(out2[h * hd + i], o, 1e-5);
        }
    }
    free(kc), free(vc), free(kh16), free(vh16), free(q), free(out), free(out2), free(scr);
    free(s);
}

static void check_attention_q(int hd, int g, int bs, int ctx, int f16, float qscale)
{
    check_attention_wc(hd, g, bs, ctx, f16, qscale, 0, 0.0f);
}

static void check_attention(int hd, int g, int bs, int ctx, int f16)
{
    check_attention_q(hd, g, bs, ctx, f16, 1.0f);
}

Test(cpu_ops, paged_attention)
{
    static const int ctxs[] = {1, 7, 8, 27, 64, 301};
    for (int f16 = 0; f16 < 2; f16++) {
        for (size_t c = 0; c < sizeof(ctxs) / sizeof(ctxs[0]); c++) {
            check_attention(64, 3, 8, ctxs[c], f16);
            check_attention(64, 1, 16, ctxs[c], f16);
            check_attention(40, 1, 16, ctxs[c], f16);
            check_attention(128, 3, 16, ctxs[c], f16);
        }
        check_attention(64, 2, 1, 50, f16);  /* a block per position */
        /* Scores spread over ~100: exponentials down to underflow. */
        check_attention_q(64, 3, 16, 301, f16, 60.0f);
        check_attention_q(64, 1, 16, 64, f16, 20.0f);
    }
}

/* Sliding windows (the first attended position inside a block, on a block
 * edge, and the last position alone) and soft-capped scores (Gemma 2),
 * with Gemma's head dim 256: whole, in parts and the reference agree with
 * the direct computation. */
Test(cpu_ops, paged_attention_window_softcap)
{
    for (int f16 = 0; f16 < 2; f16++) {
        check_attention_wc(256, 4, 16, 301, f16, 1.0f, 301 - 40, 0.0f);
        check_attention_wc(256, 1, 16, 64, f16, 1.0f, 48, 0.0f);
        check_attention_wc(64, 3, 8, 27, f16, 1.0f, 26, 0.0f);
        check_attention_wc(64, 3, 8, 300, f16, 20.0f, 0, 5.0f);   /* the cap bites */
        check_attention_wc(128, 2, 16, 100, f16, 20.0f, 37, 3.0f);
    }
}

/* The F16C row conversion equals the portable one (round to nearest even)
 * on random values of every magnitude, ties, subnormals, overflow and
 * specials, and both equal numpy's float16 on a few spot values. */
Test(cpu_ops, f32_to_f16_row)
{
    enum { N = 4099 };
    static float x[N];
    static uint16_t h[N];
    for (int i = 0; i < N; i++)
        x[i] = ldexpf(frand(), (int)(frand() * 40.0f));
    const float spots[] = {0.0f, -0.0f, 1.0f, 65504.0f, 65520.0f, 1e-8f, 6e-8f, 1.0f + 0x1p-11f,
                           1.0f + 0x3p-11f, INFINITY, -INFINITY, NAN, 0x1p-24f, 0x1.8p-24f};
    const uint16_t want[] = {0x0000, 0x8000, 0x3c00, 0x7bff, 0x7c00, 0x0000, 0x0001, 0x3c00,
                             0x3c02, 0x7c00, 0xfc00, 0x7e00, 0x0001, 0x0002};
    int ns = (int)(sizeof(spots) / sizeof(spots[0]));
    memcpy(x, spots, sizeof(spots));
    pl_op_f32_to_f16_row(h, x, N);
    for (int i = 0; i < N; i++)
        cr_assert_eq(h[i], pl_fp32_to_fp16(x[i]), "x %a: %04x vs %04x", x[i], h[i],
                     pl_fp32_to_fp16(x[i]));
    for (int i = 0; i < ns; i++)
        cr_assert_eq(h[i], want[i], "x %a: %04x, numpy %04x", x[i], h[i], want[i]);
}

typedef struct take_job { pl_pool *p; atomic_int hits[1000]; atomic_int calls; } take_job;

static void take_fn(void *arg, int ith, int nth)
{
    take_job *j = arg;
    atomic_fetch_add(&j->calls, 1);
    for (int c = pl_pool_take(j->p); c < 1000; c = pl_pool_take(j->p))
        atomic_fetch_add(&j->hits[c], 1);
}

Test(cpu_ops, pool_runs_every_item_once)
{
    pl_pool *p = pl_pool_new(3);
    cr_assert(p);
    static take_job j;
    for (int rep = 0; rep < 50; rep++) {
        memset(&j, 0, sizeof(j));
        j.p = p;
        pl_pool_run(p, take_fn, &j);
        cr_assert(atomic_load(&j.calls) >= 1 && atomic_load(&j.calls) <= 3);
        for (int i = 0; i < 1000; i++)
            cr_assert_eq(atomic_load(&j.hits[i]), 1);
    }
    int b, e, next = 0;
    for (int i = 0; i < 4; i++) {
        pl_pool_split(100, 16, i, 4, &b, &e);
        cr_assert_eq(b, next);
        cr_assert(b % 16 == 0 || b == 100);
        next = e;
    }
    cr_assert_eq(next, 100);
    pl_pool_free(p);
}

/* The one CPU probe: threads asking at the same time all get the table the
 * compiler's own probe describes (run under TSan/ASan to see no race). */
static void *probe_thread(void *arg)
{
    *(const pl_cpu_feature_set **)arg = pl_cpu_features();
    return NULL;
}

Test(cpu_ops, cpu_features_once_from_many_threads)
{
    enum { N = 8 };
    pthread_t th[N];
    const pl_cpu_feature_set *got[N];
    for (int i = 0; i < N; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, probe_thread, &got[i]), 0);
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    for (int i = 1; i < N; i++)
        cr_expect_eq(got[i], got[0]);
#if defined(__x86_64__) || defined(__i386__)
    /* The table is the CPU's answer, capped by PARLEY_CPU_ISA (meson runs
     * this suite once per cap). */
    const char *cap = getenv("PARLEY_CPU_ISA");
    int lvl = !cap ? 3 : !strcmp(cap, "avxvnni") ? 2 : !strcmp(cap, "avx2") ? 1
                 : !strcmp(cap, "scalar") ? 0 : 3;
    __builtin_cpu_init();
    cr_expect_eq(got[0]->avx2, lvl >= 1 && __builtin_cpu_supports("avx2"));
    cr_expect_eq(got[0]->fma, lvl >= 1 && __builtin_cpu_supports("fma"));
    cr_expect_eq(got[0]->f16c, lvl >= 1 && __builtin_cpu_supports("f16c"));
    cr_expect_eq(got[0]->avxvnni, lvl >= 2 && __builtin_cpu_supports("avxvnni"));
    cr_expect_eq(got[0]->avx512f, lvl >= 3 && __builtin_cpu_supports("avx512f"));
    cr_expect_eq(got[0]->avx512vnni, lvl >= 3 && __builtin_cpu_supports("avx512vnni"));
#endif
}
