/* fsm_ref.h - random token FSMs for the constrained-decoding tests of the
 * device path (test_fsm_flat.c on the CPU, test_cuda_constrain.c on a
 * GPU): a random vocabulary (1- to 6-byte tokens over a small alphabet,
 * control tokens, one end-of-generation token) and random byte DFAs lifted
 * to it by the CPU constrain core (token_fsm.h), whose masks and next()
 * are the reference. */
#ifndef PL_TEST_FSM_REF_H
#define PL_TEST_FSM_REF_H

#include <stdlib.h>
#include <string.h>

#include "backends/constrain/token_fsm.h"

#define FR_EOG 2                 /* the end-of-generation token */
#define FR_ALPHA "ab{}\":, 0123\xc3\xa9"

typedef struct fr_vocab {
    int n;
    char **tok;
    size_t *len;
    pl_vocab_trie *trie;
} fr_vocab;

static uint64_t fr_rng = 0x9E3779B97F4A7C15ull;

static inline uint32_t fr_rand(void)
{
    fr_rng ^= fr_rng << 13;
    fr_rng ^= fr_rng >> 7;
    fr_rng ^= fr_rng << 17;
    return (uint32_t)(fr_rng >> 16);
}

static inline const char *fr_bytes(void *ud, int32_t id, size_t *len)
{
    fr_vocab *v = ud;
    *len = (id >= 0 && id < v->n) ? v->len[id] : 0;
    return *len ? v->tok[id] : NULL;
}

static inline bool fr_eog(void *ud, int32_t id)
{
    (void)ud;
    return id == FR_EOG;
}

/* n tokens: 0 and 1 are control tokens (no bytes), FR_EOG ends generation,
 * then single bytes of the alphabet, then random 1..6-byte strings. */
static inline void fr_vocab_init(fr_vocab *v, int n, uint64_t seed)
{
    fr_rng = seed | 1;
    v->n = n;
    v->tok = calloc((size_t)n, sizeof *v->tok);
    v->len = calloc((size_t)n, sizeof *v->len);
    const char *al = FR_ALPHA;
    size_t na = strlen(al);
    for (int i = 3; i < n; i++) {
        size_t k = i - 3 < (int)na ? 1 : 1 + fr_rand() % 6;
        v->tok[i] = malloc(k + 1);
        for (size_t j = 0; j < k; j++)
            v->tok[i][j] = i - 3 < (int)na ? al[i - 3] : al[fr_rand() % na];
        v->tok[i][k] = '\0';
        v->len[i] = k;
    }
    pl_vocab_source src = {n, fr_bytes, fr_eog, v};
    v->trie = pl_vocab_trie_new(&src);
}

static inline void fr_vocab_free(fr_vocab *v)
{
    for (int i = 0; i < v->n; i++)
        free(v->tok[i]);
    free(v->tok);
    free(v->len);
    pl_vocab_trie_free(v->trie);
}

/* A random byte DFA of n_states over the alphabet's bytes (each state has
 * an edge on about half of them), about a third of the states accepting,
 * and, when with_sink, a last state with no edge that does not accept (it
 * allows no token: the samplers must end with EOS there). */
static inline pl_token_fsm *fr_fsm(const fr_vocab *v, int n_states, bool with_sink)
{
    pl_dfa *d = calloc(1, sizeof *d);
    d->n_states = n_states;
    d->trans = malloc(sizeof(int32_t) * 256 * (size_t)n_states);
    d->accept = calloc((size_t)n_states, 1);
    const unsigned char *al = (const unsigned char *)FR_ALPHA;
    size_t na = strlen(FR_ALPHA);
    for (int q = 0; q < n_states; q++) {
        for (int b = 0; b < 256; b++)
            d->trans[(size_t)q * 256 + b] = -1;
        bool sink = with_sink && q == n_states - 1;
        d->accept[q] = !sink && fr_rand() % 3 == 0;
        for (size_t i = 0; i < na && !sink; i++)
            if (fr_rand() % 2)
                d->trans[(size_t)q * 256 + al[i]] = (int32_t)(fr_rand() % n_states);
    }
    return pl_token_fsm_new(v->trie, d);
}

#endif
