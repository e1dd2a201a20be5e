/* oai_tools.c - tools, tool_choice and tool history into the prompt, and
 * the call grammar as a constraint, by the model's tool format
 * (oai_tools.h, backends/text/tool_format.h; replies back into tool_calls
 * are oai_tool_calls.c's). */
#include "api/oai_tools.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/oai_wire.h"
#include "backends/constrain/json_schema.h"
#include "backends/constrain/regex.h"
#include "backends/text/reasoning_format.h"
#include "src/base/evbuf.h"

#define INVALID(param, ...) \
    pl_err_set(err, 400, "invalid_request_error", param, NULL, __VA_ARGS__)
#define MAX_PARALLEL 4           /* calls in one constrained reply */

/* ---- request validation (called from oai_params.c) ---- */

bool pl_oai_tool_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-')
            return false;
    return true;
}

int pl_oai_check_tool_message(json_t *msg, int i, pl_err *err)
{
    char param[80];
    const char *role = json_string_value(json_object_get(msg, "role"));
    json_t *calls = json_object_get(msg, "tool_calls");
    if (role && !strcmp(role, "tool")) {
        json_t *id = json_object_get(msg, "tool_call_id");
        snprintf(param, sizeof param, "messages[%d].tool_call_id", i);
        if (id && !json_is_string(id))
            return INVALID(param, "'%s' must be a string", param);
        return 0;
    }
    if (!calls || json_is_null(calls))
        return 0;
    snprintf(param, sizeof param, "messages[%d].tool_calls", i);
    if (!role || strcmp(role, "assistant") || !json_is_array(calls))
        return INVALID(param, "'%s' must be an array on an assistant message", param);
    size_t k;
    json_t *c;
    json_array_foreach(calls, k, c) {
        json_t *fn = json_object_get(c, "function");
        json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
        if (!json_is_object(fn) || !json_is_string(name) ||
            (args && !json_is_string(args) && !json_is_object(args)))
            return INVALID(param, "'%s[%zu]' must be {\"id\", \"type\": \"function\", "
                                  "\"function\": {\"name\", \"arguments\"}}", param, k);
    }
    return 0;
}

static int parse_tool_choice_(json_t *body, pl_oai_params *p, pl_err *err)
{
    json_t *tc = json_object_get(body, "tool_choice");
    p->tool_choice = p->tools ? PL_TOOL_CHOICE_AUTO : PL_TOOL_CHOICE_NONE;
    if (!tc || json_is_null(tc))
        return 0;
    const char *s = json_string_value(tc);
    if (s && !strcmp(s, "none")) {
        p->tool_choice = PL_TOOL_CHOICE_NONE;
        return 0;
    }
    if (!p->tools)
        return INVALID("tool_choice", "'tool_choice' needs 'tools'");
    if (s && (!strcmp(s, "auto") || !strcmp(s, "required"))) {
        p->tool_choice = !strcmp(s, "auto") ? PL_TOOL_CHOICE_AUTO : PL_TOOL_CHOICE_REQUIRED;
        return 0;
    }
    const char *name = json_string_value(json_object_get(json_object_get(tc, "function"),
                                                         "name"));
    if (!json_is_object(tc) || !name)
        return INVALID("tool_choice", "'tool_choice' must be \"none\", \"auto\", "
                                      "\"required\" or {\"type\": \"function\", "
                                      "\"function\": {\"name\": ...}}");
    size_t i;
    json_t *t;
    json_array_foreach(p->tools, i, t)
        if (!strcmp(json_string_value(json_object_get(json_object_get(t, "function"),
                                                      "name")), name)) {
            p->tool_choice = PL_TOOL_CHOICE_NAMED;
            p->tool_name = name;
            return 0;
        }
    return INVALID("tool_choice", "'tool_choice' names '%s', which is not in 'tools'", name);
}

int pl_oai_parse_tools(json_t *body, pl_oai_params *p, pl_err *err)
{
    json_t *tools = json_object_get(body, "tools");
    p->parallel_tool_calls = true;
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools))
            return INVALID("tools", "'tools' must be an array");
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            char param[48];
            snprintf(param, sizeof param, "tools[%zu]", i);
            json_t *fn = json_object_get(t, "function");
            const char *type = json_string_value(json_object_get(t, "type"));
            const char *name = json_string_value(json_object_get(fn, "name"));
            json_t *params = json_object_get(fn, "parameters");
            if (!type || strcmp(type, "function") || !json_is_object(fn) || !name ||
                !pl_oai_tool_name_valid(name) || (params && !json_is_object(params)))
                return INVALID(param, "'%s' must be {\"type\": \"function\", \"function\": "
                                      "{\"name\": [a-zA-Z0-9_-]{1,64}, \"description\", "
                                      "\"parameters\": {...}}}", param);
        }
        if (json_array_size(tools) > 0)
            p->tools = tools;
    }
    json_t *par = json_object_get(body, "parallel_tool_calls");
    if (par && !json_is_null(par)) {
        if (!json_is_boolean(par))
            return INVALID("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
        p->parallel_tool_calls = json_is_true(par);
    }
    return parse_tool_choice_(body, p, err);
}

/* ---- legacy functions / function_call ---- */

static json_t *non_null_(json_t *body, const char *key)
{
    json_t *v = json_object_get(body, key);
    return json_is_null(v) ? NULL : v;
}

/* functions[i] -> {"type": "function", "function": functions[i]}. */
static int legacy_tools_(json_t *body, json_t *fns, pl_err *err)
{
    if (non_null_(body, "tools"))
        return INVALID("functions", "'functions' and 'tools' cannot be used together");
    if (!json_is_array(fns))
        return INVALID("functions", "'functions' must be an array of function definitions");
    json_t *tools = json_array();
    size_t i;
    json_t *f;
    json_array_foreach(fns, i, f)
        json_array_append_new(tools, json_pack("{s:s, s:O}", "type", "function", "function", f));
    if (!tools || json_array_size(tools) != json_array_size(fns) ||
        json_object_set_new(body, "tools", tools) < 0)
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    if (!non_null_(body, "parallel_tool_calls"))   /* one function_call per reply */
        json_object_set_new(body, "parallel_tool_calls", json_false());
    return 0;
}

/* function_call "none" | "auto" | {"name"} -> tool_choice. */
static int legacy_choice_(json_t *body, json_t *fc, pl_err *err)
{
    if (non_null_(body, "tool_choice"))
        return INVALID("function_call", "'function_call' and 'tool_choice' cannot be used "
                                        "together");
    const char *s = json_string_value(fc);
    const char *name = json_string_value(json_object_get(fc, "name"));
    json_t *tc;
    if (s && (!strcmp(s, "none") || !strcmp(s, "auto")))
        tc = json_string(s);
    else if (name)
        tc = json_pack("{s:s, s:{s:s}}", "type", "function", "function", "name", name);
    else
        return INVALID("function_call", "'function_call' must be \"none\", \"auto\" or "
                                        "{\"name\": ...}");
    if (!tc || json_object_set_new(body, "tool_choice", tc) < 0)
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    return 0;
}

/* History: an assistant message's function_call becomes its one tool call,
 * a "function" message (with its "name", as the legacy API has it) the
 * result of the call before it. */
static int legacy_history_(json_t *body, pl_err *err)
{
    char id[40] = "call_0";
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(body, "messages"), i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *fc = json_object_get(m, "function_call");
        int rc = 0;
        if (role && !strcmp(role, "assistant") && json_is_object(fc)) {
            snprintf(id, sizeof id, "call_%zu", i);
            rc = json_object_set_new(m, "tool_calls", json_pack("[{s:s, s:s, s:O}]", "id", id,
                                                                "type", "function",
                                                                "function", fc));
            json_object_del(m, "function_call");
        } else if (role && !strcmp(role, "function") &&
                   json_is_string(json_object_get(m, "name"))) {
            rc = json_object_set_new(m, "role", json_string("tool"));
            if (rc == 0)
                rc = json_object_set_new(m, "tool_call_id", json_string(id));
        }
        if (rc < 0)
            return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    return 0;
}

int pl_oai_legacy_functions(json_t *body, pl_oai_params *p, pl_err *err)
{
    json_t *fns = non_null_(body, "functions"), *fc = non_null_(body, "function_call");
    if (fc && !fns && !non_null_(body, "tools"))
        return INVALID("function_call", "'function_call' needs 'functions'");
    if (legacy_history_(body, err) < 0 || (fns && legacy_tools_(body, fns, err) < 0) ||
        (fc && legacy_choice_(body, fc, err) < 0))
        return -1;
    p->legacy_functions = fns != NULL;
    json_object_del(body, "functions");
    json_object_del(body, "function_call");
    return 0;
}

/* ---- the prompt ---- */

/* An assistant turn's content followed by its calls. */
static char *render_calls_(const pl_oai_params *p, const char *content, json_t *calls)
{
    struct evbuffer *b = evbuffer_new();
    if (!b)
        return NULL;
    evbuffer_add(b, content, strlen(content));
    if (content[0])
        evbuffer_add(b, "\n", 1);
    if (p->tool_format->render_calls(b, calls) < 0) {
        evbuffer_free(b);
        return NULL;
    }
    return pl_evbuffer_take(b);
}

/* A tool result as the format shows it: its own role where the template
 * has one, else the format's role with the result wrapped. */
static int render_tool_result_(pl_oai_params *p, pl_chat_message *m)
{
    const pl_tool_format *f = p->tool_format;
    if (f->result_role)
        m->role = f->result_role;
    if (!f->result_wrap)
        return 0;
    size_t n = strlen(m->content) + strlen(f->result_wrap) + 1;
    char *s = malloc(n);
    if (!s)
        return -1;
    snprintf(s, n, f->result_wrap, m->content);
    m->content = pl_oai_params_own(p, s);
    return m->content ? 0 : -1;
}

/* Merge runs of user turns made from tool results (strict templates
 * want alternation). */
static void merge_user_runs_(pl_oai_params *p)
{
    int w = 0;
    for (int r = 0; r < p->n_messages; r++) {
        pl_chat_message *m = &p->messages[r];
        if (w > 0 && !strcmp(m->role, "user") && !strcmp(p->messages[w - 1].role, "user")) {
            size_t n = strlen(p->messages[w - 1].content) + strlen(m->content) + 2;
            char *s = malloc(n);
            if (s && pl_oai_params_own(p, s)) {
                snprintf(s, n, "%s\n%s", p->messages[w - 1].content, m->content);
                p->messages[w - 1].content = s;
                continue;
            }
        }
        p->messages[w++] = *m;
    }
    p->n_messages = w;
}

static int render_history_(pl_oai_params *p, json_t *body)
{
    json_t *msgs = json_object_get(body, "messages");
    bool results = false;
    for (int i = 0; i < p->n_messages; i++) {
        json_t *msg = json_array_get(msgs, (size_t)i);
        json_t *calls = json_object_get(msg, "tool_calls");
        pl_chat_message *m = &p->messages[i];
        if (!strcmp(m->role, "tool")) {
            results = true;
            if (render_tool_result_(p, m) < 0)
                return -1;
        }
        if (json_is_array(calls) && json_array_size(calls) > 0 &&
            !(m->content = pl_oai_params_own(p, render_calls_(p, m->content, calls))))
            return -1;
    }
    if (results && p->tool_format->merge_user_runs)
        merge_user_runs_(p);
    return 0;
}

/* The tool list goes into the system turn (a new one when there is none),
 * after its text or (Qwen3.5) before it; Llama 3.1 and Mistral put it
 * before the first user turn's text. */
static int add_tools_(pl_oai_params *p)
{
    char *tools = pl_oai_params_own(p, p->tool_format->render_tools(p->tools));
    if (!tools)
        return -1;
    bool in_user = p->tool_format->tools_in_user;
    for (int i = 0; i < p->n_messages; i++) {
        pl_chat_message *m = &p->messages[i];
        if (strcmp(m->role, in_user ? "user" : "system"))
            continue;
        bool first = in_user || p->tool_format->tools_first;
        const char *text = m->content;
        if (p->tool_format->tools_first)   /* the template trims the text it adds */
            text += strspn(text, " \t\n\r\f\v");
        size_t n = strlen(tools) + strlen(text) + 3;
        char *s = pl_oai_params_own(p, malloc(n));
        if (!s)
            return -1;
        snprintf(s, n, first ? "%s\n\n%s" : "%2$s\n\n%1$s", tools, text);
        m->content = s;
        return 0;
    }
    pl_chat_message *nm = realloc(p->messages, sizeof *nm * (size_t)(p->n_messages + 1));
    if (!nm)
        return -1;
    p->messages = nm;
    memmove(nm + 1, nm, sizeof *nm * (size_t)p->n_messages);
    nm[0] = (pl_chat_message){"system", tools};
    p->n_messages++;
    return 0;
}

/* ---- the call grammar ---- */

/* A format that writes its own call regex from the schema. */
static int put_call_regex_params_(struct evbuffer *b, const pl_oai_params *p, json_t *fn,
                                  json_t *params, const char *param, pl_err *err)
{
    char msg[400], *esc = NULL;
    const char *name = json_string_value(json_object_get(fn, "name"));
    size_t len = 0, cap = 0;
    if (pl_regex_escape_append(&esc, &len, &cap, name, strlen(name)) < 0)
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    int rc = p->tool_format->call_regex_params(b, esc, params, (int)p->json_ws, msg, sizeof msg);
    free(esc);
    if (rc < 0)
        return pl_err_set(err, 400, "invalid_request_error", param, "invalid_constraint",
                          "cannot constrain the call to its parameters: %s", msg);
    return 0;
}

static int put_call_regex_(struct evbuffer *b, const pl_oai_params *p, json_t *fn, int i,
                           pl_err *err)
{
    json_t *params = json_object_get(fn, "parameters");
    char msg[400], param[64];
    snprintf(param, sizeof param, "tools[%d].function.parameters", i);
    if (p->tool_format->call_regex_params)
        return put_call_regex_params_(b, p, fn, params, param, err);
    char *args = params ? pl_json_schema_regex(params, p->json_ws, msg, sizeof msg)
                        : pl_json_object_regex(p->json_ws);
    if (!args)
        return pl_err_set(err, 400, "invalid_request_error", param, "invalid_constraint",
                          "cannot constrain the call to its parameters: %s",
                          params ? msg : "out of memory");
    json_t *n = json_object_get(fn, "name");
    char *ns = json_dumps(n, JSON_ENCODE_ANY), *esc = NULL;
    size_t len = 0, cap = 0;
    if (!ns || pl_regex_escape_append(&esc, &len, &cap, ns, strlen(ns)) < 0) {
        free(ns), free(args), free(esc);
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    p->tool_format->call_regex(b, esc, args);
    free(ns), free(args), free(esc);
    return 0;
}

/* One call of any allowed function, as a group. */
static int put_one_call_(struct evbuffer *b, const pl_oai_params *p, pl_err *err)
{
    evbuffer_add(b, "(?:", 3);
    size_t i;
    json_t *t;
    int k = 0;
    json_array_foreach(p->tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (p->tool_choice == PL_TOOL_CHOICE_NAMED && strcmp(name, p->tool_name))
            continue;
        if (k++)
            evbuffer_add(b, "|", 1);
        if (put_call_regex_(b, p, fn, (int)i, err) < 0)
            return -1;
    }
    evbuffer_add(b, ")", 1);
    return 0;
}

char *pl_oai_tools_one_call_regex(const pl_oai_params *p, pl_err *err)
{
    struct evbuffer *b = evbuffer_new();
    err->status = 0;
    if (b && put_one_call_(b, p, err) == 0)
        return pl_evbuffer_take(b);
    if (b)
        evbuffer_free(b);
    if (!err->status)
        pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    return NULL;
}

/* tool_choice required or named: the reply is the call (or calls) of an
 * allowed function, in the format's grammar. */
static int add_call_constraint_(pl_oai_params *p, pl_err *err)
{
    if (p->sampling.constraint != PL_CONSTRAINT_NONE)
        return INVALID("tool_choice", "'tool_choice' \"required\" or a named function cannot "
                                      "be combined with response_format or guided decoding");
    char *one = pl_oai_tools_one_call_regex(p, err);
    if (!one)
        return -1;
    bool many = p->parallel_tool_calls && p->tool_choice == PL_TOOL_CHOICE_REQUIRED;
    char *re = p->tool_format->reply_regex(one, many, MAX_PARALLEL);
    free(one);
    if (re && p->tool_format->thought && p->thinking == PL_THINKING_ON) {
        char *w = p->tool_format->thought->wrap(re);
        free(re);
        re = w;
    }
    if (!re)
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    p->sampling.constraint = PL_CONSTRAINT_REGEX;
    p->sampling.constraint_text = re;
    p->constraint_after_reasoning = p->tool_format->native;
    return 0;
}

int pl_oai_tools_prepare_native(pl_oai_params *p, json_t *body, pl_err *err)
{
    json_t *msgs = json_object_get(body, "messages");
    p->tools_native = true;
    for (int i = 0; i < p->n_messages; i++) {
        json_t *calls = json_object_get(json_array_get(msgs, (size_t)i), "tool_calls");
        if (json_is_array(calls) && json_array_size(calls) > 0)
            p->messages[i].tool_calls = calls;
    }
    if (p->tools && pl_oai_tools_forced(p))
        return add_call_constraint_(p, err);
    return 0;
}

int pl_oai_tools_prepare(pl_oai_params *p, json_t *body, pl_backend *b, pl_err *err)
{
    if (!p->chat)
        return 0;
    if (b->ops->upstream_tools) {  /* forwarded in the body; calls come back */
        p->tools_upstream = true;
        return 0;
    }
    p->tool_format = pl_backend_tool_format(b);
    p->json_ws = b->json_ws;
    if (p->tool_format->native)
        return pl_oai_tools_prepare_native(p, body, err);
    err->status = 0;
    if (render_history_(p, body) < 0)
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    if (!pl_oai_tools_active(p))
        return 0;
    if (add_tools_(p) < 0)
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    if (pl_oai_tools_forced(p))
        return add_call_constraint_(p, err);
    return 0;
}
