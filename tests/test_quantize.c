/* test_quantize.c - the quantisers (backends/engine/model/quantize.c):
 * Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, F16 and BF16 give gguf-py's bytes (its
 * numpy ports of ggml's reference quantisers;
 * tests/fixtures/gen_quantize_fixtures.py); Q4_K and Q6_K, which gguf-py
 * cannot write, round-trip through the reference dequantiser within their
 * error bounds and never lose a block to NaN.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/model/quant.h"
#include "backends/engine/model/quantize.h"

static json_t *fix_;

static void setup(void)
{
    const char *src = getenv("PARLEY_SRC");
    char p[1024];
    json_error_t je;
    snprintf(p, sizeof p, "%s/tests/fixtures/quantize_fixtures.json", src ? src : ".");
    fix_ = json_load_file(p, 0, &je);
    cr_assert(fix_, "%s: %s", p, je.text);
}

static void teardown(void) { json_decref(fix_); }

TestSuite(quantize, .init = setup, .fini = teardown);

static void row(size_t i, float *x, int n)
{
    json_t *r = json_array_get(json_object_get(fix_, "rows"), i);
    for (int j = 0; j < n; j++)
        x[j] = (float)json_number_value(json_array_get(r, (size_t)j));
}

static void hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

Test(quantize, equals_ggml_reference_bytes)
{
    const char *names[] = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "F16", "BF16"};
    pl_ggml_type types[] = {PL_GGML_TYPE_Q4_0, PL_GGML_TYPE_Q4_1, PL_GGML_TYPE_Q5_0,
                            PL_GGML_TYPE_Q5_1, PL_GGML_TYPE_Q8_0, PL_GGML_TYPE_F16,
                            PL_GGML_TYPE_BF16};
    int n = (int)json_integer_value(json_object_get(fix_, "n"));
    float x[256];
    uint8_t q[1024];
    char h[2100];
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        json_t *want = json_object_get(json_object_get(fix_, "types"), names[t]);
        for (size_t i = 0; i < json_array_size(want); i++) {
            row(i, x, n);
            cr_assert_eq(pl_quantize_row(types[t], x, q, n), 0);
            const char *w = json_string_value(json_array_get(want, i));
            hex(q, strlen(w) / 2, h);
            cr_expect_str_eq(h, w, "%s row %zu", names[t], i);
        }
    }
}

/* Relative RMS error of a round trip through type t. */
static double round_trip(pl_ggml_type t, const float *x, int n)
{
    uint8_t q[1024];
    float y[256];
    double e = 0, s = 0;
    cr_assert_eq(pl_quantize_row(t, x, q, n), 0);
    cr_assert_eq(pl_dequant_row(t, q, y, n), 0);
    for (int j = 0; j < n; j++) {
        cr_assert(isfinite(y[j]), "type %d element %d", t, j);
        e += ((double)y[j] - x[j]) * ((double)y[j] - x[j]);
        s += (double)x[j] * x[j];
    }
    return s > 0 ? sqrt(e / s) : sqrt(e);
}

/* Bounds: about 1.5x what these rows measure (relative RMS error: Q4_K
 * 0.053-0.105, Q6_K 0.010-0.036, the outlier row the largest), in line
 * with what these formats give in ggml. */
Test(quantize, k_quants_round_trip)
{
    float x[256];
    int n = 256;
    for (size_t i = 0; i < 3; i++) {
        row(i, x, n);
        double e4 = round_trip(PL_GGML_TYPE_Q4_K, x, n);
        double e6 = round_trip(PL_GGML_TYPE_Q6_K, x, n);
        cr_expect_lt(e4, 0.15, "Q4_K row %zu: %g", i, e4);
        cr_expect_lt(e6, 0.05, "Q6_K row %zu: %g", i, e6);
        cr_expect_lt(e6, e4, "row %zu", i);
    }
    /* constant, zeros, huge, ties; the 1e-6 row (5) only stays finite: its
     * scales underflow the format's f16 (as ggml's do) */
    for (size_t i = 3; i < 8; i++) {
        row(i, x, n);
        double e4 = round_trip(PL_GGML_TYPE_Q4_K, x, n);
        double e6 = round_trip(PL_GGML_TYPE_Q6_K, x, n);
        if (i != 5) {
            cr_expect_lt(e4, 0.15, "Q4_K row %zu: %g", i, e4);
            cr_expect_lt(e6, 0.05, "Q6_K row %zu: %g", i, e6);
        }
    }
}

Test(quantize, names_and_partial_blocks)
{
    float x[64] = {0};
    uint8_t q[256];
    cr_expect_eq(pl_quantize_type_parse("q8_0"), PL_GGML_TYPE_Q8_0);
    cr_expect_eq(pl_quantize_type_parse("Q4_K"), PL_GGML_TYPE_Q4_K);
    cr_expect_eq(pl_quantize_type_parse("bf16"), PL_GGML_TYPE_BF16);
    cr_expect_eq(pl_quantize_type_parse("q3_k"), -1);
    cr_expect(pl_quantize_supported(PL_GGML_TYPE_Q6_K));
    cr_expect(!pl_quantize_supported(PL_GGML_TYPE_Q2_K));
    cr_expect_eq(pl_quantize_row(PL_GGML_TYPE_Q8_0, x, q, 33), -1);
    cr_expect_eq(pl_quantize_row(PL_GGML_TYPE_Q4_K, x, q, 64), -1);
    cr_expect_eq(pl_quantize_row(PL_GGML_TYPE_Q2_K, x, q, 256), -1);
}
