/* constraint.h - a request's constraint (backend.h, pl_constraint_kind)
 * compiled once into a token automaton and cached by its canonical text.
 *
 * Compiling: schema/json_object/choice -> regex (json_schema.h) -> minimal
 * byte DFA (regex.h) -> token masks over the model's vocabulary
 * (token_fsm.h). The cache belongs to one engine (one vocabulary); it keeps
 * at most PL_CONSTRAINT_CACHE_MAX automata and drops the least recently
 * used; a dropped automaton lives on while requests hold references.
 */
#ifndef PL_CONSTRAIN_CONSTRAINT_H
#define PL_CONSTRAIN_CONSTRAINT_H

#include "backends/backend.h"
#include "backends/engine/constrain/token_fsm.h"

#define PL_CONSTRAINT_CACHE_MAX 32
#define PL_CONSTRAINT_MAX_STATES 4096   /* DFA states of one constraint */

typedef struct pl_constraint_cache pl_constraint_cache;

/** A cache over a vocabulary (its trie is built on the first compile;
 *  src->ud must live as long as the cache). NULL on OOM. */
pl_constraint_cache *pl_constraint_cache_new(const pl_vocab_source *src);
void pl_constraint_cache_free(pl_constraint_cache *c);

/**
 * The automaton for (kind, text): from the cache or compiled now. Returns a
 * reference the caller drops with pl_token_fsm_release, or NULL with *err
 * set: 400 naming the keyword or construct that cannot be compiled, 500 on
 * OOM. Thread-safe.
 */
const pl_token_fsm *pl_constraint_get(pl_constraint_cache *c, pl_constraint_kind kind,
                                      const char *text, pl_err *err);

/** The regex for (kind, text), malloc'd, or NULL with a 400 in *err. */
char *pl_constraint_regex(pl_constraint_kind kind, const char *text, pl_err *err);

/** Cache statistics: hits, compiles, and the milliseconds compiles took. */
void pl_constraint_cache_stats(pl_constraint_cache *c, uint64_t *hits, uint64_t *compiles,
                               double *compile_ms);

#endif
