/* test_cpu_kquant_gemv.c - the four-row decode GEMV of Q4_K and Q5_K
 * (backends/engine/cpu/qdot_k_gemv.c) on odd shapes: weight rows not a
 * multiple of 4, slices starting off a group, rows 1 to 9 super-blocks
 * wide, scales and mins over their whole 6-bit range. Every output equals
 * the AVX2 single-row kernel bit for bit (the value every ISA path and
 * batch size must give a row), on each int8 dot level this CPU has and
 * through pl_op_qmatmul_rows' one-row dispatch; rows too wide for its
 * arrays are left to the single-row kernels. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/cpu/ops.h"
#include "backends/engine/cpu/qdot_k.h"
#include "backends/engine/cpu/qdot_k_gemv.h"
#include "backends/engine/cpu/qdot_vnni.h"
#include "src/base/cpu_features.h"
#include "src/base/half.h"
#include "kquant_rand.h"

static const pl_ggml_type TYPES[2] = {PL_GGML_TYPE_Q4_K, PL_GGML_TYPE_Q5_K};

typedef struct shape {
    int n_sb, rows, o0, o1;
} shape;

static const shape SHAPES[] = {
    {1, 4, 0, 4}, {1, 7, 0, 7}, {2, 3, 0, 3}, {3, 21, 3, 21}, {4, 30, 5, 29}, {9, 17, 1, 17},
    {8, 40, 0, 40},
};

static void check_equal(const float *got, const float *want, int o0, int o1, const char *what,
                        pl_ggml_type t, int lv, int width)
{
    for (int o = o0; o < o1; o++)
        cr_assert_eq(memcmp(&got[o], &want[o], 4), 0,
                     "%s: type %s level %d width %d: out %d: %.9g vs %.9g", what,
                     pl_ggml_type_name(t), lv, width, o, got[o], want[o]);
}

Test(cpu_kquant_gemv, bit_identical_to_single_row_on_odd_shapes)
{
    if (!pl_cpu_has_avx2())
        cr_skip_test("no AVX2: the GEMV is not used");
    pl_vnni_level lv[3];
    int n_lv = levels(lv);
    for (int k = 0; k < 2; k++)
        for (size_t si = 0; si < sizeof SHAPES / sizeof SHAPES[0]; si++) {
            const shape *s = &SHAPES[si];
            int n = s->n_sb * 256, n_blk = n / PL_QK;
            size_t rb = (size_t)s->n_sb * pl_qdot_k_block_bytes(TYPES[k]);
            uint8_t *w = malloc(rb * s->rows);
            float *x = malloc(sizeof(float) * n);
            pl_q8_act *a = malloc(sizeof(pl_q8_act) * n_blk);
            float *want = malloc(sizeof(float) * s->rows), *got = malloc(sizeof(float) * s->rows);
            cr_assert(w && x && a && want && got);
            random_k(TYPES[k], w, s->n_sb * s->rows);
            for (int i = 0; i < n; i++)
                x[i] = 2.0f * frand();
            pl_op_quantize_row_q8(x, a, n);
            for (int o = s->o0; o < s->o1; o++)
                cr_assert(pl_op_qdot_avx2(TYPES[k], w + o * rb, a, n, &want[o]));
            int full = (s->o1 - s->o0) / 4 * 4;
            for (int l = 0; l < n_lv; l++) {
                memset(got, 0xff, sizeof(float) * s->rows);
                int done = pl_qdot_k_gemv(lv[l], TYPES[k], w, rb, a, n_blk, got, s->o0, s->o1);
                cr_assert_eq(done, full, "rows done %d, want %d", done, full);
                check_equal(got, want, s->o0, s->o0 + done, "gemv", TYPES[k], (int)lv[l], n);
                for (int o = s->o0 + done; o < s->o1; o++)
                    cr_assert_eq(memcmp(&got[o], &(uint32_t){0xffffffffu}, 4), 0,
                                 "gemv wrote row %d past its groups of 4", o);
            }
            memset(got, 0xff, sizeof(float) * s->rows);
            pl_op_qmatmul_rows(TYPES[k], w, rb, a, n_blk, 1, got, s->rows, s->o0, s->o1);
            check_equal(got, want, s->o0, s->o1, "qmatmul_rows", TYPES[k], -1, n);
            free(w), free(x), free(a), free(want), free(got);
        }
}

/* A row of 32,768 + 256 inputs is past the GEMV's arrays: it writes
 * nothing, and the dispatch still gives the single-row values. */
Test(cpu_kquant_gemv, rows_wider_than_its_arrays_stay_on_the_single_row_kernel)
{
    if (!pl_cpu_has_avx2())
        cr_skip_test("no AVX2: the GEMV is not used");
    int n_sb = 129, n = n_sb * 256, n_blk = n / PL_QK, rows = 4;
    size_t rb = (size_t)n_sb * pl_qdot_k_block_bytes(PL_GGML_TYPE_Q4_K);
    uint8_t *w = malloc(rb * rows);
    float *x = malloc(sizeof(float) * n), want[4], got[4];
    pl_q8_act *a = malloc(sizeof(pl_q8_act) * n_blk);
    cr_assert(w && x && a);
    random_k(PL_GGML_TYPE_Q4_K, w, n_sb * rows);
    for (int i = 0; i < n; i++)
        x[i] = frand();
    pl_op_quantize_row_q8(x, a, n);
    cr_assert_eq(pl_qdot_k_gemv(pl_qdot_vnni_level(), PL_GGML_TYPE_Q4_K, w, rb, a, n_blk, got,
                                0, rows), 0);
    pl_op_qmatmul_rows(PL_GGML_TYPE_Q4_K, w, rb, a, n_blk, 1, got, rows, 0, rows);
    for (int o = 0; o < rows; o++) {
        cr_assert(pl_op_qdot_avx2(PL_GGML_TYPE_Q4_K, w + o * rb, a, n, &want[o]));
        cr_assert_eq(memcmp(&got[o], &want[o], 4), 0, "row %d", o);
    }
    free(w), free(x), free(a);
}
