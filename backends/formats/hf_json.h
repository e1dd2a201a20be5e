/* hf_json.h - the JSON files of a Hugging Face checkpoint (config.json,
 * generation_config.json, tokenizer_config.json, tokenizer.json) with
 * typed lookups whose errors name the file and the key.
 *
 * Keys are dotted paths into nested objects ("rope_scaling.factor",
 * "quantization_config.quant_method"). A getter leaves *out untouched and
 * returns 1 when the key is absent (or JSON null) and not required, 0 when
 * it set *out, and -1 with "FILE: key 'K': why" in err otherwise.
 */
#ifndef PL_HF_JSON_H
#define PL_HF_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct pl_hf_json {
    json_t *root;                /**< an object; NULL when the file is absent */
    char path[4096];             /**< for messages */
    json_t *view;                /**< where keys are looked up when set (owned):
                                      a sub-object, see pl_hf_json_narrow */
    char prefix[64];             /**< the view's key path, for messages */
    json_t *seen;                /**< the first part of every key looked up
                                      (owned; keys of the view when narrowed),
                                      for pl_hf_json_unread */
    json_t *defaulted;           /**< the keys pl_hf_json_narrow filled (owned) */
} pl_hf_json;

/** A default for a key a config may leave out. */
typedef struct pl_hf_default {
    const char *key;
    double value;                /**< integers and booleans (0/1) too */
    bool is_int, is_bool;
} pl_hf_default;

/** Look keys up in root[key] from now on (a composite model's
 *  text_config), with defaults[] (NULL-key ended; may be NULL) for the keys
 *  it leaves out, as transformers fills a sub-config's class defaults;
 *  messages name "key.sub". Returns 0, or -1 with err when root[key] is
 *  not an object. */
int pl_hf_json_narrow(pl_hf_json *j, const char *key, const pl_hf_default *defaults,
                      char *err, size_t errlen);

/** Load dir/name. A missing file is an error only when required (then
 *  root stays NULL and every getter reports absent keys). Returns 0, or -1
 *  with "FILE:LINE: why" in err for a file that is not a JSON object. */
int pl_hf_json_load(pl_hf_json *j, const char *dir, const char *name, bool required,
                    char *err, size_t errlen);
void pl_hf_json_free(pl_hf_json *j);

/** The value at a dotted key, or NULL (absent or null). Every lookup,
 *  found or not, marks the key's first part as read. */
json_t *pl_hf_json_get(const pl_hf_json *j, const char *key);

/** True when key (a top-level key of the view) was filled in by
 *  pl_hf_json_narrow's defaults rather than written in the file. */
bool pl_hf_json_is_default(const pl_hf_json *j, const char *key);

/** The first top-level key of the view (or root), in file order, that
 *  holds a value (not null), is in the file (not a default), was never
 *  looked up and is not in
 *  harmless[] (NULL-ended; may be NULL); NULL when there is none. */
const char *pl_hf_json_unread(const pl_hf_json *j, const char *const *harmless);

int pl_hf_json_int(const pl_hf_json *j, const char *key, bool required, long long lo,
                   long long hi, long long *out, char *err, size_t errlen);
/** An integer or a real in [lo, hi]. */
int pl_hf_json_num(const pl_hf_json *j, const char *key, bool required, double lo, double hi,
                   double *out, char *err, size_t errlen);
int pl_hf_json_bool(const pl_hf_json *j, const char *key, bool required, bool *out, char *err,
                    size_t errlen);
/** A string; *out borrows from j. */
int pl_hf_json_str(const pl_hf_json *j, const char *key, bool required, const char **out,
                   char *err, size_t errlen);

/** "FILE: key 'K': why" into err; returns -1. */
int pl_hf_json_fail(const pl_hf_json *j, const char *key, char *err, size_t errlen,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#endif
