/* test_cuda_kernels.c - the element-wise CUDA kernels and the cuBLAS GEMM
 * against the C references of the CPU runner (cpu/ops.h), on random inputs
 * at several shapes. Attention and sampling are in test_cuda_attn.c and
 * test_cuda_sample.c (same executable). Skipped without a GPU.
 *
 * Tolerances (normalised error, tu_nerr): fp32 outputs 1e-5 (exact for
 * gathers and adds); bf16 outputs 8e-3, i.e. about two bf16 ulps (2^-8
 * relative each) of the largest value; GEMM over bf16-rounded inputs 1e-4
 * (fp32 accumulation order only). The ops of Gemma and Qwen3 (GeGLU,
 * per-head RMSNorm, logit soft-capping) against double-precision
 * references written from their definitions (HF transformers, ggml);
 * prompt logprobs against the CPU sampler's; the fp8 KV write against the
 * host codec, bit for bit. */
#include "tests/cuda_test_util.h"

#include "backends/engine/cpu/ops.h"
#include "backends/engine/model/model.h"
#include "backends/engine/cuda/add.cuh"
#include "backends/engine/cuda/embed.cuh"
#include "backends/engine/cuda/geglu.cuh"
#include "backends/engine/cuda/gemm.h"
#include "backends/engine/cuda/head_norm.cuh"
#include "backends/engine/cuda/kv_write.cuh"
#include "backends/engine/cuda/prompt_lp.cuh"
#include "backends/engine/cuda/rmsnorm.cuh"
#include "backends/engine/cuda/rope.cuh"
#include "backends/engine/cuda/softcap.cuh"
#include "backends/engine/cuda/swiglu.cuh"
#include "backends/engine/sampler.h"
#include "src/base/fp8.h"

#define TOL_F32 1e-5
#define TOL_BF16 8e-3

/* Gather, times the embedding scale (1, and Gemma's sqrt(640) = 25.3). */
Test(cuda_kernels, embed_gathers_rows_and_zeroes_bad_ids)
{
    SKIP_WITHOUT_GPU();
    const int V = 1000, dims[] = {64, 576, 640};
    const float scales[] = {1.0f, 1.0f, 25.298221f};
    for (int k = 0; k < 3; k++) {
        int D = dims[k], R = 9;
        float *tab = malloc(sizeof(float) * V * D), *got = malloc(sizeof(float) * R * D);
        tu_fill(tab, (size_t)V * D, 2.0f);
        tu_round_bf16(tab, (size_t)V * D);
        int32_t ids[9] = {0, 999, 5, 5, -3, 1000, 42, 7, 123};
        pl_bf16 *dt = tu_dev_bf16(tab, (size_t)V * D);
        int32_t *di = tu_dev(ids, sizeof ids);
        float *dx = tu_dev(NULL, sizeof(float) * R * D);
        OK(pl_cuda_embed(dt, di, dx, R, D, V, scales[k], 0));
        tu_get(got, dx, sizeof(float) * R * D);
        for (int r = 0; r < R; r++)
            for (int i = 0; i < D; i++) {
                float want = ids[r] >= 0 && ids[r] < V ? tab[(size_t)ids[r] * D + i] * scales[k]
                                                       : 0.0f;
                cr_assert_eq(got[r * D + i], want, "row %d col %d", r, i);
            }
        cudaFree(dt); cudaFree(di); cudaFree(dx);
        free(tab); free(got);
    }
}

static void check_rmsnorm(int R, int D, int fused)
{
    float *x = malloc(sizeof(float) * R * D), *y = malloc(sizeof(float) * R * D);
    float *w = malloc(sizeof(float) * D), *ref = malloc(sizeof(float) * R * D);
    float *got = malloc(sizeof(float) * R * D), *gx = malloc(sizeof(float) * R * D);
    tu_fill(x, (size_t)R * D, 3.0f);
    tu_fill(y, (size_t)R * D, 1.0f);
    tu_fill(w, D, 1.5f);
    float *dx = tu_dev(x, sizeof(float) * R * D), *dy = tu_dev(y, sizeof(float) * R * D);
    float *dw = tu_dev(w, sizeof(float) * D);
    pl_bf16 *dout = tu_dev(NULL, sizeof(pl_bf16) * R * D);
    if (fused) {
        OK(pl_cuda_add_rmsnorm(dx, dy, dw, dout, R, D, 1e-5f, 0));
        for (size_t i = 0; i < (size_t)R * D; i++)
            x[i] += y[i];
        tu_get(gx, dx, sizeof(float) * R * D);
        cr_assert_leq(tu_nerr(gx, x, (size_t)R * D), TOL_F32, "residual R=%d D=%d", R, D);
    } else {
        OK(pl_cuda_rmsnorm(dx, NULL, dw, dout, R, D, 1e-5f, 0));
    }
    for (int r = 0; r < R; r++)
        pl_op_rmsnorm(ref + (size_t)r * D, x + (size_t)r * D, w, D, 1e-5f);
    tu_get_bf16(got, dout, (size_t)R * D);
    cr_assert_leq(tu_nerr(got, ref, (size_t)R * D), TOL_BF16, "R=%d D=%d fused=%d", R, D,
                  fused);
    cudaFree(dx); cudaFree(dy); cudaFree(dw); cudaFree(dout);
    free(x); free(y); free(w); free(ref); free(got); free(gx);
}

Test(cuda_kernels, rmsnorm_matches_reference)
{
    SKIP_WITHOUT_GPU();
    int shapes[][2] = {{1, 64}, {7, 576}, {33, 2048}, {4, 4096}};
    for (int i = 0; i < 4; i++) {
        check_rmsnorm(shapes[i][0], shapes[i][1], 0);
        check_rmsnorm(shapes[i][0], shapes[i][1], 1);
    }
}

Test(cuda_kernels, rmsnorm_gathers_rows)
{
    SKIP_WITHOUT_GPU();
    const int R = 6, D = 128;
    float x[R * D], w[D], ref[D], got[2 * D];
    tu_fill(x, R * D, 2.0f);
    tu_fill(w, D, 1.0f);
    int32_t rows[2] = {5, 2};
    float *dx = tu_dev(x, sizeof x), *dw = tu_dev(w, sizeof w);
    int32_t *dr = tu_dev(rows, sizeof rows);
    pl_bf16 *dout = tu_dev(NULL, sizeof(pl_bf16) * 2 * D);
    OK(pl_cuda_rmsnorm(dx, dr, dw, dout, 2, D, 1e-6f, 0));
    tu_get_bf16(got, dout, 2 * D);
    for (int k = 0; k < 2; k++) {
        pl_op_rmsnorm(ref, x + rows[k] * D, w, D, 1e-6f);
        cr_assert_leq(tu_nerr(got + k * D, ref, D), TOL_BF16);
    }
    cudaFree(dx); cudaFree(dw); cudaFree(dr); cudaFree(dout);
}

/* The fp32-output norm (a mixture-of-experts router's input) against
 * pl_op_rmsnorm: fp32 sums both sides, only the order differs. */
Test(cuda_kernels, rmsnorm_f32_matches_reference)
{
    SKIP_WITHOUT_GPU();
    enum { R = 5, D = 2048 };
    static float x[R * D], w[D], ref[D], got[R * D];
    tu_fill(x, R * D, 2.0f);
    tu_fill(w, D, 1.5f);
    float *dx = tu_dev(x, sizeof x), *dw = tu_dev(w, sizeof w), *dout = tu_dev(NULL, sizeof got);
    OK(pl_cuda_rmsnorm_f32(dx, dw, dout, R, D, 1e-6f, 0));
    tu_get(got, dout, sizeof got);
    for (int r = 0; r < R; r++) {
        pl_op_rmsnorm(ref, x + r * D, w, D, 1e-6f);
        for (int i = 0; i < D; i++)
            cr_assert_float_eq(got[r * D + i], ref[i], 1e-5f * (1.0f + fabsf(ref[i])),
                               "row %d col %d", r, i);
    }
    cudaFree(dx); cudaFree(dw); cudaFree(dout);
}

/* Gemma's post-norm residual add: x += rmsnorm(y) * post, then the next
 * norm of x (or no output), against pl_op_rmsnorm. */
Test(cuda_kernels, post_norm_add_matches_reference)
{
    SKIP_WITHOUT_GPU();
    enum { R = 7, D = 640 };
    static float x[R * D], y[R * D], post[D], w[D], ref[R * D], yn[D], got[R * D];
    tu_fill(x, R * D, 3.0f);
    tu_fill(y, R * D, 5.0f);
    tu_fill(post, D, 1.5f);
    tu_fill(w, D, 1.5f);
    float *dx = tu_dev(x, sizeof x), *dy = tu_dev(y, sizeof y);
    float *dp = tu_dev(post, sizeof post), *dw = tu_dev(w, sizeof w);
    pl_bf16 *dout = tu_dev(NULL, sizeof(pl_bf16) * R * D);
    OK(pl_cuda_add_post_rmsnorm(dx, dy, dp, dw, dout, R, D, 1e-6f, 0));
    for (int r = 0; r < R; r++) {
        pl_op_rmsnorm(yn, y + r * D, post, D, 1e-6f);
        for (int i = 0; i < D; i++)
            x[r * D + i] += yn[i];
        pl_op_rmsnorm(ref + r * D, x + r * D, w, D, 1e-6f);
    }
    tu_get(got, dx, sizeof got);
    cr_assert_leq(tu_nerr(got, x, (size_t)R * D), TOL_F32, "residual");
    tu_get_bf16(got, dout, (size_t)R * D);
    cr_assert_leq(tu_nerr(got, ref, (size_t)R * D), TOL_BF16, "next norm");
    /* no next norm: only the residual moves */
    OK(pl_cuda_add_post_rmsnorm(dx, dy, dp, NULL, NULL, R, D, 1e-6f, 0));
    for (int r = 0; r < R; r++) {
        pl_op_rmsnorm(yn, y + r * D, post, D, 1e-6f);
        for (int i = 0; i < D; i++)
            x[r * D + i] += yn[i];
    }
    tu_get(got, dx, sizeof got);
    cr_assert_leq(tu_nerr(got, x, (size_t)R * D), TOL_F32, "residual, no output");
    cudaFree(dx); cudaFree(dy); cudaFree(dp); cudaFree(dw); cudaFree(dout);
}

/* mscale: YaRN's magnitude factor on the rotated dims, as the CPU runner's
 * forward_attn.c applies it after pl_op_rope. */
static void check_rope(int R, int n_heads, int hd, int n_rot, int neox, float mscale)
{
    int stride = n_heads * hd + 32;  /* extra columns must stay untouched */
    float *x = malloc(sizeof(float) * R * stride), *got = malloc(sizeof(float) * R * stride);
    float inv[128];
    int32_t *pos = malloc(sizeof(int32_t) * R);
    tu_fill(x, (size_t)R * stride, 2.0f);
    pl_model_rope_freqs(inv, n_rot, 10000.0f, "none", 1.0f, 1.0f, 1.0f, 0, NULL);
    for (int r = 0; r < R; r++)
        pos[r] = r * 397 % 8192;
    float *dx = tu_dev(x, sizeof(float) * R * stride), *dinv = tu_dev(inv, sizeof inv);
    int32_t *dpos = tu_dev(pos, sizeof(int32_t) * R);
    OK(pl_cuda_rope(dx, dpos, R, stride, n_heads, hd, n_rot, dinv, mscale,
                    neox ? PL_ROPE_MODE_NEOX : PL_ROPE_MODE_NORM, 0));
    tu_get(got, dx, sizeof(float) * R * stride);
    for (int r = 0; r < R; r++) {
        pl_op_rope(x + (size_t)r * stride, n_heads, hd, n_rot, pos[r], inv, neox);
        for (int h = 0; h < n_heads; h++)
            for (int i = 0; i < n_rot; i++)
                x[(size_t)r * stride + (size_t)h * hd + i] *= mscale;
    }
    /* fp32 both sides; the angle pos*inv_freq reaches ~8000 rad, where fp32
     * sin/cos implementations differ by ~1e-4 of the value. */
    cr_assert_leq(tu_nerr(got, x, (size_t)R * stride), 5e-4,
                  "R=%d hd=%d rot=%d neox=%d mscale %g", R, hd, n_rot, neox, mscale);
    cudaFree(dx); cudaFree(dinv); cudaFree(dpos);
    free(x); free(got); free(pos);
}

Test(cuda_kernels, rope_normal_and_neox_match_reference)
{
    SKIP_WITHOUT_GPU();
    for (int neox = 0; neox < 2; neox++) {
        check_rope(5, 12, 64, 64, neox, 1.0f);
        check_rope(17, 40, 128, 128, neox, 1.0f);
        check_rope(3, 4, 128, 64, neox, 1.0f);         /* partial rotation */
        check_rope(7, 12, 64, 64, neox, 1.3466f);      /* gpt-oss's YaRN: 1 + 0.1 ln 32 */
        check_rope(3, 4, 128, 64, neox, 1.3466f);      /* the scale on rotated dims only */
    }
}

Test(cuda_kernels, swiglu_matches_reference)
{
    SKIP_WITHOUT_GPU();
    int shapes[][2] = {{1, 1536}, {9, 8192}, {64, 256}};
    for (int k = 0; k < 3; k++) {
        int R = shapes[k][0], F = shapes[k][1];
        float *gu = malloc(sizeof(float) * R * 2 * F), *ref = malloc(sizeof(float) * R * F);
        float *got = malloc(sizeof(float) * R * F);
        tu_fill(gu, (size_t)R * 2 * F, 6.0f);
        for (int r = 0; r < R; r++) {
            memcpy(ref + (size_t)r * F, gu + (size_t)r * 2 * F, sizeof(float) * F);
            pl_op_swiglu(ref + (size_t)r * F, gu + (size_t)r * 2 * F + F, F);
        }
        float *dgu = tu_dev(gu, sizeof(float) * R * 2 * F);
        pl_bf16 *dout = tu_dev(NULL, sizeof(pl_bf16) * R * F);
        OK(pl_cuda_swiglu(dgu, dout, R, F, 0));
        tu_get_bf16(got, dout, (size_t)R * F);
        cr_assert_leq(tu_nerr(got, ref, (size_t)R * F), TOL_BF16, "R=%d F=%d", R, F);
        cudaFree(dgu); cudaFree(dout);
        free(gu); free(ref); free(got);
    }
}

Test(cuda_kernels, add_and_bias_are_exact)
{
    SKIP_WITHOUT_GPU();
    size_t sizes[] = {1, 1023, 4096 * 7};
    for (int k = 0; k < 3; k++) {
        size_t n = sizes[k];
        float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
        float *got = malloc(sizeof(float) * n);
        tu_fill(x, n, 1.0f);
        tu_fill(y, n, 1.0f);
        float *dx = tu_dev(x, sizeof(float) * n), *dy = tu_dev(y, sizeof(float) * n);
        OK(pl_cuda_add(dx, dy, n, 0));
        tu_get(got, dx, sizeof(float) * n);
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(got[i], x[i] + y[i]);
        cudaFree(dx); cudaFree(dy);
        free(x); free(y); free(got);
    }
    float m[3 * 5], b[5], got[15];
    tu_fill(m, 15, 1.0f);
    tu_fill(b, 5, 1.0f);
    float *dm = tu_dev(m, sizeof m), *db = tu_dev(b, sizeof b);
    OK(pl_cuda_add_bias(dm, db, 3, 5, 0));
    tu_get(got, dm, sizeof got);
    for (int i = 0; i < 15; i++)
        cr_assert_eq(got[i], m[i] + b[i % 5]);
    cudaFree(dm); cudaFree(db);
}

static void check_gemm(pl_cuda_gemm *g, int rows, int out, int in)
{
    float *x = malloc(sizeof(float) * rows * in), *w = malloc(sizeof(float) * out * in);
    float *ref = malloc(sizeof(float) * rows * out), *got = malloc(sizeof(float) * rows * out);
    tu_fill(x, (size_t)rows * in, 1.0f);
    tu_fill(w, (size_t)out * in, 0.1f);
    tu_round_bf16(x, (size_t)rows * in);
    tu_round_bf16(w, (size_t)out * in);
    for (int r = 0; r < rows; r++)
        for (int o = 0; o < out; o++) {
            double s = 0;
            for (int i = 0; i < in; i++)
                s += (double)x[(size_t)r * in + i] * w[(size_t)o * in + i];
            ref[(size_t)r * out + o] = (float)s;
        }
    pl_bf16 *dx = tu_dev_bf16(x, (size_t)rows * in), *dw = tu_dev_bf16(w, (size_t)out * in);
    float *dy = tu_dev(NULL, sizeof(float) * rows * out);
    OK(pl_cuda_gemm_bf16(g, dx, dw, dy, rows, out, in));
    tu_get(got, dy, sizeof(float) * rows * out);
    cr_assert_leq(tu_nerr(got, ref, (size_t)rows * out), 1e-4, "%dx%dx%d", rows, out, in);
    cudaFree(dx); cudaFree(dw); cudaFree(dy);
    free(x); free(w); free(ref); free(got);
}

Test(cuda_kernels, gemm_bf16_matches_double_reference)
{
    SKIP_WITHOUT_GPU();
    char err[256];
    pl_cuda_gemm *g = pl_cuda_gemm_new(0, err, sizeof err);
    cr_assert_not_null(g, "%s", err);
    check_gemm(g, 1, 96, 576);
    check_gemm(g, 5, 1536, 576);
    check_gemm(g, 64, 320, 2048);
    pl_cuda_gemm_free(g);
}

/* GeGLU: the tanh approximation of GELU (Gemma's hidden_activation
 * gelu_pytorch_tanh, ggml_gelu) times up. */
Test(cuda_kernels, geglu_matches_reference)
{
    SKIP_WITHOUT_GPU();
    int shapes[][2] = {{1, 2048}, {9, 9216}, {64, 640}};
    for (int k = 0; k < 3; k++) {
        int R = shapes[k][0], F = shapes[k][1];
        float *gu = malloc(sizeof(float) * R * 2 * F), *ref = malloc(sizeof(float) * R * F);
        float *got = malloc(sizeof(float) * R * F);
        tu_fill(gu, (size_t)R * 2 * F, 6.0f);
        for (int r = 0; r < R; r++)
            for (int c = 0; c < F; c++) {
                double g = gu[(size_t)r * 2 * F + c], u = gu[(size_t)r * 2 * F + F + c];
                double t = tanh(sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g));
                ref[(size_t)r * F + c] = (float)(0.5 * g * (1.0 + t) * u);
            }
        float *dgu = tu_dev(gu, sizeof(float) * R * 2 * F);
        pl_bf16 *dout = tu_dev(NULL, sizeof(pl_bf16) * R * F);
        OK(pl_cuda_geglu(dgu, dout, R, F, 0));
        tu_get_bf16(got, dout, (size_t)R * F);
        cr_assert_leq(tu_nerr(got, ref, (size_t)R * F), TOL_BF16, "R=%d F=%d", R, F);
        cudaFree(dgu); cudaFree(dout);
        free(gu); free(ref); free(got);
    }
}

/* Per-head RMSNorm of the q part and the k part of QKV rows (Qwen3,
 * Gemma 3), the v part and the columns past it untouched. */
static void check_head_norm(int R, int nq, int nk, int hd)
{
    int stride = (nq + 2 * nk) * hd + 8;
    size_t n = (size_t)R * stride;
    float *x = malloc(sizeof(float) * n), *ref = malloc(sizeof(float) * n);
    float *got = malloc(sizeof(float) * n), wq[512], wk[512];
    tu_fill(x, n, 4.0f);
    tu_fill(wq, hd, 1.5f);
    tu_fill(wk, hd, 1.5f);
    memcpy(ref, x, sizeof(float) * n);
    for (int r = 0; r < R; r++)
        for (int h = 0; h < nq + nk; h++) {
            float *v = ref + (size_t)r * stride + (size_t)h * hd;
            const float *w = h < nq ? wq : wk;
            double ss = 0;
            for (int i = 0; i < hd; i++)
                ss += (double)v[i] * v[i];
            double inv = 1.0 / sqrt(ss / hd + 1e-6);
            for (int i = 0; i < hd; i++)
                v[i] = (float)(v[i] * inv * w[i]);
        }
    float *dx = tu_dev(x, sizeof(float) * n);
    float *dwq = tu_dev(wq, sizeof(float) * hd), *dwk = tu_dev(wk, sizeof(float) * hd);
    OK(pl_cuda_head_rmsnorm(dx, stride, R, nq, hd, dwq, 1e-6f, 0));
    OK(pl_cuda_head_rmsnorm(dx + nq * hd, stride, R, nk, hd, dwk, 1e-6f, 0));
    tu_get(got, dx, sizeof(float) * n);
    cr_assert_leq(tu_nerr(got, ref, n), TOL_F32, "R=%d heads %d+%d hd %d", R, nq, nk, hd);
    for (int r = 0; r < R; r++)
        for (int i = (nq + nk) * hd; i < stride; i++)
            cr_assert_eq(got[(size_t)r * stride + i], x[(size_t)r * stride + i]);
    cudaFree(dx); cudaFree(dwq); cudaFree(dwk);
    free(x); free(ref); free(got);
}

Test(cuda_kernels, head_rmsnorm_matches_reference)
{
    SKIP_WITHOUT_GPU();
    check_head_norm(5, 16, 8, 128);    /* Qwen3 */
    check_head_norm(33, 4, 1, 256);    /* Gemma 3 270M */
    check_head_norm(2, 3, 3, 80);      /* a head size off the warp width */
}

/* Final logit soft-capping (Gemma 2: 30) leaves small logits almost as
 * they are and bounds large ones. */
Test(cuda_kernels, softcap_matches_reference)
{
    SKIP_WITHOUT_GPU();
    const size_t n = 100003;
    float *x = malloc(sizeof(float) * n), *ref = malloc(sizeof(float) * n);
    float *got = malloc(sizeof(float) * n);
    tu_fill(x, n, 200.0f);
    for (size_t i = 0; i < n; i++)
        ref[i] = (float)(30.0 * tanh((double)x[i] / 30.0));
    float *dx = tu_dev(x, sizeof(float) * n);
    OK(pl_cuda_softcap(dx, n, 30.0f, 0));
    tu_get(got, dx, sizeof(float) * n);
    cr_assert_leq(tu_nerr(got, ref, n), TOL_F32);
    for (size_t i = 0; i < n; i++)
        cr_assert_leq(fabsf(got[i]), 30.0f);
    cr_assert_eq(pl_cuda_softcap(dx, n, 0.0f, 0), -1, "cap 0 is refused");
    cudaFree(dx);
    free(x); free(ref); free(got);
}

/* Prompt logprobs of rows: the CPU sampler's raw log-softmax and top-N. */
Test(cuda_kernels, row_logprobs_match_cpu_sampler)
{
    SKIP_WITHOUT_GPU();
    const int N = 5, V = 49152;
    float *lg = malloc(sizeof(float) * N * V);
    tu_fill(lg, (size_t)N * V, 8.0f);
    int32_t next[5] = {0, V - 1, 77, 12345, 3}, top[5] = {0, 1, 5, 20, 3};
    float *dl = tu_dev(lg, sizeof(float) * N * V);
    int32_t *dn = tu_dev(next, sizeof next), *dt = tu_dev(top, sizeof top);
    float *dlp = tu_dev(NULL, sizeof(float) * N), *dtl = tu_dev(NULL, sizeof(float) * N * 20);
    int32_t *dti = tu_dev(NULL, sizeof(int32_t) * N * 20);
    OK(pl_cuda_row_logprobs(dl, N, V, dn, dt, dlp, dti, dtl, 0));
    float lp[5], tl[5 * 20];
    int32_t ti[5 * 20];
    tu_get(lp, dlp, sizeof lp);
    tu_get(ti, dti, sizeof ti);
    tu_get(tl, dtl, sizeof tl);
    for (int k = 0; k < N; k++) {
        pl_sample smp;
        pl_sampler_raw_logprobs(lg + (size_t)k * V, V, next[k], top[k], &smp);
        cr_assert_float_eq(lp[k], smp.logprob, 1e-4, "row %d", k);
        for (int j = 0; j < 20; j++) {
            cr_assert_eq(ti[k * 20 + j], j < smp.n_top ? smp.top_ids[j] : -1, "row %d top %d",
                         k, j);
            if (j < smp.n_top)
                cr_assert_float_eq(tl[k * 20 + j], smp.top_logprobs[j], 1e-4);
        }
    }
    cudaFree(dl); cudaFree(dn); cudaFree(dt); cudaFree(dlp); cudaFree(dtl); cudaFree(dti);
    free(lg);
}

/* The fp8 KV write rounds as the host codec does, bit for bit: every
 * code's value, the midpoints between codes (ties to even), values just
 * off them, saturation and signed zeros, through per-head scales of 1,
 * 0.5 (exact) and 0.3 (a rounded division). */
Test(cuda_kernels, fp8_write_matches_host_codec)
{
    SKIP_WITHOUT_GPU();
    enum { HD = 1024, KV = 3, W = KV * HD };
    static float row[2 * W];
    float scale[KV] = {1.0f, 0.5f, 0.3f};
    int n = 0;
    for (int c = 0; c < 0x7e && n + 4 <= HD; c++) {
        float lo = pl_e4m3_to_fp32((uint8_t)c), hi = pl_e4m3_to_fp32((uint8_t)(c + 1));
        float mid = 0.5f * (lo + hi);
        row[n++] = lo;
        row[n++] = -mid;
        row[n++] = nextafterf(mid, INFINITY);
        row[n++] = nextafterf(mid, 0.0f);
    }
    float extra[] = {448.0f, 464.0f, 470.0f, 1e20f, -1e20f, INFINITY, -0.0f, 1e-30f};
    for (size_t i = 0; i < sizeof extra / sizeof extra[0] && n < HD; i++)
        row[n++] = extra[i];
    for (; n < HD; n++)
        row[n] = tu_uniform() * 300.0f;
    for (int h = 1; h < KV; h++)
        for (int i = 0; i < HD; i++)
            row[h * HD + i] = row[i] * scale[h];
    for (int i = 0; i < W; i++)
        row[W + i] = -row[i];
    int32_t zero = 0;
    pl_kv_geom g = {.n_kv_heads = KV, .head_dim = HD, .block_size = 1, .max_blocks_per_seq = 1,
                    .n_blocks = 1, .dtype = PL_KV_FP8};
    float *dq = tu_dev(row, sizeof row), *ds = tu_dev(scale, sizeof scale);
    int32_t *dz = tu_dev(&zero, sizeof zero);
    pl_kv_layer kv = {.k = tu_dev(NULL, W), .v = tu_dev(NULL, W), .k_scale = ds, .v_scale = ds};
    OK(pl_cuda_kv_write(dq, 2 * W, 0, W, dz, dz, dz, g, kv, 1, 0));
    uint8_t got[2][W];
    tu_get(got[0], kv.k, W);
    tu_get(got[1], kv.v, W);
    for (int x = 0; x < 2; x++)
        for (int i = 0; i < W; i++) {
            float b = pl_bf16_to_fp32(pl_fp32_to_bf16(row[x * W + i]));
            uint8_t want = pl_fp32_to_e4m3(b / scale[i / HD]);
            cr_assert_eq(got[x][i], want, "%s[%d] = %g / %g: gpu 0x%02x, host 0x%02x",
                         x ? "v" : "k", i, b, scale[i / HD], got[x][i], want);
        }
    cudaFree(dq); cudaFree(ds); cudaFree(dz); cudaFree(kv.k); cudaFree(kv.v);
}
