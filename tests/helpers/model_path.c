/* model_path.c - the default model's path for the tests. */
#include "tests/helpers/model_path.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

const char *pl_test_model_path(void)
{
    static char p[1024];
    const char *e = getenv("PARLEY_MODEL");
    if (e && *e)
        return e;
    const char *home = getenv("HOME");
    snprintf(p, sizeof p, "%s/.cache/parley/models/SmolLM2-135M-Instruct.Q4_1.gguf",
             home && *home ? home : ".");
    return p;
}

bool pl_test_model_required(void)
{
    const char *e = getenv("PARLEY_MODEL");
    return e && *e;
}

bool pl_test_model_present(void)
{
    return access(pl_test_model_path(), R_OK) == 0;
}

const char *pl_test_gemma_path(void)
{
    static char p[1024];
    const char *e = getenv("PARLEY_GEMMA_MODEL");
    if (e && *e)
        return e;
    const char *home = getenv("HOME");
    snprintf(p, sizeof p, "%s/.cache/parley/models/gemma-3-270m-q4_k_m.gguf",
             home && *home ? home : ".");
    return p;
}

bool pl_test_gemma_required(void)
{
    const char *e = getenv("PARLEY_GEMMA_MODEL");
    return e && *e;
}

bool pl_test_gemma_present(void)
{
    return access(pl_test_gemma_path(), R_OK) == 0;
}
