/* oai_tool_calls.c - replies back into tool calls (oai_tools.h): the
 * model's call text parsed into OpenAI tool_call objects, their stream
 * chunks, and an upstream's tool-call deltas passed on or merged. */
#include "api/oai_tools.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/oai_wire.h"

/* ---- replies ---- */

const char *pl_oai_tools_opener(const pl_oai_params *p)
{
    return pl_oai_tool_format_is(p, "llama3") ? "{" : pl_oai_tool_format_is(p, "mistral") ? "[TOOL_CALLS]" : "<tool_call>";
}

int pl_oai_tools_classify(const pl_oai_params *p, const char *t, size_t n)
{
    while (n && (*t == ' ' || *t == '\n' || *t == '\t' || *t == '\r'))
        t++, n--;
    const char *op = pl_oai_tools_opener(p);
    size_t on = strlen(op), k = n < on ? n : on;
    if (p->tool_choice != PL_TOOL_CHOICE_AUTO || (k == on && !memcmp(t, op, on)))
        return PL_TOOLS_HOLD;
    return memcmp(t, op, k) ? PL_TOOLS_TEXT : PL_TOOLS_UNDECIDED;
}

static bool known_tool_(const pl_oai_params *p, const char *name)
{
    size_t i;
    json_t *t;
    json_array_foreach(p->tools, i, t)
        if (!strcmp(json_string_value(json_object_get(json_object_get(t, "function"), "name")),
                    name))
            return true;
    return false;
}

/* {"name", "arguments"|"parameters"} -> an OpenAI tool_call; NULL if not. */
static json_t *to_call_(const pl_oai_params *p, json_t *o)
{
    const char *name = json_string_value(json_object_get(o, "name"));
    json_t *a = json_object_get(o, "arguments");
    if (!a)
        a = json_object_get(o, "parameters");
    if (!json_is_object(o) || !name || !known_tool_(p, name) || !a ||
        (!json_is_object(a) && !json_is_string(a)))
        return NULL;
    char *as = json_is_string(a) ? strdup(json_string_value(a)) : json_dumps(a, JSON_COMPACT);
    char id[40];
    snprintf(id, sizeof id, "call_%08x%08x%08x", (unsigned)rand(), (unsigned)rand(),
             (unsigned)rand());
    json_t *c = as ? json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function",
                               "function", "name", name, "arguments", as)
                   : NULL;
    free(as);
    return c;
}

static bool append_call_(const pl_oai_params *p, json_t *calls, const char *s, size_t n)
{
    json_t *o = json_loadb(s, n, JSON_DECODE_ANY, NULL);
    json_t *c = o ? to_call_(p, o) : NULL;
    json_decref(o);
    return c && json_array_append_new(calls, c) == 0;
}

/* <tool_call> blocks; text around them is content. */
static bool parse_tagged_(const pl_oai_params *p, const char *t, size_t n, json_t *calls,
                          struct evbuffer *content)
{
    static const char open[] = "<tool_call>", close[] = "</tool_call>";
    const char *end = t + n;
    while (t < end) {
        const char *o = memmem(t, (size_t)(end - t), open, sizeof open - 1);
        evbuffer_add(content, t, (size_t)((o ? o : end) - t));
        if (!o)
            break;
        const char *body = o + sizeof open - 1;
        const char *c = memmem(body, (size_t)(end - body), close, sizeof close - 1);
        if (!append_call_(p, calls, body, (size_t)((c ? c : end) - body)))
            return false;
        t = c ? c + sizeof close - 1 : end;
    }
    return json_array_size(calls) > 0;
}

static bool parse_mistral_(const pl_oai_params *p, const char *t, size_t n, json_t *calls)
{
    static const char open[] = "[TOOL_CALLS]";
    if (n < sizeof open - 1 || memcmp(t, open, sizeof open - 1))
        return false;
    json_t *arr = json_loadb(t + sizeof open - 1, n - (sizeof open - 1), 0, NULL);
    size_t i;
    json_t *o;
    bool ok = json_is_array(arr) && json_array_size(arr) > 0;
    json_array_foreach(arr, i, o) {
        json_t *c = ok ? to_call_(p, o) : NULL;
        ok = c && json_array_append_new(calls, c) == 0;
    }
    json_decref(arr);
    return ok;
}

json_t *pl_oai_tools_parse_reply(const pl_oai_params *p, const char *text, size_t len,
                                 char **content)
{
    *content = NULL;
    while (len && isspace((unsigned char)*text))
        text++, len--;
    while (len && isspace((unsigned char)text[len - 1]))
        len--;
    json_t *calls = json_array();
    struct evbuffer *rest = evbuffer_new();
    bool ok = false;
    if (calls && rest) {
        if (pl_oai_tool_format_is(p, "llama3"))
            ok = len && text[0] == '{' && append_call_(p, calls, text, len);
        else if (pl_oai_tool_format_is(p, "mistral"))
            ok = parse_mistral_(p, text, len, calls);
        else
            ok = parse_tagged_(p, text, len, calls, rest);
    }
    if (!ok) {
        json_decref(calls);
        if (rest)
            evbuffer_free(rest);
        return NULL;
    }
    char *c = pl_evbuffer_take(rest);
    size_t n = c ? strlen(c) : 0;
    while (n && isspace((unsigned char)c[n - 1]))
        c[--n] = '\0';
    if (c && n)
        *content = c;
    else
        free(c);
    return calls;
}

void pl_oai_put_tool_chunks(struct evbuffer *b, const char *prefix, int index, json_t *calls)
{
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_t *fn = json_object_get(c, "function");
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        json_t *head = json_pack("{s:i, s:s, s:s, s:{s:s, s:s}}", "index", (int)i, "id",
                                 json_string_value(json_object_get(c, "id")), "type",
                                 "function", "function", "name",
                                 json_string_value(json_object_get(fn, "name")),
                                 "arguments", "");
        char *hs = head ? json_dumps(head, JSON_COMPACT) : NULL;
        json_decref(head);
        evbuffer_add_printf(b, "%s{\"index\":%d,\"delta\":{\"tool_calls\":[%s]},"
                               "\"logprobs\":null,\"finish_reason\":null}]}\n\n",
                            prefix, index, hs ? hs : "");
        free(hs);
        size_t n = args ? strlen(args) : 0;
        for (size_t at = 0, k; at < n; at += k) {
            k = n - at < 16 ? n - at : 16;
            while (at + k < n && ((unsigned char)args[at + k] & 0xC0) == 0x80)
                k++;                                  /* whole UTF-8 characters */
            evbuffer_add_printf(b, "%s{\"index\":%d,\"delta\":{\"tool_calls\":[{\"index\":%d,"
                                   "\"function\":{\"arguments\":", prefix, index, (int)i);
            pl_oai_put_string(b, args + at, k);
            evbuffer_add_printf(b, "}}]},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
        }
    }
    pl_oai_put_tool_finish_chunk(b, prefix, index);
}

void pl_oai_put_tool_finish_chunk(struct evbuffer *b, const char *prefix, int index)
{
    evbuffer_add_printf(b, "%s{\"index\":%d,\"delta\":{},\"logprobs\":null,"
                           "\"finish_reason\":\"tool_calls\"}]}\n\n", prefix, index);
}

/* ---- upstream tool calls ---- */

static void put_key_(struct evbuffer *b, const char *key, const char *s, size_t len)
{
    evbuffer_add_printf(b, "\"%s\":", key);
    pl_oai_put_string(b, s, len);
}

void pl_oai_put_tool_delta_chunk(struct evbuffer *b, const char *prefix, int index,
                                 const pl_tool_call_delta *t, int n)
{
    evbuffer_add_printf(b, "%s{\"index\":%d,\"delta\":{\"tool_calls\":[", prefix, index);
    for (int i = 0; i < n; i++) {
        evbuffer_add_printf(b, "%s{\"index\":%d,", i ? "," : "", t[i].index);
        if (t[i].id) {
            put_key_(b, "id", t[i].id, strlen(t[i].id));
            evbuffer_add_printf(b, ",\"type\":\"function\",");
        }
        evbuffer_add_printf(b, "\"function\":{");
        if (t[i].name)
            put_key_(b, "name", t[i].name, strlen(t[i].name));
        if (t[i].arguments) {
            if (t[i].name)
                evbuffer_add(b, ",", 1);
            put_key_(b, "arguments", t[i].arguments, t[i].arguments_len);
        }
        evbuffer_add_printf(b, "}}");
    }
    evbuffer_add_printf(b, "]},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
}

/* The call of *calls with this index, appended when new. */
static json_t *call_at_(json_t *calls, int index)
{
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        if (json_integer_value(json_object_get(c, "index")) == index)
            return c;
    }
    c = json_pack("{s:i, s:s, s:s, s:{s:s, s:s}}", "index", index, "id", "", "type",
                  "function", "function", "name", "", "arguments", "");
    return c && json_array_append_new(calls, c) == 0 ? c : NULL;
}

int pl_oai_merge_tool_deltas(json_t **calls, const pl_tool_call_delta *t, int n)
{
    if (!*calls && !(*calls = json_array()))
        return -1;
    for (int i = 0; i < n; i++) {
        json_t *c = call_at_(*calls, t[i].index);
        json_t *fn = json_object_get(c, "function");
        if (!fn)
            return -1;
        if (t[i].id && json_object_set_new(c, "id", json_string(t[i].id)) < 0)
            return -1;
        if (t[i].name && json_object_set_new(fn, "name", json_string(t[i].name)) < 0)
            return -1;
        json_t *a = json_object_get(fn, "arguments");
        if (t[i].arguments_len) {
            size_t have = json_string_length(a), add = t[i].arguments_len;
            char *s = malloc(have + add);
            if (!s)
                return -1;
            memcpy(s, json_string_value(a), have);
            memcpy(s + have, t[i].arguments, add);
            int rc = json_string_setn(a, s, have + add);
            free(s);
            if (rc < 0)
                return -1;
        }
    }
    return 0;
}
