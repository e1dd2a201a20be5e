/* families.h - a tiny random-weight model of tests/fixtures against its
 * reference outputs (gen_families.py, gen_moe.py: llama-cpp-python's and
 * ref_forward.py's float64 prompt logprobs and greedy tokens), through the
 * CPU forward pass: used by test_families and test_moe. */
#ifndef PL_TEST_FAMILIES_H
#define PL_TEST_FAMILIES_H

#include <jansson.h>
#include <stdbool.h>

#include "backends/formats/gguf.h"
#include "backends/engine/model/model.h"

#define PL_FAM_NEAR_TIE 1e-3f    /* float64 top-2 gap below which either is right */

typedef struct pl_test_loaded {
    pl_gguf *g;
    pl_model *m;
} pl_test_loaded;

/* tests/fixtures/<name> (under $PARLEY_SRC), asserted to open. */
json_t *pl_test_fixture_json(const char *name);
/* opts may be NULL (pl_model_load's default). */
pl_test_loaded pl_test_load_fixture(const char *name, const pl_model_opts *opts);
void pl_test_unload(pl_test_loaded *l);

/* Mean |ours - ref| of one sequence's prompt logprobs, against llama.cpp
 * (over the first `upto_llama` positions) and the float64 forward (all). */
typedef struct pl_fam_lp {
    double vs_llama, vs_f64;
} pl_fam_lp;

/* seq: one entry of a model's "sequences"; rows in blocks of bs tokens. */
pl_fam_lp pl_test_family_prompt_lp(const pl_model *m, json_t *seq, int upto_llama, int bs);

/* Greedy tokens after the first `prompt` ids, one row per step through the
 * paged cache, expected equal to the float64 forward's (and llama.cpp's
 * when vs_llama) except at the float64 forward's near ties. */
void pl_test_family_greedy(const char *name, const pl_model *m, json_t *seq, int prompt,
                           bool vs_llama, int bs);

/* Both checks on every sequence of `file` in models (a reference's
 * "models"), prompt logprobs within tol nats (mean) of both references;
 * window > 0: llama.cpp is compared below it only. */
void pl_test_family_check(json_t *models, const char *file, int window, double tol);

#endif
