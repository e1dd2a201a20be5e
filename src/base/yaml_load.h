/* yaml_load.h - load a YAML or JSON file into a jansson tree, keeping the
 * line of every value for error messages.
 *
 * Config and job files are YAML (JSON is accepted too: it is parsed by the
 * same YAML reader). Plain scalars resolve to null, booleans, integers and
 * reals as in YAML 1.2's core schema; quoted scalars stay strings. Anchors,
 * aliases and merge keys (`<<`) are read as PyYAML reads them, with a bound
 * on what aliases may expand to (a billion-laughs file is refused).
 * Non-string mapping keys are refused.
 */
#ifndef PL_YAML_LOAD_H
#define PL_YAML_LOAD_H

#include <stddef.h>

#include <jansson.h>

/** Line numbers by path: "models.mock.capacity" or "agents[2].model".
 *  Owned by the caller: free with pl_linemap_free. */
typedef struct pl_linemap {
    json_t *lines;               /**< object: path -> integer line (1-based) */
} pl_linemap;

/**
 * Parse the file at path. Returns a new json_t reference, or NULL with
 * "FILE:LINE: message" in err. When lines is not NULL it is filled with the
 * line of every value (on success only: after a refusal lines holds
 * nothing, so there is nothing to free).
 */
json_t *pl_yaml_load_file(const char *path, pl_linemap *lines, char *err,
                          size_t errlen);

/** Parse a buffer; name is used in error messages. */
json_t *pl_yaml_load_buf(const char *name, const char *buf, size_t len,
                         pl_linemap *lines, char *err, size_t errlen);

/** Line of the value at path, or of its nearest ancestor; 0 if unknown. */
int pl_linemap_line(const pl_linemap *m, const char *path);
void pl_linemap_free(pl_linemap *m);

#endif
