/* tool_qwen35.c - tool format "qwen3_coder" (tool_format.h, named as
 * vLLM names its parser): Qwen3.5's and Qwen3-Coder's XML calls,
 *
 *   <tool_call>
 *   <function=NAME>
 *   <parameter=KEY>
 *   VALUE
 *   </parameter>
 *   </function>
 *   </tool_call>
 *
 * the tool list first in the system turn (before the system text), results
 * in "tool" turns that the template wraps in <tool_response> itself. The
 * prompt text follows Qwen3.5's template (its tojson and string filters);
 * a parameter's value is read back by the type its schema gives it, as
 * vLLM's qwen3_coder parser reads it, and a forced call is constrained
 * parameter by parameter (raw text for strings, the JSON schema's regex
 * for the rest). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backends/constrain/json_schema.h"
#include "backends/constrain/regex.h"
#include "backends/text/chat_template_internal.h"
#include "backends/text/tool_format.h"
#include "src/base/evbuf.h"

static const char PRE[] =
    "# Tools\n\nYou have access to the following functions:\n\n<tools>";
static const char POST[] =
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with "
    "NO suffix:\n\n<tool_call>\n<function=example_function_name>\n"
    "<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
    "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n"
    "<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner "
    "<function=...></function> block must be nested within <tool_call></tool_call> XML "
    "tags\n- Required parameters MUST be specified\n- You may provide optional reasoning "
    "for your function call in natural language BEFORE the function call, but NOT after\n"
    "- If there is no function call available, answer the question like normal with your "
    "current knowledge and do not tell the user about function calls\n</IMPORTANT>";
static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>";

static void put_buf_(struct evbuffer *b, pl_ct_buf *t)
{
    if (t->p)
        evbuffer_add(b, t->p, t->len);
    free(t->p);
    *t = (pl_ct_buf){0};
}

/* Each tool as the template's `tool | tojson`, one a line. */
static char *render_tools_(json_t *tools)
{
    struct evbuffer *b = evbuffer_new();
    if (!b)
        return NULL;
    evbuffer_add(b, PRE, sizeof PRE - 1);
    size_t i;
    json_t *t;
    pl_ct_buf s = {0};
    json_array_foreach(tools, i, t) {
        pl_ct_put_(&s, "\n");
        pl_ct_put_pyjson_(&s, t);
    }
    bool oom = s.oom;
    put_buf_(b, &s);
    evbuffer_add(b, POST, sizeof POST - 1);
    if (oom) {
        evbuffer_free(b);
        return NULL;
    }
    return pl_evbuffer_take(b);
}

/* An assistant turn's calls after its content: a blank line after text
 * (the API has put one newline there), each call's arguments as
 * <parameter=KEY> blocks: strings as they are, containers as tojson,
 * other values as Python's str() prints them. */
static int render_calls_(struct evbuffer *b, json_t *calls)
{
    if (evbuffer_get_length(b))
        evbuffer_add(b, "\n", 1);
    size_t k;
    json_t *c;
    pl_ct_buf s = {0};
    json_array_foreach(calls, k, c) {
        json_t *fn = json_object_get(c, "function");
        json_t *a = json_object_get(fn, "arguments");
        json_t *args = json_is_string(a) ? json_loads(json_string_value(a), 0, NULL)
                                         : json_incref(a);
        pl_ct_put_(&s, k ? "\n<tool_call>\n<function=" : "<tool_call>\n<function=");
        pl_ct_put_(&s, json_string_value(json_object_get(fn, "name")));
        pl_ct_put_(&s, ">\n");
        const char *key;
        json_t *v;
        json_object_foreach(json_is_object(args) ? args : NULL, key, v) {
            pl_ct_put_(&s, "<parameter=");
            pl_ct_put_(&s, key);
            pl_ct_put_(&s, ">\n");
            if (json_is_object(v) || json_is_array(v))
                pl_ct_put_pyjson_(&s, v);
            else
                pl_ct_put_pystr_(&s, v);
            pl_ct_put_(&s, "\n</parameter>\n");
        }
        pl_ct_put_(&s, "</function>\n</tool_call>");
        json_decref(args);
    }
    bool oom = s.oom;
    put_buf_(b, &s);
    return oom ? -1 : 0;
}

/* A string parameter's text: anything up to its closing tag (no "</"). */
static const char TEXT_RE[] = "(?:[^<]|<[^/])*";

/* The regex of one parameter's value by its schema: strings as raw text,
 * booleans as the template prints them (Python's True/False) or as JSON,
 * anything else as its JSON schema's regex. */
static char *value_regex_(json_t *schema, int ws, char *msg, size_t msglen)
{
    const char *ty = json_string_value(json_object_get(schema, "type"));
    if (ty && !strcmp(ty, "string")) {
        json_t *lo = json_object_get(schema, "minLength"), *hi = json_object_get(schema, "maxLength");
        if (!json_is_integer(lo) && !json_is_integer(hi))
            return strdup(TEXT_RE);
        char bound[48] = "";               /* bytes, not characters: a bound all the same */
        if (json_is_integer(hi))
            snprintf(bound, sizeof bound, "%lld", (long long)json_integer_value(hi));
        char *r = malloc(96);
        if (r)
            snprintf(r, 96, "(?:[^<]|<[^/]){%lld,%s}",
                     json_is_integer(lo) ? (long long)json_integer_value(lo) : 0LL, bound);
        return r;
    }
    if (ty && !strcmp(ty, "boolean"))
        return strdup("(?:[Tt]rue|[Ff]alse)");
    return pl_json_schema_regex(schema, (pl_json_ws)ws, msg, msglen);
}

static bool required_(json_t *params, const char *key)
{
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(params, "required"), i, r)
        if (json_is_string(r) && !strcmp(json_string_value(r), key))
            return true;
    return false;
}

/* One call: the schema's properties in its order, each a <parameter=KEY>
 * block of its type, optional unless required; a schema without
 * properties allows any parameters as text. */
static int call_regex_params_(struct evbuffer *b, const char *name, json_t *params, int ws,
                              char *msg, size_t msglen)
{
    evbuffer_add_printf(b, "<tool_call>\\n<function=%s>\\n", name);
    json_t *props = json_object_get(params, "properties");
    if (!json_is_object(props)) {
        evbuffer_add_printf(b, "(?:<parameter=[A-Za-z0-9_.-]+>\\n%s\\n</parameter>\\n)*",
                            TEXT_RE);
    } else {
        const char *key;
        json_t *sub;
        json_object_foreach(props, key, sub) {
            char *v = value_regex_(sub, ws, msg, msglen), *k = NULL;
            size_t len = 0, cap = 0;
            if (!v || pl_regex_escape_append(&k, &len, &cap, key, strlen(key)) < 0) {
                free(v);
                return -1;
            }
            evbuffer_add_printf(b, "(?:<parameter=%s>\\n(?:%s)\\n</parameter>\\n)%s", k, v,
                                required_(params, key) ? "" : "?");
            free(v), free(k);
        }
    }
    evbuffer_add_printf(b, "</function>\\n</tool_call>");
    return 0;
}

static char *reply_regex_(const char *one, bool many, int max)
{
    return pl_tool_list_regex("", "\\n", "", one, many, max);
}

/* The schema type of parameter key of function fn ("string" when the
 * schema does not say). */
static const char *param_type_(json_t *tools, const char *fn, const char *key)
{
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *f = json_object_get(t, "function");
        const char *n = json_string_value(json_object_get(f, "name"));
        if (!n || strcmp(n, fn))
            continue;
        json_t *p = json_object_get(json_object_get(json_object_get(f, "parameters"),
                                                    "properties"), key);
        json_t *ty = json_object_get(p, "type");
        if (json_is_array(ty))  /* ["integer", "null"]: the first non-null */
            for (size_t k = 0; k < json_array_size(ty); k++)
                if (strcmp(json_string_value(json_array_get(ty, k)) ?: "null", "null"))
                    return json_string_value(json_array_get(ty, k));
        return json_is_string(ty) ? json_string_value(ty) : "string";
    }
    return "string";
}

/* A parameter's text as its schema type: numbers, booleans, null and
 * containers when the text is one, else the text as a string. */
static json_t *param_value_(const char *type, const char *v, size_t n)
{
    if (!strcmp(type, "boolean") && (n == 4 || n == 5) &&
        (!strncasecmp(v, "true", n) || !strncasecmp(v, "false", n)))
        return json_boolean(n == 4);       /* the template prints Python's True */
    if (strcmp(type, "string") && strcmp(type, "str") && strcmp(type, "text")) {
        json_t *j = json_loadb(v, n, JSON_DECODE_ANY, NULL);
        bool fits = j && ((!strcmp(type, "integer") && json_is_integer(j)) ||
                          (!strcmp(type, "number") && json_is_number(j)) ||
                          (!strcmp(type, "boolean") && json_is_boolean(j)) ||
                          (!strcmp(type, "object") && json_is_object(j)) ||
                          (!strcmp(type, "array") && json_is_array(j)) || json_is_null(j));
        if (fits)
            return j;
        json_decref(j);
    }
    return json_stringn(v, n);
}

static const char *find_(const char *t, const char *end, const char *s)
{
    return memmem(t, (size_t)(end - t), s, strlen(s));
}

/* One call's body (between <tool_call> and </tool_call>) as a call. */
static bool parse_call_(json_t *tools, const char *t, const char *end, json_t *calls)
{
    static const char FN[] = "<function=", PAR[] = "<parameter=", PEND[] = "</parameter>";
    const char *f = find_(t, end, FN), *fe = f ? memchr(f, '>', (size_t)(end - f)) : NULL;
    if (!fe)
        return false;
    char *name = strndup(f + sizeof FN - 1, (size_t)(fe - f - (sizeof FN - 1)));
    const char *close = find_(fe, end, "</function>");
    json_t *args = json_object();
    bool ok = name && args && close;
    for (const char *p = fe + 1; ok && (p = find_(p, close, PAR));) {
        const char *ke = memchr(p, '>', (size_t)(close - p));
        const char *ve = ke ? find_(ke, close, PEND) : NULL;
        if (!ve) {
            ok = false;
            break;
        }
        const char *v = ke + 1;
        size_t vn = (size_t)(ve - v);
        if (vn && *v == '\n')
            v++, vn--;
        if (vn && v[vn - 1] == '\n')
            vn--;
        char *key = strndup(p + sizeof PAR - 1, (size_t)(ke - p - (sizeof PAR - 1)));
        ok = key && json_object_set_new(args, key,
                                        param_value_(param_type_(tools, name, key), v, vn)) == 0;
        free(key);
        p = ve + sizeof PEND - 1;
    }
    json_t *o = ok ? json_pack("{s:s, s:O}", "name", name, "arguments", args) : NULL;
    ok = o && pl_tool_call_add(tools, calls, o);
    json_decref(o);
    json_decref(args);
    free(name);
    return ok;
}

/* <tool_call> blocks; text around them is content. cut: an unfinished
 * last block is dropped. */
static bool parse_(json_t *tools, const char *t, size_t n, bool cut, json_t *calls,
                   struct evbuffer *content)
{
    const char *end = t + n;
    bool any = false;
    while (t < end) {
        const char *o = find_(t, end, OPEN);
        evbuffer_add(content, t, (size_t)((o ? o : end) - t));
        if (!o)
            break;
        any = true;
        const char *body = o + sizeof OPEN - 1, *c = find_(body, end, CLOSE);
        if (!c)
            return cut;
        if (!parse_call_(tools, body, c, calls))
            return false;
        t = c + sizeof CLOSE - 1;
    }
    return any;
}

const pl_tool_format pl_tool_qwen3_coder = {
    .name = "qwen3_coder",
    .tools_first = true,
    .opener = OPEN,
    .render_tools = render_tools_,
    .render_calls = render_calls_,
    .call_regex_params = call_regex_params_,
    .reply_regex = reply_regex_,
    .parse = parse_,
};
