/* chat_template_harmony.c - gpt-oss's chat template (OpenAI's harmony
 * format), step by step as its Jinja text runs under transformers
 * (tests/fixtures/templates/gpt-oss.jinja; byte for byte against jinja2
 * in tests/test_chat_harmony.c):
 *
 *   <|start|>system<|message|>identity, cutoff, date, "Reasoning: effort",
 *       the valid channels<|end|>
 *   <|start|>developer<|message|># Instructions (the first system or
 *       developer message) # Tools (TypeScript declarations)<|end|>
 *   <|start|>user<|message|>...<|end|>
 *   <|start|>assistant<|channel|>final<|message|>...<|end|>
 *   <|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>ARGS<|call|>
 *   <|start|>functions.NAME to=assistant<|channel|>commentary<|message|>"RESULT"<|end|>
 *   <|start|>assistant
 *
 * with the template's quirks kept (its TypeScript rendering of nested
 * schemas, one call per assistant turn, a call's reasoning kept only until
 * a final answer follows). Where the template fails on what OpenAI allows
 * (a tool without a description) parley renders as harmony's own renderer
 * does (no description line). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/text/chat_template_internal.h"

#define PUT(c, s) pl_ct_put_((c)->out, (s))
#define TS_INDENT "\n                "   /* the template's, before a nested type */
#define ONEOF_DEFAULT_INDENT "                    "

static const char CHANNEL_TAGS_MSG[] =
    "You have passed a message containing <|channel|> tags in the %s field. Instead of doing "
    "this, you should pass analysis messages (the string between '<|message|>' and '<|end|>') "
    "in the 'thinking' field, and final messages (the string between '<|message|>' and "
    "'<|end|>') in the 'content' field.";

/* ---- TypeScript declarations of tool parameters ---- */

static json_t *get(json_t *o, const char *k)
{
    return json_is_object(o) ? json_object_get(o, k) : NULL;
}

static bool str_is(json_t *v, const char *s)
{
    return json_is_string(v) && !strcmp(json_string_value(v), s);
}

/* Python's `name in required` for `required or []`. */
static bool required_has(json_t *required, const char *name)
{
    size_t i;
    json_t *r;
    if (json_is_string(required))
        return strstr(json_string_value(required), name) != NULL;
    json_array_foreach(required, i, r)
        if (str_is(r, name))
            return true;
    return false;
}

static void ts_type(pl_ct_buf *b, json_t *spec);

/* An array's element type: the four scalar names, or the items' own
 * rendering unless it is "object | object" or longer than 50 bytes. */
static void ts_array(pl_ct_buf *b, json_t *spec)
{
    json_t *items = get(spec, "items"), *it = get(items, "type");
    if (!pl_ct_truthy_(items)) {
        pl_ct_put_(b, "any[]");
    } else if (str_is(it, "string") || str_is(it, "boolean")) {
        pl_ct_put_(b, json_string_value(it));
        pl_ct_put_(b, "[]");
    } else if (str_is(it, "number") || str_is(it, "integer")) {
        pl_ct_put_(b, "number[]");
    } else {
        pl_ct_buf inner = {0};
        ts_type(&inner, items);
        b->oom |= inner.oom;
        const char *t = inner.p ? inner.p : "";
        if (!strcmp(t, "object | object") || strlen(t) > 50) {
            pl_ct_put_(b, "any[]");
        } else {
            pl_ct_put_(b, t);
            pl_ct_put_(b, "[]");
        }
        free(inner.p);
    }
    if (pl_ct_truthy_(get(spec, "nullable")))
        pl_ct_put_(b, " | null");
}

/* oneOf: each variant, its description and default, " | \n" between (the
 * template's whitespace). */
static void ts_one_of(pl_ct_buf *b, json_t *variants)
{
    size_t i, n = json_array_size(variants);
    json_t *v;
    json_array_foreach(variants, i, v) {
        ts_type(b, v);
        json_t *d = get(v, "description"), *def = get(v, "default");
        if (pl_ct_truthy_(d)) {
            pl_ct_put_(b, "// ");
            pl_ct_put_pystr_(b, d);
        }
        if (def) {
            pl_ct_put_(b, ONEOF_DEFAULT_INDENT "// default: ");
            pl_ct_put_pyjson_(b, def);
        }
        if (i + 1 < n)
            pl_ct_put_(b, " | \n");
    }
}

static void ts_object(pl_ct_buf *b, json_t *spec)
{
    json_t *props = get(spec, "properties"), *required = get(spec, "required"), *p;
    const char *name;
    if (!json_is_object(props) || !json_object_size(props)) {
        pl_ct_put_(b, "object");
        return;
    }
    size_t i = 0, n = json_object_size(props);
    pl_ct_put_(b, "{\n");
    json_object_foreach(props, name, p) {
        pl_ct_put_(b, name);
        if (!required_has(required, name))
            pl_ct_put_(b, "?");
        pl_ct_put_(b, ": " TS_INDENT);
        ts_type(b, p);
        if (++i < n)
            pl_ct_put_(b, ", ");
    }
    pl_ct_put_(b, "}");
}

static void ts_enum(pl_ct_buf *b, json_t *e)
{
    size_t i;
    json_t *v;
    pl_ct_put_(b, "\"");
    json_array_foreach(e, i, v) {
        pl_ct_put_(b, i ? "\" | \"" : "");
        pl_ct_put_pystr_(b, v);
    }
    pl_ct_put_(b, "\"");
}

/* The template's render_typescript_type. */
static void ts_type(pl_ct_buf *b, json_t *spec)
{
    json_t *type = get(spec, "type");
    if (str_is(type, "array")) {
        ts_array(b, spec);
    } else if (json_is_array(type) && json_array_size(type) > 0) {
        size_t i;
        json_t *t;
        json_array_foreach(type, i, t) {
            pl_ct_put_(b, i ? " | " : "");
            pl_ct_put_pystr_(b, t);
        }
    } else if (json_is_array(get(spec, "oneOf")) && json_array_size(get(spec, "oneOf"))) {
        ts_one_of(b, get(spec, "oneOf"));
    } else if (str_is(type, "string")) {
        if (json_is_array(get(spec, "enum")) && json_array_size(get(spec, "enum")))
            ts_enum(b, get(spec, "enum"));
        else
            pl_ct_put_(b, pl_ct_truthy_(get(spec, "nullable")) ? "string | null" : "string");
    } else if (str_is(type, "number") || str_is(type, "integer")) {
        pl_ct_put_(b, "number");
    } else if (str_is(type, "boolean")) {
        pl_ct_put_(b, "boolean");
    } else if (str_is(type, "object")) {
        ts_object(b, spec);
    } else {
        pl_ct_put_(b, "any");
    }
}

/* One top-level parameter: its description line, name, type, default. */
static void ts_param(pl_ct_buf *b, const char *name, json_t *spec, json_t *required)
{
    json_t *d = get(spec, "description"), *def = get(spec, "default");
    if (pl_ct_truthy_(d)) {
        pl_ct_put_(b, "// ");
        pl_ct_put_pystr_(b, d);
        pl_ct_put_(b, "\n");
    }
    pl_ct_put_(b, name);
    if (!required_has(required, name))
        pl_ct_put_(b, "?");
    pl_ct_put_(b, ": ");
    ts_type(b, spec);
    if (def && pl_ct_truthy_(get(spec, "enum"))) {
        pl_ct_put_(b, ", // default: ");
        pl_ct_put_pystr_(b, def);
    } else if (def && pl_ct_truthy_(get(spec, "oneOf"))) {
        pl_ct_put_(b, "// default: ");
        pl_ct_put_pystr_(b, def);
    } else if (def) {
        pl_ct_put_(b, ", // default: ");
        pl_ct_put_pyjson_(b, def);
    }
    pl_ct_put_(b, ",\n");
}

/* The template's render_tool_namespace("functions", tools). */
static void put_namespace(const pl_ct_ctx *c)
{
    size_t i;
    json_t *t;
    pl_ct_buf *b = c->out;
    PUT(c, "## functions\n\nnamespace functions {\n\n");
    json_array_foreach(c->kw.tools, i, t) {
        json_t *fn = get(t, "function"), *params = get(fn, "parameters");
        json_t *props = get(params, "properties"), *d = get(fn, "description"), *p;
        if (json_is_string(d)) {
            PUT(c, "// ");
            pl_ct_put_pystr_(b, d);
            PUT(c, "\n");
        }
        PUT(c, "type ");
        pl_ct_put_pystr_(b, get(fn, "name"));
        PUT(c, " = ");
        if (!pl_ct_truthy_(params) || !json_is_object(props) || !json_object_size(props)) {
            PUT(c, "() => any;\n\n");
            continue;
        }
        const char *name;
        PUT(c, "(_: {\n");
        json_object_foreach(props, name, p)
            ts_param(b, name, p, get(params, "required"));
        PUT(c, "}) => any;\n\n");
    }
    PUT(c, "} // namespace functions");
}

/* ---- the conversation ---- */

static bool has_tools(const pl_ct_ctx *c)
{
    return json_is_array(c->kw.tools) && json_array_size(c->kw.tools) > 0;
}

static void put_system(const pl_ct_ctx *c)
{
    char today[16] = "";
    if (!c->kw.date) {           /* strftime_now("%Y-%m-%d"): local time */
        time_t now = time(NULL);
        struct tm tm;
        if (localtime_r(&now, &tm))
            strftime(today, sizeof today, "%Y-%m-%d", &tm);
    }
    PUT(c, "<|start|>system<|message|>");
    PUT(c, c->kw.model_identity ? c->kw.model_identity
                                : "You are ChatGPT, a large language model trained by OpenAI.");
    PUT(c, "\nKnowledge cutoff: 2024-06\nCurrent date: ");
    PUT(c, c->kw.date ? c->kw.date : today);
    PUT(c, "\n\nReasoning: ");
    PUT(c, c->kw.reasoning_effort ? c->kw.reasoning_effort : "medium");
    PUT(c, "\n\n# Valid channels: analysis, commentary, final. Channel must be included for "
           "every message.");
    if (has_tools(c))
        PUT(c, "\nCalls to these tools must go to the commentary channel: 'functions'.");
    PUT(c, "<|end|>");
}

/* The first system or developer message becomes the developer message's
 * instructions; returns where the conversation proper starts. */
static int put_developer(const pl_ct_ctx *c)
{
    bool first = pl_ct_role_is_(c, 0, "system") || pl_ct_role_is_(c, 0, "developer");
    const char *dev = first ? pl_ct_content_(c, 0) : "";
    if (*dev || has_tools(c)) {
        PUT(c, "<|start|>developer<|message|>");
        if (*dev) {
            PUT(c, "# Instructions\n\n");
            PUT(c, dev);
            PUT(c, "\n\n");
        }
        if (has_tools(c)) {
            PUT(c, "# Tools\n\n");
            put_namespace(c);
        }
        PUT(c, "<|end|>");
    }
    return first ? 1 : 0;
}

static json_t *calls_of(const pl_ct_ctx *c, int i)
{
    json_t *tc = c->msgs[i].tool_calls;
    return json_is_array(tc) && json_array_size(tc) > 0 ? tc : NULL;
}

/* A later assistant turn without calls (then this call's reasoning is
 * dropped). */
static bool final_follows(const pl_ct_ctx *c, int i)
{
    for (int k = i + 1; k < c->n; k++)
        if (pl_ct_role_is_(c, k, "assistant") && !calls_of(c, k))
            return true;
    return false;
}

static void put_analysis(const pl_ct_ctx *c, const char *text)
{
    PUT(c, "<|start|>assistant<|channel|>analysis<|message|>");
    PUT(c, text);
    PUT(c, "<|end|>");
}

/* A call's arguments: a JSON string is parsed first, as vLLM and
 * llama.cpp give them to the template (one that does not parse is
 * written as a string). */
static void put_arguments(const pl_ct_ctx *c, json_t *args)
{
    json_t *parsed = json_is_string(args)
        ? json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, NULL)
        : NULL;
    pl_ct_put_pyjson_(c->out, parsed ? parsed : args ? args : json_null());
    json_decref(parsed);
}

/* An assistant turn with calls: its reasoning (or its content, which the
 * template takes for reasoning) unless a final answer follows, then the
 * first call. Sets *last to the call's function name. */
static int put_call_turn(const pl_ct_ctx *c, int i, json_t *calls, const char **last)
{
    const char *content = pl_ct_content_(c, i), *thinking = c->msgs[i].reasoning;
    if (*content && thinking && *thinking)
        return pl_ct_reject_(c, "Cannot pass both content and thinking in an assistant message "
                                "with tool calls! Put the analysis message in one or the "
                                "other, but not both.");
    bool keep = !final_follows(c, i);
    if (*content && keep)
        put_analysis(c, content);
    else if (thinking && *thinking && keep)
        put_analysis(c, thinking);
    json_t *call = json_array_get(calls, 0), *fn = get(call, "function");
    if (pl_ct_truthy_(fn))
        call = fn;
    json_t *ct = get(call, "content_type");
    *last = json_string_value(get(call, "name"));
    PUT(c, "<|start|>assistant to=functions.");
    pl_ct_put_pystr_(c->out, get(call, "name"));
    PUT(c, "<|channel|>commentary ");
    PUT(c, json_is_string(ct) ? json_string_value(ct) : "json");
    PUT(c, "<|message|>");
    put_arguments(c, get(call, "arguments"));
    PUT(c, "<|call|>");
    return 0;
}

static int put_assistant(const pl_ct_ctx *c, int i, const char **last)
{
    char msg[sizeof CHANNEL_TAGS_MSG + 8];
    const char *content = pl_ct_content_(c, i), *thinking = c->msgs[i].reasoning;
    static const char *const tags[] = {"<|channel|>analysis<|message|>",
                                       "<|channel|>final<|message|>"};
    for (int k = 0; k < 2; k++) {
        if (strstr(content, tags[k]) || (thinking && strstr(thinking, tags[k]))) {
            snprintf(msg, sizeof msg, CHANNEL_TAGS_MSG, strstr(content, tags[0]) ||
                     strstr(content, tags[1]) ? "content" : "thinking");
            return pl_ct_reject_(c, msg);
        }
    }
    json_t *calls = calls_of(c, i);
    if (calls)
        return put_call_turn(c, i, calls, last);
    if (i == c->n - 1 && !c->agp) {
        if (thinking)
            put_analysis(c, thinking);
        PUT(c, "<|start|>assistant<|channel|>final<|message|>");
        PUT(c, content);
        PUT(c, "<|return|>");
        return 0;
    }
    PUT(c, "<|start|>assistant<|channel|>final<|message|>");
    PUT(c, content);
    PUT(c, "<|end|>");
    *last = NULL;
    return 0;
}

/* A tool result, under the name of the last call. */
static int put_tool(const pl_ct_ctx *c, int i, const char *last)
{
    if (!last)
        return pl_ct_reject_(c, "Message has tool role, but there was no previous assistant "
                                "message with a tool call!");
    PUT(c, "<|start|>functions.");
    PUT(c, last);
    PUT(c, " to=assistant<|channel|>commentary<|message|>");
    const char *r = pl_ct_content_(c, i);
    pl_ct_put_pyjson_string_(c->out, r, strlen(r));
    PUT(c, "<|end|>");
    return 0;
}

int pl_ct_render_harmony_(const pl_ct_ctx *c)
{
    const char *last = NULL;
    put_system(c);
    for (int i = put_developer(c); i < c->n; i++) {
        int rc = 0;
        if (pl_ct_role_is_(c, i, "assistant"))
            rc = put_assistant(c, i, &last);
        else if (pl_ct_role_is_(c, i, "tool"))
            rc = put_tool(c, i, last);
        else if (pl_ct_role_is_(c, i, "user")) {
            PUT(c, "<|start|>user<|message|>");
            PUT(c, pl_ct_content_(c, i));
            PUT(c, "<|end|>");
        }
        if (rc < 0)
            return -1;
    }
    if (c->agp)
        PUT(c, "<|start|>assistant");
    return 0;
}
