/* test_qwen35_ckpt.c - recurrent-state checkpoints on the CPU forward pass
 * (forward.h: pl_fwd_batch.ck_save_*, pl_cpu_fwd_ckpt_load) with
 * tests/fixtures/tiny_qwen35.gguf. The reference is the cold computation:
 * the same prompt run whole from position 0 in a fresh slot.
 *  - a prompt resumed from a checkpoint saved mid-call by another prompt
 *    with the same prefix (its K/V blocks shared) gives the cold logits
 *    bit for bit, resumed at the latest checkpoint and at an earlier one
 *    (the scheduler's fallback), with parley's own kernels at every row
 *    count (--batch-invariant, the default); with the f32 GEMM from 20
 *    rows (--no-batch-invariant: BLAS's results depend on a call's row
 *    count) within 1e-4. The file is tiny_qwen35_f16.gguf
 *    (gen_qwen35_f16.py): F32 matrices always go to BLAS, F16 ones to
 *    parley's kernels;
 *  - bad saves (not on a block boundary, outside the call's rows, a
 *    checkpoint out of range) and bad loads fail.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/cpu/forward.h"
#include "backends/engine/cpu/pool.h"
#include "backends/formats/gguf.h"
#include "backends/engine/model/model.h"

#define BS 16
#define MB 8                      /* blocks per sequence: 128 positions */
#define N 100                     /* the prompt */

static pl_gguf *g_gguf;
static pl_model *g_model;

static void setup(void)
{
    const char *src = getenv("PARLEY_SRC");
    char p[1024], err[256];
    snprintf(p, sizeof p, "%s/tests/fixtures/tiny_qwen35_f16.gguf", src ? src : ".");
    g_gguf = pl_gguf_open(p, err, sizeof err);
    cr_assert(g_gguf, "%s", err);
    g_model = pl_model_load(g_gguf, NULL, err, sizeof err);
    cr_assert(g_model, "%s", err);
}

static void teardown(void)
{
    pl_model_free(g_model);
    pl_gguf_free(g_gguf);
}

TestSuite(qwen35_ckpt, .init = setup, .fini = teardown, .timeout = 120);

typedef struct fwd {
    pl_pool *pool;
    pl_cpu_fwd *f;
} fwd;

static fwd fwd_new(int gemm_min_rows)
{
    fwd w = {.pool = pl_pool_new(2)};
    pl_fwd_opts o = {.max_rows = 128, .max_out = 128, .max_ctx = MB * BS, .num_blocks = 4 * MB,
                     .block_size = BS, .gemm_min_rows = gemm_min_rows, .max_slots = 4,
                     .max_ckpts = 4, .gdn_align = BS};
    char err[256];
    w.f = pl_cpu_fwd_new(g_model, w.pool, &o, err, sizeof err);
    cr_assert(w.f, "%s", err);
    return w;
}

static void fwd_free(fwd *w)
{
    pl_cpu_fwd_free(w->f);
    pl_pool_free(w->pool);
}

/* Rows [p0, p0 + n) of ids in slot `slot` over block table bt, with the
 * saves given; every row's logits into lg. Returns pl_cpu_forward's. */
static int run(fwd *w, const int32_t *ids, int p0, int n, int32_t slot, const int32_t *bt,
               int n_sv, const int32_t *sv_pos, const int32_t *sv_ck, float *lg)
{
    int32_t pos[128], sq[128], rows[128], sv_slot[4] = {slot, slot, slot, slot};
    for (int i = 0; i < n; i++) {
        pos[i] = p0 + i;
        sq[i] = 0;
        rows[i] = i;
    }
    pl_fwd_batch b = {.n_rows = n, .tokens = ids + p0, .positions = pos, .row_seq = sq,
                      .block_table = bt, .max_blocks_per_seq = MB, .n_out = n,
                      .out_rows = rows, .seq_slot = &slot, .n_ck_save = n_sv,
                      .ck_save_slot = sv_slot, .ck_save_id = sv_ck, .ck_save_pos = sv_pos};
    return pl_cpu_forward(w->f, &b, lg);
}

static void prompt(int32_t *ids, int n, int salt)
{
    int nv = g_model->n_vocab;
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)((i * 37 + 11 + (i >= 64 ? salt : 0)) % nv);
}

/* Cold: the prompt whole. Another prompt sharing its first 64 ids saves
 * checkpoints at 32 and 64 mid-call; the prompt resumed from each (the
 * other's blocks before it, fresh ones after) gives the cold rows. */
static void resume_case(int gemm_min_rows)
{
    int nv = g_model->n_vocab;
    int32_t y[N], x[N];
    prompt(y, N, 0);
    prompt(x, N, 5);                           /* parts from y at 64 */
    cr_assert_eq(memcmp(x, y, 64 * sizeof *x), 0);
    cr_assert_neq(x[64], y[64]);
    size_t row = sizeof(float) * (size_t)nv;
    float *cold = malloc(row * N), *lg = malloc(row * N);
    int32_t bt_a[MB], bt_b[MB], bt_c[MB];
    for (int i = 0; i < MB; i++) {
        bt_a[i] = i;
        bt_b[i] = MB + i;
        bt_c[i] = 2 * MB + i;
    }
    fwd w = fwd_new(gemm_min_rows);
    cr_assert_eq(run(&w, y, 0, N, 1, bt_b, 0, NULL, NULL, cold), 0);
    int32_t sv_pos[2] = {32, 64}, sv_ck[2] = {0, 1};
    cr_assert_eq(run(&w, x, 0, 90, 0, bt_a, 2, sv_pos, sv_ck, lg), 0);
    for (int c = 0; c < 2; c++) {
        int P = sv_pos[c];
        for (int i = 0; i < MB; i++)           /* x's blocks before P, then its own */
            bt_c[i] = i < P / BS ? bt_a[i] : 2 * MB + i;
        cr_assert_eq(pl_cpu_fwd_ckpt_load(w.f, sv_ck[c], 2, P), 0);
        cr_assert_eq(run(&w, y, P, N - P, 2, bt_c, 0, NULL, NULL, lg), 0);
        double d = 0;
        for (size_t i = 0; i < (size_t)(N - P) * nv; i++)
            d = fmax(d, fabs(lg[i] - cold[(size_t)P * nv + i]));
        if (gemm_min_rows == INT_MAX)
            cr_assert(!memcmp(lg, cold + (size_t)P * nv, row * (size_t)(N - P)),
                      "resumed at %d: differs from cold (max |d| %g)", P, d);
        else
            cr_assert_lt(d, 1e-4, "resumed at %d: max |dlogit| %g from cold", P, d);
    }
    fwd_free(&w);
    free(cold);
    free(lg);
}

Test(qwen35_ckpt, resume_is_bit_identical_quantised) { resume_case(INT_MAX); }

Test(qwen35_ckpt, resume_is_bit_identical_gemm) { resume_case(20); }

Test(qwen35_ckpt, bad_saves_and_loads_fail)
{
    int nv = g_model->n_vocab;
    int32_t y[N], bt[MB];
    prompt(y, N, 0);
    for (int i = 0; i < MB; i++)
        bt[i] = i;
    float *lg = malloc(sizeof(float) * (size_t)nv * N);
    fwd w = fwd_new(INT_MAX);
    int32_t pos[][1] = {{24}, {48}, {0}, {32}}, ck[][1] = {{0}, {0}, {0}, {4}};
    for (int c = 0; c < 4; c++)     /* off a boundary, past the rows, at 0, ck out of range */
        cr_expect_eq(run(&w, y, 0, 40, 0, bt, 1, pos[c], ck[c], lg), -1, "case %d", c);
    cr_expect_eq(pl_cpu_fwd_ckpt_load(w.f, 4, 0, 16), -1);
    cr_expect_eq(pl_cpu_fwd_ckpt_load(w.f, 0, 4, 16), -1);
    cr_expect_eq(pl_cpu_fwd_ckpt_load(w.f, 0, 0, 0), -1);
    cr_expect_eq(run(&w, y, 0, 40, 0, bt, 1, pos[3], ck[0], lg), 0);
    fwd_free(&w);
    free(lg);
}
