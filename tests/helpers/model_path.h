/* model_path.h - where the tests find the default model (SmolLM2-135M
 * Q4_1), in one place: $PARLEY_MODEL, else the cache scripts/fetch_model.sh
 * fills under $HOME. */
#ifndef PL_TEST_MODEL_PATH_H
#define PL_TEST_MODEL_PATH_H

#include <stdbool.h>

/** $PARLEY_MODEL when set and non-empty, else
 *  $HOME/.cache/parley/models/SmolLM2-135M-Instruct.Q4_1.gguf. Static
 *  storage; never NULL. */
const char *pl_test_model_path(void);

/** True when the default model is readable. When it is not: false, but
 *  only where PARLEY_MODEL is unset. With PARLEY_MODEL set (as
 *  scripts/test.sh does), a missing model is a broken setup, not a reason
 *  to skip: the caller should fail (see PL_TEST_MODEL_OR_SKIP). */
bool pl_test_model_present(void);

/** True when PARLEY_MODEL is set: the suite promised the model. */
bool pl_test_model_required(void);

/** In a Criterion test: skip when the model is absent and was not asked
 *  for; fail when PARLEY_MODEL names a file that cannot be read. */
#define PL_TEST_MODEL_OR_SKIP()                                                          \
    do {                                                                                 \
        if (!pl_test_model_present()) {                                                  \
            cr_assert(!pl_test_model_required(), "PARLEY_MODEL=%s is not readable",      \
                      pl_test_model_path());                                             \
            cr_skip_test("model not found: %s (set PARLEY_MODEL)", pl_test_model_path()); \
        }                                                                                \
    } while (0)

/** The second real model, Gemma 3 270M Q4_K_M (scripts/fetch_model.sh
 *  gemma3): $PARLEY_GEMMA_MODEL when set and non-empty, else
 *  $HOME/.cache/parley/models/gemma-3-270m-q4_k_m.gguf. Static storage. */
const char *pl_test_gemma_path(void);
bool pl_test_gemma_present(void);
/** True when PARLEY_GEMMA_MODEL is set (scripts/test.sh sets it). */
bool pl_test_gemma_required(void);

/** As PL_TEST_MODEL_OR_SKIP, for the Gemma model. */
#define PL_TEST_GEMMA_OR_SKIP()                                                           \
    do {                                                                                  \
        if (!pl_test_gemma_present()) {                                                   \
            cr_assert(!pl_test_gemma_required(), "PARLEY_GEMMA_MODEL=%s is not readable", \
                      pl_test_gemma_path());                                              \
            cr_skip_test("Gemma 3 270M not found: %s (scripts/fetch_model.sh gemma3)",   \
                         pl_test_gemma_path());                                           \
        }                                                                                 \
    } while (0)

#endif
