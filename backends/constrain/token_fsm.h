/* token_fsm.h - a byte DFA lifted to the model's vocabulary: for every DFA
 * state, the bitset of tokens that keep the automaton alive (a token is
 * walked byte by byte through the DFA; tokens spanning several grammar
 * symbols are handled by construction), and next = walk(state, token).
 *
 * End-of-generation tokens are allowed exactly in accepting states and
 * leave the state unchanged; control tokens (no bytes) are never allowed.
 * A state's mask is one walk of a trie of the vocabulary's byte strings
 * (subtrees die together), done the first time the state is used (a
 * grammar with thousands of states visits few of them per reply) or for
 * all states by pl_token_fsm_fill (a device copy needs them all).
 *
 * A pl_token_fsm is immutable and reference counted, so the engine thread
 * and runners read it while the main thread's cache may drop it.
 */
#ifndef PL_CONSTRAIN_TOKEN_FSM_H
#define PL_CONSTRAIN_TOKEN_FSM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/constrain/regex.h"

/** The vocabulary as byte strings, with its trie (built once per model). */
typedef struct pl_vocab_trie pl_vocab_trie;

/** How to read a vocabulary: the bytes a token adds to the text (NULL or
 *  len 0 for control tokens) and whether it ends generation. */
typedef struct pl_vocab_source {
    int32_t n_vocab;
    const char *(*token_bytes)(void *ud, int32_t id, size_t *len);
    bool (*is_eog)(void *ud, int32_t id);
    void *ud;
} pl_vocab_source;

/** Copy the vocabulary and build its trie. NULL on OOM. */
pl_vocab_trie *pl_vocab_trie_new(const pl_vocab_source *src);
void pl_vocab_trie_free(pl_vocab_trie *t);

typedef struct pl_token_fsm {
    int n_states;                /**< state 0 is the start */
    int32_t n_vocab;
    int words;                   /**< mask words per state: ceil(n_vocab / 32) */
    uint32_t *mask;              /**< (n_states, words) allowed tokens; a
                                      row is valid once ready[state] */
    uint8_t *ready;              /**< (n_states) atomic: row computed */
    void *mu_;                   /**< pthread mutex for computing rows */
    int32_t *scratch_;           /**< walk stack, under mu_ */
    uint8_t *final;              /**< (n_states) accepting, no byte goes on:
                                      only end-of-generation is allowed */
    pl_dfa *dfa;                 /**< owned */
    const pl_vocab_trie *vocab;  /**< borrowed; outlives the fsm */
    int refs;                    /**< atomic reference count */
    double compile_ms;           /**< lifting (rows not included) */
} pl_token_fsm;

/** Lift dfa (taken: freed with the fsm or here on failure) to the vocab.
 *  One reference. NULL on OOM. */
pl_token_fsm *pl_token_fsm_new(const pl_vocab_trie *v, pl_dfa *dfa);

/** Take and drop references (thread-safe); the last release frees. */
void pl_token_fsm_retain(const pl_token_fsm *f);
void pl_token_fsm_release(const pl_token_fsm *f);

/** The state after token tok from state (>= 0), or -1 when tok is not
 *  allowed there. End-of-generation tokens keep an accepting state. */
int32_t pl_token_fsm_next(const pl_token_fsm *f, int32_t state, int32_t tok);

/** Row of allowed tokens of state (words uint32 words), computed now if
 *  it was not yet (thread-safe; allocates nothing). */
const uint32_t *pl_token_fsm_row(const pl_token_fsm *f, int32_t state);

/** Compute every state's row (for a device copy or a benchmark). */
void pl_token_fsm_fill(const pl_token_fsm *f);

static inline bool pl_token_fsm_allowed(const pl_token_fsm *f, int32_t state, int32_t tok)
{
    return tok >= 0 && tok < f->n_vocab &&
           (pl_token_fsm_row(f, state)[tok >> 5] >> (tok & 31)) & 1;
}

/** A token's bytes as the trie holds them (borrowed). */
const char *pl_vocab_trie_bytes(const pl_vocab_trie *t, int32_t id, size_t *len);
bool pl_vocab_trie_is_eog(const pl_vocab_trie *t, int32_t id);

#endif
