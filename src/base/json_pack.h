/* json_pack.h - jansson's json_pack, but a failure is never quiet.
 *
 * json_pack returns NULL both when memory runs out and when its format
 * string is wrong, and json_object_set_new(o, "k", NULL) then drops the key
 * without a word: a status built with a format jansson refuses ("s:f?")
 * loses that key in every reply. pl_json_pack logs every failure with the
 * call site and jansson's message, and a wrong format (a constant string,
 * so a programming error every run of that line makes) aborts: any test
 * that goes through the line fails at once. Other failures (out of memory,
 * a NULL or invalid UTF-8 argument) return NULL for the caller to turn into
 * an error reply. tests/python/test_json_formats.py checks every format
 * literal in the tree against jansson's grammar, on paths no test runs too.
 */
#ifndef PL_JSON_PACK_H
#define PL_JSON_PACK_H

#include <jansson.h>

/** json_pack with the failures described above. New reference or NULL. */
json_t *pl_json_pack_at(const char *file, int line, const char *fmt, ...);

#define pl_json_pack(...) pl_json_pack_at(__FILE__, __LINE__, __VA_ARGS__)

#endif
