/* mock_internal.h - pieces of the mock backend shared between its files. */
#ifndef PL_MOCK_INTERNAL_H
#define PL_MOCK_INTERNAL_H

#include <stdint.h>

#include "backends/backend.h"

/** Compiled constraints the mock has answered, reused across requests
 *  (a job sends the same answer grammar many times). */
#define PL_MOCK_DFA_CACHE 16
typedef struct pl_mock_dfa_cache {
    struct {
        char *re;                /* the regex, NULL: empty slot */
        struct pl_dfa *dfa;
        int *dist;               /* bytes from each state to acceptance */
        uint64_t used;
    } e[PL_MOCK_DFA_CACHE];
    uint64_t clock;
} pl_mock_dfa_cache;

void pl_mock_dfa_cache_clear(pl_mock_dfa_cache *c);

/**
 * The text the mock answers a constrained request with (malloc'd): one of
 * the choices, or a random shortest text the constraint accepts. NULL when
 * sp has no constraint; (char *)-1 with *err (400 for a constraint that
 * does not compile). JSON has whitespace ws; rnd draws from *rng; cache
 * keeps compiled regexes.
 */
char *pl_mock_constrained_text(pl_mock_dfa_cache *cache, const pl_sampling *sp,
                               pl_json_ws ws, uint64_t (*rnd)(uint64_t *), uint64_t *rng,
                               pl_err *err);

/** An echoed prompt: its delta (pl_delta.prompt) and what it points to. */
typedef struct pl_mock_prompt {
    pl_delta delta;
    char *text;
    size_t len;
    int n;
    int32_t *ids;
    pl_token_logprob *lp;
    pl_top_logprob *top;
} pl_mock_prompt;

/** req's prompt as mock tokens with deterministic logprobs (mock_echo.c).
 *  NULL on out-of-memory. */
pl_mock_prompt *pl_mock_prompt_new(const pl_gen_request *req);
void pl_mock_prompt_free(pl_mock_prompt *p);

#endif
