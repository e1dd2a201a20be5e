/* fsm_flat.h - a token FSM (token_fsm.h) packed into flat arrays for a
 * device copy, and the constrained-decoding step as the CUDA kernel runs
 * it, written once for the device (cuda/constrain.cu) and the host (the
 * packing test and the kernel's C reference): next = the walk of a
 * token's bytes through the byte DFA (table[state][byte], the walk of
 * pl_token_fsm_next; an n_states x n_vocab table would take 377 MB for a
 * 1921-state schema on a 49152-token vocabulary), and a state's mask row.
 *
 * Plain C with no CUDA types: compiled by nvcc with __host__ __device__.
 */
#ifndef PL_CONSTRAIN_FSM_FLAT_H
#define PL_CONSTRAIN_FSM_FLAT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define PL_HD static __host__ __device__ __forceinline__
#else
#define PL_HD static inline
#endif

/** The vocabulary as the device reads it (once per runner). */
typedef struct pl_fsm_vocab {
    int32_t n_vocab;
    const int32_t *off;          /**< (n_vocab + 1) byte offsets into bytes */
    const uint8_t *bytes;        /**< every token's bytes */
    const uint8_t *eog;          /**< (n_vocab) 1: ends generation */
} pl_fsm_vocab;

/** One constraint's tables (device or host addresses; NULL mask: none). */
typedef struct pl_fsm_tables {
    const uint32_t *mask;        /**< (n_states, words) allowed tokens */
    const int32_t *trans;        /**< (n_states, 256) byte DFA, -1 dead */
    const uint8_t *accept;       /**< (n_states) */
    int32_t n_states, words;
} pl_fsm_tables;

/** The state after token tok from state, or -1 (pl_token_fsm_next). */
PL_HD int32_t pl_fsm_walk(const pl_fsm_tables *t, const pl_fsm_vocab *v, int32_t state,
                          int32_t tok)
{
    if (state < 0 || state >= t->n_states || tok < 0 || tok >= v->n_vocab)
        return -1;
    if (v->eog[tok])
        return t->accept[state] ? state : -1;
    int32_t a = v->off[tok], b = v->off[tok + 1];
    if (a == b)
        return -1;                   /* control token: never allowed */
    int32_t q = state;
    for (int32_t i = a; i < b && q >= 0; i++)
        q = t->trans[(int64_t)q * 256 + v->bytes[i]];
    return q;
}

/** Whether state allows tok (its mask bit). */
PL_HD int pl_fsm_allowed(const pl_fsm_tables *t, int32_t state, int32_t tok)
{
    return (t->mask[(int64_t)state * t->words + (tok >> 5)] >> (tok & 31)) & 1u;
}

/** The state a sampling step masks with: the host's state, advanced by the
 *  id a placeholder row stood for when there is one (ph_tok >= 0), which
 *  the device resolved and the host has not seen yet. */
PL_HD int32_t pl_fsm_step_state(const pl_fsm_tables *t, const pl_fsm_vocab *v,
                                int32_t host_state, int32_t ph_tok)
{
    return ph_tok >= 0 ? pl_fsm_walk(t, v, host_state, ph_tok) : host_state;
}

/* ---- packing (host, fsm_flat.c; not for device code) ---- */
#ifndef __CUDACC__
struct pl_token_fsm;
struct pl_vocab_trie;

/** A packed blob: one allocation to copy as is; the tables' pointers are
 *  offsets into it (add the copy's base address). */
typedef struct pl_fsm_blob {
    void *data;                  /**< malloc'd, bytes long */
    size_t bytes;
    size_t off[4];               /**< tables: mask, trans, accept; vocab:
                                      off, bytes, eog */
} pl_fsm_blob;

/** Pack f's tables (every state's mask row is computed first). 0, or -1
 *  on OOM. */
int pl_fsm_pack_tables(const struct pl_token_fsm *f, pl_fsm_blob *out);
/** Pack a vocabulary (once per model). 0, or -1 on OOM or when its bytes
 *  exceed 2 GiB. */
int pl_fsm_pack_vocab(const struct pl_vocab_trie *v, int32_t n_vocab, pl_fsm_blob *out);
/** The tables / vocabulary of a blob copied at base (host or device). */
pl_fsm_tables pl_fsm_tables_at(const pl_fsm_blob *b, const void *base,
                               const struct pl_token_fsm *f);
pl_fsm_vocab pl_fsm_vocab_at(const pl_fsm_blob *b, const void *base, int32_t n_vocab);
void pl_fsm_blob_free(pl_fsm_blob *b);
#endif

#endif
