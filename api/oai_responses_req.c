/* oai_responses_req.c - a POST /v1/responses body into the chat-completions
 * body that api/oai_params.c validates, so both endpoints share one set of
 * parameter rules. Errors name the Responses field (input[2].content,
 * max_output_tokens, text.format, tools[0].parameters), not the chat field
 * they became. Function tools are flat in Responses ({type, name,
 * parameters}) and nested in chat ({type, function: {name, parameters}});
 * function_call / function_call_output input items become an assistant
 * turn with tool_calls and tool messages; a reasoning item becomes the
 * reasoning_content of the assistant turn it precedes; reasoning.effort is
 * reasoning_effort.
 */
#include "api/oai_responses.h"

#include <stdlib.h>
#include <string.h>

#include "api/oai_tools.h"
#include "api/oai_wire.h"
#include "src/base/evbuf.h"

#define BAD(e, param, ...) \
    pl_err_set(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

/* The text of a content value: a string, or an array of text parts
 * (input_text, output_text, text). NULL with *e set otherwise. */
static json_t *content_text(json_t *c, const char *where, pl_err *e)
{
    if (json_is_string(c))
        return json_incref(c);
    if (!json_is_array(c))
        return BAD(e, where, "'%s' must be a string or an array of text parts", where), NULL;
    size_t i;
    json_t *part;
    char path[128];
    json_t *out = json_string("");
    json_array_foreach(c, i, part) {
        const char *ty = json_string_value(json_object_get(part, "type"));
        const char *tx = json_string_value(json_object_get(part, "text"));
        snprintf(path, sizeof path, "%s[%zu]", where, i);
        if (!ty || (strcmp(ty, "input_text") && strcmp(ty, "output_text") && strcmp(ty, "text"))) {
            json_decref(out);
            return pl_err_set(e, 400, "invalid_request_error", path, "unsupported_content",
                              "'%s.type' %s%s%s is not supported: only text parts are",
                              path, ty ? "'" : "", ty ? ty : "(missing)", ty ? "'" : ""),
                   NULL;
        }
        if (!tx) {
            json_decref(out);
            return BAD(e, path, "'%s.text' must be a string", path), NULL;
        }
        size_t a = json_string_length(out), b = strlen(tx);
        char *cat = malloc(a + b + 1);
        if (!cat) {
            json_decref(out);
            return pl_err_set(e, 500, "server_error", NULL, NULL, "out of memory"), NULL;
        }
        memcpy(cat, json_string_value(out), a);
        memcpy(cat + a, tx, b + 1);
        json_decref(out);
        out = json_stringn_nocheck(cat, a + b);
        free(cat);
    }
    return out;
}

static const char *str_at(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

static int oom(pl_err *e)
{
    return pl_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
}

/* The last message when it is an assistant turn that a reasoning item
 * opened and nothing filled yet. */
static json_t *reasoning_only_turn(json_t *msgs)
{
    size_t n = json_array_size(msgs);
    json_t *last = n ? json_array_get(msgs, n - 1) : NULL;
    const char *role = last ? str_at(last, "role") : NULL;
    return role && !strcmp(role, "assistant") && json_object_get(last, "reasoning_content") &&
           !json_object_get(last, "tool_calls") &&
           !json_string_length(json_object_get(last, "content")) ? last : NULL;
}

/* A reasoning item (as a Responses reply gives it): its reasoning_text
 * parts, or its summary's text, open an assistant turn. */
static int add_reasoning_item(json_t *msgs, json_t *it, const char *where, pl_err *e)
{
    json_t *enc = json_object_get(it, "encrypted_content");
    if (enc && !json_is_null(enc))
        return pl_err_set(e, 400, "invalid_request_error", where, "unsupported_parameter",
                          "'%s.encrypted_content' is not supported: give the reasoning as "
                          "content parts of type reasoning_text", where);
    json_t *parts = json_object_get(it, "content");
    if (!json_array_size(parts))
        parts = json_object_get(it, "summary");
    size_t i;
    json_t *part;
    struct evbuffer *b = evbuffer_new();
    if (!b)
        return oom(e);
    json_array_foreach(parts, i, part) {
        const char *t = str_at(part, "text");
        if (!t) {
            evbuffer_free(b);
            return BAD(e, where, "'%s' parts must be {\"type\": \"reasoning_text\", "
                       "\"text\": ...}", where);
        }
        evbuffer_add(b, t, strlen(t));
    }
    char *text = pl_evbuffer_take(b);
    json_t *m = text ? json_pack("{s:s, s:s, s:s}", "role", "assistant", "content", "",
                                 "reasoning_content", text) : NULL;
    free(text);
    return m && json_array_append_new(msgs, m) == 0 ? 0 : oom(e);
}

/* A function_call item: a tool call of an assistant turn (consecutive
 * calls share one turn, as parallel calls do in chat). */
static int add_call_item(json_t *msgs, json_t *it, const char *where, pl_err *e)
{
    const char *id = str_at(it, "call_id"), *name = str_at(it, "name");
    const char *args = str_at(it, "arguments");
    if (!id || !name || !args)
        return BAD(e, where, "'%s' (a function_call) needs string 'call_id', 'name' and "
                   "'arguments'", where);
    json_t *tc = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function",
                           "function", "name", name, "arguments", args);
    size_t n = json_array_size(msgs);
    json_t *last = n ? json_array_get(msgs, n - 1) : NULL;
    const char *role = last ? str_at(last, "role") : NULL;
    json_t *calls = role && !strcmp(role, "assistant") ? json_object_get(last, "tool_calls")
                                                       : NULL;
    if (tc && calls)
        return json_array_append_new(calls, tc) == 0 ? 0 : oom(e);
    if (tc && reasoning_only_turn(msgs))
        return json_object_set_new(last, "tool_calls", json_pack("[o]", tc)) == 0 ? 0 : oom(e);
    json_t *m = tc ? json_pack("{s:s, s:n, s:[o]}", "role", "assistant", "content",
                               "tool_calls", tc) : NULL;
    return m && json_array_append_new(msgs, m) == 0 ? 0 : oom(e);
}

/* A function_call_output item: the tool message answering call_id. */
static int add_output_item(json_t *msgs, json_t *it, const char *where, pl_err *e)
{
    const char *id = str_at(it, "call_id");
    if (!id)
        return BAD(e, where, "'%s' (a function_call_output) needs a string 'call_id'", where);
    char ow[80];
    snprintf(ow, sizeof ow, "%s.output", where);
    json_t *text = content_text(json_object_get(it, "output"), ow, e);
    if (!text)
        return -1;
    json_t *m = json_pack("{s:s, s:s, s:o}", "role", "tool", "tool_call_id", id,
                          "content", text);
    return m && json_array_append_new(msgs, m) == 0 ? 0 : oom(e);
}

/* One input item as a chat message appended to msgs. */
static int add_item(json_t *msgs, json_t *it, size_t i, pl_err *e)
{
    char where[64];
    snprintf(where, sizeof where, "input[%zu]", i);
    if (!json_is_object(it))
        return BAD(e, where, "'%s' must be an object", where);
    const char *ty = json_string_value(json_object_get(it, "type"));
    if (ty && !strcmp(ty, "function_call"))
        return add_call_item(msgs, it, where, e);
    if (ty && !strcmp(ty, "function_call_output"))
        return add_output_item(msgs, it, where, e);
    if (ty && !strcmp(ty, "reasoning"))
        return add_reasoning_item(msgs, it, where, e);
    if (ty && strcmp(ty, "message"))
        return pl_err_set(e, 400, "invalid_request_error", where, "unsupported_item",
                          "'%s.type' '%s' is not supported: only message, reasoning, "
                          "function_call and function_call_output items are", where, ty);
    const char *role = json_string_value(json_object_get(it, "role"));
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") &&
                  strcmp(role, "developer")))
        return BAD(e, where, "'%s.role' must be one of user, assistant, system, developer",
                   where);
    char cw[80];
    snprintf(cw, sizeof cw, "%s.content", where);
    json_t *text = content_text(json_object_get(it, "content"), cw, e), *open;
    if (!text)
        return -1;
    if (!strcmp(role, "assistant") && (open = reasoning_only_turn(msgs)))
        return json_object_set_new(open, "content", text) == 0 ? 0 : oom(e);
    json_t *m = json_pack("{s:s, s:o}", "role", strcmp(role, "developer") ? role : "system",
                          "content", text);
    return m && json_array_append_new(msgs, m) == 0
               ? 0 : pl_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
}

/* The input as chat messages (a new array). */
static json_t *input_messages(json_t *body, pl_err *e)
{
    json_t *msgs = json_array(), *in = json_object_get(body, "input");
    if (!msgs)
        return pl_err_set(e, 500, "server_error", NULL, NULL, "out of memory"), NULL;
    if (json_is_string(in)) {
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", in));
        return msgs;
    }
    if (!json_is_array(in) || json_array_size(in) == 0) {
        BAD(e, "input", "'input' must be a string or a non-empty array of message items");
        goto fail;
    }
    size_t i;
    json_t *it;
    json_array_foreach(in, i, it)
        if (add_item(msgs, it, i, e) < 0)
            goto fail;
    return msgs;
fail:
    json_decref(msgs);
    return NULL;
}

/* The chat messages: instructions (not carried to later responses), the
 * earlier turns, this input. */
static json_t *chat_messages(json_t *body, json_t *history, json_t *input, pl_err *e)
{
    json_t *ins = json_object_get(body, "instructions");
    if (ins && !json_is_null(ins) && !json_is_string(ins))
        return BAD(e, "instructions", "'instructions' must be a string"), NULL;
    json_t *msgs = json_array();
    if (msgs && json_is_string(ins))
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "system", "content", ins));
    if (!msgs || (history && json_array_extend(msgs, history) < 0) ||
        json_array_extend(msgs, input) < 0) {
        json_decref(msgs);
        return pl_err_set(e, 500, "server_error", NULL, NULL, "out of memory"), NULL;
    }
    return msgs;
}

/* text.format into response_format. */
static int map_text_format(json_t *body, json_t *chat, pl_err *e)
{
    json_t *text = json_object_get(body, "text");
    if (!text || json_is_null(text))
        return 0;
    json_t *f = json_object_get(text, "format");
    if (!json_is_object(text) || (f && !json_is_object(f)))
        return BAD(e, "text.format", "'text.format' must be an object with a 'type'");
    const char *ty = f ? json_string_value(json_object_get(f, "type")) : "text";
    if (!ty)
        return BAD(e, "text.format.type", "'text.format.type' must be a string");
    if (!strcmp(ty, "text"))
        return 0;
    if (!strcmp(ty, "json_object"))
        return json_object_set_new(chat, "response_format",
                                   json_pack("{s:s}", "type", "json_object"));
    if (strcmp(ty, "json_schema"))
        return pl_err_set(e, 400, "invalid_request_error", "text.format.type",
                          "unsupported_parameter", "text.format type '%s' is not supported", ty);
    json_t *js = json_deep_copy(f);
    json_object_del(js, "type");
    return json_object_set_new(chat, "response_format",
                               json_pack("{s:s, s:o}", "type", "json_schema", "json_schema", js));
}

/* tools, tool_choice and parallel_tool_calls into their chat forms. */
static int map_tools(json_t *body, json_t *chat, pl_err *e)
{
    json_t *tools = json_object_get(body, "tools"), *t, *out;
    size_t i;
    char where[48];
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools))
            return BAD(e, "tools", "'tools' must be an array of function tools");
        if (!(out = json_array()) || json_object_set_new(chat, "tools", out) < 0)
            return oom(e);
        json_array_foreach(tools, i, t) {
            snprintf(where, sizeof where, "tools[%zu]", i);
            const char *ty = json_is_object(t) ? str_at(t, "type") : NULL;
            if (!ty)
                return BAD(e, where, "'%s' must be an object with a string 'type'", where);
            if (strcmp(ty, "function"))
                return pl_err_set(e, 400, "invalid_request_error", where,
                                  "unsupported_parameter", "'%s.type' '%s' is not supported: "
                                  "only function tools are", where, ty);
            const char *name = str_at(t, "name");
            json_t *params = json_object_get(t, "parameters");
            if (!name || !pl_oai_tool_name_valid(name) || (params && !json_is_object(params)))
                return BAD(e, where, "'%s' must be {\"type\": \"function\", \"name\": "
                           "[a-zA-Z0-9_-]{1,64}, \"description\", \"parameters\": {...}}",
                           where);
            json_t *fn = json_deep_copy(t);
            json_object_del(fn, "type");
            if (!fn || json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function",
                                                            "function", fn)) < 0)
                return oom(e);
        }
    }
    json_t *tc = json_object_get(body, "tool_choice");
    if (json_is_object(tc)) {
        const char *name = str_at(tc, "name");
        if (!str_at(tc, "type") || strcmp(str_at(tc, "type"), "function") || !name)
            return BAD(e, "tool_choice", "'tool_choice' must be none, auto, required or "
                       "{\"type\": \"function\", \"name\": ...}");
        tc = json_pack("{s:s, s:{s:s}}", "type", "function", "function", "name", name);
    } else if (tc && !json_is_null(tc)) {
        json_incref(tc);
    } else {
        tc = NULL;
    }
    if (tc && json_object_set_new(chat, "tool_choice", tc) < 0)
        return oom(e);
    json_t *ptc = json_object_get(body, "parallel_tool_calls");
    return ptc && !json_is_null(ptc) && json_object_set(chat, "parallel_tool_calls", ptc) < 0
               ? oom(e) : 0;
}

/* Rename the chat parameter an error names back to its Responses field. */
void pl_responses_rename_param(pl_err *e)
{
    char *f = strncmp(e->param, "tools[", 6) ? NULL : strstr(e->param, "].function");
    if (f)   /* tools[i].function.x -> tools[i].x */
        memmove(f + 1, f + 10, strlen(f + 10) + 1);
    static const char *const map[][2] = {
        {"max_tokens", "max_output_tokens"}, {"max_completion_tokens", "max_output_tokens"},
        {"messages", "input"}, {"response_format", "text.format"},
        {"reasoning_effort", "reasoning.effort"},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        size_t n = strlen(map[i][0]);
        if (!strncmp(e->param, map[i][0], n) && (!e->param[n] || e->param[n] == '.')) {
            char rest[64];
            snprintf(rest, sizeof rest, "%s", e->param + n);
            snprintf(e->param, sizeof e->param, "%s%s", map[i][1], rest);
            return;
        }
    }
}

/* Copy the sampling fields that have the same meaning in both APIs. */
static void copy_shared(json_t *body, json_t *chat)
{
    static const char *const same[] = {"model", "temperature", "top_p", "stream", "user",
                                       "prompt_cache_key", "seed", "top_logprobs"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        json_t *v = json_object_get(body, same[i]);
        if (v && !json_is_null(v))
            json_object_set(chat, same[i], v);
    }
    json_t *mot = json_object_get(body, "max_output_tokens");
    if (mot && !json_is_null(mot))
        json_object_set(chat, "max_tokens", mot);
}

/* reasoning: {effort, summary} -> reasoning_effort (the summary is not
 * made: the reasoning item carries the reasoning's text itself). */
static int map_reasoning(json_t *body, json_t *chat, pl_err *e)
{
    json_t *r = json_object_get(body, "reasoning");
    if (!r || json_is_null(r))
        return 0;
    if (!json_is_object(r))
        return BAD(e, "reasoning", "'reasoning' must be an object {\"effort\", \"summary\"}");
    json_t *eff = json_object_get(r, "effort");
    if (eff && !json_is_null(eff) && json_object_set(chat, "reasoning_effort", eff) < 0)
        return oom(e);
    return 0;
}

json_t *pl_responses_chat_body(json_t *body, json_t *history, json_t **input, pl_err *e)
{
    *input = NULL;
    json_t *in = input_messages(body, e);
    json_t *msgs = in ? chat_messages(body, history, in, e) : NULL;
    json_t *chat = msgs ? json_object() : NULL;
    if (msgs && !chat)
        pl_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    if (!chat)
        goto fail;
    copy_shared(body, chat);
    json_object_set_new(chat, "messages", msgs);
    msgs = NULL;
    if (map_text_format(body, chat, e) < 0 || map_tools(body, chat, e) < 0 ||
        map_reasoning(body, chat, e) < 0)
        goto fail;
    *input = in;
    return chat;
fail:
    json_decref(in);
    json_decref(msgs);
    json_decref(chat);
    return NULL;
}

int pl_responses_parse(json_t *chat, pl_oai_params *p, pl_err *e)
{
    if (pl_oai_parse(chat, true, p, e) < 0) {
        pl_responses_rename_param(e);
        return -1;
    }
    if (p->n != 1) {
        pl_oai_params_free(p);
        return BAD(e, "n", "'n' is not a Responses parameter");
    }
    return 0;
}
