/* anthropic_req.c - a POST /v1/messages body into the chat-completions body
 * that api/oai_params.c validates (see anthropic.h). Anthropic's fields are
 * checked here, so errors name them as Anthropic names them (dotted paths:
 * messages.2.content.0.type); what only the chat rules check comes back
 * renamed by pl_anthropic_rename_param.
 */
#include "api/anthropic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/oai_tools.h"
#include "src/base/json_dump.h"

#define BAD(e, param, ...) \
    pl_err_set(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

static int oom(pl_err *e)
{
    return pl_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
}

static const char *str_at(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

static const char *block_type(json_t *b)
{
    return json_is_object(b) ? str_at(b, "type") : NULL;
}

/* A block type Anthropic has that parley does not take (images, files,
 * server tools' results), for a clearer error than "unknown". */
static bool known_unsupported(const char *ty)
{
    static const char *const kinds[] = {"image", "document", "search_result",
                                        "server_tool_use", "web_search_tool_result",
                                        "container_upload", "mcp_tool_use", "mcp_tool_result"};
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        if (!strcmp(ty, kinds[i]))
            return true;
    return false;
}

static int bad_block(pl_err *e, const char *where, const char *ty, const char *allowed)
{
    if (!ty)
        return BAD(e, where, "each content block must be an object with a string 'type'");
    if (known_unsupported(ty))
        return pl_err_set(e, 400, "invalid_request_error", where, "unsupported_content",
                          "content blocks of type '%s' are not supported by this server "
                          "(%s are)", ty, allowed);
    return BAD(e, where, "unknown content block type '%s' (expected %s)", ty, allowed);
}

/* A text block as a chat text part appended to parts. */
static int add_text_part(json_t *parts, json_t *b, const char *where, pl_err *e)
{
    json_t *t = json_object_get(b, "text");
    if (!json_is_string(t))
        return BAD(e, where, "a text block needs a string 'text'");
    json_t *p = json_pack("{s:s, s:O}", "type", "text", "text", t);
    return p && json_array_append_new(parts, p) == 0 ? 0 : oom(e);
}

/* Text content: a string, or an array of text blocks, as chat content (a
 * string or text parts; a new reference). */
static json_t *text_content(json_t *c, const char *where, pl_err *e)
{
    if (json_is_string(c))
        return json_incref(c);
    if (!json_is_array(c))
        return BAD(e, where, "must be a string or an array of text blocks"), NULL;
    json_t *parts = json_array(), *b;
    size_t i;
    char w[128];
    if (!parts)
        return oom(e), NULL;
    json_array_foreach(c, i, b) {
        snprintf(w, sizeof w, "%s.%zu", where, i);
        const char *ty = block_type(b);
        if (!ty || strcmp(ty, "text")) {
            bad_block(e, w, ty, "text blocks");
            goto fail;
        }
        if (add_text_part(parts, b, w, e) < 0)
            goto fail;
    }
    return parts;
fail:
    json_decref(parts);
    return NULL;
}

/* A tool_result block as a tool message appended to msgs. */
static int add_tool_result(json_t *msgs, json_t *b, const char *where, pl_err *e)
{
    const char *id = str_at(b, "tool_use_id");
    char w[160];
    if (!id)
        return BAD(e, where, "a tool_result block needs a string 'tool_use_id'");
    json_t *c = json_object_get(b, "content"), *text;
    snprintf(w, sizeof w, "%s.content", where);
    if (!c || json_is_null(c))
        text = json_string("");
    else if (!(text = text_content(c, w, e)))
        return -1;
    json_t *m = json_pack("{s:s, s:s, s:o}", "role", "tool", "tool_call_id", id, "content", text);
    return m && json_array_append_new(msgs, m) == 0 ? 0 : oom(e);
}

/* A tool_use block as an OpenAI tool call appended to calls. */
static int add_tool_use(json_t *calls, json_t *b, const char *where, pl_err *e)
{
    const char *id = str_at(b, "id"), *name = str_at(b, "name");
    json_t *input = json_object_get(b, "input");
    if (!id || !name || !json_is_object(input))
        return BAD(e, where, "a tool_use block needs a string 'id', a string 'name' and an "
                   "object 'input'");
    char *args = pl_json_dumps(input, NULL);
    json_t *tc = args ? json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function",
                                  "function", "name", name, "arguments", args) : NULL;
    free(args);
    return tc && json_array_append_new(calls, tc) == 0 ? 0 : oom(e);
}

/* The text of a thinking block appended to *reasoning (a string). */
static int add_thinking(json_t **reasoning, json_t *b, const char *where, pl_err *e)
{
    const char *t = str_at(b, "thinking");
    if (!t)
        return BAD(e, where, "a thinking block needs a string 'thinking'");
    const char *was = *reasoning ? json_string_value(*reasoning) : "";
    size_t a = strlen(was), n = strlen(t);
    char *cat = malloc(a + n + 1);
    if (!cat)
        return oom(e);
    memcpy(cat, was, a);
    memcpy(cat + a, t, n + 1);
    json_decref(*reasoning);
    *reasoning = json_stringn_nocheck(cat, a + n);
    free(cat);
    return *reasoning ? 0 : oom(e);
}

/* A user turn's blocks: tool results first (as tool messages), then its
 * text as one user message. */
static int add_user_blocks(json_t *msgs, json_t *blocks, const char *where, pl_err *e)
{
    json_t *parts = json_array(), *b;
    size_t i;
    char w[128];
    if (!parts)
        return oom(e);
    json_array_foreach(blocks, i, b) {
        snprintf(w, sizeof w, "%s.%zu", where, i);
        const char *ty = block_type(b);
        int rc = !ty ? bad_block(e, w, ty, "")
               : !strcmp(ty, "text") ? add_text_part(parts, b, w, e)
               : !strcmp(ty, "tool_result") ? add_tool_result(msgs, b, w, e)
               : bad_block(e, w, ty, "text and tool_result blocks in a user turn");
        if (rc < 0)
            goto fail;
    }
    if (json_array_size(parts) || !json_array_size(blocks)) {
        json_t *m = json_pack("{s:s, s:o}", "role", "user", "content", parts);
        parts = NULL;
        if (!m || json_array_append_new(msgs, m) < 0)
            return oom(e);
    }
    json_decref(parts);
    return 0;
fail:
    json_decref(parts);
    return -1;
}

/* An assistant turn's blocks as one assistant message: text parts,
 * tool_calls, reasoning_content. */
static int add_assistant_blocks(json_t *msgs, json_t *blocks, const char *where, pl_err *e)
{
    json_t *parts = json_array(), *calls = json_array(), *reasoning = NULL, *b, *m = NULL;
    size_t i;
    char w[128];
    int rc = -1;
    if (!parts || !calls) {
        oom(e);
        goto done;
    }
    json_array_foreach(blocks, i, b) {
        snprintf(w, sizeof w, "%s.%zu", where, i);
        const char *ty = block_type(b);
        int r = !ty ? bad_block(e, w, ty, "")
              : !strcmp(ty, "text") ? add_text_part(parts, b, w, e)
              : !strcmp(ty, "tool_use") ? add_tool_use(calls, b, w, e)
              : !strcmp(ty, "thinking") ? add_thinking(&reasoning, b, w, e)
              : !strcmp(ty, "redacted_thinking") ? 0   /* opaque: nothing to render */
              : bad_block(e, w, ty, "text, tool_use, thinking and redacted_thinking blocks "
                          "in an assistant turn");
        if (r < 0)
            goto done;
    }
    m = json_pack("{s:s, s:O}", "role", "assistant", "content",
                  json_array_size(parts) || !json_array_size(calls) ? parts : json_null());
    if (!m || (json_array_size(calls) && json_object_set(m, "tool_calls", calls) < 0) ||
        (reasoning && json_object_set(m, "reasoning_content", reasoning) < 0) ||
        json_array_append(msgs, m) < 0) {
        oom(e);
        goto done;
    }
    rc = 0;
done:
    json_decref(m);
    json_decref(parts);
    json_decref(calls);
    json_decref(reasoning);
    return rc;
}

/* One Messages turn appended to msgs as chat messages. */
static int add_turn(json_t *msgs, json_t *t, size_t i, pl_err *e)
{
    char where[48], cw[64];
    snprintf(where, sizeof where, "messages.%zu", i);
    snprintf(cw, sizeof cw, "messages.%zu.content", i);
    if (!json_is_object(t))
        return BAD(e, where, "each message must be an object {\"role\", \"content\"}");
    const char *role = str_at(t, "role");
    char rw[64];
    snprintf(rw, sizeof rw, "messages.%zu.role", i);
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant")))
        return BAD(e, rw, "role must be 'user' or 'assistant'%s%s%s (the system prompt is "
                   "the top-level 'system' field)", role ? ", not '" : "", role ? role : "",
                   role ? "'" : "");
    json_t *c = json_object_get(t, "content");
    if (json_is_string(c)) {
        json_t *m = json_pack("{s:s, s:O}", "role", role, "content", c);
        return m && json_array_append_new(msgs, m) == 0 ? 0 : oom(e);
    }
    if (!json_is_array(c))
        return BAD(e, cw, "content must be a string or an array of content blocks");
    return !strcmp(role, "user") ? add_user_blocks(msgs, c, cw, e)
                                 : add_assistant_blocks(msgs, c, cw, e);
}

/* system (a string or text blocks) and messages into chat messages. */
static json_t *chat_messages(json_t *body, pl_err *e)
{
    json_t *turns = json_object_get(body, "messages"), *sys = json_object_get(body, "system");
    json_t *msgs = json_array(), *t;
    size_t i;
    if (!msgs)
        return oom(e), NULL;
    if (!turns) {
        BAD(e, "messages", "Field required");
        goto fail;
    }
    if (!json_is_array(turns) || !json_array_size(turns)) {
        BAD(e, "messages", "must be a non-empty array of messages");
        goto fail;
    }
    if (sys && !json_is_null(sys)) {
        json_t *text = text_content(sys, "system", e);
        json_t *m = text ? json_pack("{s:s, s:o}", "role", "system", "content", text) : NULL;
        if (!text)
            goto fail;
        if (!m || json_array_append_new(msgs, m) < 0) {
            oom(e);
            goto fail;
        }
    }
    json_array_foreach(turns, i, t)
        if (add_turn(msgs, t, i, e) < 0)
            goto fail;
    return msgs;
fail:
    json_decref(msgs);
    return NULL;
}

/* tools: custom tools {name, description, input_schema} as function tools. */
static int map_tools(json_t *body, json_t *chat, pl_err *e)
{
    json_t *tools = json_object_get(body, "tools"), *t, *out;
    size_t i;
    char where[48];
    if (!tools || json_is_null(tools))
        return 0;
    if (!json_is_array(tools))
        return BAD(e, "tools", "must be an array of tools");
    if (!(out = json_array()) || json_object_set_new(chat, "tools", out) < 0)
        return oom(e);
    json_array_foreach(tools, i, t) {
        snprintf(where, sizeof where, "tools.%zu", i);
        const char *ty = json_is_object(t) ? str_at(t, "type") : NULL;
        if (!json_is_object(t))
            return BAD(e, where, "each tool must be an object {\"name\", \"input_schema\"}");
        if (ty && strcmp(ty, "custom"))
            return pl_err_set(e, 400, "invalid_request_error", where, "unsupported_parameter",
                              "tools of type '%s' are not supported by this server: only "
                              "custom tools {\"name\", \"description\", \"input_schema\"} are",
                              ty);
        const char *name = str_at(t, "name"), *desc = str_at(t, "description");
        json_t *schema = json_object_get(t, "input_schema");
        if (!name || !pl_oai_tool_name_valid(name))
            return BAD(e, where, "'name' must match ^[a-zA-Z0-9_-]{1,64}$");
        if (!json_is_object(schema))
            return BAD(e, where, "'input_schema' is required: a JSON schema object");
        json_t *fn = json_pack("{s:s, s:O}", "name", name, "parameters", schema);
        if (fn && desc)
            json_object_set_new(fn, "description", json_string(desc));
        if (!fn || json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function",
                                                        "function", fn)) < 0)
            return oom(e);
    }
    return 0;
}

/* tool_choice {type: auto|any|tool|none, name, disable_parallel_tool_use}. */
static int map_tool_choice(json_t *body, json_t *chat, pl_err *e)
{
    json_t *tc = json_object_get(body, "tool_choice"), *v;
    if (!tc || json_is_null(tc))
        return 0;
    const char *ty = json_is_object(tc) ? str_at(tc, "type") : NULL;
    if (!ty || (strcmp(ty, "auto") && strcmp(ty, "any") && strcmp(ty, "tool") &&
                strcmp(ty, "none")))
        return BAD(e, "tool_choice", "must be {\"type\": \"auto\"}, {\"type\": \"any\"}, "
                   "{\"type\": \"tool\", \"name\": ...} or {\"type\": \"none\"}");
    if (!strcmp(ty, "tool")) {
        const char *name = str_at(tc, "name");
        if (!name)
            return BAD(e, "tool_choice.name", "a tool_choice of type 'tool' needs the tool's "
                       "'name'");
        v = json_pack("{s:s, s:{s:s}}", "type", "function", "function", "name", name);
    } else {
        v = json_string(!strcmp(ty, "any") ? "required" : ty);
    }
    if (!v || json_object_set_new(chat, "tool_choice", v) < 0)
        return oom(e);
    json_t *dp = json_object_get(tc, "disable_parallel_tool_use");
    if (dp && !json_is_boolean(dp))
        return BAD(e, "tool_choice.disable_parallel_tool_use", "must be a boolean");
    if (json_is_true(dp) && json_object_set_new(chat, "parallel_tool_calls", json_false()) < 0)
        return oom(e);
    return 0;
}

/* thinking {type: enabled (budget_tokens) | adaptive | disabled} as the
 * template's enable_thinking. budget_tokens is checked, not enforced
 * apart: max_tokens bounds the whole reply, reasoning included. */
static int map_thinking(json_t *body, json_t *chat, pl_err *e)
{
    json_t *th = json_object_get(body, "thinking");
    if (!th || json_is_null(th))
        return 0;
    const char *ty = json_is_object(th) ? str_at(th, "type") : NULL;
    if (!ty || (strcmp(ty, "enabled") && strcmp(ty, "disabled") && strcmp(ty, "adaptive")))
        return BAD(e, "thinking", "must be {\"type\": \"enabled\", \"budget_tokens\": N}, "
                   "{\"type\": \"adaptive\"} or {\"type\": \"disabled\"}");
    json_t *bt = json_object_get(th, "budget_tokens");
    if (!strcmp(ty, "enabled") && (!json_is_integer(bt) || json_integer_value(bt) < 1))
        return BAD(e, "thinking.budget_tokens", "Field required: a positive integer when "
                   "thinking is enabled");
    json_t *kw = json_pack("{s:b}", "enable_thinking", strcmp(ty, "disabled") != 0);
    return kw && json_object_set_new(chat, "chat_template_kwargs", kw) == 0 ? 0 : oom(e);
}

/* output_config {format: {type: json_schema, schema}, effort} as
 * response_format and reasoning_effort ("xhigh" and "max" are "high"). */
static int map_output_config(json_t *body, json_t *chat, pl_err *e)
{
    json_t *oc = json_object_get(body, "output_config");
    if (!oc || json_is_null(oc))
        return 0;
    if (!json_is_object(oc))
        return BAD(e, "output_config", "must be an object {\"format\", \"effort\"}");
    json_t *f = json_object_get(oc, "format"), *eff = json_object_get(oc, "effort");
    if (f && !json_is_null(f)) {
        const char *ty = json_is_object(f) ? str_at(f, "type") : NULL;
        json_t *schema = json_object_get(f, "schema");
        if (!ty || strcmp(ty, "json_schema") || !json_is_object(schema))
            return BAD(e, "output_config.format", "must be {\"type\": \"json_schema\", "
                       "\"schema\": {...}}");
        json_t *rf = json_pack("{s:s, s:{s:s, s:O, s:b}}", "type", "json_schema", "json_schema",
                               "name", "output", "schema", schema, "strict", 1);
        if (!rf || json_object_set_new(chat, "response_format", rf) < 0)
            return oom(e);
    }
    if (eff && !json_is_null(eff)) {
        const char *v = json_string_value(eff);
        if (!v || (strcmp(v, "low") && strcmp(v, "medium") && strcmp(v, "high") &&
                   strcmp(v, "xhigh") && strcmp(v, "max")))
            return BAD(e, "output_config.effort", "must be one of low, medium, high, xhigh, max");
        const char *r = !strcmp(v, "xhigh") || !strcmp(v, "max") ? "high" : v;
        if (json_object_set_new(chat, "reasoning_effort", json_string(r)) < 0)
            return oom(e);
    }
    return 0;
}

/* stop_sequences (up to PL_MAX_STOP strings) as stop. */
static int map_stop(json_t *body, json_t *chat, pl_err *e)
{
    json_t *ss = json_object_get(body, "stop_sequences"), *s;
    size_t i;
    if (!ss || json_is_null(ss))
        return 0;
    if (!json_is_array(ss))
        return BAD(e, "stop_sequences", "must be an array of strings");
    if (json_array_size(ss) > PL_MAX_STOP)
        return BAD(e, "stop_sequences", "at most %d stop sequences are supported; got %zu",
                   PL_MAX_STOP, json_array_size(ss));
    json_array_foreach(ss, i, s)
        if (!json_is_string(s) || !json_string_length(s))
            return BAD(e, "stop_sequences", "stop_sequences.%zu must be a non-empty string", i);
    return json_array_size(ss) && json_object_set(chat, "stop", ss) < 0 ? oom(e) : 0;
}

/* model, max_tokens, sampling, stream and metadata.user_id. */
static int map_scalars(json_t *body, json_t *chat, bool need_max_tokens, pl_err *e)
{
    static const char *const same[] = {"model", "max_tokens", "temperature", "top_p",
                                       "top_k", "stream"};
    json_t *model = json_object_get(body, "model");
    if (!model)
        return BAD(e, "model", "Field required");
    if (!json_is_string(model))
        return BAD(e, "model", "must be a string");
    json_t *mt = json_object_get(body, "max_tokens");
    if (need_max_tokens && (!mt || json_is_null(mt)))
        return BAD(e, "max_tokens", "Field required");
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        json_t *v = json_object_get(body, same[i]);
        if (v && !json_is_null(v) && (need_max_tokens || strcmp(same[i], "max_tokens")) &&
            json_object_set(chat, same[i], v) < 0)
            return oom(e);
    }
    json_t *md = json_object_get(body, "metadata");
    if (md && !json_is_null(md) && !json_is_object(md))
        return BAD(e, "metadata", "must be an object");
    json_t *uid = json_object_get(md, "user_id");
    if (uid && !json_is_null(uid) && !json_is_string(uid))
        return BAD(e, "metadata.user_id", "must be a string");
    return json_is_string(uid) && json_object_set(chat, "user", uid) < 0 ? oom(e) : 0;
}

json_t *pl_anthropic_chat_body(json_t *body, bool need_max_tokens, pl_err *e)
{
    json_t *chat = json_object(), *msgs = NULL;
    if (!chat)
        return oom(e), NULL;
    if (map_scalars(body, chat, need_max_tokens, e) < 0 || !(msgs = chat_messages(body, e)) ||
        json_object_set_new(chat, "messages", msgs) < 0 || map_stop(body, chat, e) < 0 ||
        map_tools(body, chat, e) < 0 || map_tool_choice(body, chat, e) < 0 ||
        map_thinking(body, chat, e) < 0 || map_output_config(body, chat, e) < 0) {
        json_decref(chat);
        return NULL;
    }
    return chat;
}

void pl_anthropic_rename_param(pl_err *e)
{
    char *f = strncmp(e->param, "tools[", 6) ? NULL : strstr(e->param, "].function");
    if (f) {   /* tools[i].function.parameters -> tools.i.input_schema */
        int i = atoi(e->param + 6);
        const char *rest = f + 10;
        char buf[sizeof e->param];
        snprintf(buf, sizeof buf, "tools.%d%s", i,
                 !strncmp(rest, ".parameters", 11) ? ".input_schema" : rest);
        snprintf(e->param, sizeof e->param, "%s", buf);
        return;
    }
    static const char *const map[][2] = {
        {"stop", "stop_sequences"}, {"chat_template_kwargs.enable_thinking", "thinking"},
        {"user", "metadata.user_id"}, {"parallel_tool_calls", "tool_choice"},
        {"response_format", "output_config.format"}, {"reasoning_effort", "output_config.effort"},
    };
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (!strcmp(e->param, map[i][0])) {
            snprintf(e->param, sizeof e->param, "%s", map[i][1]);
            return;
        }
    if (!strncmp(e->param, "messages[", 9))   /* chat indices differ from the turns' */
        snprintf(e->param, sizeof e->param, "messages");
}
