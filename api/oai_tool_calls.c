/* oai_tool_calls.c - replies back into tool calls (oai_tools.h): the
 * model's call text parsed into OpenAI tool_call objects, their stream
 * chunks, and an upstream's tool-call deltas passed on or merged. */
#include "api/oai_tools.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/oai_wire.h"
#include "api/respond.h"

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

/* The calls of a cut reply's JSON: the complete objects from t on (comma
 * separated, as in an array), up to the first unfinished one. */
static bool append_complete_(const pl_oai_params *p, json_t *calls, const char *t, size_t n)
{
    size_t i = 0;
    for (;;) {
        while (i < n && (isspace((unsigned char)t[i]) || t[i] == ','))
            i++;
        size_t k = i < n && t[i] == '{' ? object_end_(t + i, n - i) : 0;
        if (!k)
            return true;
        if (!append_call_(p, calls, t + i, k))
            return false;
        i += k;
    }
}

/* <tool_call> blocks; text around them is content. cut: the last block
 * may be unfinished (dropped unless its JSON is whole). */
static bool parse_tagged_(const pl_oai_params *p, const char *t, size_t n, bool cut,
                          json_t *calls, struct evbuffer *content)
{
    static const char open[] = "<tool_call>", close[] = "</tool_call>";
    const char *end = t + n;
    bool any = false;
    while (t < end) {
        const char *o = memmem(t, (size_t)(end - t), open, sizeof open - 1);
        evbuffer_add(content, t, (size_t)((o ? o : end) - t));
        if (!o)
            break;
        any = true;
        const char *body = o + sizeof open - 1;
        const char *c = memmem(body, (size_t)(end - body), close, sizeof close - 1);
        size_t bn = (size_t)((c ? c : end) - body);
        if (!c && cut)
            return append_complete_(p, calls, body, bn);
        if (!append_call_(p, calls, body, bn))
            return false;
        t = c ? c + sizeof close - 1 : end;
    }
    return any;
}

static bool parse_mistral_(const pl_oai_params *p, const char *t, size_t n, bool cut,
                           json_t *calls)
{
    static const char open[] = "[TOOL_CALLS]";
    if (n < sizeof open - 1 || memcmp(t, open, sizeof open - 1))
        return false;
    t += sizeof open - 1, n -= sizeof open - 1;
    while (n && isspace((unsigned char)*t))
        t++, n--;
    json_t *arr = json_loadb(t, n, 0, NULL);
    if (!arr && cut && n && *t == '[')
        return append_complete_(p, calls, t + 1, n - 1);
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

/* A cut reply may end inside the opener itself: that tail is no text. */
static size_t drop_partial_opener_(const pl_oai_params *p, const char *t, size_t n)
{
    const char *op = pl_oai_tools_opener(p);
    for (size_t k = strlen(op) - 1; k > 0; k--)
        if (n >= k && !memcmp(t + n - k, op, k))
            return n - k;
    return n;
}

json_t *pl_oai_tools_parse_reply(const pl_oai_params *p, const char *text, size_t len,
                                 bool cut, char **content)
{
    *content = NULL;
    while (len && isspace((unsigned char)*text))
        text++, len--;
    size_t whole = len;
    if (cut)
        len = drop_partial_opener_(p, text, len);
    while (len && isspace((unsigned char)text[len - 1]))
        len--;
    json_t *calls = json_array();
    struct evbuffer *rest = evbuffer_new();
    bool ok = false;
    if (calls && rest) {
        if (pl_oai_tool_format_is(p, "llama3"))
            ok = len && text[0] == '{' &&
                 (cut ? append_complete_(p, calls, text, len) : append_call_(p, calls, text, len));
        else if (pl_oai_tool_format_is(p, "mistral"))
            ok = parse_mistral_(p, text, len, cut, calls);
        else
            ok = parse_tagged_(p, text, len, cut, calls, rest);
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

/* ---- a reply with tools ---- */

void pl_oai_tools_reply(const pl_oai_params *p, const char *text, size_t len,
                        pl_finish finish, pl_oai_tool_reply *r)
{
    memset(r, 0, sizeof *r);
    r->finish = pl_finish_name(finish);
    bool cut = finish == PL_FINISH_LENGTH;
    if ((finish != PL_FINISH_STOP && !cut) || (len && !text)) {
        r->text_is_content = true;
        return;
    }
    r->calls = pl_oai_tools_parse_reply(p, len ? text : "", len, cut, &r->content);
    if (!r->calls) {
        r->text_is_content = !pl_oai_tools_forced(p);   /* a forced call is never text */
        return;
    }
    if (json_array_size(r->calls) == 0) {               /* the only call was cut */
        json_decref(r->calls);
        r->calls = NULL;
        return;
    }
    r->finish = cut ? "length"
                : p->tool_choice == PL_TOOL_CHOICE_NAMED ? "stop"
                : p->legacy_functions ? "function_call" : "tool_calls";
}

void pl_oai_tool_reply_free(pl_oai_tool_reply *r)
{
    json_decref(r->calls);
    free(r->content);
    memset(r, 0, sizeof *r);
}

void pl_oai_tools_legacy_message(json_t *choice)
{
    json_t *msg = json_object_get(choice, "message");
    json_t *fn = json_object_get(json_array_get(json_object_get(msg, "tool_calls"), 0),
                                 "function");
    if (fn) {
        json_object_set_new(msg, "function_call",
                            json_pack("{s:O, s:O}", "name", json_object_get(fn, "name"),
                                      "arguments", json_object_get(fn, "arguments")));
        json_object_del(msg, "tool_calls");
    }
    const char *fr = json_string_value(json_object_get(choice, "finish_reason"));
    if (fr && !strcmp(fr, "tool_calls"))
        json_object_set_new(choice, "finish_reason", json_string("function_call"));
}

void pl_oai_tools_set_message(const pl_oai_params *p, json_t *choice,
                              const pl_oai_tool_reply *r)
{
    if (r->text_is_content)
        return;
    json_t *msg = json_object_get(choice, "message");
    json_object_set_new(msg, "content", r->content
                                            ? pl_json_string_lossy(r->content, strlen(r->content))
                                            : json_null());
    if (r->calls)
        json_object_set(msg, "tool_calls", r->calls);
    json_object_set_new(choice, "finish_reason", json_string(r->finish));
    if (p->legacy_functions)
        pl_oai_tools_legacy_message(choice);
}

void pl_oai_tools_put_end(const pl_oai_params *p, struct evbuffer *b, const char *prefix,
                          int index, const pl_oai_tool_reply *r, const char *text,
                          size_t len, size_t *text_offset)
{
    pl_delta d = {.text = r->text_is_content ? text : r->content};
    d.len = r->text_is_content ? len : r->content ? strlen(r->content) : 0;
    if (d.len && d.text)
        pl_oai_put_delta_chunk(b, prefix, true, index, &d, text_offset);
    if (r->calls)
        pl_oai_put_tool_chunks(b, prefix, index, r->calls, p->legacy_functions);
    pl_oai_put_tool_finish_chunk(b, prefix, index, r->finish);
}

/* ---- stream chunks ---- */

static void put_key_(struct evbuffer *b, const char *key, const char *s, size_t len)
{
    evbuffer_add_printf(b, "\"%s\":", key);
    pl_oai_put_string(b, s, len);
}

/* One chunk of choice index with a call fragment: the call's id and name
 * (when id), a piece of its arguments (when args). Legacy functions: as
 * delta.function_call. */
static void put_call_chunk_(struct evbuffer *b, const char *prefix, int index, int call,
                            const char *id, const char *name, const char *args,
                            size_t args_len, bool legacy)
{
    evbuffer_add_printf(b, "%s{\"index\":%d,\"delta\":{", prefix, index);
    if (legacy) {
        evbuffer_add_printf(b, "\"function_call\":{");
    } else {
        evbuffer_add_printf(b, "\"tool_calls\":[{\"index\":%d,", call);
        if (id) {
            put_key_(b, "id", id, strlen(id));
            evbuffer_add_printf(b, ",\"type\":\"function\",");
        }
        evbuffer_add_printf(b, "\"function\":{");
    }
    if (name)
        put_key_(b, "name", name, strlen(name));
    if (args) {
        if (name)
            evbuffer_add(b, ",", 1);
        put_key_(b, "arguments", args, args_len);
    }
    evbuffer_add_printf(b, legacy ? "}},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
                                  : "}}]},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
}

void pl_oai_put_tool_chunks(struct evbuffer *b, const char *prefix, int index, json_t *calls,
                            bool legacy)
{
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        if (legacy && i > 0)
            break;                                /* one function_call */
        json_t *fn = json_object_get(c, "function");
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        put_call_chunk_(b, prefix, index, (int)i, json_string_value(json_object_get(c, "id")),
                        json_string_value(json_object_get(fn, "name")), "", 0, legacy);
        size_t n = args ? strlen(args) : 0;
        for (size_t at = 0, k; at < n; at += k) {
            k = n - at < 16 ? n - at : 16;
            while (at + k < n && ((unsigned char)args[at + k] & 0xC0) == 0x80)
                k++;                                  /* whole UTF-8 characters */
            put_call_chunk_(b, prefix, index, (int)i, NULL, NULL, args + at, k, legacy);
        }
    }
}

void pl_oai_put_tool_finish_chunk(struct evbuffer *b, const char *prefix, int index,
                                  const char *finish)
{
    evbuffer_add_printf(b, "%s{\"index\":%d,\"delta\":{},\"logprobs\":null,"
                           "\"finish_reason\":\"%s\"}]}\n\n", prefix, index, finish);
}

/* ---- upstream tool calls ---- */

void pl_oai_put_tool_delta_chunk(struct evbuffer *b, const char *prefix, int index,
                                 const pl_tool_call_delta *t, int n, bool legacy)
{
    if (legacy) {                                 /* the first call, as function_call */
        for (int i = 0; i < n; i++)
            if (t[i].index == 0 && (t[i].name || t[i].arguments))
                put_call_chunk_(b, prefix, index, 0, NULL, t[i].name, t[i].arguments,
                                t[i].arguments_len, true);
        return;
    }
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
