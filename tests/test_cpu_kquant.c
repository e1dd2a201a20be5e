/* test_cpu_kquant.c - the CPU runner on a Q4_K_M model (Q4_K, Q6_K and
 * llama.cpp's Q5_0 / Q8_0 fallbacks), made from the default model by
 * tests/fixtures/gen_kquant_fixtures.py with llama.cpp's llama-quantize:
 *  - every matrix stays packed (no f32 copy) and the process grows by at
 *    most 1.2x the file while loading and running it;
 *  - teacher-forced logits against llama-cpp-python on that file and
 *    against a float64 numpy forward on gguf-dequantised weights.
 * Skips when the model or tests/fixtures/kquant_fixtures.json is absent
 * (the model needs a llama.cpp build, which CI does not have).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/engine/cpu/forward.h"
#include "backends/engine/cpu/ops.h"
#include "backends/formats/gguf.h"
#include "backends/engine/model/model.h"
#include "tests/helpers/forced.h"
#include "tests/helpers/model_path.h"

#define NEAR_TIE 0.50f           /* reference top-2 gap allowed at a disagreement */
/* |ours - llama.cpp| at its top-5 ids (measured 1.87). llama.cpp dots
 * K-quant rows with q8_K activations (one scale per 256 values, ours one per
 * 32) and keeps K/V in f16: it is itself 1.54 from the float64 reference on
 * the first 64 tokens, where we are 1.31. */
#define MAX_DLOGIT 2.5f
#define Q8_TOL 2.0f              /* |ours - float64 reference| */
#define BS 16

static char g_path[1024];
static json_t *g_fix;

static void setup(void)
{
    const char *e = getenv("PARLEY_KQUANT_MODEL");
    if (e && *e) {
        snprintf(g_path, sizeof g_path, "%s", e);
    } else {
        snprintf(g_path, sizeof g_path, "%s", pl_test_model_path());
        char *slash = strrchr(g_path, '/');
        snprintf(slash ? slash + 1 : g_path, sizeof g_path - (size_t)(slash ? slash + 1 - g_path : 0),
                 "SmolLM2-135M-Instruct.Q4_K_M.gguf");
    }
    const char *src = getenv("PARLEY_SRC");
    char fpath[1024];
    snprintf(fpath, sizeof fpath, "%s/tests/fixtures/kquant_fixtures.json", src ? src : ".");
    if (access(g_path, R_OK) != 0 || access(fpath, R_OK) != 0)
        return;
    json_error_t je;
    g_fix = json_load_file(fpath, 0, &je);
    cr_assert(g_fix, "%s", je.text);
}

static void teardown(void) { json_decref(g_fix); }

TestSuite(cpu_kquant, .init = setup, .fini = teardown, .timeout = 600);

static int jint(json_t *a, size_t i) { return (int)json_integer_value(json_array_get(a, i)); }
static float jnum(json_t *a, size_t i) { return (float)json_number_value(json_array_get(a, i)); }

static long rss_bytes(void)
{
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%ld %ld", &pages, &rss) != 2)
        rss = 0;
    if (f)
        fclose(f);
    return rss * sysconf(_SC_PAGESIZE);
}

/* Teacher-forced top-1 / logit agreement with a fixture section, in chunks
 * of 64 rows through the quantised kernels (the engine's path), the K/V
 * cache in floats (the default) or halves (kv_f16, --kv-cache-f16). */
static pl_forced_stats run_forced(const pl_model *m, json_t *sec, int kv_f16)
{
    return pl_test_run_forced(m, sec, BS, 1 << 30, 64, 2, kv_f16, NEAR_TIE);
}

/* Loads as the engine does (batch-invariant: no f32 copies wanted). */
static pl_model *load(pl_gguf **g)
{
    char err[256];
    *g = pl_gguf_open(g_path, err, sizeof err);
    cr_assert(*g, "%s", err);
    pl_model_opts mo = {.keep_f32 = false, .keep_packed = pl_op_qdot_supported};
    pl_model *m = pl_model_load(*g, &mo, err, sizeof err);
    cr_assert(m, "%s", err);
    return m;
}

static const pl_weight *layer_w(const pl_model *m, int l, int i)
{
    const pl_layer *y = &m->layers[l];
    const pl_weight *w[7] = {&y->wq, &y->wk, &y->wv, &y->wo, &y->w_gate, &y->w_up, &y->w_down};
    return w[i];
}

Test(cpu_kquant, packed_and_resident_within_1_2x_file)
{
    if (!g_fix)
        cr_skip_test("Q4_K_M model or fixture absent (tests/fixtures/gen_kquant_fixtures.py)");
    struct stat sb;
    cr_assert_eq(stat(g_path, &sb), 0);
    long rss0 = rss_bytes();
    pl_gguf *g;
    pl_model *m = load(&g);
    int n_k = 0;
    for (int l = 0; l < m->n_layer; l++)
        for (int i = 0; i < 7; i++) {
            const pl_weight *w = layer_w(m, l, i);
            cr_assert_null(w->f32, "layer %d matrix %d (%s) was dequantised", l, i,
                           pl_ggml_type_name(w->type));
            n_k += w->type == PL_GGML_TYPE_Q4_K || w->type == PL_GGML_TYPE_Q6_K;
        }
    cr_assert_gt(n_k, 0, "the file has no Q4_K / Q6_K matrices");
    json_t *sec = json_object_get(g_fix, "exact");
    run_forced(m, sec, 1);   /* touches every weight page */
    double grown = (double)(rss_bytes() - rss0);
    printf("Q4_K_M: file %.1f MB, process grew %.1f MB (%.2fx) loading and running it\n",
           sb.st_size / 1e6, grown / 1e6, grown / (double)sb.st_size);
    /* AddressSanitizer's shadow memory and quarantine grow the process by
     * themselves (1.21x seen): the bound is for real builds. */
    const char *san = getenv("PARLEY_SANITIZED");
    if (!san || !*san)
        cr_expect_leq(grown, 1.2 * (double)sb.st_size);
    pl_model_free(m);
    pl_gguf_free(g);
}

/* max |llama.cpp - float64| over the ids both fixtures list, on the
 * positions of the float64 section. */
static float llama_vs_exact(void)
{
    json_t *f = json_object_get(g_fix, "forced"), *e = json_object_get(g_fix, "exact");
    float d = 0.0f;
    for (size_t p = 0; p < json_array_size(json_object_get(e, "ids")); p++) {
        json_t *fi = json_array_get(json_object_get(f, "top_ids"), p);
        json_t *fl = json_array_get(json_object_get(f, "top_logits"), p);
        json_t *ei = json_array_get(json_object_get(e, "top_ids"), p);
        json_t *el = json_array_get(json_object_get(e, "top_logits"), p);
        for (size_t i = 0; i < json_array_size(ei); i++)
            for (size_t j = 0; j < json_array_size(fi); j++)
                if (jint(ei, i) == jint(fi, j))
                    d = fmaxf(d, fabsf(jnum(el, i) - jnum(fl, j)));
    }
    return d;
}

Test(cpu_kquant, teacher_forced_vs_llama_cpp_and_exact)
{
    if (!g_fix)
        cr_skip_test("Q4_K_M model or fixture absent (tests/fixtures/gen_kquant_fixtures.py)");
    pl_gguf *g;
    pl_model *m = load(&g);
    float ref_d = llama_vs_exact();
    printf("llama.cpp itself vs float64: max |dlogit| %.4f\n", ref_d);
    for (int f16 = 0; f16 < 2; f16++) {
        pl_forced_stats lc = run_forced(m, json_object_get(g_fix, "forced"), f16);
        pl_forced_stats ex = run_forced(m, json_object_get(g_fix, "exact"), f16);
        printf("Q4_K_M (K/V %s) vs llama.cpp: %d tokens, top-1 %.2f%% (%.2f%% with near "
               "ties), max |dlogit| %.4f; vs float64: top-1 %d/%d (%d with ties), max "
               "|dlogit| %.4f\n", f16 ? "f16" : "f32", lc.n, 100.0 * lc.agree / lc.n,
               100.0 * lc.agree_or_tie / lc.n, lc.max_d, ex.agree, ex.n, ex.agree_or_tie,
               ex.max_d);
        cr_expect_geq(lc.agree_or_tie * 100, lc.n * 99);
        /* Raw top-1 flips only at near ties. Measured 95.3% (f32) and 94.5%
         * (f16) when Q8_0 kept llama.cpp's lane-wise sums; 94.0% and 94.3% in
         * block order, which the float64 reference prefers (top-1 63/64 for
         * both caches, was 61 and 60). */
        cr_expect_geq(lc.agree * 100, lc.n * 94);
        cr_expect_leq(lc.max_d, MAX_DLOGIT);
        cr_expect_geq(ex.agree_or_tie, ex.n - ex.n / 50);
        cr_expect_leq(ex.max_d, Q8_TOL);
        cr_expect_leq(ex.max_d, ref_d + 0.25f, "further from float64 than llama.cpp is");
    }
    pl_model_free(m);
    pl_gguf_free(g);
}
