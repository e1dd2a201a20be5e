/* test_cpu_hdot.c - the F16/BF16 x f32 kernels (backends/engine/cpu/hdot.c)
 * against their scalar reference (bit for bit, whatever the rows computed
 * together) and a float64 dot. Runs under every kernel path (the _avx2 and
 * _scalar variants). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "backends/engine/cpu/hdot.h"
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

/* F16/BF16 rows x f32 activations: the kernel's bits are the reference's
 * whatever the number of rows computed together, and the reference is the
 * float64 dot within rounding. */
Test(cpu_hdot, hmatmul_rows_f16_bf16)
{
    enum { R = 9, O = 13 };
    const int lens[] = {8, 16, 40, 576, 77};
    for (int ti = 0; ti < 2; ti++) {
        pl_ggml_type t = ti ? PL_GGML_TYPE_BF16 : PL_GGML_TYPE_F16;
        for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
            int n = lens[li];
            uint16_t *w = malloc(sizeof *w * (size_t)O * n);
            float *x = malloc(sizeof *x * (size_t)R * n), y[R * O], y1[O];
            cr_assert(w && x);
            for (int i = 0; i < O * n; i++) {
                float f = frand();
                w[i] = ti ? pl_fp32_to_bf16(f) : pl_fp32_to_fp16(f);
            }
            fill(x, R * n, 2.0f);
            pl_op_hmatmul_rows(t, w, (size_t)n * 2, x, n, R, y, O, 0, O);
            for (int r = 0; r < R; r++) {
                pl_op_hmatmul_rows(t, w, (size_t)n * 2, x + (size_t)r * n, n, 1, y1, O, 3, O);
                for (int o = 0; o < O; o++) {
                    const uint16_t *wr = w + (size_t)o * n;
                    float ref = pl_op_hdot_ref(t, wr, x + (size_t)r * n, n);
                    double d = 0, mag = 0;
                    for (int i = 0; i < n; i++) {
                        double wf = ti ? pl_bf16_to_fp32(wr[i]) : pl_fp16_to_fp32(wr[i]);
                        d += wf * x[(size_t)r * n + i];
                        mag += fabs(wf * x[(size_t)r * n + i]);
                    }
                    cr_expect_eq(y[r * O + o], ref, "t %d n %d r %d o %d", ti, n, r, o);
                    if (o >= 3)
                        cr_expect_eq(y1[o], ref, "one row: t %d n %d r %d o %d", ti, n, r, o);
                    cr_expect_leq(fabs(ref - d), 1e-6 * mag + 1e-30, "vs f64: n %d", n);
                }
            }
            free(w);
            free(x);
        }
    }
    cr_expect(pl_op_hdot_supported(PL_GGML_TYPE_F16) && pl_op_hdot_supported(PL_GGML_TYPE_BF16));
    cr_expect(!pl_op_hdot_supported(PL_GGML_TYPE_Q8_0));
}
