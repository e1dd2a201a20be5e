/* test_cpu_kquant_repack.c - the repacked Q4_K / Q5_K / Q6_K GEMM and the
 * 8-row decode GEMV (backends/engine/cpu/qdot_k_repack.c) on odd shapes: weight rows not a
 * multiple of 8, slices starting off a group, 1..70 activation rows, rows
 * 1 to 9 super-blocks wide. Every output equals the AVX2 single-row kernel
 * bit for bit (the value every ISA path and batch size must give a row),
 * on each int8 dot level this CPU has, and through pl_op_qmatmul_rows'
 * dispatch; and it is within the kernels' stated bound of the float64 dot
 * of the operands as model/quant.c dequantises them (itself checked
 * against gguf-py in test_quant.c). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/cpu/ops.h"
#include "backends/engine/cpu/qdot_k.h"
#include "backends/engine/cpu/qdot_k_repack.h"
#include "backends/engine/cpu/qdot_vnni.h"
#include "backends/engine/model/quant.h"
#include "src/base/cpu_features.h"
#include "src/base/half.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint8_t rbyte(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint8_t)(rng_state >> 56);
}

static float frand(void)         /* uniform in [-1, 1) */
{
    return (float)(rbyte() << 8 | rbyte()) / 32768.0f - 1.0f;
}

/* Random K-quant rows: random bytes, each super-block's fp16 scales set to
 * sane values (every other byte pattern is a valid block). */
static void random_k(pl_ggml_type t, uint8_t *dst, int n_sb)
{
    size_t bb = pl_qdot_k_block_bytes(t);
    for (size_t i = 0; i < (size_t)n_sb * bb; i++)
        dst[i] = rbyte();
    for (int b = 0; b < n_sb; b++) {
        uint8_t *p = dst + (size_t)b * bb;
        uint16_t d = pl_fp32_to_fp16(0.002f + 0.02f * fabsf(frand()));
        uint16_t m = pl_fp32_to_fp16(0.01f * frand());
        if (t == PL_GGML_TYPE_Q6_K) {
            memcpy(p + 208, &d, 2);
            continue;
        }
        memcpy(p, &d, 2);
        memcpy(p + 2, &m, 2);
    }
}

static const pl_ggml_type TYPES[3] = {PL_GGML_TYPE_Q4_K, PL_GGML_TYPE_Q5_K, PL_GGML_TYPE_Q6_K};

typedef struct shape {
    int n_sb, rows, o0, o1;
} shape;

static const shape SHAPES[] = {
    {1, 8, 0, 8}, {1, 13, 0, 13}, {3, 21, 3, 21}, {4, 30, 5, 29}, {9, 17, 1, 17}, {8, 40, 0, 40},
};
static const int NROWS[] = {1, 2, 3, 5, 7, 8, 9, 16, 33, 64, 70};

/* The levels of int8 dot this CPU runs (NONE: AVX2's). */
static int levels(pl_vnni_level *lv)
{
    const pl_cpu_feature_set *f = pl_cpu_features();
    int n = 0;
    lv[n++] = PL_VNNI_NONE;
    if (pl_qdot_vnni_level() == PL_VNNI_AVX512)
        lv[n++] = PL_VNNI_AVX512;
    if (f->avxvnni)
        lv[n++] = PL_VNNI_AVX;
    return n;
}

/* y = the AVX2 single-row kernel for every (activation row, weight row). */
static void single_rows(pl_ggml_type t, const uint8_t *w, size_t rb, const pl_q8_act *a,
                        int n_blk, int nr, const shape *s, float *y)
{
    for (int r = 0; r < nr; r++)
        for (int o = s->o0; o < s->o1; o++)
            cr_assert(pl_op_qdot_avx2(t, w + o * rb, a + (size_t)r * n_blk, n_blk * PL_QK,
                                      &y[(size_t)r * s->rows + o]));
}

static void check_equal(const float *got, const float *want, int nr, const shape *s,
                        const char *what, pl_ggml_type t, int lv)
{
    for (int r = 0; r < nr; r++)
        for (int o = s->o0; o < s->o1; o++) {
            size_t i = (size_t)r * s->rows + o;
            cr_assert_eq(memcmp(&got[i], &want[i], 4), 0,
                         "%s: type %s level %d width %d rows %d: row %d out %d: %.9g vs %.9g",
                         what, pl_ggml_type_name(t), lv, s->n_sb * 256, nr, r, o, got[i],
                         want[i]);
        }
}

Test(cpu_kquant_repack, bit_identical_to_single_row_on_odd_shapes)
{
    if (!pl_cpu_has_avx2())
        cr_skip_test("no AVX2: the GEMM is not used");
    pl_vnni_level lv[3];
    int n_lv = levels(lv);
    for (int k = 0; k < 3; k++)
        for (size_t si = 0; si < sizeof SHAPES / sizeof SHAPES[0]; si++) {
            const shape *s = &SHAPES[si];
            int n = s->n_sb * 256, n_blk = n / PL_QK, maxr = 70;
            size_t rb = (size_t)s->n_sb * pl_qdot_k_block_bytes(TYPES[k]);
            uint8_t *w = malloc(rb * s->rows);
            float *x = malloc(sizeof(float) * n), *wf = malloc(sizeof(float) * n);
            pl_q8_act *a = malloc(sizeof(pl_q8_act) * n_blk * maxr);
            float *want = malloc(sizeof(float) * maxr * s->rows);
            float *got = malloc(sizeof(float) * maxr * s->rows);
            cr_assert(w && x && wf && a && want && got);
            random_k(TYPES[k], w, s->n_sb * s->rows);
            for (int r = 0; r < maxr; r++) {
                for (int i = 0; i < n; i++)
                    x[i] = 2.0f * frand();
                pl_op_quantize_row_q8(x, a + (size_t)r * n_blk, n);
            }
            for (size_t ni = 0; ni < sizeof NROWS / sizeof NROWS[0]; ni++) {
                int nr = NROWS[ni];
                single_rows(TYPES[k], w, rb, a, n_blk, nr, s, want);
                int full = (s->o1 - s->o0) / 8 * 8;
                for (int l = 0; l < n_lv; l++) {
                    memset(got, 0xff, sizeof(float) * maxr * s->rows);
                    int done = pl_qdot_k_gemm(lv[l], TYPES[k], w, rb, a, n_blk, nr, got,
                                              s->rows, s->o0, s->o1);
                    cr_assert_eq(done, full, "rows done %d, want %d", done, full);
                    shape g = {s->n_sb, s->rows, s->o0, s->o0 + done};
                    check_equal(got, want, nr, &g, "gemm", TYPES[k], (int)lv[l]);
                }
                /* one activation row: the decode GEMV, 8 rows straight from w
                 * (Q6_K on AVX-512 only) */
                for (int l = 0; nr == 1 && l < n_lv; l++) {
                    memset(got, 0xff, sizeof(float) * maxr * s->rows);
                    int done = pl_qdot_k_gemv(lv[l], TYPES[k], w, rb, a, n_blk, got, s->o0,
                                              s->o1);
                    int want_done = TYPES[k] == PL_GGML_TYPE_Q6_K && lv[l] != PL_VNNI_AVX512
                                        ? 0 : full;
                    cr_assert_eq(done, want_done, "gemv rows done %d, want %d", done, want_done);
                    shape g = {s->n_sb, s->rows, s->o0, s->o0 + done};
                    check_equal(got, want, nr, &g, "gemv", TYPES[k], (int)lv[l]);
                }
                memset(got, 0xff, sizeof(float) * maxr * s->rows);
                pl_op_qmatmul_rows(TYPES[k], w, rb, a, n_blk, nr, got, s->rows, s->o0, s->o1);
                check_equal(got, want, nr, s, "qmatmul_rows", TYPES[k], -1);
            }
            /* Against the float64 dot, the bound test_cpu_ops states for the
             * lane-wise kernels. */
            for (int o = s->o0; o < s->o1; o++) {
                cr_assert_eq(pl_dequant_row(TYPES[k], w + o * rb, wf, n), 0);
                for (int r = 0; r < 70; r += 23) {
                    const pl_q8_act *ar = a + (size_t)r * n_blk;
                    double exact = 0, mag = 0;
                    for (int i = 0; i < n; i++) {
                        double xi = (double)ar[i / PL_QK].d * ar[i / PL_QK].qs[i % PL_QK];
                        exact += (double)wf[i] * xi;
                        mag += fabs((double)wf[i] * xi);
                    }
                    float v = got[(size_t)r * s->rows + o];
                    cr_assert_leq(fabs(v - exact), 1e-5 * mag + 1e-6, "type %s: %g vs %g",
                                  pl_ggml_type_name(TYPES[k]), v, exact);
                }
            }
            free(w), free(x), free(wf), free(a), free(want), free(got);
        }
}

Test(cpu_kquant_repack, declines_what_it_does_not_cover)
{
    static pl_q8_act a[8 * 8];
    float y[64];
    static uint8_t w[8 * 210];
    cr_assert(!pl_qdot_k_gemm_supported(PL_GGML_TYPE_Q5_0));
    cr_assert(!pl_qdot_k_gemm_supported(PL_GGML_TYPE_Q8_0));
    cr_assert_eq(pl_qdot_k_gemm(PL_VNNI_NONE, PL_GGML_TYPE_Q5_0, w, 22 * 8, a, 8, 8, y, 8, 0, 8),
                 0);
    /* fewer than 8 weight rows: nothing for it */
    cr_assert_eq(pl_qdot_k_gemm(PL_VNNI_NONE, PL_GGML_TYPE_Q6_K, w, 210, a, 8, 8, y, 8, 0, 7), 0);
}
