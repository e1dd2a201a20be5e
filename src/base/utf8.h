/* utf8.h - well-formed UTF-8, and ill-formed text made well-formed the way
 * Python's bytes.decode("utf-8", "replace") does it.
 *
 * A model's reply is bytes: one cut by max_tokens inside a character, or a
 * byte-level token sequence, is not UTF-8, and jansson refuses such strings
 * (json_pack and json_string return NULL). Every layer that turns a reply
 * into JSON (the HTTP stream, whole replies, the jobs' transcripts) goes
 * through these, so a reply reads the same everywhere: each ill-formed
 * sequence (its longest valid start, Unicode's "maximal subpart", or one
 * byte) becomes U+FFFD, as vLLM and the OpenAI API send it.
 */
#ifndef PL_UTF8_H
#define PL_UTF8_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/** U+FFFD, the replacement character, in UTF-8. */
#define PL_UTF8_REPLACEMENT "\xEF\xBF\xBD"

/** Length (1..4) of the well-formed sequence at s[0..n) (n >= 1), or 0
 *  when it is ill-formed or cut short: no overlong forms, no surrogates,
 *  nothing past U+10FFFF (jansson's rules). */
size_t pl_utf8_seq_len(const unsigned char *s, size_t n);

/** Bytes of the ill-formed sequence at s[0..n) (n >= 1) that one U+FFFD
 *  replaces: the longest start of a valid sequence, at least 1. */
size_t pl_utf8_bad_len(const unsigned char *s, size_t n);

/** Whether s[0..len) is well-formed UTF-8. */
bool pl_utf8_valid(const char *s, size_t len);

/** A NUL-terminated copy of s[0..len) with each ill-formed sequence
 *  replaced by U+FFFD (at most 3 * len bytes); its length in *out_len.
 *  The caller frees it. NULL only when out of memory. */
char *pl_utf8_lossy(const char *s, size_t len, size_t *out_len);

/** A JSON string of s[0..len) made well-formed as pl_utf8_lossy does (s
 *  NULL: ""). A new reference; NULL only when out of memory. */
json_t *pl_json_string_lossy(const char *s, size_t len);

#endif
