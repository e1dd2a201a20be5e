/* test_cuda_ssm.c - the Gated DeltaNet kernels (cuda/ssm.cuh) against the
 * CPU runner's references (cpu/ops_ssm.h: pl_op_ssm_conv_row,
 * pl_op_l2norm, pl_op_gdn_step_ref, pl_op_rmsnorm_gated), composed as
 * forward_deltanet.c composes them, over a step of several sequences whose
 * rows are interleaved, in slots out of order, one of them reset. Skipped
 * without a GPU.
 *
 * Tolerances (tu_nerr): the conv 1e-5 (the same fused sums in the same
 * order; SiLU's exp within ulps); the rule's outputs and states 1e-4 (the
 * norms' sums in fp32 on the GPU, in double on the CPU; the state's sums
 * in pl_op_gdn_step_ref's order). The slot copy is exact. */
#include "tests/cuda_test_util.h"

#include "backends/engine/cpu/ops_ssm.h"
#include "backends/engine/cuda/ssm.cuh"

/* Three sequences of 1, 6 and 29 rows interleaved over 36 rows, in slots
 * 2, 0, 1 of 3; sequence 0 starts at position 0 (reset). */
#define N_SEQ 3
#define N_ROWS 36
static const int LENS[N_SEQ] = {1, 6, 29};
static const int32_t SLOT[N_SEQ] = {2, 0, 1};
static const uint8_t RESET[N_SEQ] = {1, 0, 0};

static void step_rows(int32_t *rows, int32_t *off)
{
    /* seq 1 takes rows 0, 2, ..., 10; seq 0 row 1; seq 2 the rest in order */
    int k = 0, next[N_ROWS] = {0};
    off[0] = 0;
    off[1] = 1;
    rows[k++] = 1;
    next[1] = 1;
    for (int i = 0; i < 6; i++, k++)
        rows[k] = 2 * i, next[2 * i] = 1;
    off[2] = k;
    for (int r = 0; r < N_ROWS; r++)
        if (!next[r])
            rows[k++] = r;
    off[3] = k;
    cr_assert_eq(k, N_ROWS);
    for (int q = 0; q < N_SEQ; q++)
        cr_assert_eq(off[q + 1] - off[q], LENS[q]);
}

typedef struct dev_seqs {
    int32_t *rows, *off, *slot;
    uint8_t *reset;
} dev_seqs;

static pl_cuda_ssm_seqs dev_seqs_(dev_seqs *d, const int32_t *rows, const int32_t *off)
{
    d->rows = tu_dev(rows, sizeof(int32_t) * N_ROWS);
    d->off = tu_dev(off, sizeof(int32_t) * (N_SEQ + 1));
    d->slot = tu_dev(SLOT, sizeof SLOT);
    d->reset = tu_dev(RESET, sizeof RESET);
    return (pl_cuda_ssm_seqs){.rows = d->rows, .off = d->off, .slot_of = d->slot,
                              .reset = d->reset, .n = N_SEQ};
}

static void dev_seqs_free_(dev_seqs *d)
{
    cudaFree(d->rows), cudaFree(d->off), cudaFree(d->slot), cudaFree(d->reset);
}

Test(cuda_ssm, conv_matches_cpu_reference)
{
    SKIP_WITHOUT_GPU();
    int C = 200, K = 4;
    int32_t rows[N_ROWS], off[N_SEQ + 1];
    step_rows(rows, off);
    size_t nx = (size_t)N_ROWS * C, ns = (size_t)3 * (K - 1) * C;
    float *w = malloc(sizeof(float) * K * C), *x = malloc(sizeof(float) * nx);
    float *st = malloc(sizeof(float) * ns), *wx = malloc(sizeof(float) * nx);
    float *wst = malloc(sizeof(float) * ns), *gx = malloc(sizeof(float) * nx);
    float *gst = malloc(sizeof(float) * ns);
    tu_seed(41);
    tu_fill(w, (size_t)K * C, 1.0f);
    tu_fill(x, nx, 2.0f);
    tu_fill(st, ns, 1.5f);
    memcpy(wx, x, sizeof(float) * nx);
    memcpy(wst, st, sizeof(float) * ns);
    for (int s = 0; s < N_SEQ; s++) {
        float *hist = wst + (size_t)SLOT[s] * (K - 1) * C;
        if (RESET[s])
            memset(hist, 0, sizeof(float) * (K - 1) * C);
        for (int i = off[s]; i < off[s + 1]; i++)
            pl_op_ssm_conv_row(w, C, hist, C, wx + (size_t)rows[i] * C, C, K);
    }
    dev_seqs ds;
    pl_cuda_ssm_seqs sq = dev_seqs_(&ds, rows, off);
    float *dw = tu_dev(w, sizeof(float) * K * C), *dx = tu_dev(x, sizeof(float) * nx);
    float *dst = tu_dev(st, sizeof(float) * ns);
    OK(pl_cuda_ssm_conv(dw, dst, dx, sq, C, K, 0));
    tu_get(gx, dx, sizeof(float) * nx);
    tu_get(gst, dst, sizeof(float) * ns);
    cr_expect_leq(tu_nerr(gx, wx, nx), 1e-5, "outputs");
    cr_expect_leq(tu_nerr(gst, wst, ns), 0.0, "the history is the inputs, exactly");
    cr_expect_eq(pl_cuda_ssm_conv(dw, dst, dx, sq, C, PL_CUDA_SSM_MAX_K + 1, 0), -1);
    dev_seqs_free_(&ds);
    cudaFree(dw), cudaFree(dx), cudaFree(dst);
    free(w), free(x), free(st), free(wx), free(wst), free(gx), free(gst);
}

static float softplus_(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* The rule at head size d (nk key heads, nv value heads): d 64 and 128
 * keep the state in shared memory, 256 in global memory. */
static void check_rule(int d, int nk, int nv)
{
    int32_t rows[N_ROWS], off[N_SEQ + 1];
    step_rows(rows, off);
    int C = (2 * nk + nv) * d, inner = nv * d;
    size_t nq = (size_t)N_ROWS * C, nz = (size_t)N_ROWS * inner, nst = (size_t)3 * nv * d * d;
    float *qkv = malloc(sizeof(float) * nq), *z = malloc(sizeof(float) * nz);
    float *beta = malloc(sizeof(float) * N_ROWS * nv), *alpha = malloc(sizeof(float) * N_ROWS * nv);
    float *A = malloc(sizeof(float) * nv), *dt = malloc(sizeof(float) * nv);
    float *nw = malloc(sizeof(float) * d), *st = malloc(sizeof(float) * nst);
    float *wst = malloc(sizeof(float) * nst), *wout = malloc(sizeof(float) * nz);
    float *gst = malloc(sizeof(float) * nst), *gout = malloc(sizeof(float) * nz);
    float *q = malloc(sizeof(float) * d), *k = malloc(sizeof(float) * d);
    float *o = malloc(sizeof(float) * d), *u = malloc(sizeof(float) * d);
    tu_seed((uint64_t)d * 7 + 1);
    tu_fill(qkv, nq, 1.0f);
    tu_fill(z, nz, 2.0f);
    tu_fill(beta, (size_t)N_ROWS * nv, 2.0f);
    tu_fill(alpha, (size_t)N_ROWS * nv, 2.0f);
    tu_fill(dt, nv, 1.0f);
    for (int h = 0; h < nv; h++)
        A[h] = -expf(tu_uniform());      /* -exp(A_log) */
    tu_fill(nw, d, 0.5f);
    for (int i = 0; i < d; i++)
        nw[i] += 1.0f;
    tu_fill(st, nst, 0.3f);
    memcpy(wst, st, sizeof(float) * nst);
    float eps = 1e-6f;
    for (int s = 0; s < N_SEQ; s++)
        for (int h = 0; h < nv; h++) {
            float *S = wst + ((size_t)SLOT[s] * nv + h) * d * d;
            if (RESET[s])
                memset(S, 0, sizeof(float) * d * d);
            int kh = h % nk;
            for (int i = off[s]; i < off[s + 1]; i++) {
                int r = rows[i];
                const float *row = qkv + (size_t)r * C;
                memcpy(q, row + (size_t)kh * d, sizeof(float) * d);
                memcpy(k, row + (size_t)(nk + kh) * d, sizeof(float) * d);
                pl_op_l2norm(q, d, eps, 1.0f / sqrtf((float)d));
                pl_op_l2norm(k, d, eps, 1.0f);
                float g = expf(A[h] * softplus_(alpha[r * nv + h] + dt[h]));
                float b = 1.0f / (1.0f + expf(-beta[r * nv + h]));
                pl_op_gdn_step_ref(S, q, k, row + (size_t)2 * nk * d + (size_t)h * d, g, b, o,
                                   d, d, u);
                pl_op_rmsnorm_gated(wout + (size_t)r * inner + (size_t)h * d, o, nw,
                                    z + (size_t)r * inner + (size_t)h * d, d, eps);
            }
        }
    dev_seqs ds;
    pl_cuda_ssm_seqs sq = dev_seqs_(&ds, rows, off);
    pl_cuda_gdn_args a = {.qkv = tu_dev(qkv, sizeof(float) * nq),
                          .z = tu_dev(z, sizeof(float) * nz),
                          .beta = tu_dev(beta, sizeof(float) * N_ROWS * nv),
                          .alpha = tu_dev(alpha, sizeof(float) * N_ROWS * nv),
                          .a = tu_dev(A, sizeof(float) * nv), .dt = tu_dev(dt, sizeof(float) * nv),
                          .norm_w = tu_dev(nw, sizeof(float) * d),
                          .state = tu_dev(st, sizeof(float) * nst),
                          .out = tu_dev(NULL, sizeof(float) * nz),
                          .C = C, .nk = nk, .nv = nv, .d = d, .eps = eps};
    OK(pl_cuda_gdn_rule(&a, sq, 0));
    tu_get(gout, a.out, sizeof(float) * nz);
    tu_get(gst, a.state, sizeof(float) * nst);
    cr_expect_leq(tu_nerr(gout, wout, nz), 1e-4, "d %d: outputs", d);
    cr_expect_leq(tu_nerr(gst, wst, nst), 1e-4, "d %d: states", d);
    a.d = 48;
    cr_expect_eq(pl_cuda_gdn_rule(&a, sq, 0), -1, "a head size that is not a multiple of 32");
    dev_seqs_free_(&ds);
    void *dp[] = {(void *)a.qkv, (void *)a.z, (void *)a.beta, (void *)a.alpha, (void *)a.a,
                  (void *)a.dt, (void *)a.norm_w, a.state, a.out};
    for (size_t i = 0; i < sizeof dp / sizeof *dp; i++)
        cudaFree(dp[i]);
    free(qkv), free(z), free(beta), free(alpha), free(A), free(dt), free(nw), free(st);
    free(wst), free(wout), free(gst), free(gout), free(q), free(k), free(o), free(u);
}

Test(cuda_ssm, rule_matches_cpu_reference_shared_state) { SKIP_WITHOUT_GPU(); check_rule(64, 2, 4); }
Test(cuda_ssm, rule_matches_cpu_reference_qwen35_head) { SKIP_WITHOUT_GPU(); check_rule(128, 2, 4); }
Test(cuda_ssm, rule_matches_cpu_reference_global_state) { SKIP_WITHOUT_GPU(); check_rule(256, 1, 2); }

/* Slot 1's states of 3 layers into slot 3 (a checkpoint), the rest kept. */
Test(cuda_ssm, copy_slot_moves_one_slot_of_every_layer)
{
    SKIP_WITHOUT_GPU();
    size_t per = 1000, slots = 4, layers = 3, n = per * slots * layers;
    float *h = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
    tu_seed(77);
    tu_fill(h, n, 1.0f);
    float *d = tu_dev(h, sizeof(float) * n);
    OK(pl_cuda_ssm_copy_slot(d, per * 4, per * 4, per * slots * 4, (int)layers, 1, 3, 0));
    tu_get(got, d, sizeof(float) * n);
    for (size_t l = 0; l < layers; l++)
        for (size_t s = 0; s < slots; s++) {
            const float *want = h + (l * slots + (s == 3 ? 1 : s)) * per;
            cr_expect_eq(memcmp(got + (l * slots + s) * per, want, per * 4), 0,
                         "layer %zu slot %zu", l, s);
        }
    cudaFree(d);
    free(h), free(got);
}
