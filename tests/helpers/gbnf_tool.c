/* gbnf_tool.c - parley's constraint core on the command line, for
 * tests/python/test_gbnf.py: one JSON request per input line,
 *   {"kind": "regex"|"choice"|"json_schema"|"json_object", "text": "...",
 *    "samples": N, "seed": S, "strings": ["...", ...]}
 * and one JSON reply per output line,
 *   {"regex": "...", "gbnf": "...", "samples": [...], "verdicts": [...]}
 * or {"error": "..."}: the GBNF parley sends a llama-server for the
 * constraint, N strings its DFA accepts (random walks) and the DFA's
 * verdict on each given string (JSON kinds with compact whitespace, as
 * the stored llama.cpp fixture was written). Not a test itself: the Python test judges
 * the grammar with its own GBNF interpreter. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "backends/backend.h"
#include "backends/constrain/constraint.h"
#include "backends/constrain/regex.h"

#define TOOL_MAX_STATES 8192
#define TOOL_MAX_LEN 400

static uint64_t next_(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A random accepted string into buf (length *n), or -1. Each step picks a
 * next state at random, then a byte leading there, so a rare byte that
 * moves on (a '.' after \S+) is not lost among 200 that loop. */
static int walk_(const pl_dfa *d, uint64_t *rng, char *buf, size_t *n)
{
    int q = 0;
    size_t len = 0;
    while (len < TOOL_MAX_LEN) {
        const int32_t *t = &d->trans[(size_t)q * 256];
        int targets[256], nt = 0, out[256], k = 0;
        for (int b = 0; b < 256; b++) {
            bool seen = false;
            for (int i = 0; i < nt && !seen; i++)
                seen = targets[i] == t[b];
            if (t[b] >= 0 && !seen)
                targets[nt++] = t[b];
        }
        if (d->accept[q] && (nt == 0 || next_(rng) % 4 == 0))
            break;
        if (nt == 0)
            return -1;
        int to = targets[next_(rng) % (uint64_t)nt];
        for (int b = 0; b < 256; b++)
            if (t[b] == to)
                out[k++] = b;
        int b = out[next_(rng) % (uint64_t)k];
        buf[len++] = (char)b;
        q = d->trans[(size_t)q * 256 + (size_t)b];
    }
    if (!d->accept[q])
        return -1;
    *n = len;
    return 0;
}

static json_t *samples_(const pl_dfa *d, int n, uint64_t seed)
{
    json_t *a = json_array();
    uint64_t rng = seed;
    char buf[TOOL_MAX_LEN + 1];
    for (int tries = 0; tries < n * 20 && (int)json_array_size(a) < n; tries++) {
        size_t len;
        if (walk_(d, &rng, buf, &len) == 0) {
            json_t *s = json_stringn(buf, len);
            if (s)
                json_array_append_new(a, s);
        }
    }
    return a;
}

static json_t *verdicts_(const pl_dfa *d, json_t *strings)
{
    json_t *a = json_array(), *s;
    size_t i;
    json_array_foreach(strings, i, s)
        json_array_append_new(a, json_boolean(pl_dfa_match(d, json_string_value(s),
                                                           json_string_length(s))));
    return a;
}

static const pl_constraint_kind kinds[] = {PL_CONSTRAINT_REGEX, PL_CONSTRAINT_CHOICE,
                                           PL_CONSTRAINT_JSON_SCHEMA,
                                           PL_CONSTRAINT_JSON_OBJECT};

static json_t *answer_(json_t *req)
{
    const char *kn = json_string_value(json_object_get(req, "kind"));
    const char *text = json_string_value(json_object_get(req, "text"));
    pl_constraint_kind kind = PL_CONSTRAINT_NONE;
    for (size_t i = 0; kn && i < sizeof kinds / sizeof *kinds; i++)
        if (!strcmp(kn, pl_constraint_name(kinds[i])))
            kind = kinds[i];
    if (kind == PL_CONSTRAINT_NONE)
        return json_pack("{s:s}", "error", "unknown kind");
    pl_err e = {0};
    char msg[300];
    char *re = pl_constraint_regex(kind, text, PL_JSON_WS_COMPACT, &e);
    if (!re)
        return json_pack("{s:s}", "error", e.message);
    char *g = pl_regex_gbnf(re, strlen(re), msg, sizeof msg);
    pl_dfa *d = pl_regex_compile(re, strlen(re), 0, TOOL_MAX_STATES, msg, sizeof msg);
    json_t *o = json_pack("{s:s, s:s?}", "regex", re, "gbnf", g);
    if (!g || !d) {
        json_object_set_new(o, "error", json_string(msg));
    } else {
        json_int_t ns = json_integer_value(json_object_get(req, "samples"));
        uint64_t seed = (uint64_t)json_integer_value(json_object_get(req, "seed"));
        json_object_set_new(o, "samples", samples_(d, (int)ns, seed));
        json_t *strs = json_object_get(req, "strings");
        if (json_is_array(strs))
            json_object_set_new(o, "verdicts", verdicts_(d, strs));
    }
    pl_dfa_free(d);
    free(g);
    free(re);
    return o;
}

int main(void)
{
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, stdin) > 0) {
        json_t *req = json_loads(line, JSON_ALLOW_NUL, NULL);
        json_t *out = req ? answer_(req) : json_pack("{s:s}", "error", "bad JSON");
        char *s = json_dumps(out, JSON_COMPACT);
        printf("%s\n", s ? s : "{\"error\":\"out of memory\"}");
        fflush(stdout);
        free(s);
        json_decref(out);
        json_decref(req);
    }
    free(line);
    return 0;
}
