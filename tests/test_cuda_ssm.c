/* test_cuda_ssm.c - the Gated DeltaNet kernels (cuda/ssm.cuh) against the
 * CPU runner's references (cpu/ops_ssm.h: pl_op_ssm_conv_row,
 * pl_op_l2norm, pl_op_gdn_step_ref, pl_op_rmsnorm_gated), composed as
 * forward_deltanet.c composes them, over a step of several sequences whose
 * rows are interleaved, in slots out of order, one of them reset; the
 * rule's chunked form also against its row-by-row kernel. Skipped without
 * a GPU.
 *
 * Tolerances (tu_nerr): the conv 1e-5 (the same fused sums in the same
 * order; SiLU's exp within ulps); the rule's outputs and states 1e-4, both
 * forms (the norms' sums in fp32 on the GPU, in double on the CPU; the row
 * kernel's state sums in pl_op_gdn_step_ref's order; the chunked form
 * reassociates them as pl_op_gdn_chunk_ref does, which test_cpu_ops_ssm
 * holds within 5e-6 of the steps in double over 150 rows, so 1e-4 leaves
 * 20x for fp32 norms and CUDA's expf (2 ulp) while a wrong term moves
 * the outputs by their own size). The slot copy is exact. */
#include "tests/cuda_test_util.h"

#include <limits.h>
#include <stdbool.h>

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

/* A step of the rule: n sequences (rows rows[off[s] .. off[s + 1])) in
 * slots slot[s] of n_slots, reset[s]; random inputs and slot states. */
typedef struct rule_case {
    int d, nk, nv, n, n_rows, n_slots, C, inner;
    const int32_t *rows, *off, *slot;
    const uint8_t *reset;
    float *qkv, *z, *beta, *alpha, *A, *dt, *nw, *st;
    float eps;
} rule_case;

static rule_case rule_case_make(int d, int nk, int nv, int n, const int32_t *rows,
                                const int32_t *off, const int32_t *slot, const uint8_t *reset,
                                int n_slots)
{
    rule_case c = {.d = d, .nk = nk, .nv = nv, .n = n, .n_rows = off[n], .n_slots = n_slots,
                   .C = (2 * nk + nv) * d, .inner = nv * d, .rows = rows, .off = off,
                   .slot = slot, .reset = reset, .eps = 1e-6f};
    size_t R = (size_t)c.n_rows;
    c.qkv = malloc(sizeof(float) * R * c.C), c.z = malloc(sizeof(float) * R * c.inner);
    c.beta = malloc(sizeof(float) * R * nv), c.alpha = malloc(sizeof(float) * R * nv);
    c.A = malloc(sizeof(float) * nv), c.dt = malloc(sizeof(float) * nv);
    c.nw = malloc(sizeof(float) * d), c.st = malloc(sizeof(float) * n_slots * nv * d * d);
    tu_seed((uint64_t)d * 7 + (uint64_t)R);
    tu_fill(c.qkv, R * c.C, 1.0f);
    tu_fill(c.z, R * c.inner, 2.0f);
    tu_fill(c.beta, R * nv, 2.0f);
    tu_fill(c.alpha, R * nv, 2.0f);
    tu_fill(c.dt, nv, 1.0f);
    for (int h = 0; h < nv; h++)
        c.A[h] = -expf(tu_uniform());    /* -exp(A_log) */
    tu_fill(c.nw, d, 0.5f);
    for (int i = 0; i < d; i++)
        c.nw[i] += 1.0f;
    tu_fill(c.st, (size_t)n_slots * nv * d * d, 0.3f);
    return c;
}

static void rule_case_free(rule_case *c)
{
    free(c->qkv), free(c->z), free(c->beta), free(c->alpha), free(c->A), free(c->dt);
    free(c->nw), free(c->st);
}

/* The rule on the CPU, composed as forward_deltanet.c's row-by-row path
 * composes pl_op_l2norm, pl_op_gdn_step_ref and pl_op_rmsnorm_gated:
 * outputs into out (n_rows, inner), the slots' states into st. */
static void cpu_rule_(const rule_case *c, float *out, float *st)
{
    int d = c->d, nk = c->nk, nv = c->nv;
    float *q = malloc(sizeof(float) * d), *k = malloc(sizeof(float) * d);
    float *o = malloc(sizeof(float) * d), *u = malloc(sizeof(float) * d);
    memcpy(st, c->st, sizeof(float) * c->n_slots * nv * d * d);
    for (int s = 0; s < c->n; s++)
        for (int h = 0; h < nv; h++) {
            float *S = st + ((size_t)c->slot[s] * nv + h) * d * d;
            if (c->reset[s])
                memset(S, 0, sizeof(float) * d * d);
            int kh = h % nk;
            for (int i = c->off[s]; i < c->off[s + 1]; i++) {
                int r = c->rows[i];
                const float *row = c->qkv + (size_t)r * c->C;
                memcpy(q, row + (size_t)kh * d, sizeof(float) * d);
                memcpy(k, row + (size_t)(nk + kh) * d, sizeof(float) * d);
                pl_op_l2norm(q, d, c->eps, 1.0f / sqrtf((float)d));
                pl_op_l2norm(k, d, c->eps, 1.0f);
                float g = expf(c->A[h] * softplus_(c->alpha[r * nv + h] + c->dt[h]));
                float b = 1.0f / (1.0f + expf(-c->beta[r * nv + h]));
                pl_op_gdn_step_ref(S, q, k, row + (size_t)2 * nk * d + (size_t)h * d, g, b, o,
                                   d, d, u);
                size_t at = (size_t)r * c->inner + (size_t)h * d;
                pl_op_rmsnorm_gated(out + at, o, c->nw, c->z + at, d, c->eps);
            }
        }
    free(q), free(k), free(o), free(u);
}

/* The rule on the device (pl_cuda_gdn_rule with chunk_min; max_len the
 * longest sequence): outputs into out, the slots' states into st. With
 * bad_d, also that a head size not a multiple of 32 is refused. */
static void dev_rule_(const rule_case *c, int chunk_min, float *out, float *st, bool bad_d)
{
    size_t R = (size_t)c->n_rows, nst = (size_t)c->n_slots * c->nv * c->d * c->d;
    size_t no = R * c->inner;
    int max_len = 0;
    for (int s = 0; s < c->n; s++)
        max_len = c->off[s + 1] - c->off[s] > max_len ? c->off[s + 1] - c->off[s] : max_len;
    int32_t *rows = tu_dev(c->rows, sizeof(int32_t) * R);
    int32_t *off = tu_dev(c->off, sizeof(int32_t) * (c->n + 1));
    int32_t *slot = tu_dev(c->slot, sizeof(int32_t) * c->n);
    uint8_t *reset = tu_dev(c->reset, (size_t)c->n);
    pl_cuda_ssm_seqs sq = {.rows = rows, .off = off, .slot_of = slot, .reset = reset,
                           .n = c->n, .max_len = max_len};
    pl_cuda_gdn_args a = {.qkv = tu_dev(c->qkv, sizeof(float) * R * c->C),
                          .z = tu_dev(c->z, sizeof(float) * no),
                          .beta = tu_dev(c->beta, sizeof(float) * R * c->nv),
                          .alpha = tu_dev(c->alpha, sizeof(float) * R * c->nv),
                          .a = tu_dev(c->A, sizeof(float) * c->nv),
                          .dt = tu_dev(c->dt, sizeof(float) * c->nv),
                          .norm_w = tu_dev(c->nw, sizeof(float) * c->d),
                          .state = tu_dev(c->st, sizeof(float) * nst),
                          .out = tu_dev(NULL, sizeof(float) * no),
                          .C = c->C, .nk = c->nk, .nv = c->nv, .d = c->d, .eps = c->eps,
                          .chunk_min = chunk_min};
    OK(pl_cuda_gdn_rule(&a, sq, 0));
    tu_get(out, a.out, sizeof(float) * no);
    tu_get(st, a.state, sizeof(float) * nst);
    pl_cuda_gdn_args bad = a;
    bad.d = 48;
    if (bad_d)
        cr_expect_eq(pl_cuda_gdn_rule(&bad, sq, 0), -1, "a head size that is not a multiple of 32");
    void *dp[] = {rows, off, slot, reset, (void *)a.qkv, (void *)a.z, (void *)a.beta,
                  (void *)a.alpha, (void *)a.a, (void *)a.dt, (void *)a.norm_w, a.state, a.out};
    for (size_t i = 0; i < sizeof dp / sizeof *dp; i++)
        cudaFree(dp[i]);
}

/* The rule at head size d (nk key heads, nv value heads) on the step of
 * step_rows, the default choice of form (the 29-row sequence chunked, the
 * others row by row): d 64 and 128 keep the state in shared memory, 256
 * in global memory. */
static void check_rule(int d, int nk, int nv)
{
    int32_t rows[N_ROWS], off[N_SEQ + 1];
    step_rows(rows, off);
    rule_case c = rule_case_make(d, nk, nv, N_SEQ, rows, off, SLOT, RESET, 3);
    size_t no = (size_t)N_ROWS * c.inner, nst = (size_t)3 * nv * d * d;
    float *wout = malloc(sizeof(float) * no), *wst = malloc(sizeof(float) * nst);
    float *gout = malloc(sizeof(float) * no), *gst = malloc(sizeof(float) * nst);
    cpu_rule_(&c, wout, wst);
    dev_rule_(&c, 0, gout, gst, true);
    cr_expect_leq(tu_nerr(gout, wout, no), 1e-4, "d %d: outputs", d);
    cr_expect_leq(tu_nerr(gst, wst, nst), 1e-4, "d %d: states", d);
    rule_case_free(&c);
    free(wout), free(wst), free(gout), free(gst);
}

Test(cuda_ssm, rule_matches_cpu_reference_shared_state) { SKIP_WITHOUT_GPU(); check_rule(64, 2, 4); }
Test(cuda_ssm, rule_matches_cpu_reference_qwen35_head) { SKIP_WITHOUT_GPU(); check_rule(128, 2, 4); }
Test(cuda_ssm, rule_matches_cpu_reference_global_state) { SKIP_WITHOUT_GPU(); check_rule(256, 1, 2); }

/* Sequences of 1, 37, 64 and 200 rows (within one chunk, across chunk
 * boundaries, exactly one, several with a short tail), rows handed out
 * round-robin over the sequences still running, in slots 3, 0, 2, 1 of 4;
 * the 37-row one reset, the others carrying their slot's state. */
#define CH_SEQ 4
static const int CH_LENS[CH_SEQ] = {1, 37, 64, 200};
static const int32_t CH_SLOT[CH_SEQ] = {3, 0, 2, 1};
static const uint8_t CH_RESET[CH_SEQ] = {0, 1, 0, 0};

static int chunk_rows(int32_t *rows, int32_t *off)
{
    off[0] = 0;
    for (int q = 0; q < CH_SEQ; q++)
        off[q + 1] = off[q] + CH_LENS[q];
    for (int i = 0, next = 0; next < off[CH_SEQ]; i++)
        for (int q = 0; q < CH_SEQ; q++)
            if (i < CH_LENS[q])
                rows[off[q] + i] = next++;
    return off[CH_SEQ];
}

/* Every sequence through the chunked form (chunk_min 1: the 1-row one
 * too), against the CPU's row-by-row reference, then against the device's
 * row-by-row kernel (chunk_min INT_MAX). */
static void check_chunked(int d, int nk, int nv)
{
    int32_t rows[1 + 37 + 64 + 200], off[CH_SEQ + 1];
    int R = chunk_rows(rows, off);
    rule_case c = rule_case_make(d, nk, nv, CH_SEQ, rows, off, CH_SLOT, CH_RESET, 4);
    size_t no = (size_t)R * c.inner, nst = (size_t)4 * nv * d * d;
    float *wout = malloc(sizeof(float) * no), *wst = malloc(sizeof(float) * nst);
    float *cout = malloc(sizeof(float) * no), *cst = malloc(sizeof(float) * nst);
    float *rout = malloc(sizeof(float) * no), *rst = malloc(sizeof(float) * nst);
    cpu_rule_(&c, wout, wst);
    dev_rule_(&c, 1, cout, cst, false);
    dev_rule_(&c, INT_MAX, rout, rst, false);
    cr_expect_leq(tu_nerr(cout, wout, no), 1e-4, "d %d: chunked outputs vs CPU", d);
    cr_expect_leq(tu_nerr(cst, wst, nst), 1e-4, "d %d: chunked states vs CPU", d);
    cr_expect_leq(tu_nerr(rout, wout, no), 1e-4, "d %d: row-by-row outputs vs CPU", d);
    cr_expect_leq(tu_nerr(cout, rout, no), 1e-4, "d %d: chunked vs row-by-row outputs", d);
    cr_expect_leq(tu_nerr(cst, rst, nst), 1e-4, "d %d: chunked vs row-by-row states", d);
    rule_case_free(&c);
    free(wout), free(wst), free(cout), free(cst), free(rout), free(rst);
}

Test(cuda_ssm, chunked_matches_cpu_and_rows_d64) { SKIP_WITHOUT_GPU(); check_chunked(64, 2, 4); }
Test(cuda_ssm, chunked_matches_cpu_and_rows_d128) { SKIP_WITHOUT_GPU(); check_chunked(128, 2, 4); }
Test(cuda_ssm, chunked_matches_cpu_and_rows_d256) { SKIP_WITHOUT_GPU(); check_chunked(256, 1, 2); }

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
