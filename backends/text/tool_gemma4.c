/* tool_gemma4.c - tool format "gemma4" (Gemma 4; tool_format.h): native.
 * Its template declares the tools in the system turn, writes history calls
 * and results itself (chat_template_gemma4.c), and calls come back from
 * the reply's split (reasoning_gemma4.c). A forced reply is one call or
 * more in the model's own syntax, after an optional thought channel when
 * the request turns thinking on (the prompt closes it otherwise):
 *
 *   <|tool_call>call:NAME{key:value,...}<tool_call|>
 *
 * The constraint follows llama.cpp's gemma4 grammar (common/parsers/
 * gemma4.cpp), tightened by the schema: the call's object holds the
 * schema's properties as key:value members in the order the template
 * writes them (jinja2's dictsort: without case), each at most once, the
 * required ones there; each value of its property's type (strings between
 * <|"|> quotes, with minLength/maxLength that many characters and no '<',
 * a string enum's values, typed array items, an object's own properties
 * down to three levels, null too where nullable), any Gemma value (nesting
 * up to two levels) where the schema gives no type. llama.cpp takes any
 * keys in any order: a forced call must end here (a random model
 * otherwise writes members for ever), and typed values keep the automaton
 * small (any value three levels deep for every property took seconds). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backends/constrain/regex.h"
#include "backends/text/reasoning_format.h"
#include "backends/text/tool_format.h"

/* A string: <|"|> quotes around text without <|"|> (runs of '<' that
 * begin the quote partway, "<" ... "<|\"|", followed by a byte that breaks
 * it; as reasoning_qwen3.c's "</think>"). */
#define Q_PART "<(?:\\|(?:\"(?:\\|)?)?)?"
#define STR "<\\|\"\\|>(?:[^<]|(?:" Q_PART ")*<(?:[^<|]|\\|(?:[^<\"]|\"(?:[^<|]|\\|[^<>]))))*" \
            "(?:" Q_PART ")*<\\|\"\\|>"
#define NUM "-?(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"
#define INT "-?(?:0|[1-9][0-9]*)"
#define BOOL "(?:true|false)"
#define SCALAR "(?:" STR "|" NUM "|" BOOL "|null)"
#define KEY "[A-Za-z_][A-Za-z0-9_.-]*"
/* Values nested up to two levels deep. */
#define V0 SCALAR
#define V1 "(?:" SCALAR "|\\[(?:" V0 "(?:," V0 ")*)?\\]|\\{(?:" KEY ":" V0 "(?:," KEY ":" V0 ")*)?\\})"
#define V2 "(?:" SCALAR "|\\[(?:" V1 "(?:," V1 ")*)?\\]|\\{(?:" KEY ":" V1 "(?:," KEY ":" V1 ")*)?\\})"

static int members_(struct evbuffer *b, json_t *props, int depth);

/* A buffer's text taken out (NULL when out of memory). */
static char *take_(struct evbuffer *m)
{
    size_t n = evbuffer_get_length(m);
    char *s = malloc(n + 1);
    if (s) {
        evbuffer_remove(m, s, n);
        s[n] = '\0';
    }
    evbuffer_free(m);
    return s;
}

/* "(?:X(?:,X)*)?" around X, the list of one kind of item. */
static int list_of_(struct evbuffer *b, struct evbuffer *m)
{
    char *x = take_(m);
    if (!x)
        return -1;
    evbuffer_add_printf(b, "(?:%s(?:,%s)*)?", x, x);
    free(x);
    return 0;
}

/* A string enum's values, each between <|"|> quotes; -1 when the enum
 * holds anything else. */
static int enum_re_(struct evbuffer *b, json_t *values)
{
    size_t i;
    json_t *v;
    json_array_foreach(values, i, v)
        if (!json_is_string(v))
            return -1;
    evbuffer_add(b, "(?:", 3);
    json_array_foreach(values, i, v) {
        char *esc = NULL;
        size_t len = 0, cap = 0;
        const char *t = json_string_value(v);
        if (pl_regex_escape_append(&esc, &len, &cap, t, strlen(t)) < 0)
            return -1;
        evbuffer_add_printf(b, "%s<\\|\"\\|>%s<\\|\"\\|>", i ? "|" : "", esc ? esc : "");
        free(esc);
    }
    evbuffer_add(b, ")", 1);
    return 0;
}

/* A string; with minLength or maxLength that many characters, none a '<'
 * (a bounded count cannot tell a quote's first bytes from text). */
static void string_re_(struct evbuffer *b, json_t *schema)
{
    json_t *mn = json_object_get(schema, "minLength"), *mx = json_object_get(schema, "maxLength");
    bool has_mn = json_is_integer(mn) && json_integer_value(mn) >= 0 &&
                  json_integer_value(mn) <= 1000;
    bool has_mx = json_is_integer(mx) && json_integer_value(mx) >= 0 &&
                  json_integer_value(mx) <= 1000;
    if (has_mx && has_mn && json_integer_value(mx) < json_integer_value(mn))
        has_mx = false;
    if (!has_mn && !has_mx) {
        evbuffer_add(b, STR, strlen(STR));
        return;
    }
    long long lo = has_mn ? json_integer_value(mn) : 0;
    if (has_mx)
        evbuffer_add_printf(b, "<\\|\"\\|>[^<]{%lld,%lld}<\\|\"\\|>", lo,
                            (long long)json_integer_value(mx));
    else
        evbuffer_add_printf(b, "<\\|\"\\|>[^<]{%lld,}<\\|\"\\|>", lo);
}

/* A property's value: its type's syntax where the schema gives one (a
 * string enum's values, typed array items, an object's own properties,
 * down to three levels), any Gemma value otherwise. */
static int value_re_(struct evbuffer *b, json_t *schema, int depth)
{
    const char *t = json_string_value(json_object_get(schema, "type"));
    json_t *en = json_object_get(schema, "enum");
    bool nullable = json_is_true(json_object_get(schema, "nullable"));
    if (nullable)
        evbuffer_add(b, "(?:null|", 8);
    if (json_is_array(en) && json_array_size(en)) {
        struct evbuffer *m = evbuffer_new();
        if (!m)
            return -1;
        if (enum_re_(m, en) == 0)
            evbuffer_add_buffer(b, m);
        else
            evbuffer_add(b, V2, strlen(V2));
        evbuffer_free(m);
    } else if (!t || json_is_array(en)) {
        evbuffer_add(b, V2, strlen(V2));
    } else if (!strcmp(t, "string")) {
        string_re_(b, schema);
    } else if (!strcmp(t, "integer")) {
        evbuffer_add(b, INT, strlen(INT));
    } else if (!strcmp(t, "number")) {
        evbuffer_add(b, NUM, strlen(NUM));
    } else if (!strcmp(t, "boolean")) {
        evbuffer_add(b, BOOL, strlen(BOOL));
    } else if (!strcmp(t, "null")) {
        evbuffer_add(b, "null", 4);
    } else if (!strcmp(t, "array") && json_is_object(json_object_get(schema, "items")) &&
               depth < 3) {
        struct evbuffer *m = evbuffer_new();
        if (!m || value_re_(m, json_object_get(schema, "items"), depth + 1) < 0) {
            if (m)
                evbuffer_free(m);
            return -1;
        }
        evbuffer_add(b, "\\[", 2);
        if (list_of_(b, m) < 0)
            return -1;
        evbuffer_add(b, "\\]", 2);
    } else if (!strcmp(t, "object") && depth < 3) {
        evbuffer_add(b, "\\{", 2);
        if (members_(b, schema, depth + 1) < 0)
            return -1;
        evbuffer_add(b, "\\}", 2);
    } else {
        evbuffer_add(b, V2, strlen(V2));
    }
    if (nullable)
        evbuffer_add(b, ")", 1);
    return 0;
}

typedef struct member {
    const char *key;
    char *re;                    /* KEY:VALUE */
    bool required;
} member;

/* jinja2's dictsort: keys compared without case, then with it. */
static int member_cmp_(const void *a, const void *b)
{
    const member *x = a, *y = b;
    int c = strcasecmp(x->key, y->key);
    return c ? c : strcmp(x->key, y->key);
}

/* Members i.. after one already written: each present one after a comma. */
static void after_(struct evbuffer *b, const member *m, size_t i, size_t n)
{
    for (; i < n; i++)
        evbuffer_add_printf(b, m[i].required ? ",%s" : "(?:,%s)?", m[i].re);
}

/* Members i.. with none written yet: the first present one bare. */
static void first_(struct evbuffer *b, const member *m, size_t i, size_t n)
{
    if (i == n)
        return;
    if (m[i].required) {
        evbuffer_add(b, m[i].re, strlen(m[i].re));
        after_(b, m, i + 1, n);
        return;
    }
    evbuffer_add_printf(b, "(?:%s", m[i].re);
    after_(b, m, i + 1, n);
    evbuffer_add(b, "|", 1);
    first_(b, m, i + 1, n);
    evbuffer_add(b, ")", 1);
}

/* An object's members: its properties' KEY:VALUE in the order the
 * template writes them (dictsort), each at most once, the required ones
 * there; any keys and values, comma-separated, when the schema names no
 * properties. */
static int members_(struct evbuffer *b, json_t *schema, int depth)
{
    json_t *props = json_object_get(schema, "properties");
    if (!json_is_object(props) || !json_object_size(props)) {
        struct evbuffer *m = evbuffer_new();
        if (!m)
            return -1;
        evbuffer_add_printf(m, "%s:%s", KEY, V2);
        return list_of_(b, m);
    }
    size_t n = json_object_size(props), k = 0;
    member *ms = calloc(n, sizeof *ms);
    if (!ms)
        return -1;
    json_t *req = json_object_get(schema, "required");
    const char *key;
    json_t *sub;
    int rc = 0;
    json_object_foreach(props, key, sub) {
        struct evbuffer *m = evbuffer_new();
        char *esc = NULL;
        size_t len = 0, cap = 0;
        if (!m || pl_regex_escape_append(&esc, &len, &cap, key, strlen(key)) < 0) {
            if (m)
                evbuffer_free(m);
            rc = -1;
            break;
        }
        evbuffer_add_printf(m, "%s:", esc);
        free(esc);
        if (value_re_(m, sub, depth) < 0) {
            evbuffer_free(m);
            rc = -1;
            break;
        }
        ms[k].key = key;
        size_t i;
        json_t *r;
        json_array_foreach(req, i, r)
            if (json_is_string(r) && !strcmp(json_string_value(r), key))
                ms[k].required = true;
        if (!(ms[k++].re = take_(m))) {
            rc = -1;
            break;
        }
    }
    if (rc == 0) {
        qsort(ms, k, sizeof *ms, member_cmp_);
        evbuffer_add(b, "(?:", 3);
        first_(b, ms, 0, k);
        evbuffer_add(b, ")", 1);
    }
    for (size_t i = 0; i < k; i++)
        free(ms[i].re);
    free(ms);
    return rc;
}

/* One call: NAME{member,...} with each member KEY:VALUE of a property. */
static int call_regex_params_(struct evbuffer *b, const char *name, json_t *params, int ws,
                              char *msg, size_t msglen)
{
    (void)ws, (void)msg, (void)msglen;
    evbuffer_add_printf(b, "<\\|tool_call>call:%s\\{", name);
    if (members_(b, params, 1) < 0)
        return -1;
    evbuffer_add(b, "\\}<tool_call\\|>", 15);
    return 0;
}

/* The calls alone: the thought channel goes before them only when the
 * request thinks (.thought). */
static char *reply_regex_(const char *one, bool many, int max)
{
    return pl_tool_list_regex("", "", "", one, many, max);
}

const pl_tool_format pl_tool_gemma4 = {
    .name = "gemma4",
    .native = true,
    .call_regex_params = call_regex_params_,
    .reply_regex = reply_regex_,
    .thought = &pl_reasoning_gemma4,
};
