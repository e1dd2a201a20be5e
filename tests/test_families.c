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
#include "backends/engine/model/gguf.h"
#include "backends/engine/model/model.h"
#include "tests/helpers/forced.h"

#define LP_TOL 0.02              /* mean |ours - ref| over a sequence, nats */
#define NEAR_TIE 1e-3f           /* float64 top-2 gap below which either is right */
#define BS 4                     /* small blocks: a window spans several */

static json_t *g_ref;

static void setup(void)
{
    const char *src = getenv("PARLEY_SRC");
    char p[1024];
    snprintf(p, sizeof p, "%s/tests/fixtures/tiny_families_ref.json", src ? src : ".");
    json_error_t je;
    g_ref = json_load_file(p, 0, &je);
    cr_assert(g_ref, "%s: %s", p, je.text);
}

static void teardown(void) { json_decref(g_ref); }

TestSuite(families, .init = setup, .fini = teardown, .timeout = 300);

typedef struct loaded {
    pl_gguf *g;
    pl_model *m;
} loaded;

static loaded load(const char *name)
{
    const char *src = getenv("PARLEY_SRC");
    char p[1024], err[256];
    snprintf(p, sizeof p, "%s/tests/fixtures/%s", src ? src : ".", name);
    loaded l = {.g = pl_gguf_open(p, err, sizeof err)};
    cr_assert(l.g, "%s: %s", p, err);
    l.m = pl_model_load(l.g, NULL, err, sizeof err);
    cr_assert(l.m, "%s: %s", p, err);
    return l;
}

static void unload(loaded *l)
{
    pl_model_free(l->m);
    pl_gguf_free(l->g);
}

static int jint(json_t *a, size_t i) { return (int)json_integer_value(json_array_get(a, i)); }
static double jnum(json_t *a, size_t i) { return json_number_value(json_array_get(a, i)); }

/* Rows [p0, p0 + n) of ids, every row's logits into out (n, n_vocab). */
static void seq_run(pl_test_fwd *w, const int32_t *ids, int p0, int n, float *out)
{
    int32_t pos[64], seq[64] = {0};
    cr_assert_leq(n, 64);
    for (int i = 0; i < n; i++)
        pos[i] = p0 + i;
    pl_test_fwd_run(w, ids + p0, pos, seq, n, out);
}

/* Mean |ours - ref| of the prompt logprobs over positions [0, upto). */
static double lp_delta(const double *ours, json_t *ref, int upto)
{
    double d = 0;
    for (int i = 0; i < upto; i++)
        d += fabs(ours[i] - jnum(ref, (size_t)i));
    return d / upto;
}

static void check_prompt_lp(const char *name, const pl_model *m, json_t *seq, int window)
{
    json_t *ids_j = json_object_get(seq, "ids");
    int n = (int)json_array_size(ids_j), nv = m->n_vocab;
    int32_t ids[64];
    for (int i = 0; i < n; i++)
        ids[i] = jint(ids_j, (size_t)i);
    pl_test_fwd s = pl_test_fwd_new(m, 1, n, BS, n, 20, 0);
    float *lg = malloc(sizeof(float) * (size_t)n * nv);
    seq_run(&s, ids, 0, n, lg);
    double lp[64];
    for (int i = 0; i + 1 < n; i++)
        lp[i] = pl_test_log_softmax_at(lg + (size_t)i * nv, nv, ids[i + 1]);
    /* llama.cpp knows no window in llama files: compare below it there */
    int upto = window ? window - 1 : n - 1;
    double dl = lp_delta(lp, json_object_get(seq, "llama_lp"), upto);
    double df = lp_delta(lp, json_object_get(seq, "ref_lp"), n - 1);
    cr_log_info("%s: mean |dlp| %.5f vs llama.cpp (%d positions), %.5f vs float64", name, dl,
                upto, df);
    cr_expect_leq(dl, LP_TOL, "%s: mean |dlp| vs llama.cpp %.4f", name, dl);
    cr_expect_leq(df, LP_TOL, "%s: mean |dlp| vs float64 %.4f", name, df);
    free(lg);
    pl_test_fwd_free(&s);
}

/* Greedy tokens after the prompt, one row per step. */
static void check_greedy(const char *name, const pl_model *m, json_t *seq, int prompt,
                         bool vs_llama)
{
    json_t *ids_j = json_object_get(seq, "ids"), *fg = json_object_get(seq, "ref_greedy");
    json_t *lg_ref = json_object_get(seq, "llama_greedy"), *gap = json_object_get(seq, "ref_gap");
    int n_gen = (int)json_array_size(fg), nv = m->n_vocab;
    int32_t ids[64];
    for (int i = 0; i < prompt; i++)
        ids[i] = jint(ids_j, (size_t)i);
    pl_test_fwd s = pl_test_fwd_new(m, 1, prompt + n_gen, BS, prompt, 20, 0);
    float *lg = malloc(sizeof(float) * (size_t)prompt * nv);
    seq_run(&s, ids, 0, prompt, lg);
    int tok = pl_test_argmax(lg + (size_t)(prompt - 1) * nv, nv);
    for (int k = 0; k < n_gen; k++) {
        bool tie = jnum(gap, (size_t)k) < NEAR_TIE;
        cr_expect(tok == jint(fg, (size_t)k) || tie, "%s: step %d: %d, float64 %d", name, k,
                  tok, jint(fg, (size_t)k));
        if (vs_llama)
            cr_expect(tok == jint(lg_ref, (size_t)k) || tie, "%s: step %d: %d, llama.cpp %d",
                      name, k, tok, jint(lg_ref, (size_t)k));
        if (tok != jint(fg, (size_t)k))
            break;               /* past a tie the sequences are not comparable */
        ids[prompt + k] = tok;
        seq_run(&s, ids, prompt + k, 1, lg);
        tok = pl_test_argmax(lg, nv);
    }
    free(lg);
    pl_test_fwd_free(&s);
}

static void check_model(const char *file, int window)
{
    json_t *mj = json_object_get(json_object_get(g_ref, "models"), file);
    cr_assert(mj, "no reference for %s", file);
    loaded l = load(file);
    cr_assert_eq(l.m->n_vocab, (int)json_integer_value(json_object_get(mj, "n_vocab")));
    int prompt = (int)json_integer_value(json_object_get(mj, "prompt"));
    size_t i;
    json_t *seq;
    json_array_foreach(json_object_get(mj, "sequences"), i, seq) {
        check_prompt_lp(file, l.m, seq, window);
        check_greedy(file, l.m, seq, prompt, window == 0);
    }
    unload(&l);
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
    loaded q = load("tiny_qwen3.gguf"), g2 = load("tiny_gemma2.gguf");
    loaded g3 = load("tiny_gemma3.gguf"), mi = load("tiny_mistral.gguf");
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
    unload(&q);
    unload(&g2);
    unload(&g3);
    unload(&mi);
}
