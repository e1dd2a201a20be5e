/* tool_format.c - the table of tool-call formats and what their files
 * share: the streamed reply's classification, the whole reply's parse
 * around each format's own, the JSON of calls (tool_format.h). */
#include "backends/text/tool_format.h"
#include "src/base/evbuf.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const pl_tool_format *const formats_[] = {
    &pl_tool_hermes, &pl_tool_generic, &pl_tool_llama3, &pl_tool_mistral, &pl_tool_harmony,
    &pl_tool_qwen3_coder, &pl_tool_gemma4,
};

const pl_tool_format *pl_tool_format_find(const char *name)
{
    for (size_t i = 0; name && i < sizeof formats_ / sizeof formats_[0]; i++)
        if (!strcmp(formats_[i]->name, name))
            return formats_[i];
    return NULL;
}


/* ---- replies ---- */

int pl_tool_format_classify(const pl_tool_format *f, bool forced, const char *t, size_t n)
{
    while (n && (*t == ' ' || *t == '\n' || *t == '\t' || *t == '\r'))
        t++, n--;
    const char *op = f->opener ? f->opener : "";
    size_t on = strlen(op), k = n < on ? n : on;
    if (forced || (k == on && !memcmp(t, op, on)))
        return PL_TOOL_FORMAT_HOLD;
    return memcmp(t, op, k) ? PL_TOOL_FORMAT_TEXT : PL_TOOL_FORMAT_UNDECIDED;
}

static bool known_tool_(json_t *tools, const char *name)
{
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *n = json_string_value(json_object_get(json_object_get(t, "function"),
                                                          "name"));
        if (n && !strcmp(n, name))
            return true;
    }
    return false;
}

bool pl_tool_call_add(json_t *tools, json_t *calls, json_t *o)
{
    const char *name = json_string_value(json_object_get(o, "name"));
    json_t *a = json_object_get(o, "arguments");
    if (!a)
        a = json_object_get(o, "parameters");
    if (!json_is_object(o) || !name || !known_tool_(tools, name) || !a ||
        (!json_is_object(a) && !json_is_string(a)))
        return false;
    char *as = json_is_string(a) ? strdup(json_string_value(a)) : json_dumps(a, JSON_COMPACT);
    json_t *c = as ? json_pack("{s:s, s:s}", "name", name, "arguments", as) : NULL;
    free(as);
    return c && json_array_append_new(calls, c) == 0;
}

bool pl_tool_call_add_text(json_t *tools, json_t *calls, const char *s, size_t n)
{
    json_t *o = json_loadb(s, n, JSON_DECODE_ANY, NULL);
    bool ok = o && pl_tool_call_add(tools, calls, o);
    json_decref(o);
    return ok;
}

/* Where the JSON object at t ends (past its '}'), or 0 when t[0..n) ends
 * inside it: a call cut by max_tokens. */
static size_t object_end_(const char *t, size_t n)
{
    int depth = 0;
    bool str = false, esc = false;
    for (size_t i = 0; i < n; i++) {
        char c = t[i];
        if (esc)
            esc = false;
        else if (str)
            esc = c == '\\', str = c != '"';
        else if (c == '"')
            str = true;
        else if (c == '{' || c == '[')
            depth++;
        else if ((c == '}' || c == ']') && --depth <= 0)
            return depth == 0 && t[0] == '{' ? i + 1 : 0;
    }
    return 0;
}

bool pl_tool_call_add_complete(json_t *tools, json_t *calls, const char *t, size_t n)
{
    size_t i = 0;
    for (;;) {
        while (i < n && (isspace((unsigned char)t[i]) || t[i] == ','))
            i++;
        size_t k = i < n && t[i] == '{' ? object_end_(t + i, n - i) : 0;
        if (!k)
            return true;
        if (!pl_tool_call_add_text(tools, calls, t + i, k))
            return false;
        i += k;
    }
}

/* A cut reply may end inside the opener itself: that tail is no text. */
static size_t drop_partial_opener_(const char *op, const char *t, size_t n)
{
    for (size_t k = strlen(op) - 1; k > 0; k--)
        if (n >= k && !memcmp(t + n - k, op, k))
            return n - k;
    return n;
}

/* The text outside the calls, trailing white space trimmed; NULL: none. */
static char *content_of_(struct evbuffer *rest)
{
    char *c = pl_evbuffer_take(rest);
    size_t n = c ? strlen(c) : 0;
    while (n && isspace((unsigned char)c[n - 1]))
        c[--n] = '\0';
    if (c && n)
        return c;
    free(c);
    return NULL;
}

json_t *pl_tool_format_parse(const pl_tool_format *f, json_t *tools, const char *text,
                             size_t len, bool cut, char **content)
{
    *content = NULL;
    if (!f->parse || !f->opener)
        return NULL;
    while (len && isspace((unsigned char)*text))
        text++, len--;
    size_t whole = len;
    if (cut)
        len = drop_partial_opener_(f->opener, text, len);
    while (len && isspace((unsigned char)text[len - 1]))
        len--;
    json_t *calls = json_array();
    struct evbuffer *rest = evbuffer_new();
    bool ok = false;
    if (calls && rest) {
        ok = f->parse(tools, text, len, cut, calls, rest);
        if (!ok && len < whole) {    /* only an opener's start: dropped, no call */
            evbuffer_drain(rest, evbuffer_get_length(rest));
            ok = evbuffer_add(rest, text, len) == 0;
        }
    }
    if (!ok || (!cut && json_array_size(calls) == 0)) {
        json_decref(calls);
        if (rest)
            evbuffer_free(rest);
        return NULL;
    }
    *content = content_of_(rest);
    return calls;
}

/* ---- the prompt and the grammar ---- */

void pl_tool_put_call_json(struct evbuffer *b, json_t *c, const char *key)
{
    json_t *fn = json_object_get(c, "function"), *a = json_object_get(fn, "arguments");
    char *ns = json_dumps(json_object_get(fn, "name"), JSON_ENCODE_ANY);
    char *as = json_is_string(a) ? strdup(json_string_value(a))
               : a ? json_dumps(a, JSON_COMPACT) : strdup("{}");
    evbuffer_add_printf(b, "{\"name\": %s, \"%s\": %s}", ns ? ns : "\"\"", key,
                        as ? as : "{}");
    free(ns);
    free(as);
}

void pl_tool_put_tools_json(struct evbuffer *b, json_t *tools, const char *before,
                            const char *sep)
{
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char *s = json_dumps(t, JSON_COMPACT);
        evbuffer_add_printf(b, "%s%s%s", i ? sep : "", before, s ? s : "{}");
        free(s);
    }
}

char *pl_tool_list_regex(const char *open, const char *sep, const char *close,
                         const char *one, bool many, int max)
{
    struct evbuffer *b = evbuffer_new();
    if (!b)
        return NULL;
    evbuffer_add_printf(b, "%s%s", open, one);
    if (many)
        evbuffer_add_printf(b, "(?:%s%s){0,%d}", sep, one, max - 1);
    evbuffer_add_printf(b, "%s", close);
    return pl_evbuffer_take(b);
}
