/* test_cuda_gemma4.c - the CUDA ops Gemma 4 adds (issue 48) against the
 * CPU runner's references (cpu/ops.h and the formulas of
 * cpu/forward_ple.c, forward_attn.c): the unweighted RMSNorm of V at head
 * size 512, proportional RoPE on a 512-wide global head (a quarter of the
 * pairs rotating, the rest by factors of 1e30), the per-layer embeddings'
 * inputs and gate, the 26B-A4B branches' two norms summed, the layer
 * output scale. Attention at head size 512 is in test_cuda_attn.c.
 * Skipped without a GPU.
 *
 * Tolerances (tu_nerr): fp32 outputs 1e-5 of their largest value (the
 * scale exactly), bf16 outputs 8e-3. */
#include "tests/cuda_test_util.h"

#include "backends/engine/cpu/ops.h"
#include "backends/engine/cuda/head_norm.cuh"
#include "backends/engine/cuda/ple.cuh"
#include "backends/engine/cuda/rope.cuh"

#define TOL_F32 1e-5
#define TOL_BF16 8e-3

Test(cuda_gemma4, v_norm_unweighted_at_head_512)
{
    SKIP_WITHOUT_GPU();
    int rows = 5, heads = 2, hd = 512, stride = 3 * 512;
    size_t n = (size_t)rows * stride;
    float *x = malloc(sizeof(float) * n), *want = malloc(sizeof(float) * n);
    float *got = malloc(sizeof(float) * n);
    tu_seed(51);
    tu_fill(x, n, 3.0f);
    memcpy(want, x, sizeof(float) * n);
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < heads; h++) {
            float *v = want + (size_t)r * stride + (size_t)h * hd;
            pl_op_rmsnorm(v, v, NULL, hd, 1e-6f);
        }
    float *d = tu_dev(x, sizeof(float) * n);
    OK(pl_cuda_head_rmsnorm(d, stride, rows, heads, hd, NULL, 1e-6f, 0));
    tu_get(got, d, sizeof(float) * n);
    cr_expect_leq(tu_nerr(got, want, n), TOL_F32, "the normed heads, the rest untouched");
    cudaFree(d);
    free(x), free(want), free(got);
}

/* Global layers: 512-wide heads, rope_freqs 1 on the first quarter of the
 * pairs and 1e30 on the rest (as llama.cpp's converter writes them). */
Test(cuda_gemma4, proportional_rope_on_512_heads)
{
    SKIP_WITHOUT_GPU();
    int rows = 4, heads = 3, hd = 512, half = hd / 2;
    size_t n = (size_t)rows * heads * hd;
    float *inv = malloc(sizeof(float) * half), *x = malloc(sizeof(float) * n);
    float *want = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
    int32_t pos[] = {0, 7, 300, 4095};
    for (int i = 0; i < half; i++)
        inv[i] = powf(1000000.0f, -2.0f * i / hd) / (i < half / 4 ? 1.0f : 1e30f);
    tu_seed(53);
    tu_fill(x, n, 1.0f);
    for (int neox = 0; neox <= 1; neox++) {
        memcpy(want, x, sizeof(float) * n);
        for (int r = 0; r < rows; r++)
            pl_op_rope(want + (size_t)r * heads * hd, heads, hd, hd, pos[r], inv, neox);
        float *d = tu_dev(x, sizeof(float) * n), *di = tu_dev(inv, sizeof(float) * half);
        int32_t *dp = tu_dev(pos, sizeof pos);
        OK(pl_cuda_rope(d, dp, rows, heads * hd, heads, hd, hd, di, 1.0f,
                        neox ? PL_ROPE_MODE_NEOX : PL_ROPE_MODE_NORM, 0));
        tu_get(got, d, sizeof(float) * n);
        cr_expect_leq(tu_nerr(got, want, n), TOL_F32, "neox %d", neox);
        cudaFree(d), cudaFree(di), cudaFree(dp);
    }
    free(inv), free(x), free(want), free(got);
}

/* The per-layer inputs (forward_ple.c's pl_fwd_ple_inputs_ after its
 * projection) and layer l's gate, at E2B's per-layer width 256 and a
 * width that is not a block's multiple. */
static void check_ple(int n_layer, int np)
{
    int rows = 6, e_dim = 96;
    size_t ne = (size_t)rows * n_layer * np, ng = (size_t)rows * np;
    float *e = malloc(sizeof(float) * ne), *tok = malloc(sizeof(float) * ne);
    float *norm = malloc(sizeof(float) * np), *want = malloc(sizeof(float) * ne);
    float *got = malloc(sizeof(float) * ne), *g = malloc(sizeof(float) * ng);
    float *wg = malloc(sizeof(float) * ng), *gg = malloc(sizeof(float) * ng);
    float ps = 1.0f / sqrtf((float)e_dim), ts = sqrtf((float)np), eps = 1e-6f;
    tu_seed((uint64_t)np * 3 + 1);
    tu_fill(e, ne, 4.0f);
    tu_fill(tok, ne, 0.5f);
    tu_fill(norm, np, 0.5f);
    tu_fill(g, ng, 3.0f);
    for (int i = 0; i < np; i++)
        norm[i] += 1.0f;
    for (size_t i = 0; i < ne; i++)
        want[i] = e[i] * ps;
    for (int r = 0; r < rows; r++)
        for (int l = 0; l < n_layer; l++) {
            float *el = want + ((size_t)r * n_layer + l) * np;
            const float *tl = tok + ((size_t)r * n_layer + l) * np;
            pl_op_rmsnorm(el, el, norm, np, eps);
            for (int i = 0; i < np; i++)
                el[i] = (el[i] + tl[i] * ts) * (float)M_SQRT1_2;
        }
    float *de = tu_dev(e, sizeof(float) * ne), *dt = tu_dev(tok, sizeof(float) * ne);
    float *dn = tu_dev(norm, sizeof(float) * np), *dg = tu_dev(g, sizeof(float) * ng);
    pl_bf16 *dout = tu_dev(NULL, sizeof(pl_bf16) * ng);
    OK(pl_cuda_ple_inputs(de, dt, dn, ps, ts, eps, rows, n_layer, np, 0));
    tu_get(got, de, sizeof(float) * ne);
    cr_expect_leq(tu_nerr(got, want, ne), TOL_F32, "inputs, n_ple %d", np);
    int l = n_layer - 1;
    memcpy(wg, g, sizeof(float) * ng);
    for (int r = 0; r < rows; r++)
        pl_op_geglu(wg + (size_t)r * np, want + ((size_t)r * n_layer + l) * np, np);
    OK(pl_cuda_ple_gate(dg, de, l, n_layer, dout, rows, np, 0));
    tu_get_bf16(gg, dout, ng);
    cr_expect_leq(tu_nerr(gg, wg, ng), TOL_BF16, "gate, n_ple %d", np);
    cudaFree(de), cudaFree(dt), cudaFree(dn), cudaFree(dg), cudaFree(dout);
    free(e), free(tok), free(norm), free(want), free(got), free(g), free(wg), free(gg);
}

Test(cuda_gemma4, per_layer_embeddings) { SKIP_WITHOUT_GPU(); check_ple(35, 256); check_ple(3, 40); }

/* 26B-A4B: x += rmsnorm(rmsnorm(dense, post_ffw_norm_1) + rmsnorm(experts,
 * post_ffw_norm_2), post_ffw_norm): the sum here, the outer norm by
 * pl_cuda_add_post_rmsnorm (rmsnorm.cuh); then x *= layer_output_scale. */
Test(cuda_gemma4, branch_norms_and_output_scale)
{
    SKIP_WITHOUT_GPU();
    int rows = 7, n = 640;
    size_t nn = (size_t)rows * n;
    float *t = malloc(sizeof(float) * nn), *t2 = malloc(sizeof(float) * nn);
    float *w1 = malloc(sizeof(float) * n), *w2 = malloc(sizeof(float) * n);
    float *want = malloc(sizeof(float) * nn), *got = malloc(sizeof(float) * nn), s = 0.37f;
    tu_seed(59);
    tu_fill(t, nn, 2.0f);
    tu_fill(t2, nn, 5.0f);
    tu_fill(w1, n, 1.0f);
    tu_fill(w2, n, 1.0f);
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
    for (int r = 0; r < rows; r++) {
        pl_op_rmsnorm(a, t + (size_t)r * n, w1, n, 1e-6f);
        pl_op_rmsnorm(b, t2 + (size_t)r * n, w2, n, 1e-6f);
        for (int i = 0; i < n; i++)
            want[(size_t)r * n + i] = a[i] + b[i];
    }
    float *dt = tu_dev(t, sizeof(float) * nn), *dt2 = tu_dev(t2, sizeof(float) * nn);
    float *dw1 = tu_dev(w1, sizeof(float) * n), *dw2 = tu_dev(w2, sizeof(float) * n);
    float *ds = tu_dev(&s, sizeof s);
    OK(pl_cuda_rmsnorm2_sum(dt, dt2, dw1, dw2, rows, n, 1e-6f, 0));
    tu_get(got, dt, sizeof(float) * nn);
    cr_expect_leq(tu_nerr(got, want, nn), TOL_F32, "the two branches");
    OK(pl_cuda_scale_rows(dt, ds, rows, n, 0));
    float *scaled = malloc(sizeof(float) * nn);
    tu_get(scaled, dt, sizeof(float) * nn);
    for (size_t i = 0; i < nn; i++)
        cr_assert_eq(scaled[i], got[i] * s, "element %zu: scaled exactly", i);
    cr_expect_eq(pl_cuda_ple_inputs(dt, dt2, dw1, 1, 1, 1e-6f, 1, 1, 2048, 0), -1,
                 "a per-layer width past the kernel's");
    cudaFree(dt), cudaFree(dt2), cudaFree(dw1), cudaFree(dw2), cudaFree(ds);
    free(t), free(t2), free(w1), free(w2), free(want), free(got), free(a), free(b), free(scaled);
}
