/* json_schema.c - JSON schema -> regex (json_schema.h). One recursive walk
 * writes the pattern into a growing buffer; the first unsupported keyword
 * stops it with an error naming the keyword and where it is. */
#include "backends/constrain/json_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/constrain/regex.h"

#define MAX_DIGITS 15
#define ANY_DEPTH 3

/* A string a JSON string may hold, one character at a time. */
#define RX_JCHAR "(?:[^\"\\\\\\x00-\\x1f]|\\\\[\"\\\\/nrt])"
#define RX_JSTRING "\"" RX_JCHAR "*\""
#define RX_JNUMBER "-?(?:0|[1-9][0-9]{0,14})(?:\\.[0-9]{1,15})?"
#define RX_JINTEGER "-?(?:0|[1-9][0-9]{0,14})"
/* Flexible whitespace (json_schema.h), bounded as llama.cpp's JSON grammar
 * bounds it: where writers break lines (after an opening bracket or a
 * comma, before a closing one) nothing, one space, or one or two newlines
 * and up to 20 spaces or tabs of indentation; a space or none after ':'
 * and before ':' or ','. */
#define RX_WS_LINE "(?: |\\n{1,2}[ \\t]{0,20})?"
#define RX_WS_SPACE " ?"

typedef struct gen {
    char *buf;
    size_t len, cap;
    json_t *root;
    pl_json_ws ws;
    char *err;
    size_t errlen;
    bool failed;
    char path[160];              /* where in the schema, for errors */
} gen;

static void put_(gen *g, const char *s)
{
    size_t n = strlen(s);
    if (g->failed)
        return;
    if (g->len + n + 1 > g->cap) {
        size_t nc = g->cap ? g->cap * 2 : 1024;
        while (nc < g->len + n + 1)
            nc *= 2;
        char *nb = realloc(g->buf, nc);
        if (!nb) {
            g->failed = true;
            snprintf(g->err, g->errlen, "out of memory");
            return;
        }
        g->buf = nb;
        g->cap = nc;
    }
    memcpy(g->buf + g->len, s, n + 1);
    g->len += n;
}

static void putf_(gen *g, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    put_(g, tmp);
}

static void put_literal_(gen *g, const char *s, size_t n)
{
    if (!g->failed && pl_regex_escape_append(&g->buf, &g->len, &g->cap, s, n) < 0) {
        g->failed = true;
        snprintf(g->err, g->errlen, "out of memory");
    }
}

static int fail_(gen *g, const char *fmt, ...)
{
    if (g->failed)
        return -1;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(g->err, g->errlen, "%s (at %s)", msg, g->path[0] ? g->path : "the schema root");
    g->failed = true;
    return -1;
}

/* ---- brackets and separators, in the whitespace mode ---- */

static bool flex_(const gen *g)
{
    return g->ws == PL_JSON_WS_FLEXIBLE;
}

/* An opening bracket ("\\{" or "\\["), then room for a line break. */
static void open_(gen *g, const char *bracket)
{
    put_(g, bracket);
    if (flex_(g))
        put_(g, RX_WS_LINE);
}

/* Room for a line break before a closing bracket. */
static void before_close_(gen *g)
{
    if (flex_(g))
        put_(g, RX_WS_LINE);
}

static void comma_(gen *g)
{
    put_(g, flex_(g) ? RX_WS_SPACE "," RX_WS_LINE : ", ");
}

static void colon_(gen *g)
{
    put_(g, flex_(g) ? RX_WS_SPACE ":" RX_WS_SPACE : ": ");
}

/* The literal JSON text of a value, compact. */
static void put_value_literal_(gen *g, const json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) {
        fail_(g, "cannot encode an enum or const value");
        return;
    }
    put_literal_(g, s, strlen(s));
    free(s);
}

/* ---- integer ranges ---- */

/* Decimal strings lo..hi of the same length n (no sign), as a group. */
/* Whether s[0..n) is all c (s need not be NUL-terminated). */
static bool all_(const char *s, int n, char c)
{
    for (int i = 0; i < n; i++)
        if (s[i] != c)
            return false;
    return true;
}

static void same_len_(gen *g, const char *lo, const char *hi, int n)
{
    if (n == 0)
        return;
    if (!strncmp(lo, hi, (size_t)n)) {
        put_literal_(g, lo, (size_t)n);
        return;
    }
    if (n == 1) {
        putf_(g, "[%c-%c]", lo[0], hi[0]);
        return;
    }
    if (lo[0] == hi[0]) {
        putf_(g, "%c(?:", lo[0]);
        same_len_(g, lo + 1, hi + 1, n - 1);
        put_(g, ")");
        return;
    }
    bool lo_zeros = all_(lo + 1, n - 1, '0');
    bool hi_nines = all_(hi + 1, n - 1, '9');
    char mid_lo = (char)(lo[0] + !lo_zeros), mid_hi = (char)(hi[0] - !hi_nines);
    char nines[MAX_DIGITS + 2], zeros[MAX_DIGITS + 2];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    const char *sep = "";
    put_(g, "(?:");
    if (!lo_zeros) {
        putf_(g, "%c(?:", lo[0]);
        same_len_(g, lo + 1, nines, n - 1);
        put_(g, ")");
        sep = "|";
    }
    if (mid_lo <= mid_hi) {
        putf_(g, "%s[%c-%c][0-9]{%d}", sep, mid_lo, mid_hi, n - 1);
        sep = "|";
    }
    if (!hi_nines) {
        putf_(g, "%s%c(?:", sep, hi[0]);
        same_len_(g, zeros, hi + 1, n - 1);
        put_(g, ")");
    }
    put_(g, ")");
}

/* Naturals a..b (0 <= a <= b), without leading zeros. */
static void nat_range_(gen *g, long long a, long long b)
{
    put_(g, "(?:");
    const char *sep = "";
    long long p = 1;
    for (int d = 1; d <= MAX_DIGITS && p <= b; d++, p *= 10) {
        long long lo = a > (d == 1 ? 0 : p) ? a : (d == 1 ? 0 : p);
        long long hi = b < p * 10 - 1 ? b : p * 10 - 1;
        if (lo > hi)
            continue;
        char ls[32], hs[32];
        snprintf(ls, sizeof ls, "%0*lld", d, lo);
        snprintf(hs, sizeof hs, "%0*lld", d, hi);
        put_(g, sep);
        same_len_(g, ls, hs, d);
        sep = "|";
    }
    put_(g, ")");
}

static const long long MAX_NAT = 999999999999999LL;    /* 15 digits */

/* Integers lo..hi; returns false when the range is empty. */
static bool int_range_(gen *g, long long lo, long long hi)
{
    if (lo > hi)
        return false;
    put_(g, "(?:");
    bool any = false;
    if (lo < 0) {
        long long a = hi < 0 ? -hi : 1, b = -lo;
        put_(g, "-");
        nat_range_(g, a, b);
        any = true;
    }
    if (hi >= 0) {
        put_(g, any ? "|" : "");
        nat_range_(g, lo > 0 ? lo : 0, hi);
    }
    put_(g, ")");
    return true;
}

static int bound_(gen *g, json_t *s, const char *kw, double *out)
{
    json_t *v = json_object_get(s, kw);
    if (!v)
        return 0;
    if (!json_is_number(v))
        return fail_(g, "'%s' must be a number", kw);
    *out = json_number_value(v);
    if (fabs(*out) > (double)MAX_NAT)
        return fail_(g, "'%s' beyond 15 digits is not supported", kw);
    return 1;
}

static int gen_integer_(gen *g, json_t *s)
{
    double mn = -(double)MAX_NAT, mx = (double)MAX_NAT;
    int a = bound_(g, s, "minimum", &mn), b = bound_(g, s, "maximum", &mx);
    if (a < 0 || b < 0)
        return -1;
    if (!a && !b) {
        put_(g, RX_JINTEGER);
        return 0;
    }
    if (!int_range_(g, (long long)ceil(mn), (long long)floor(mx)))
        return fail_(g, "'minimum'/'maximum' admit no integer");
    return 0;
}

static int gen_number_(gen *g, json_t *s)
{
    double mn = -(double)MAX_NAT, mx = (double)MAX_NAT;
    int a = bound_(g, s, "minimum", &mn), b = bound_(g, s, "maximum", &mx);
    if (a < 0 || b < 0)
        return -1;
    if (!a && !b) {
        put_(g, RX_JNUMBER);
        return 0;
    }
    long long lo = (long long)ceil(mn), hi = (long long)floor(mx);
    put_(g, "(?:");
    if (!int_range_(g, lo, hi))
        return fail_(g, "'minimum'/'maximum' admit no number this engine can write");
    /* n.fff stays below n + 1 (above -n - 1 for negatives). */
    long long flo = lo > 0 ? lo : 0, fhi = hi - 1;
    if (flo <= fhi) {
        put_(g, "|");
        int_range_(g, flo, fhi);
        put_(g, "\\.[0-9]{1,15}");
    }
    long long mlo = (long long)ceil(-mx), mhi = (long long)floor(-mn) - 1;
    if (mlo < 1)
        mlo = 1;
    if (mlo <= mhi) {
        put_(g, "|-");
        nat_range_(g, mlo, mhi);
        put_(g, "\\.[0-9]{1,15}");
    }
    put_(g, ")");
    return 0;
}

/* ---- strings ---- */

static int count_(gen *g, json_t *s, const char *kw, long long *out)
{
    json_t *v = json_object_get(s, kw);
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 100000)
        return fail_(g, "'%s' must be an integer from 0 to 100000", kw);
    *out = json_integer_value(v);
    return 1;
}

/* A pattern is searched for (JSON Schema); anchors pin it. */
static int gen_pattern_(gen *g, const char *pat)
{
    size_t n = strlen(pat);
    bool head = n > 0 && pat[0] == '^';
    size_t bs = 0;
    while (bs + 1 < n && pat[n - 2 - bs] == '\\')
        bs++;
    bool tail = n > (size_t)head && pat[n - 1] == '$' && bs % 2 == 0;
    char *inner = strndup(pat + head, n - head - tail);
    if (!inner)
        return fail_(g, "out of memory");
    char e[200];
    pl_dfa *d = pl_regex_compile(inner, strlen(inner), PL_REGEX_JSON_STRING, 4096, e, sizeof e);
    if (!d) {
        free(inner);
        return fail_(g, "'pattern' %s", e);
    }
    pl_dfa_free(d);
    put_(g, head ? "\"(?J:(?:" : "\"(?J:.*(?:");
    put_(g, inner);
    put_(g, tail ? "))\"" : ").*)\"");
    free(inner);
    return 0;
}

static int gen_string_(gen *g, json_t *s)
{
    long long mn = 0, mx = -1;
    int a = count_(g, s, "minLength", &mn), b = count_(g, s, "maxLength", &mx);
    json_t *pat = json_object_get(s, "pattern");
    if (a < 0 || b < 0)
        return -1;
    if (pat) {
        if (!json_is_string(pat))
            return fail_(g, "'pattern' must be a string");
        if (a || b)
            return fail_(g, "'pattern' together with 'minLength'/'maxLength' is not supported");
        return gen_pattern_(g, json_string_value(pat));
    }
    if (b && mx < mn)
        return fail_(g, "'maxLength' is below 'minLength'");
    if (b)
        putf_(g, "\"" RX_JCHAR "{%lld,%lld}\"", mn, mx);
    else
        putf_(g, "\"" RX_JCHAR "{%lld,}\"", mn);
    return 0;
}

/* ---- any value, bounded depth ---- */

static void gen_any_(gen *g, int depth);

/* "key": value, the value any JSON nested at most depth deep. */
static void any_member_(gen *g, int depth)
{
    put_(g, RX_JSTRING);
    colon_(g);
    gen_any_(g, depth);
}

/* An object (or array) of any values nested at most depth deep. */
static void any_container_(gen *g, int depth, bool object)
{
    open_(g, object ? "\\{" : "\\[");
    for (int rep = 0; rep < 2; rep++) {
        put_(g, "(?:");
        if (rep)
            comma_(g);
        if (object)
            any_member_(g, depth);
        else
            gen_any_(g, depth);
    }
    put_(g, ")*");
    before_close_(g);
    put_(g, object ? ")?\\}" : ")?\\]");
}

static void gen_any_(gen *g, int depth)
{
    put_(g, "(?:" RX_JSTRING "|" RX_JNUMBER "|true|false|null");
    if (depth > 0) {
        put_(g, "|");
        any_container_(g, depth - 1, true);
        put_(g, "|");
        any_container_(g, depth - 1, false);
    }
    put_(g, ")");
}

/* ---- schemas ---- */

static int gen_schema_(gen *g, json_t *s, int depth);

static int path_push_(gen *g, const char *part, size_t *saved)
{
    *saved = strlen(g->path);
    snprintf(g->path + *saved, sizeof g->path - *saved, "%s", part);
    return 0;
}

static int gen_sub_(gen *g, json_t *s, int depth, const char *part)
{
    size_t saved;
    path_push_(g, part, &saved);
    int rc = gen_schema_(g, s, depth);
    if (!g->failed)
        g->path[saved] = '\0';
    return rc;
}

static bool is_required_(json_t *req, const char *key)
{
    size_t i;
    json_t *v;
    json_array_foreach(req, i, v)
        if (json_is_string(v) && !strcmp(json_string_value(v), key))
            return true;
    return false;
}

/* One "key": value fragment of property i. */
static int gen_prop_(gen *g, const char *key, json_t *sub, int depth)
{
    json_t *k = json_string(key);
    put_value_literal_(g, k);
    json_decref(k);
    colon_(g);
    char part[96];
    snprintf(part, sizeof part, ".properties.%.80s", key);
    return gen_sub_(g, sub, depth + 1, part);
}

static int gen_map_(gen *g, json_t *add, int depth)
{
    open_(g, "\\{");
    for (int rep = 0; rep < 2; rep++) {
        put_(g, "(?:");
        if (rep)
            comma_(g);
        put_(g, RX_JSTRING);
        colon_(g);
        if (gen_sub_(g, add, depth + 1, ".additionalProperties") < 0)
            return -1;
    }
    put_(g, ")*");
    before_close_(g);
    put_(g, ")?\\}");
    return g->failed ? -1 : 0;
}

/* Properties in order; the first present one has no comma before it. */
static int gen_object_(gen *g, json_t *s, int depth)
{
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *add = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props))
        return fail_(g, "'properties' must be an object");
    if (req && !json_is_array(req))
        return fail_(g, "'required' must be an array");
    if (add && !json_is_boolean(add) && !json_is_object(add))
        return fail_(g, "'additionalProperties' must be a boolean or a schema");
    size_t n = props ? json_object_size(props) : 0, i;
    json_t *v;
    json_array_foreach(req, i, v)
        if (!json_is_string(v) || !json_object_get(props, json_string_value(v)))
            return fail_(g, "'required' names a property not in 'properties'");
    if (n == 0 && json_is_object(add))
        return gen_map_(g, add, depth);
    if (n == 0) {
        open_(g, "\\{");
        put_(g, "\\}");
        return g->failed ? -1 : 0;
    }
    const char **keys = malloc(sizeof *keys * n);
    json_t **subs = malloc(sizeof *subs * n);
    bool *rq = malloc(n);
    if (!keys || !subs || !rq) {
        free(keys), free(subs), free(rq);
        return fail_(g, "out of memory");
    }
    const char *k;
    size_t m = 0;
    json_object_foreach(props, k, v) {
        keys[m] = k;
        subs[m] = v;
        rq[m++] = req && is_required_(req, k);
    }
    open_(g, "\\{");
    put_(g, "(?:(?:");
    bool all_optional = true;
    for (size_t j = 0; j < n && !g->failed; j++) {
        put_(g, j ? "|" : "");
        gen_prop_(g, keys[j], subs[j], depth);
        for (size_t t = j + 1; t < n && !g->failed; t++) {
            put_(g, rq[t] ? "" : "(?:");
            comma_(g);
            gen_prop_(g, keys[t], subs[t], depth);
            put_(g, rq[t] ? "" : ")?");
        }
        if (rq[j]) {
            all_optional = false;
            break;
        }
    }
    put_(g, ")");
    before_close_(g);
    put_(g, all_optional ? ")?\\}" : ")\\}");
    free(keys), free(subs), free(rq);
    return g->failed ? -1 : 0;
}

static int gen_array_(gen *g, json_t *s, int depth)
{
    long long mn = 0, mx = -1;
    int a = count_(g, s, "minItems", &mn), b = count_(g, s, "maxItems", &mx);
    json_t *items = json_object_get(s, "items");
    if (a < 0 || b < 0)
        return -1;
    if (b && mx < mn)
        return fail_(g, "'maxItems' is below 'minItems'");
    if (items && !json_is_object(items) && !json_is_boolean(items))
        return fail_(g, "'items' must be a schema (tuple 'items' are not supported)");
    open_(g, "\\[");
    if (b && mx == 0) {
        put_(g, "\\]");
        return g->failed ? -1 : 0;
    }
    put_(g, "(?:");
    for (int rep = 0; rep < 2 && !g->failed; rep++) {
        if (rep) {
            put_(g, "(?:");
            comma_(g);
        }
        if (items)
            gen_sub_(g, items, depth + 1, ".items");
        else
            gen_any_(g, ANY_DEPTH - 1);
    }
    long long lo = mn > 1 ? mn - 1 : 0;
    if (b)
        putf_(g, "){%lld,%lld}", lo, mx - 1);
    else
        putf_(g, "){%lld,}", lo);
    before_close_(g);
    put_(g, mn == 0 ? ")?\\]" : ")\\]");
    return g->failed ? -1 : 0;
}

static int gen_type_(gen *g, json_t *s, const char *t, int depth)
{
    if (!strcmp(t, "object"))
        return gen_object_(g, s, depth);
    if (!strcmp(t, "array"))
        return gen_array_(g, s, depth);
    if (!strcmp(t, "string"))
        return gen_string_(g, s);
    if (!strcmp(t, "integer"))
        return gen_integer_(g, s);
    if (!strcmp(t, "number"))
        return gen_number_(g, s);
    if (!strcmp(t, "boolean"))
        return put_(g, "(?:true|false)"), 0;
    if (!strcmp(t, "null"))
        return put_(g, "null"), 0;
    return fail_(g, "'type' '%s' is not a JSON schema type", t);
}

static const char *known_keywords_[] = {
    "type", "properties", "required", "additionalProperties", "items", "minItems",
    "maxItems", "minLength", "maxLength", "pattern", "minimum", "maximum", "enum",
    "const", "anyOf", "oneOf", "$ref", "$defs", "definitions", "title", "description",
    "default", "examples", "$schema", "$id", "$comment", NULL,
};

static int check_keywords_(gen *g, json_t *s)
{
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        const char **q = known_keywords_;
        while (*q && strcmp(*q, k))
            q++;
        if (!*q)
            return fail_(g, "JSON schema keyword '%s' is not supported", k);
    }
    return 0;
}

static json_t *resolve_ref_(gen *g, const char *ref)
{
    if (!strcmp(ref, "#"))
        return g->root;
    static const char *prefixes[] = {"#/$defs/", "#/definitions/"};
    static const char *keys[] = {"$defs", "definitions"};
    for (int i = 0; i < 2; i++) {
        size_t n = strlen(prefixes[i]);
        json_t *d = strncmp(ref, prefixes[i], n) ? NULL
                    : json_object_get(json_object_get(g->root, keys[i]), ref + n);
        if (d)
            return d;
    }
    fail_(g, "'$ref' '%.100s' is not a local reference into $defs or definitions", ref);
    return NULL;
}

static int gen_alternatives_(gen *g, json_t *list, const char *kw, int depth)
{
    if (!json_is_array(list) || json_array_size(list) == 0)
        return fail_(g, "'%s' must be a non-empty array", kw);
    put_(g, "(?:");
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v) {
        char part[48];
        snprintf(part, sizeof part, ".%s[%zu]", kw, i);
        put_(g, i ? "|" : "");
        if (gen_sub_(g, v, depth + 1, part) < 0)
            return -1;
    }
    put_(g, ")");
    return 0;
}

static int gen_enum_(gen *g, json_t *e)
{
    if (!json_is_array(e) || json_array_size(e) == 0)
        return fail_(g, "'enum' must be a non-empty array");
    put_(g, "(?:");
    size_t i;
    json_t *v;
    json_array_foreach(e, i, v) {
        put_(g, i ? "|" : "");
        put_value_literal_(g, v);
    }
    put_(g, ")");
    return 0;
}

static int gen_schema_(gen *g, json_t *s, int depth)
{
    if (depth > PL_JSON_SCHEMA_MAX_DEPTH)
        return fail_(g, "schema nested deeper than %d levels", PL_JSON_SCHEMA_MAX_DEPTH);
    if (json_is_true(s))
        return gen_any_(g, ANY_DEPTH - 1), 0;
    if (!json_is_object(s))
        return fail_(g, "a schema must be an object (or true)");
    if (check_keywords_(g, s) < 0)
        return -1;
    json_t *v;
    if ((v = json_object_get(s, "$ref"))) {
        json_t *target = json_is_string(v) ? resolve_ref_(g, json_string_value(v)) : NULL;
        if (!target)
            return fail_(g, "'$ref' must be a string");
        return gen_sub_(g, target, depth + 1, ".$ref");
    }
    if ((v = json_object_get(s, "const")))
        return put_value_literal_(g, v), g->failed ? -1 : 0;
    if ((v = json_object_get(s, "enum")))
        return gen_enum_(g, v);
    if ((v = json_object_get(s, "anyOf")))
        return gen_alternatives_(g, v, "anyOf", depth);
    if ((v = json_object_get(s, "oneOf")))
        return gen_alternatives_(g, v, "oneOf", depth);
    json_t *t = json_object_get(s, "type");
    if (json_is_string(t))
        return gen_type_(g, s, json_string_value(t), depth);
    if (json_is_array(t) && json_array_size(t) > 0) {
        put_(g, "(?:");
        size_t i;
        json_array_foreach(t, i, v) {
            if (!json_is_string(v))
                return fail_(g, "'type' must be a string or an array of strings");
            put_(g, i ? "|" : "");
            if (gen_type_(g, s, json_string_value(v), depth) < 0)
                return -1;
        }
        put_(g, ")");
        return 0;
    }
    if (t)
        return fail_(g, "'type' must be a string or an array of strings");
    if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties"))
        return gen_object_(g, s, depth);
    if (json_object_get(s, "items"))
        return gen_array_(g, s, depth);
    gen_any_(g, ANY_DEPTH - 1);
    return 0;
}

char *pl_json_schema_regex(json_t *schema, pl_json_ws ws, char *err, size_t errlen)
{
    gen g = {.root = schema, .ws = ws, .err = err, .errlen = errlen};
    if (gen_schema_(&g, schema, 0) < 0 || g.failed) {
        free(g.buf);
        return NULL;
    }
    return g.buf;
}

char *pl_json_object_regex(pl_json_ws ws)
{
    char err[64];
    gen g = {.ws = ws, .err = err, .errlen = sizeof err};
    any_container_(&g, ANY_DEPTH - 1, true);
    if (g.failed) {
        free(g.buf);
        return NULL;
    }
    return g.buf;
}

char *pl_choice_regex(const char *const *choices, int n)
{
    char err[64];
    gen g = {.err = err, .errlen = sizeof err};
    put_(&g, "(?:");
    for (int i = 0; i < n; i++) {
        put_(&g, i ? "|" : "");
        put_literal_(&g, choices[i], strlen(choices[i]));
    }
    put_(&g, ")");
    if (g.failed) {
        free(g.buf);
        return NULL;
    }
    return g.buf;
}
