/* test_moe.c - the mixture-of-experts architectures on the CPU runner, on
 * tiny random-weight models (tests/fixtures/gen_moe.py): qwen3moe (8
 * experts, top 3), Mixtral (llama with 8 experts, top 2) and gpt-oss
 * (sinks, biases, YaRN, even layers sliding over 8 positions, clamped
 * SwiGLU, 8 experts top 4), the window shorter than the sequences:
 *  - f32 files: prompt logprobs within 0.02 nats (mean) of
 *    llama-cpp-python's on the same ids and of a float64 numpy forward
 *    (ref_forward.py); greedy tokens equal to both but at near ties;
 *  - MXFP4 experts: both runners quantise the activations to 8 bits
 *    against the FP4 weights, so parley is held to the float64 forward as
 *    llama.cpp is (no further from it than llama.cpp plus a margin);
 *  - the Q8_0 + MXFP4 file (every matmul on the quantised kernels): a
 *    row's logits are the same bits alone and in a batch, in prefill and
 *    decode (the experts group rows of several sequences);
 *  - decode rows through the split attention (sinks per head) give the
 *    bits of the whole attention;
 *  - the architecture table's properties of each file.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/cpu/forward.h"
#include "backends/engine/families/family.h"
#include "backends/engine/cpu/ops.h"
#include "backends/engine/cpu/pool.h"
#include "backends/engine/model/model.h"
#include "tests/helpers/families.h"
#include "tests/helpers/forced.h"

#define LP_TOL 0.02              /* mean |ours - ref| over a sequence, nats */

static json_t *g_ref;

static void setup(void) { g_ref = pl_test_fixture_json("tiny_moe_ref.json"); }

static void teardown(void) { json_decref(g_ref); }

TestSuite(moe, .init = setup, .fini = teardown, .timeout = 300);

static json_t *models(void) { return json_object_get(g_ref, "models"); }

Test(moe, qwen3moe_vs_llama_cpp) { pl_test_family_check(models(), "tiny_qwen3moe.gguf", 0, LP_TOL); }
Test(moe, mixtral_vs_llama_cpp) { pl_test_family_check(models(), "tiny_mixtral.gguf", 0, LP_TOL); }
Test(moe, gptoss_vs_llama_cpp) { pl_test_family_check(models(), "tiny_gptoss.gguf", 0, LP_TOL); }

static double jnum(json_t *a, size_t i) { return json_number_value(json_array_get(a, i)); }

/* Mean |llama.cpp - float64| of a sequence's prompt logprobs. */
static double llama_vs_f64(json_t *seq)
{
    json_t *l = json_object_get(seq, "llama_lp"), *f = json_object_get(seq, "ref_lp");
    double d = 0;
    size_t n = json_array_size(f);
    for (size_t i = 0; i < n; i++)
        d += fabs(jnum(l, i) - jnum(f, i));
    return d / (double)n;
}

/* MXFP4 experts: parley no further from the float64 forward than
 * llama.cpp is, give or take 0.02 nats, and within 0.15 of llama.cpp. */
Test(moe, gptoss_mxfp4_vs_float64)
{
    const char *file = "tiny_gptoss_mxfp4.gguf";
    json_t *mj = json_object_get(models(), file);
    pl_test_loaded l = pl_test_load_fixture(file, NULL);
    cr_assert_eq(l.m->layers[0].gate_exps.w.type, PL_GGML_TYPE_MXFP4);
    cr_assert_null(l.m->layers[0].gate_exps.w.f32, "MXFP4 experts stay packed");
    size_t i;
    json_t *seq;
    json_array_foreach(json_object_get(mj, "sequences"), i, seq) {
        int n = (int)json_array_size(json_object_get(seq, "ids"));
        pl_fam_lp d = pl_test_family_prompt_lp(l.m, seq, n - 1, 4);
        double lf = llama_vs_f64(seq);
        cr_log_info("%s: mean |dlp| %.4f vs float64 (llama.cpp %.4f), %.4f vs llama.cpp",
                    file, d.vs_f64, lf, d.vs_llama);
        cr_expect_leq(d.vs_f64, lf + 0.02, "%s: %.4f from float64, llama.cpp %.4f", file,
                      d.vs_f64, lf);
        cr_expect_leq(d.vs_llama, 0.15, "%s: %.4f from llama.cpp", file, d.vs_llama);
    }
    pl_test_unload(&l);
}

/* Loads as the engine does in batch-invariant mode: no f32 copies. */
static pl_test_loaded load_packed(const char *file)
{
    pl_model_opts mo = {.keep_f32 = false, .keep_packed = pl_op_qdot_supported};
    return pl_test_load_fixture(file, &mo);
}

/* Q8_0 dense + MXFP4 experts: prompt logprobs near the float64 forward
 * (0.12-0.17 nats: 8-bit activations in every matmul of a model this
 * small and sharp; the MXFP4 experts alone cost 0.07, as in llama.cpp). */
Test(moe, gptoss_q8_vs_float64)
{
    const char *file = "tiny_gptoss_q8.gguf";
    json_t *mj = json_object_get(models(), file);
    pl_test_loaded l = load_packed(file);
    cr_assert_null(l.m->layers[0].wq.f32);
    size_t i;
    json_t *seq;
    json_array_foreach(json_object_get(mj, "sequences"), i, seq) {
        pl_fam_lp d = pl_test_family_prompt_lp(l.m, seq, 0, 4);
        cr_log_info("%s: mean |dlp| %.4f vs float64", file, d.vs_f64);
        cr_expect_leq(d.vs_f64, 0.25, "%s: %.4f from float64", file, d.vs_f64);
    }
    pl_test_unload(&l);
}

/* Rows [p0, p0 + n) of sequence s (tokens ids + p0), then the same for
 * sequence s2 (n2 rows from q0) in one call; every row's logits. */
static void run2(pl_test_fwd *w, const int32_t *a, int p0, int n, int s, const int32_t *b,
                 int q0, int n2, float *out)
{
    int32_t tok[96], pos[96], seq[96];
    for (int i = 0; i < n; i++) {
        tok[i] = a[p0 + i];
        pos[i] = p0 + i;
        seq[i] = s;
    }
    for (int i = 0; i < n2; i++) {
        tok[n + i] = b[q0 + i];
        pos[n + i] = q0 + i;
        seq[n + i] = 1 - s;
    }
    pl_test_fwd_run(w, tok, pos, seq, n + n2, out);
}

/* A row's logits are the same bits alone and beside another sequence's
 * rows (which share and do not share its experts), in prefill and in a
 * decode step. */
Test(moe, batch_invariant)
{
    pl_test_loaded l = load_packed("tiny_gptoss_q8.gguf");
    int nv = l.m->n_vocab, n = 30;
    int32_t a[48], b[48];
    for (int i = 0; i < 48; i++) {
        a[i] = (i * 37 + 11) % nv;
        b[i] = (i * 53 + 5) % nv;
    }
    size_t row = sizeof(float) * (size_t)nv;
    float *alone = malloc(row * 64), *mixed = malloc(row * 64);
    pl_test_fwd w1 = pl_test_fwd_new(l.m, 2, 48, 4, 64, 1 << 30, 0);
    pl_test_fwd w2 = pl_test_fwd_new(l.m, 2, 48, 4, 64, 1 << 30, 0);
    run2(&w1, a, 0, n, 0, NULL, 0, 0, alone);
    run2(&w2, a, 0, n, 0, b, 0, 17, mixed);
    cr_assert(!memcmp(alone, mixed, row * (size_t)n), "prefill rows differ in a batch");
    run2(&w1, a, n, 1, 0, NULL, 0, 0, alone);
    run2(&w2, b, 17, 3, 1, a, n, 1, mixed);      /* a's decode row after 3 of b's */
    cr_assert(!memcmp(alone, mixed + 3 * (size_t)nv, row), "a decode row differs in a batch");
    pl_test_fwd_free(&w1);
    pl_test_fwd_free(&w2);
    free(alone);
    free(mixed);
    pl_test_unload(&l);
}

/* A forward of its own pool (2 threads) whose decode rows take the split
 * attention from `split_ctx` positions on (-1: never). */
static pl_cpu_fwd *fwd_split(const pl_model *m, pl_pool *pool, int split_ctx, int32_t *bt)
{
    for (int i = 0; i < 16; i++)
        bt[i] = 15 - i;
    pl_fwd_opts o = {.max_rows = 40, .max_out = 40, .max_ctx = 64, .num_blocks = 16,
                     .block_size = 4, .gemm_min_rows = 1 << 30, .attn_split_ctx = split_ctx};
    char err[256];
    pl_cpu_fwd *f = pl_cpu_fwd_new(m, pool, &o, err, sizeof err);
    cr_assert(f, "%s", err);
    return f;
}

/* Decode rows through the split attention (scores, a softmax per head with
 * its sink, values: each thread a part) give the bits of the whole
 * attention, in sliding and full layers. */
Test(moe, split_attention_with_sinks)
{
    pl_test_loaded l = pl_test_load_fixture("tiny_gptoss.gguf", NULL);
    pl_pool *pool = pl_pool_new(2);
    int32_t bt[2][16], tok[40], pos[40], seq[40] = {0}, rows[40];
    int nv = l.m->n_vocab;
    pl_cpu_fwd *f[2] = {fwd_split(l.m, pool, -1, bt[0]), fwd_split(l.m, pool, 1, bt[1])};
    float *lg[2] = {malloc(sizeof(float) * 40 * nv), malloc(sizeof(float) * 40 * nv)};
    for (int i = 0; i < 40; i++) {
        tok[i] = (i * 29 + 7) % nv;
        pos[i] = rows[i] = i;
    }
    for (int k = 0; k < 2; k++) {
        pl_fwd_batch b = {.n_rows = 30, .tokens = tok, .positions = pos, .row_seq = seq,
                          .block_table = bt[k], .max_blocks_per_seq = 16, .n_out = 1,
                          .out_rows = rows};
        cr_assert_eq(pl_cpu_forward(f[k], &b, lg[k]), 0);
        for (int p = 30; p < 36; p++) {      /* one row a step */
            pl_fwd_batch d = {.n_rows = 1, .tokens = tok + p, .positions = pos + p,
                              .row_seq = seq, .block_table = bt[k], .max_blocks_per_seq = 16,
                              .n_out = 1, .out_rows = rows};
            cr_assert_eq(pl_cpu_forward(f[k], &d, lg[k] + (size_t)(p - 30) * nv), 0);
        }
    }
    cr_assert(!memcmp(lg[0], lg[1], sizeof(float) * 6 * (size_t)nv),
              "split attention with sinks differs from the whole");
    for (int k = 0; k < 2; k++) {
        pl_cpu_fwd_free(f[k]);
        free(lg[k]);
    }
    pl_pool_free(pool);
    pl_test_unload(&l);
}

/* What the architecture table made of each file. */
Test(moe, table_properties)
{
    int w = (int)json_integer_value(json_object_get(g_ref, "window"));
    pl_test_loaded q = pl_test_load_fixture("tiny_qwen3moe.gguf", NULL);
    pl_test_loaded mx = pl_test_load_fixture("tiny_mixtral.gguf", NULL);
    pl_test_loaded g = pl_test_load_fixture("tiny_gptoss.gguf", NULL);
    cr_expect(q.m->family == &pl_family_qwen3moe && q.m->n_expert == 8 &&
              q.m->n_expert_used == 3 && q.m->n_ff_exp == 32);
    cr_expect(q.m->moe_gating == PL_MOE_SOFTMAX && q.m->moe_norm_w);
    cr_expect(q.m->layers[0].attn_q_norm && !q.m->layers[0].w_gate.q &&
              q.m->layers[1].gate_exps.n == 8);
    cr_expect(mx.m->family == &pl_family_llama && mx.m->n_expert == 8 &&
              mx.m->n_expert_used == 2 && !mx.m->rope_neox && mx.m->moe_norm_w);
    cr_expect_eq(mx.m->n_ff_exp, mx.m->n_ff);
    const pl_model *o = g.m;
    cr_expect(o->family == &pl_family_gpt_oss && o->moe_gating == PL_MOE_TOPK_SOFTMAX &&
              o->n_expert_used == 4 && o->ffn_act == PL_FFN_SWIGLU_OAI && o->rope_neox);
    for (int l = 0; l < 3; l++) {
        cr_expect_eq(o->layers[l].n_swa, l % 2 == 0 ? w : 0, "gpt-oss layer %d", l);
        cr_expect(o->layers[l].attn_sinks && o->layers[l].bo && o->layers[l].bq &&
                  o->layers[l].gate_inp_b && o->layers[l].down_exps_b);
    }
    /* YaRN: factor 32 from 4,096 positions, base 150000, 16 rotated dims */
    cr_expect_float_eq(o->rope_mscale, 1.0f + 0.1f * logf(32.0f), 1e-6);
    cr_expect_float_eq(o->rope_inv_freq[0], 1.0f, 1e-7);   /* extrapolated */
    cr_expect_float_eq(o->rope_inv_freq[7], powf(150000.0f, -14.0f / 16) / 32, 1e-9);
    cr_expect(o->rope_inv_freq[3] < powf(150000.0f, -6.0f / 16) &&
              o->rope_inv_freq[3] > powf(150000.0f, -6.0f / 16) / 32, "on the ramp");
    cr_expect_float_eq(o->attn_scale, 0.25f, 1e-7);
    cr_expect(pl_model_has_moe(o) && pl_model_has_moe(q.m) && pl_model_has_moe(mx.m));
    pl_test_unload(&q);
    pl_test_unload(&mx);
    pl_test_unload(&g);
}
