/* test_fp8.c - the host FP8 E4M3 codec (src/base/fp8.h) against values
 * worked out from the OCP FP8 specification (bias 7, 3 mantissa bits,
 * S.1111.111 NaN, no infinities): every code's value, round to nearest
 * even at midpoints (normal and subnormal), saturation at 448, signed
 * zeros and NaN. The GPU's conversion is compared with this codec on the
 * device (test_cuda_kernels: cuda_kernels::fp8_write_matches_host_codec). */
#include <criterion/criterion.h>
#include <math.h>

#include "src/base/fp8.h"

Test(fp8, known_codes)
{
    struct { uint8_t c; float v; } k[] = {
        {0x00, 0.0f}, {0x01, 0.001953125f}, {0x07, 0.013671875f}, {0x08, 0.015625f},
        {0x38, 1.0f}, {0x3c, 1.5f}, {0x40, 2.0f}, {0x77, 240.0f}, {0x78, 256.0f},
        {0x7e, 448.0f}, {0xb8, -1.0f}, {0xfe, -448.0f}, {0x81, -0.001953125f},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        cr_assert_eq(pl_e4m3_to_fp32(k[i].c), k[i].v, "code 0x%02x", k[i].c);
        cr_assert_eq(pl_fp32_to_e4m3(k[i].v), k[i].c, "value %g", k[i].v);
    }
    cr_assert(isnan(pl_e4m3_to_fp32(0x7f)) && isnan(pl_e4m3_to_fp32(0xff)));
    cr_assert_eq(pl_fp32_to_e4m3(-0.0f), 0x80);
}

/* Every code but NaN decodes to a value that encodes back to it, and the
 * positive codes increase strictly. */
Test(fp8, every_code_round_trips)
{
    float prev = -1.0f;
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7f) == 0x7f)
            continue;
        float v = pl_e4m3_to_fp32((uint8_t)c);
        cr_assert_eq(pl_fp32_to_e4m3(v), c, "code 0x%02x (%g)", c, v);
        if (c < 0x7f) {
            cr_assert_gt(v, prev, "code 0x%02x", c);
            prev = v;
        }
    }
}

/* Midpoints round to the even mantissa; just off a midpoint to the
 * nearer code. */
Test(fp8, round_to_nearest_even)
{
    for (int c = 0; c < 0x7e; c++) {
        float lo = pl_e4m3_to_fp32((uint8_t)c), hi = pl_e4m3_to_fp32((uint8_t)(c + 1));
        float mid = 0.5f * (lo + hi);
        cr_assert_eq(pl_fp32_to_e4m3(mid), (c & 1) ? c + 1 : c, "midpoint of 0x%02x", c);
        cr_assert_eq(pl_fp32_to_e4m3(nextafterf(mid, 0.0f)), c, "below the midpoint of 0x%02x",
                     c);
        cr_assert_eq(pl_fp32_to_e4m3(nextafterf(mid, INFINITY)), c + 1,
                     "above the midpoint of 0x%02x", c);
        cr_assert_eq(pl_fp32_to_e4m3(-mid), ((c & 1) ? c + 1 : c) | 0x80);
    }
    cr_assert_eq(pl_fp32_to_e4m3(0.0009765625f), 0x00, "half the smallest subnormal: even 0");
    cr_assert_eq(pl_fp32_to_e4m3(1.0e-30f), 0x00);
    cr_assert_eq(pl_fp32_to_e4m3(-1.0e-30f), 0x80);
}

Test(fp8, saturates_at_448_and_keeps_nan)
{
    float big[] = {448.0f, 455.9f, 464.0f, 464.1f, 500.0f, 1e30f, INFINITY};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        cr_assert_eq(pl_fp32_to_e4m3(big[i]), 0x7e, "%g", big[i]);
        cr_assert_eq(pl_fp32_to_e4m3(-big[i]), 0xfe, "%g", -big[i]);
    }
    cr_assert_eq(pl_fp32_to_e4m3(NAN) & 0x7f, 0x7f);
}
