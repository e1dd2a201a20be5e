/* test_families.c - the architectures beside llama/qwen2 on the CPU
 * runner, on tiny random-weight models (tests/fixtures/gen_families.py):
 * qwen3, gemma2 (soft-capping that bites), gemma3 (local/global layers,
 * local RoPE base) and a llama file with a sliding window (Mistral), the
 * window shorter than the sequences so that it matters:
 *  - prompt logprobs within 0.02 nats (mean) of llama-cpp-python's on the
 *    same ids, and of a float64 numpy forward (ref_forward.py);
 *  - greedy tokens, decoded one row at a time through the paged K/V cache
 *    (blocks out of order), equal to llama.cpp's and the float64 forward's
 *    except where the float64 top-2 gap is a near tie;
 * llama.cpp has no sliding window for llama files, so tiny_mistral is
 * compared with it below the window only, with the float64 forward
 * everywhere. Also: the model table's properties of each file.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/cpu/forward.h"
#include "backends/engine/cpu/pool.h"
#include "backends/formats/gguf.h"
#include "backends/engine/model/model.h"
#include "tests/helpers/families.h"

#define LP_TOL 0.02              /* mean |ours - ref| over a sequence, nats */

static json_t *g_ref;

static void setup(void) { g_ref = pl_test_fixture_json("tiny_families_ref.json"); }

static void teardown(void) { json_decref(g_ref); }

TestSuite(families, .init = setup, .fini = teardown, .timeout = 300);

static void check_model(const char *file, int window)
{
    pl_test_family_check(json_object_get(g_ref, "models"), file, window, LP_TOL);
}

Test(families, qwen3_vs_llama_cpp) { check_model("tiny_qwen3.gguf", 0); }
Test(families, gemma2_vs_llama_cpp) { check_model("tiny_gemma2.gguf", 0); }
Test(families, gemma3_vs_llama_cpp) { check_model("tiny_gemma3.gguf", 0); }

Test(families, mistral_window_vs_float64)
{
    int w = (int)json_integer_value(json_object_get(g_ref, "window"));
    check_model("tiny_mistral.gguf", w);
}

/* What the architecture table made of each file. */
Test(families, table_properties)
{
    int w = (int)json_integer_value(json_object_get(g_ref, "window"));
    pl_test_loaded q = pl_test_load_fixture("tiny_qwen3.gguf", NULL);
    pl_test_loaded g2 = pl_test_load_fixture("tiny_gemma2.gguf", NULL);
    pl_test_loaded g3 = pl_test_load_fixture("tiny_gemma3.gguf", NULL);
    pl_test_loaded mi = pl_test_load_fixture("tiny_mistral.gguf", NULL);
    cr_expect(q.m->rope_neox && q.m->layers[0].attn_q_norm && !q.m->layers[0].bq);
    cr_expect_eq(q.m->n_swa, 0);
    cr_expect_eq(g2.m->ffn_act, PL_FFN_GELU_TANH);
    cr_expect(g2.m->tied && g2.m->attn_softcap == 2.5f && g2.m->final_softcap == 2.0f);
    cr_expect_float_eq(g2.m->embd_scale, sqrtf(32.0f), 1e-6);
    cr_expect(g2.m->layers[0].n_swa == w && g2.m->layers[1].n_swa == 0 &&
              g2.m->layers[2].n_swa == w);
    cr_expect(g2.m->layers[0].attn_post_norm && g2.m->layers[0].ffn_post_norm);
    for (int l = 0; l < 6; l++)
        cr_expect_eq(g3.m->layers[l].n_swa, l < 5 ? w : 0, "gemma3 layer %d", l);
    cr_expect_eq(g3.m->n_swa_layers, 5);
    cr_expect_eq(g3.m->attn_softcap, 0.0f);
    /* local base 10000 unscaled; global 1e6 with linear x2 */
    cr_expect_eq(g3.m->layers[0].rope_inv_freq, g3.m->rope_inv_freq_swa);
    cr_expect_eq(g3.m->layers[5].rope_inv_freq, g3.m->rope_inv_freq);
    cr_expect_float_eq(g3.m->rope_inv_freq_swa[1], powf(10000.0f, -2.0f / 32), 1e-6);
    cr_expect_float_eq(g3.m->rope_inv_freq[1], powf(1e6f, -2.0f / 32) / 2, 1e-7);
    cr_expect_float_eq(g3.m->attn_scale, 1.0f / sqrtf(32.0f), 1e-7);
    for (int l = 0; l < 2; l++)
        cr_expect_eq(mi.m->layers[l].n_swa, w);
    cr_expect(!mi.m->rope_neox && !mi.m->tied);
    cr_expect(pl_model_has_extensions(g3.m) && pl_model_has_extensions(mi.m));
    pl_test_unload(&q);
    pl_test_unload(&g2);
    pl_test_unload(&g3);
    pl_test_unload(&mi);
}
