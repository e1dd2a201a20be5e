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
 * the schema's property names, each value of its property's type where
 * that is a scalar (strings between <|"|> quotes), any Gemma value
 * (nesting up to three levels) otherwise. Required keys and key order are
 * not enforced, as llama.cpp does not. */
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
/* Values nested up to three levels deep. */
#define V0 SCALAR
#define V1 "(?:" SCALAR "|\\[(?:" V0 "(?:," V0 ")*)?\\]|\\{(?:" KEY ":" V0 "(?:," KEY ":" V0 ")*)?\\})"
#define V2 "(?:" SCALAR "|\\[(?:" V1 "(?:," V1 ")*)?\\]|\\{(?:" KEY ":" V1 "(?:," KEY ":" V1 ")*)?\\})"
#define V3 "(?:" SCALAR "|\\[(?:" V2 "(?:," V2 ")*)?\\]|\\{(?:" KEY ":" V2 "(?:," KEY ":" V2 ")*)?\\})"

static const char *value_re_(json_t *schema)
{
    json_t *ty = json_object_get(schema, "type");
    const char *t = json_string_value(ty);
    if (!t || json_object_get(schema, "enum"))
        return V3;
    if (!strcmp(t, "string"))
        return STR;
    if (!strcmp(t, "integer"))
        return INT;
    if (!strcmp(t, "number"))
        return NUM;
    if (!strcmp(t, "boolean"))
        return BOOL;
    return V3;
}

/* One call: NAME{member,...} with each member KEY:VALUE of a property. */
static int call_regex_params_(struct evbuffer *b, const char *name, json_t *params, int ws,
                              char *msg, size_t msglen)
{
    (void)ws, (void)msg, (void)msglen;
    json_t *props = json_object_get(params, "properties");
    evbuffer_add_printf(b, "<\\|tool_call>call:%s\\{", name);
    struct evbuffer *m = evbuffer_new();
    if (!m)
        return -1;
    if (!json_is_object(props) || !json_object_size(props)) {
        evbuffer_add_printf(m, "%s:%s", KEY, V3);
    } else {
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
            evbuffer_add_printf(m, "%s%s:%s", k++ ? "|" : "", esc, value_re_(sub));
            free(esc);
        }
        evbuffer_add(m, ")", 1);
    }
    size_t n = evbuffer_get_length(m);
    char *one = malloc(n + 1);
    if (!one) {
        evbuffer_free(m);
        return -1;
    }
    evbuffer_remove(m, one, n);
    one[n] = '\0';
    evbuffer_free(m);
    evbuffer_add_printf(b, "(?:%s(?:,%s)*)?\\}<tool_call\\|>", one, one);
    free(one);
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
