/* test_cpu_ops_act.c - the element-wise activations of backends/engine/cpu/
 * ops.c (RMSNorm, SwiGLU, softmax; GeGLU, soft-capping and the rational
 * tanh behind both, which Gemma brought) against their definitions in
 * double. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "backends/engine/cpu/ops.h"

/* Values in [-scale, scale), the same on every run. */
static void fill(float *x, int n, float scale)
{
    static unsigned s = 12345;
    for (int i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = ((float)(s >> 8) / 16777216.0f * 2.0f - 1.0f) * scale;
    }
}

/* RMSNorm, SwiGLU and softmax against double, over a length whose tail
 * misses the 8-lane loops' multiples of 8; the softmax also with -inf
 * entries (weight 0, not exp256's clamped 1e-38) and with a sink's term in
 * the denominator. */
Test(cpu_ops, rmsnorm_swiglu_softmax)
{
    enum { N = 67 };
    float x[N], w[N], y[N], u[N], g[N];
    fill(x, N, 4.0f);
    fill(w, N, 1.0f);
    pl_op_rmsnorm(y, x, w, N, 1e-5f);
    double ss = 0;
    for (int i = 0; i < N; i++)
        ss += (double)x[i] * x[i];
    for (int i = 0; i < N; i++)
        cr_assert_float_eq(y[i], x[i] / sqrt(ss / N + 1e-5) * w[i], 1e-5);
    fill(g, N, 12.0f);
    fill(u, N, 1.0f);
    memcpy(y, g, sizeof(y));
    pl_op_swiglu(y, u, N);
    for (int i = 0; i < N; i++) {
        double want = g[i] / (1 + exp(-(double)g[i])) * u[i];
        cr_assert_float_eq(y[i], want, 1e-5 * (1 + fabs(want)), "swiglu(%g)", g[i]);
    }
    x[3] = x[40] = x[N - 1] = -INFINITY;
    for (int sink = 0; sink < 2; sink++) {
        memcpy(y, x, sizeof(y));
        float lse = 0;
        if (sink)
            pl_op_softmax_sink(y, N, 2.5f);
        else
            lse = pl_op_softmax(y, N);
        double z = sink ? exp(2.5) : 0, sum = 0;
        for (int i = 0; i < N; i++)
            z += exp((double)x[i]);
        for (int i = 0; i < N; i++) {
            cr_assert_float_eq(y[i], exp((double)x[i]) / z, 1e-6, "softmax[%d]", i);
            sum += y[i];
        }
        cr_assert_eq(y[3], 0.0f);
        cr_assert_eq(y[40], 0.0f);
        cr_assert_float_eq(sum, sink ? 1.0 - exp(2.5) / z : 1.0, 1e-5);
        if (!sink)
            cr_assert_float_eq(lse, log(z), 1e-4);
    }
}

/* GeGLU against its definition in double (GELU's tanh form), and the
 * soft-capping op against c * tanh(x / c). */
Test(cpu_ops, geglu_and_softcap)
{
    enum { N = 257 };
    float g[N], u[N], x[N], y[N];
    for (int i = 0; i < N; i++) {
        g[i] = x[i] = y[i] = (float)(i - N / 2) * 0.11f;
        u[i] = 0.5f + 0.01f * (float)i;
    }
    pl_op_geglu(g, u, N);
    pl_op_softcap(y, N, 4.0f);
    for (int i = 0; i < N; i++) {
        double v = x[i];
        double ge = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))) * u[i];
        cr_assert_float_eq(g[i], ge, 1e-5 * (1 + fabs(ge)), "geglu(%g)", v);
        cr_assert_float_eq(y[i], 4.0 * tanh(v / 4.0), 1e-6, "softcap(%g)", v);
        cr_assert_leq(fabsf(y[i]), 4.0f);
    }
    /* the rational tanh behind both, within 6 float ulps of tanh (it is 1
     * from |x| = 7.9 on, where tanh is 1 - 2.8e-7) */
    for (int i = -20000; i <= 20000; i++) {
        float v = (float)i * 0.0005f, t = v;
        pl_op_softcap(&t, 1, 1.0f);
        double want = tanh((double)v);
        cr_assert_leq(fabs(t - want), 6 * 5.97e-8 * fmax(fabs(want), 1e-30) + 1e-45,
                      "tanh(%.9g) = %.9g, want %.9g", v, t, want);
    }
}

