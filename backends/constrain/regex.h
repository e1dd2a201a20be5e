/* regex.h - a small regex engine compiling to a minimal byte-level DFA, the
 * first stage of constrained decoding (DESIGN.md, "Constrained decoding").
 *
 * Syntax: literals (UTF-8), escapes (\n \t \r \f \v \0 \xHH \uHHHH and any
 * escaped punctuation), classes [...] with ASCII ranges and negation, \d \w
 * \s \D \W \S, '.', '|', groups (...) and (?:...), quantifiers ? * + {m}
 * {m,} {m,n} (a trailing lazy '?' is accepted and means the same). The
 * whole text must match: anchors are implicit, so '^' at the start and '$'
 * at the end are ignored. '.' and negated classes match one whole UTF-8
 * character (never a newline), so every match is valid UTF-8.
 * The group (?J:...) is parley's own: PL_REGEX_JSON_STRING inside it.
 * Back-references, lookaround, possessive quantifiers and anchors inside
 * the pattern give an error that names them.
 */
#ifndef PL_CONSTRAIN_REGEX_H
#define PL_CONSTRAIN_REGEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Flags for pl_regex_compile. */
enum {
    /** Inside a JSON string: '.', negated classes and \s never match '"',
     *  '\\' or control bytes (< 0x20); a literal '"' or '\\' is an error. */
    PL_REGEX_JSON_STRING = 1,
};

/** A DFA over bytes. State 0 is the start; -1 is the dead state. Every
 *  state can still reach an accepting state (dead ends are pruned). */
typedef struct pl_dfa {
    int n_states;
    int32_t *trans;              /**< (n_states, 256) next state or -1 */
    uint8_t *accept;             /**< (n_states) 1 when accepting */
} pl_dfa;

/**
 * Compile len bytes of pattern. max_states bounds the DFA (and, times 64,
 * the NFA). Returns a DFA the caller frees with pl_dfa_free, or NULL with a
 * message in err (unsupported construct, syntax error with its offset,
 * too many states, out of memory). A pattern matching nothing is an error.
 */
pl_dfa *pl_regex_compile(const char *pattern, size_t len, int flags, int max_states,
                         char *err, size_t errlen);

/** The parse alone (linear in the pattern, no automaton): 0, or -1 with
 *  pl_regex_compile's message for a bad or unsupported pattern. A pattern
 *  that passes may still fail to compile (too many states). */
int pl_regex_check(const char *pattern, size_t len, int flags, char *err, size_t errlen);

void pl_dfa_free(pl_dfa *d);

/** Whether the DFA matches all n bytes of s. */
bool pl_dfa_match(const pl_dfa *d, const char *s, size_t n);

/**
 * The same language as a GBNF grammar (llama.cpp's grammar format; one rule,
 * root), over code points: what an upstream llama-server is given to
 * enforce a regex. Returns malloc'd text the caller frees, or NULL with a
 * message in err (the parser's errors, a byte that is not UTF-8, or a
 * grammar too large).
 */
char *pl_regex_gbnf(const char *pattern, size_t len, char *err, size_t errlen);

/** Append pattern-escaped text (every regex metacharacter backslashed)
 *  to buf at *len (cap bytes; grows with realloc). Returns 0 or -1. */
int pl_regex_escape_append(char **buf, size_t *len, size_t *cap, const char *text,
                           size_t n);

#endif
