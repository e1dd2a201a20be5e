/* json_schema.h - JSON schemas, json_object and choice lists as regexes for
 * regex.h (DESIGN.md, "Constrained decoding").
 *
 * Whitespace (pl_json_ws): compact is Python json.dumps' separators (", "
 * and ": ") and nothing else; flexible is what writers of JSON put between
 * tokens, bounded as llama.cpp's JSON grammar bounds it so a model cannot
 * pad forever: after '{', '[' and ',' and before '}' and ']' nothing, one
 * space, or one or two newlines then up to 20 spaces or tabs; around ':'
 * and before ',' one space or none. Never before or after the whole text.
 * Properties come in the schema's order. Keywords: type
 * (one or a list), object with properties / required / additionalProperties,
 * array with items / minItems / maxItems, string with minLength / maxLength
 * or pattern, number and integer with minimum / maximum, boolean, null,
 * enum, const, anyOf, oneOf (as anyOf: exact only when the branches are
 * disjoint), local $ref into $defs or definitions. Annotations (title,
 * description, default, examples, $schema, $id, $comment) are ignored; any
 * other keyword is an error naming it. Numbers have at most 15 integer and
 * 15 fraction digits and no exponent; nesting is bounded (also through
 * $ref, so recursive schemas are cut at that depth).
 */
#ifndef PL_CONSTRAIN_JSON_SCHEMA_H
#define PL_CONSTRAIN_JSON_SCHEMA_H

#include <stddef.h>

#include <jansson.h>

#include "backends/backend.h"

#define PL_JSON_SCHEMA_MAX_DEPTH 10

/** A regex for the JSON texts that validate against schema (root of its
 *  own $refs). Returns a malloc'd pattern, or NULL with a message naming
 *  the keyword in err. */
char *pl_json_schema_regex(json_t *schema, pl_json_ws ws, char *err, size_t errlen);

/** A regex for any JSON object, nested at most 3 deep. malloc'd or NULL. */
char *pl_json_object_regex(pl_json_ws ws);

/** An alternation of n literal strings (exact match). malloc'd or NULL. */
char *pl_choice_regex(const char *const *choices, int n);

#endif
