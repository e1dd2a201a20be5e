/* families.c - see families.h. */
#include "tests/helpers/families.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/helpers/forced.h"

json_t *pl_test_fixture_json(const char *name)
{
    const char *src = getenv("PARLEY_SRC");
    char p[1024];
    snprintf(p, sizeof p, "%s/tests/fixtures/%s", src ? src : ".", name);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    cr_assert(j, "%s: %s", p, je.text);
    return j;
}

pl_test_loaded pl_test_load_fixture(const char *name, const pl_model_opts *opts)
{
    const char *src = getenv("PARLEY_SRC");
    char p[1024], err[256];
    snprintf(p, sizeof p, "%s/tests/fixtures/%s", src ? src : ".", name);
    pl_test_loaded l = {.g = pl_gguf_open(p, err, sizeof err)};
    cr_assert(l.g, "%s: %s", p, err);
    l.m = pl_model_load(l.g, opts, err, sizeof err);
    cr_assert(l.m, "%s: %s", p, err);
    return l;
}

void pl_test_unload(pl_test_loaded *l)
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
    return upto > 0 ? d / upto : 0;
}

pl_fam_lp pl_test_family_prompt_lp(const pl_model *m, json_t *seq, int upto_llama, int bs)
{
    json_t *ids_j = json_object_get(seq, "ids");
    int n = (int)json_array_size(ids_j), nv = m->n_vocab;
    int32_t ids[64];
    cr_assert_leq(n, 64);
    for (int i = 0; i < n; i++)
        ids[i] = jint(ids_j, (size_t)i);
    pl_test_fwd s = pl_test_fwd_new(m, 1, n, bs, n, 20, 0);
    float *lg = malloc(sizeof(float) * (size_t)n * nv);
    seq_run(&s, ids, 0, n, lg);
    double lp[64];
    for (int i = 0; i + 1 < n; i++)
        lp[i] = pl_test_log_softmax_at(lg + (size_t)i * nv, nv, ids[i + 1]);
    pl_fam_lp d = {lp_delta(lp, json_object_get(seq, "llama_lp"), upto_llama),
                   lp_delta(lp, json_object_get(seq, "ref_lp"), n - 1)};
    free(lg);
    pl_test_fwd_free(&s);
    return d;
}

void pl_test_family_greedy(const char *name, const pl_model *m, json_t *seq, int prompt,
                           bool vs_llama, int bs)
{
    json_t *ids_j = json_object_get(seq, "ids"), *fg = json_object_get(seq, "ref_greedy");
    json_t *lg_ref = json_object_get(seq, "llama_greedy"), *gap = json_object_get(seq, "ref_gap");
    int n_gen = (int)json_array_size(fg), nv = m->n_vocab;
    int32_t ids[64];
    cr_assert_leq(prompt + n_gen, 64);
    for (int i = 0; i < prompt; i++)
        ids[i] = jint(ids_j, (size_t)i);
    pl_test_fwd s = pl_test_fwd_new(m, 1, prompt + n_gen, bs, prompt, 20, 0);
    float *lg = malloc(sizeof(float) * (size_t)prompt * nv);
    seq_run(&s, ids, 0, prompt, lg);
    int tok = pl_test_argmax(lg + (size_t)(prompt - 1) * nv, nv);
    for (int k = 0; k < n_gen; k++) {
        bool tie = jnum(gap, (size_t)k) < PL_FAM_NEAR_TIE;
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

#define BS 4                     /* small blocks: a window spans several */

void pl_test_family_check(json_t *models, const char *file, int window, double tol)
{
    json_t *mj = json_object_get(models, file);
    cr_assert(mj, "no reference for %s", file);
    pl_test_loaded l = pl_test_load_fixture(file, NULL);
    cr_assert_eq(l.m->n_vocab, (int)json_integer_value(json_object_get(mj, "n_vocab")));
    int prompt = (int)json_integer_value(json_object_get(mj, "prompt"));
    size_t i;
    json_t *seq;
    json_array_foreach(json_object_get(mj, "sequences"), i, seq) {
        int n = (int)json_array_size(json_object_get(seq, "ids"));
        /* llama.cpp knows no window in llama files: compare below it there */
        int upto = window ? window - 1 : n - 1;
        pl_fam_lp d = pl_test_family_prompt_lp(l.m, seq, upto, BS);
        cr_log_info("%s: mean |dlp| %.5f vs llama.cpp (%d positions), %.5f vs float64", file,
                    d.vs_llama, upto, d.vs_f64);
        cr_expect_leq(d.vs_llama, tol, "%s: mean |dlp| vs llama.cpp %.4f", file, d.vs_llama);
        cr_expect_leq(d.vs_f64, tol, "%s: mean |dlp| vs float64 %.4f", file, d.vs_f64);
        pl_test_family_greedy(file, l.m, seq, prompt, window == 0, BS);
    }
    pl_test_unload(&l);
}
