/* test_cpu_amx.c - the block-order matmuls of qdot_amx.c:
 *  - the tile kernel on the C model of the tiles (every CPU), with the
 *    scalar epilogue and, where the CPU has AVX-512, the AVX-512 one;
 *  - the AVX2 block-order kernel for rows outside whole 16s;
 *  - the CPU's tiles and the self-check, where the CPU has AMX-INT8;
 *  - the model of the tiles refusing what the CPU would refuse;
 *  - a forward pass in the AMX mode: batch-invariant, and as close to the
 *    float64 reference as the default kernels.
 * Every sum is held to pl_op_qdot_ref bit for bit.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/engine/cpu/forward.h"
#include "backends/engine/cpu/qdot_amx.h"
#include "backends/engine/cpu/qdot_block_order.h"
#include "backends/engine/cpu/tile_emu.h"
#include "backends/formats/gguf.h"
#include "backends/engine/model/model.h"
#include "src/base/cpu_features.h"
#include "src/base/half.h"
#include "tests/helpers/forced.h"
#include "tests/helpers/model_path.h"

static const pl_ggml_type types[] = {PL_GGML_TYPE_Q4_0, PL_GGML_TYPE_Q4_1, PL_GGML_TYPE_Q8_0};

static size_t bbytes(pl_ggml_type t)
{
    size_t bb = 0;
    cr_assert(pl_ggml_type_block(t, NULL, &bb));
    return bb;
}

/* Random weights (n_out rows of n_blk blocks) with finite scales, some zero
 * or negative, and activations quantised from random floats. */
static void make_problem(pl_ggml_type t, int n_out, int n_blk, int n_rows, uint8_t **w,
                         pl_q8_act **x, unsigned seed)
{
    size_t bb = bbytes(t);
    srand(seed);
    *w = malloc((size_t)n_out * n_blk * bb);
    for (size_t i = 0; i < (size_t)n_out * n_blk * bb; i++)
        (*w)[i] = (uint8_t)rand();
    for (int b = 0; b < n_out * n_blk; b++) {
        float d = rand() % 7 == 0 ? 0.0f : ((float)(rand() % 2001) - 1000.0f) * 1e-5f;
        uint16_t h = pl_fp32_to_fp16(d), m = pl_fp32_to_fp16(((float)(rand() % 201) - 100) * 1e-3f);
        memcpy(*w + (size_t)b * bb, &h, 2);
        if (t == PL_GGML_TYPE_Q4_1)
            memcpy(*w + (size_t)b * bb + 2, &m, 2);
    }
    float *f = malloc(sizeof(float) * PL_QK * n_blk);
    *x = malloc(sizeof(pl_q8_act) * (size_t)n_rows * n_blk);
    for (int r = 0; r < n_rows; r++) {
        for (int i = 0; i < PL_QK * n_blk; i++)
            f[i] = ((float)rand() / (float)RAND_MAX - 0.5f) * (float)(1 + r % 5);
        pl_op_quantize_row_q8(f, *x + (size_t)r * n_blk, PL_QK * n_blk);
    }
    free(f);
}

/* y (n_rows x ldy, sentinel NaN outside [o0, o1)) against the reference,
 * bit for bit; the sentinels untouched. */
static void check_y(pl_ggml_type t, const uint8_t *w, const pl_q8_act *x, int n_blk,
                    int n_rows, const float *y, int ldy, int o0, int o1, const char *what)
{
    size_t rb = (size_t)n_blk * bbytes(t);
    for (int r = 0; r < n_rows; r++)
        for (int o = 0; o < ldy; o++) {
            float got = y[(size_t)r * ldy + o];
            if (o < o0 || o >= o1) {
                cr_assert(isnan(got), "%s: y[%d][%d] outside the range was written", what, r, o);
                continue;
            }
            float want = pl_op_qdot_ref(t, w + (size_t)o * rb, x + (size_t)r * n_blk,
                                        n_blk * PL_QK);
            cr_assert(memcmp(&got, &want, 4) == 0,
                      "%s: type %d, %d blocks, %d rows, o [%d, %d): y[%d][%d] = %.9g, the "
                      "reference %.9g", what, (int)t, n_blk, n_rows, o0, o1, r, o, got, want);
        }
}

typedef void run_fn(pl_ggml_type t, const uint8_t *w, size_t rb, const pl_q8_act *x, int n_blk,
                    int n_rows, float *y, int ldy, int o0, int o1, int arg);

/* Every type over shapes that cross the kernels' edges: one block and more
 * than one 32-block chunk, partial 16- and 32-row groups of weights, row
 * counts on and off the 16s. */
static void sweep(run_fn *run, int arg, const int *rows, int n_rows_cases, const char *what)
{
    static const int blks[] = {1, 3, 33};
    static const int ranges[][2] = {{0, 16}, {0, 40}, {5, 70}, {3, 4}, {32, 64}};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t bi = 0; bi < 3; bi++)
            for (int ri = 0; ri < n_rows_cases; ri++) {
                pl_ggml_type t = types[ti];
                int n_blk = blks[bi], n_rows = rows[ri], ldy = 72;
                uint8_t *w;
                pl_q8_act *x;
                make_problem(t, ldy, n_blk, n_rows, &w, &x, (unsigned)(ti * 100 + bi * 10 + ri));
                float *y = malloc(sizeof(float) * (size_t)n_rows * ldy);
                for (size_t g = 0; g < sizeof ranges / sizeof ranges[0]; g++) {
                    for (int i = 0; i < n_rows * ldy; i++)
                        y[i] = NAN;
                    run(t, w, (size_t)n_blk * bbytes(t), x, n_blk, n_rows, y, ldy,
                        ranges[g][0], ranges[g][1], arg);
                    check_y(t, w, x, n_blk, n_rows, y, ldy, ranges[g][0], ranges[g][1], what);
                }
                free(y);
                free(w);
                free(x);
            }
}

static void run_tiles(pl_ggml_type t, const uint8_t *w, size_t rb, const pl_q8_act *x,
                      int n_blk, int n_rows, float *y, int ldy, int o0, int o1, int arg)
{
    pl_amx_qmatmul_tiles(arg >> 1 ? PL_AMX_TILES : PL_AMX_EMULATED, arg & 1, t, w, rb, x, n_blk,
                         n_rows, y, ldy, o0, o1);
}

static void run_any(pl_ggml_type t, const uint8_t *w, size_t rb, const pl_q8_act *x, int n_blk,
                    int n_rows, float *y, int ldy, int o0, int o1, int arg)
{
    pl_amx_qmatmul((pl_amx_mode)arg, t, w, rb, x, n_blk, n_rows, y, ldy, o0, o1);
}

static const int rows16[] = {16, 32, 48};
static const int rows_any[] = {1, 2, 7, 15, 17, 33, 40};

Test(cpu_amx, emulated_tiles_match_reference)
{
    sweep(run_tiles, 0, rows16, 3, "model tiles, scalar epilogue");
}

Test(cpu_amx, emulated_tiles_avx512_epilogue_match_reference)
{
    const pl_cpu_feature_set *f = pl_cpu_features();
    if (!f->avx512f || !f->avx512bw || !f->avx512vl)
        cr_skip_test("no AVX-512 F/BW/VL on this CPU (or capped by PARLEY_CPU_ISA)");
    sweep(run_tiles, 1, rows16, 3, "model tiles, AVX-512 epilogue");
}

/* Row counts off the 16s: the tiles for the whole 16s, the AVX2 (or the
 * reference) block-order kernel for the rest; and that kernel alone. */
Test(cpu_amx, any_row_count_matches_reference)
{
    sweep(run_any, PL_AMX_EMULATED, rows_any, 7, "AMX mode on the model");
    sweep(run_any, PL_AMX_OFF, rows_any, 7, "the block-order row kernel");
}

static void run_avx2_rows(pl_ggml_type t, const uint8_t *w, size_t rb, const pl_q8_act *x,
                          int n_blk, int n_rows, float *y, int ldy, int o0, int o1, int arg)
{
    for (int r = 0; r < n_rows; r++)
        cr_assert(pl_qdot_block_order_row1_avx2(t, w, rb, x + (size_t)r * n_blk, n_blk,
                                                y + (size_t)r * ldy, o0, o1));
}

/* The AVX2 block-order kernel, known to have run (not the reference). */
Test(cpu_amx, avx2_row_kernel_matches_reference)
{
    if (!pl_cpu_has_avx2())
        cr_skip_test("no AVX2 on this CPU (or capped by PARLEY_CPU_ISA)");
    sweep(run_avx2_rows, 0, rows_any, 3, "the AVX2 block-order row kernel");
}

Test(cpu_amx, cpu_tiles_match_reference)
{
    if (!pl_cpu_features()->amx_int8)
        cr_skip_test("no AMX-INT8 on this CPU (or no leave from Linux, or capped)");
    char err[256];
    cr_assert_eq(pl_amx_self_check(err, sizeof err), 0, "%s", err);
    sweep(run_tiles, 2 | 1, rows16, 3, "CPU tiles, AVX-512 epilogue");
    sweep(run_any, PL_AMX_TILES, rows_any, 7, "AMX mode on the CPU");
}

Test(cpu_amx, self_check_refuses_without_amx)
{
    if (pl_cpu_features()->amx_int8)
        cr_skip_test("this CPU has AMX-INT8");
    char err[256] = "";
    cr_assert_eq(pl_amx_self_check(err, sizeof err), -1);
    cr_assert(strstr(err, "no AMX-INT8"), "%s", err);
}

/* The model refuses what the CPU would refuse (#UD / #GP). */
static uint8_t good_cfg[64];

static void cfg_init(void)
{
    memset(good_cfg, 0, sizeof good_cfg);
    good_cfg[0] = 1;
    for (int t = 0; t < 3; t++) {    /* C 16x64, A 16x32, B 8x64 */
        good_cfg[16 + 2 * t] = t == 1 ? 32 : 64;
        good_cfg[48 + t] = t == 2 ? 8 : 16;
    }
}

Test(cpu_amx, model_dp_by_hand)
{
    cfg_init();
    pl_tile_emu e;
    int8_t a[16][32], b[8][64];
    int32_t c[16][16];
    for (int m = 0; m < 16; m++)
        for (int j = 0; j < 32; j++)
            a[m][j] = (int8_t)(m - j);
    for (int n = 0; n < 16; n++)     /* weight row n, element j at b[j / 4][4n + j % 4] */
        for (int j = 0; j < 32; j++)
            b[j / 4][4 * n + j % 4] = (int8_t)(n * j % 11 - 5);
    pl_tile_emu_ops.config(&e, good_cfg);
    pl_tile_emu_ops.zero(&e, 0);
    pl_tile_emu_ops.load(&e, 1, a, 32);
    pl_tile_emu_ops.load(&e, 2, b, 64);
    pl_tile_emu_ops.dp(&e, 0, 1, 2);
    pl_tile_emu_ops.dp(&e, 0, 1, 2);     /* accumulates */
    pl_tile_emu_ops.store(&e, 0, c, 64);
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            int32_t want = 0;
            for (int j = 0; j < 32; j++)
                want += 2 * (m - j) * (n * j % 11 - 5);
            cr_assert_eq(c[m][n], want, "c[%d][%d]", m, n);
        }
}

Test(cpu_amx, model_refuses_unconfigured, .signal = SIGABRT)
{
    pl_tile_emu e;
    memset(&e, 0, sizeof e);
    pl_tile_emu_ops.zero(&e, 0);
}

Test(cpu_amx, model_refuses_tall_tile, .signal = SIGABRT)
{
    cfg_init();
    pl_tile_emu e;
    good_cfg[48] = 17;
    pl_tile_emu_ops.config(&e, good_cfg);
}

Test(cpu_amx, model_refuses_mismatched_dp, .signal = SIGABRT)
{
    cfg_init();
    pl_tile_emu e;
    good_cfg[48 + 2] = 4;            /* B 4 rows: A's 32 bytes want 8 */
    pl_tile_emu_ops.config(&e, good_cfg);
    pl_tile_emu_ops.dp(&e, 0, 1, 2);
}

/* A forward pass in the AMX mode (on the model of the tiles): 40 rows in one
 * call (32 on the tiles, 8 on the row kernels) give the logits of the
 * default kernels bit for bit, and of the same rows one call each
 * (batch invariance); teacher-forced against the float64 reference, as
 * close as test_cpu_forward's bounds for the default kernels. */
#define Q8_TOL 2.0f              /* test_cpu_forward's bound for the q8 path */

Test(cpu_amx, forward_same_as_default_and_close_to_exact, .timeout = 600)
{
    PL_TEST_MODEL_OR_SKIP();
    char err[256];
    pl_gguf *g = pl_gguf_open(pl_test_model_path(), err, sizeof err);
    cr_assert(g, "%s", err);
    pl_model *m = pl_model_load(g, NULL, err, sizeof err);
    cr_assert(m, "%s", err);
    enum { N = 40, BS = 16, MB = (N + BS - 1) / BS };
    int nv = m->n_vocab;
    pl_pool *pool = pl_pool_new(2);
    pl_fwd_opts o = {.max_rows = N, .max_out = N, .max_ctx = MB * BS, .num_blocks = 2 * MB,
                     .block_size = BS, .gemm_min_rows = 1 << 30, .kv_f16 = 1,
                     .amx = PL_AMX_EMULATED};
    pl_cpu_fwd *f = pl_cpu_fwd_new(m, pool, &o, err, sizeof err);
    cr_assert(f, "%s", err);
    int32_t tok[N], pos[N], rs[N], outr[N], bt[2][MB];
    for (int i = 0; i < N; i++) {
        tok[i] = (int32_t)((i * 7919 + 13) % nv);
        pos[i] = i;
        rs[i] = 0;
        outr[i] = i;
    }
    for (int i = 0; i < MB; i++) {
        bt[0][i] = i;
        bt[1][i] = MB + i;
    }
    float *batch = malloc(sizeof(float) * (size_t)N * nv), *one = malloc(sizeof(float) * nv);
    pl_fwd_batch b = {.n_rows = N, .tokens = tok, .positions = pos, .row_seq = rs,
                      .block_table = bt[0], .max_blocks_per_seq = MB, .n_out = N,
                      .out_rows = outr};
    cr_assert_eq(pl_cpu_forward(f, &b, batch), 0);
    float *plain = malloc(sizeof(float) * (size_t)N * nv);
    pl_cpu_fwd_set_amx(f, PL_AMX_OFF);
    b.block_table = bt[1];
    cr_assert_eq(pl_cpu_forward(f, &b, plain), 0);
    cr_assert(memcmp(plain, batch, sizeof(float) * (size_t)N * nv) == 0,
              "the AMX mode's logits differ from the default kernels'");
    free(plain);
    pl_cpu_fwd_set_amx(f, PL_AMX_EMULATED);
    for (int i = 0; i < N; i++) {
        pl_fwd_batch b1 = {.n_rows = 1, .tokens = tok + i, .positions = pos + i,
                           .row_seq = rs, .block_table = bt[1], .max_blocks_per_seq = MB,
                           .n_out = 1, .out_rows = outr};
        cr_assert_eq(pl_cpu_forward(f, &b1, one), 0);
        cr_assert(memcmp(one, batch + (size_t)i * nv, sizeof(float) * nv) == 0,
                  "row %d: its logits alone differ from its logits in the batch", i);
    }
    free(batch);
    free(one);
    pl_cpu_fwd_free(f);
    pl_pool_free(pool);

    const char *src = getenv("PARLEY_SRC");
    char fpath[1024];
    snprintf(fpath, sizeof fpath, "%s/tests/fixtures/forward_fixtures.json", src ? src : ".");
    json_error_t je;
    json_t *fix = json_load_file(fpath, 0, &je);
    cr_assert(fix, "%s: %s", fpath, je.text);
    json_t *ex = json_object_get(fix, "exact");
    cr_assert(ex);
    pl_forced_stats st = pl_test_run_forced(m, ex, 16, 1 << 30, 64, 2,
                                            PL_FORCED_KV_F16 | PL_FORCED_AMX_EMULATED, 0.5f);
    printf("AMX mode (model tiles) vs exact: top-1 %d/%d (%d counting near ties), "
           "max |dlogit| %.4f\n", st.agree, st.n, st.agree_or_tie, st.max_d);
    cr_expect_geq(st.agree_or_tie, st.n - st.n / 50);
    cr_expect_leq(st.max_d, Q8_TOL);
    json_decref(fix);
    pl_model_free(m);
    pl_gguf_free(g);
}
