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
#include "backends/constrain/token_fsm.h"

#define PL_CONSTRAINT_CACHE_MAX 32
#define PL_CONSTRAINT_MAX_STATES 4096   /* DFA states of one constraint */

typedef struct pl_constraint_cache pl_constraint_cache;

/** A cache over a vocabulary (its trie is built on the first compile;
 *  src->ud must live as long as the cache), compiling JSON constraints
 *  with whitespace ws. NULL on OOM. */
pl_constraint_cache *pl_constraint_cache_new(const pl_vocab_source *src, pl_json_ws ws);
void pl_constraint_cache_free(pl_constraint_cache *c);

/**
 * The automaton for (kind, text): from the cache or compiled now. Returns a
 * reference the caller drops with pl_token_fsm_release, or NULL with *err
 * set: 400 naming the keyword or construct that cannot be compiled, 500 on
 * OOM. Thread-safe, and compiles each (kind, text) once: a thread asking
 * for one another thread is compiling waits for that compile. The cache's
 * lock is never held while compiling, and a 400 is kept like an automaton
 * (the same text fails the same way). May block for a compile (tens of
 * milliseconds): not for the event loop, which uses pl_constraint_lookup.
 */
const pl_token_fsm *pl_constraint_get(pl_constraint_cache *c, pl_constraint_kind kind,
                                      const char *text, pl_err *err);

/**
 * The cache alone, never compiling nor waiting for a compile: 1 and a
 * reference in *out when (kind, text) is compiled; -1 with its 400 in *err
 * when it failed before; 0 when it must be compiled (absent, or being
 * compiled now): then pl_constraint_get, off the event loop.
 */
int pl_constraint_lookup(pl_constraint_cache *c, pl_constraint_kind kind, const char *text,
                         const pl_token_fsm **out, pl_err *err);

/** Called on the compiling thread before each compile (tests: which
 *  thread compiles, or a compile made slow on purpose). */
typedef void (*pl_constraint_hook)(void *ud, pl_constraint_kind kind, const char *text);
void pl_constraint_cache_set_hook(pl_constraint_cache *c, pl_constraint_hook hook, void *ud);

/** The regex for (kind, text), JSON with whitespace ws; malloc'd, or NULL
 *  with a 400 in *err. */
char *pl_constraint_regex(pl_constraint_kind kind, const char *text, pl_json_ws ws,
                          pl_err *err);

/** The cheap half of a compile, for the event loop: the regex written and
 *  parsed (about 0.1 ms for a 20-property schema). 0, or -1 with the 400
 *  pl_constraint_get would give; what passes can still fail to compile
 *  (a DFA of more than PL_CONSTRAINT_MAX_STATES states). */
int pl_constraint_check(pl_constraint_kind kind, const char *text, pl_json_ws ws, pl_err *err);

/** Cache statistics: hits, compiles, and the milliseconds compiles took. */
void pl_constraint_cache_stats(pl_constraint_cache *c, uint64_t *hits, uint64_t *compiles,
                               double *compile_ms);

#endif
