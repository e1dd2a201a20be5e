/* test_cuda_moe_host.c - the host half of the CUDA runner's experts
 * (backends/engine/cuda/moe_weights.c, moe_plan.cu's tile bound), which
 * needs no GPU: how each type is kept, the device image of the tiny
 * fixtures' experts, and the memory gpt-oss-20b's experts take. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/cuda/cuda_runner.h"
#include "backends/engine/cuda/moe_plan.cuh"
#include "backends/engine/cuda/moe_weights.h"
#include "backends/formats/gguf.h"
#include "backends/engine/model/quant.h"

static pl_model *load(const char *name, pl_gguf **g)
{
    const char *src = getenv("PARLEY_SRC");
    char p[1024], err[256];
    snprintf(p, sizeof p, "%s/tests/fixtures/%s", src ? src : ".", name);
    *g = pl_gguf_open(p, err, sizeof err);
    cr_assert(*g, "%s: %s", p, err);
    pl_model_opts mo = {.keep_f32 = false, .keep_packed = pl_keep_packed_all};
    pl_model *m = pl_model_load(*g, &mo, err, sizeof err);
    cr_assert(m, "%s: %s", p, err);
    return m;
}

/* MXFP4 experts go up as the file's bytes; f32 ones as bf16 of their
 * values (round to nearest even). */
Test(cuda_moe_host, device_images_of_the_fixtures)
{
    pl_gguf *g;
    pl_model *m = load("tiny_gptoss_mxfp4.gguf", &g);
    const pl_experts *x = &m->layers[1].down_exps;
    cr_assert_eq(pl_cuda_moe_format(x->w.type), PL_CUDA_MOE_W_MXFP4);
    size_t n = pl_cuda_moe_bytes(x);
    cr_assert_eq(n, (size_t)8 * 32 * (32 / 32 * 17));
    uint8_t *img = malloc(n);
    cr_assert_eq(pl_cuda_moe_pack(x, img), 0);
    cr_assert(!memcmp(img, x->w.q, n));
    free(img);
    pl_model_free(m);
    pl_gguf_free(g);

    m = load("tiny_qwen3moe.gguf", &g);
    x = &m->layers[0].up_exps;
    cr_assert_eq(pl_cuda_moe_format(x->w.type), PL_CUDA_MOE_W_BF16);
    n = pl_cuda_moe_bytes(x);
    cr_assert_eq(n, (size_t)8 * 32 * 32 * 2);
    pl_bf16 *bf = malloc(n);
    cr_assert_eq(pl_cuda_moe_pack(x, bf), 0);
    float row[32];
    for (int e = 0; e < 8; e++)
        for (int r = 0; r < 32; r++) {
            pl_weight w = pl_experts_at(x, e);
            pl_dequant_row(w.type, (const uint8_t *)w.q + (size_t)r * w.row_bytes, row, 32);
            for (int c = 0; c < 32; c++)
                cr_assert_eq(bf[((size_t)e * 32 + r) * 32 + c], pl_fp32_to_bf16(row[c]),
                             "expert %d row %d col %d", e, r, c);
        }
    free(bf);
    pl_model_free(m);
    pl_gguf_free(g);
}

/* gpt-oss-20b's shapes (24 layers, 32 experts, hidden and expert width
 * 2,880, MXFP4): its experts take 10.15 GB kept packed, 38.2 GB as bf16. */
Test(cuda_moe_host, gpt_oss_20b_expert_memory)
{
    enum { L = 24, E = 32, D = 2880 };
    pl_layer layers[L];
    memset(layers, 0, sizeof layers);
    pl_model m = {.n_layer = L, .n_expert = E, .layers = layers};
    size_t rb = D / 32 * 17;
    for (int l = 0; l < L; l++) {
        pl_experts x = {.w = {.type = PL_GGML_TYPE_MXFP4, .rows = D, .cols = D, .row_bytes = rb},
                        .n = E, .stride = D * rb};
        layers[l].gate_exps = layers[l].up_exps = layers[l].down_exps = x;
    }
    size_t kept, bf16;
    pl_cuda_moe_model_bytes(&m, &kept, &bf16);
    cr_assert_eq(kept, (size_t)L * 3 * E * D * rb);
    cr_assert_eq(bf16, (size_t)L * 3 * E * D * D * 2);
    cr_log_info("gpt-oss-20b experts on the GPU: %.2f GB packed, %.2f GB as bf16", kept / 1e9,
                bf16 / 1e9);
    cr_assert(kept > 10.1e9 && kept < 10.2e9 && bf16 > 38.2e9 && bf16 < 38.3e9);
}

/* The grouped GEMM's grid covers every plan a step can have: the tiles of
 * all ways n_pairs pairs fall on the experts. */
Test(cuda_moe_host, max_tiles_bounds_every_plan)
{
    for (int n_pairs = 1; n_pairs < 300; n_pairs += 7)
        for (int E = 1; E < 70; E += 5) {
            int worst = 0;                   /* one pair on each of min(E, n) - 1 experts */
            int a = E < n_pairs ? E : n_pairs, rest = n_pairs - (a - 1);
            worst = (a - 1) + (rest + PL_CUDA_MOE_TILE_ROWS - 1) / PL_CUDA_MOE_TILE_ROWS;
            cr_assert_geq(pl_cuda_moe_max_tiles(n_pairs, E), worst, "n %d E %d", n_pairs, E);
            int even = 0;                    /* spread as evenly as can be */
            for (int e = 0; e < a; e++) {
                int c = n_pairs / a + (e < n_pairs % a);
                even += (c + PL_CUDA_MOE_TILE_ROWS - 1) / PL_CUDA_MOE_TILE_ROWS;
            }
            cr_assert_geq(pl_cuda_moe_max_tiles(n_pairs, E), even, "n %d E %d", n_pairs, E);
        }
}

/* gpt-oss's layers (attention sinks, output bias, YaRN's scale) are no
 * longer refused: the tiny fixture is, for its head size of 16, which the
 * attention kernels do not take, named before any CUDA call (no GPU
 * needed). ref-gptoss (head_dim 64) runs in test_cuda_families. */
Test(cuda_moe_host, runner_takes_gptoss_layers_refuses_head_dim_16)
{
    pl_gguf *g;
    pl_model *m = load("tiny_gptoss_mxfp4.gguf", &g);
    pl_runner_info want = {.block_size = 16, .max_seqs = 4, .max_rows = 64,
                           .max_model_len = 256};
    pl_cuda_opts co = {.gpu_memory_utilization = 0.5};
    char err[256] = "";
    cr_assert_null(pl_cuda_runner_new(m, &want, &co, err, sizeof err));
    cr_assert(!strstr(err, "sinks") && strstr(err, "head_dim 16"), "%s", err);
    pl_model_free(m);
    pl_gguf_free(g);
}
