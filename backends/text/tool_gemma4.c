/* tool_gemma4.c - tool format "gemma4" (Gemma 4; tool_format.h): native.
 * Its template declares the tools in the system turn, writes history calls
 * and results itself (chat_template_gemma4.c), and calls come back from
 * the reply's split (reasoning_gemma4.c). A forced reply is one call or
 * more in the model's own syntax, after an optional thought channel:
 *
 *   <|tool_call>call:NAME{key:value,...}<tool_call|>
 *
 * The constraint follows llama.cpp's gemma4 grammar (common/parsers/
 * gemma4.cpp): the call's object holds key:value members, the keys here
 * the schema's property names, each value of its property's type
 * (strings between <|"|> quotes, a string enum's values, typed array
 * items and an object's properties down to three levels), any Gemma
 * value (nesting up to two levels) where the schema gives no type; null
 * where it is nullable. Required keys and key order are not enforced, as
 * llama.cpp does not. Typed values keep the automaton small: any value
 * three levels deep for every property took seconds to compile. */
#include <stdlib.h>
#include <string.h>

#include "backends/constrain/regex.h"
#include "backends/text/reasoning_format.h"
#include "backends/text/tool_format.h"

/* A string: <|"|> quotes around text without <|"|>. */
#define STR "<\\|\"\\|>(?:[^<]|<+(?:[^<|]|\\|(?:[^<\"]|\"(?:[^<|]|\\|[^<>]))))*<*<\\|\"\\|>"
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
        evbuffer_add(b, STR, strlen(STR));
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
        if (members_(b, json_object_get(schema, "properties"), depth + 1) < 0)
            return -1;
        evbuffer_add(b, "\\}", 2);
    } else {
        evbuffer_add(b, V2, strlen(V2));
    }
    if (nullable)
        evbuffer_add(b, ")", 1);
    return 0;
}

/* An object's members: KEY:VALUE of its properties (any key and value
 * when the schema names none), comma-separated. */
static int members_(struct evbuffer *b, json_t *props, int depth)
{
    struct evbuffer *m = evbuffer_new();
    if (!m)
        return -1;
    if (!json_is_object(props) || !json_object_size(props)) {
        evbuffer_add_printf(m, "%s:%s", KEY, V2);
        return list_of_(b, m);
    }
    const char *key;
    json_t *sub;
    int k = 0;
    evbuffer_add(m, "(?:", 3);
    json_object_foreach(props, key, sub) {
        char *esc = NULL;
        size_t len = 0, cap = 0;
        if (pl_regex_escape_append(&esc, &len, &cap, key, strlen(key)) < 0) {
            evbuffer_free(m);
            return -1;
        }
        evbuffer_add_printf(m, "%s%s:", k++ ? "|" : "", esc);
        free(esc);
        if (value_re_(m, sub, depth) < 0) {
            evbuffer_free(m);
            return -1;
        }
    }
    evbuffer_add(m, ")", 1);
    return list_of_(b, m);
}

/* One call: NAME{member,...} with each member KEY:VALUE of a property. */
static int call_regex_params_(struct evbuffer *b, const char *name, json_t *params, int ws,
                              char *msg, size_t msglen)
{
    (void)ws, (void)msg, (void)msglen;
    evbuffer_add_printf(b, "<\\|tool_call>call:%s\\{", name);
    if (members_(b, json_object_get(params, "properties"), 1) < 0)
        return -1;
    evbuffer_add(b, "\\}<tool_call\\|>", 15);
    return 0;
}

static char *reply_regex_(const char *one, bool many, int max)
{
    char *list = pl_tool_list_regex("", "", "", one, many, max);
    if (!list)
        return NULL;
    char *r = pl_reasoning_gemma4.wrap(list);
    free(list);
    return r;
}

const pl_tool_format pl_tool_gemma4 = {
    .name = "gemma4",
    .native = true,
    .call_regex_params = call_regex_params_,
    .reply_regex = reply_regex_,
};
