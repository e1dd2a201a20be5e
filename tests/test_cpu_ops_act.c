/* test_cpu_ops_act.c - the element-wise activations of backends/engine/cpu/
 * ops.c that Gemma brought (GeGLU, soft-capping, and the rational tanh
 * behind both) against their definitions in double. */
#include <criterion/criterion.h>
#include <math.h>

#include "backends/engine/cpu/ops.h"

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

