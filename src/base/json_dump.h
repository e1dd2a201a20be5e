/* json_dump.h - compact JSON text from a jansson tree, without jansson's
 * per-call costs.
 *
 * json_dumps spends most of a small reply's time on bookkeeping: a hash
 * table per call, a snprintf("%p") key per object and array to catch
 * cycles, a callback per string segment, snprintf per integer, and a copy
 * of the finished text. Every non-streaming reply and every relayed
 * upstream chunk pays it. pl_json_dump writes the same bytes as
 * json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) through a 4 KiB stack
 * buffer: strings are copied in runs between the bytes that need escaping,
 * integers are formatted by hand, and reals still go through jansson (their
 * shortest round-trip form is its business). tests/test_json_dump.c holds
 * it to json_dumps byte for byte on fixed and random trees.
 */
#ifndef PL_JSON_DUMP_H
#define PL_JSON_DUMP_H

#include <jansson.h>
#include <stddef.h>

/** Where the text goes: returns 0, or -1 to stop the dump. */
typedef int (*pl_json_sink)(void *ud, const char *bytes, size_t n);

/** Nesting deeper than this fails the dump (jansson's parser refuses
 * deeper input, and a cycle ends here instead of overflowing the stack). */
#define PL_JSON_DUMP_MAX_DEPTH 4096

/** Writes v as json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) would, in
 * pieces of at most 4 KiB. Returns 0, or -1 (part of the text may have been
 * written) when v is NULL, a string is not valid UTF-8, nesting passes
 * PL_JSON_DUMP_MAX_DEPTH, or the sink refused. */
int pl_json_dump(const json_t *v, pl_json_sink sink, void *ud);

/** The decimal digits of v, written to end just before end (20 bytes at
 * most, no NUL); returns where they start. JSON's integers, and the stream
 * chunks api/oai_wire.c writes by hand, without printf's cost. */
char *pl_json_fmt_uint(char *end, unsigned long long v);

/** The same text as a NUL-terminated string the caller frees; its length
 * in *len when len is not NULL. NULL on the failures above or out of
 * memory. */
char *pl_json_dumps(const json_t *v, size_t *len);

#endif
