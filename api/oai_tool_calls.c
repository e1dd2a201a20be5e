/* oai_tool_calls.c - replies back into tool calls (oai_tools.h): the
 * model's call text, parsed by its tool format (backends/text/
 * tool_format.h), as OpenAI tool_call objects, their stream
 * chunks, and an upstream's tool-call deltas passed on or merged. */
#include "api/oai_tools.h"
#include "api/oai_reasoning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/oai_wire.h"
#include "api/respond.h"

/* ---- replies ---- */

int pl_oai_tools_classify(const pl_oai_params *p, const char *t, size_t n)
{
    return pl_tool_format_classify(p->tool_format, p->tool_choice != PL_TOOL_CHOICE_AUTO, t, n);
}

/* {"name", "arguments"} -> an OpenAI tool_call with a new id. */
static json_t *to_call_(json_t *c)
{
    char id[40];
    pl_oai_call_id(id, sizeof id);
    return json_pack("{s:s, s:s, s:O}", "id", id, "type", "function", "function", c);
}

json_t *pl_oai_tools_parse_reply(const pl_oai_params *p, const char *text, size_t len,
                                 bool cut, char **content)
{
    json_t *found = pl_tool_format_parse(p->tool_format, p->tools, text, len, cut, content);
    json_t *calls = found ? json_array() : NULL;
    size_t i;
    json_t *c;
    json_array_foreach(found, i, c) {
        if (calls && json_array_append_new(calls, to_call_(c)) < 0) {
            json_decref(calls);
            calls = NULL;
        }
    }
    json_decref(found);
    if (found && !calls) {
        free(*content);
        *content = NULL;
    }
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
