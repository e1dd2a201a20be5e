/* chat_template_gemma4.c - Gemma 4's chat template (google/gemma-4-*-it,
 * the template llama.cpp keeps as models/templates/google-gemma-4-31B-it.jinja):
 * turns are <|turn>ROLE\n...<turn|>\n with the assistant as "model"; a
 * system turn opens the prompt when the conversation starts with a system
 * (or developer) message, offers tools, or enables thinking (<|think|>);
 * tools are declared in Gemma's own object syntax (<|tool>declaration:
 * NAME{...}<tool|>), calls are <|tool_call>call:NAME{key:value}<tool_call|>
 * with strings quoted as <|"|>...<|"|>, and the results of the "tool"
 * messages after a call turn follow its calls in the same model turn
 * (<|tool_response>response:NAME{value:...}<tool_response|>). The
 * generation prompt closes an empty thought channel unless thinking is
 * enabled. Native: the template renders tools, calls and results itself
 * (tool_gemma4.c). Followed step by step so that the output equals
 * jinja2's, byte for byte; keys are dictsorted (case-insensitively, ASCII
 * case folding). */
#include <stdlib.h>
#include <string.h>

#include "backends/text/chat_template_internal.h"

#define PUT(c, s) pl_ct_put_((c)->out, (s))
#define Q "<|\"|>"

static bool truthy(json_t *o, const char *key)
{
    return pl_ct_truthy_(json_object_get(o, key));
}

/* ---- dictsort ---- */

typedef struct kv {
    const char *key;
    json_t *v;
    size_t at;                   /* insertion order: the sort is stable */
} kv;

static int lower_cmp(const char *a, const char *b)
{
    for (;; a++, b++) {
        unsigned char x = (unsigned char)*a, y = (unsigned char)*b;
        if (x >= 'A' && x <= 'Z')
            x = (unsigned char)(x - 'A' + 'a');
        if (y >= 'A' && y <= 'Z')
            y = (unsigned char)(y - 'A' + 'a');
        if (x != y || !x)
            return (int)x - (int)y;
    }
}

static int kv_cmp(const void *pa, const void *pb)
{
    const kv *a = pa, *b = pb;
    int r = lower_cmp(a->key, b->key);
    return r ? r : (a->at > b->at) - (a->at < b->at);
}

/* An object's members sorted as Jinja's dictsort sorts them (malloc'd,
 * *n entries; NULL with *n = 0 when empty; NULL with *n = SIZE_MAX on
 * OOM). */
static kv *dictsort(json_t *o, size_t *n)
{
    *n = json_object_size(o);
    if (!*n)
        return NULL;
    kv *a = malloc(*n * sizeof *a);
    if (!a) {
        *n = SIZE_MAX;
        return NULL;
    }
    size_t i = 0;
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        a[i] = (kv){key, v, i};
        i++;
    }
    qsort(a, *n, sizeof *a, kv_cmp);
    return a;
}

/* Sorted members; on OOM the buffer is marked and nothing is iterated. */
static kv *sorted(pl_ct_buf *b, json_t *o, size_t *n)
{
    kv *a = dictsort(o, n);
    if (*n == SIZE_MAX) {
        b->oom = true;
        *n = 0;
    }
    return a;
}

/* ---- values ---- */

/* The template's format_argument. */
static void put_argument(pl_ct_buf *b, json_t *v, bool escape_keys)
{
    if (json_is_string(v)) {
        pl_ct_put_(b, Q);
        pl_ct_putn_(b, json_string_value(v), json_string_length(v));
        pl_ct_put_(b, Q);
    } else if (json_is_boolean(v)) {
        pl_ct_put_(b, json_is_true(v) ? "true" : "false");
    } else if (json_is_object(v)) {
        size_t n;
        kv *m = sorted(b, v, &n);
        pl_ct_put_(b, "{");
        for (size_t i = 0; i < n; i++) {
            if (i)
                pl_ct_put_(b, ",");
            if (escape_keys)
                pl_ct_put_(b, Q);
            pl_ct_put_(b, m[i].key);
            if (escape_keys)
                pl_ct_put_(b, Q);
            pl_ct_put_(b, ":");
            put_argument(b, m[i].v, escape_keys);
        }
        pl_ct_put_(b, "}");
        free(m);
    } else if (json_is_array(v)) {
        size_t i;
        json_t *e;
        pl_ct_put_(b, "[");
        json_array_foreach(v, i, e) {
            if (i)
                pl_ct_put_(b, ",");
            put_argument(b, e, escape_keys);
        }
        pl_ct_put_(b, "]");
    } else {
        pl_ct_put_pystr_(b, v);
    }
}

/* `x | upper` of a string (ASCII); other values print as Python's str(),
 * upper-cased. */
static void put_upper(pl_ct_buf *b, json_t *v)
{
    size_t from = b->len;
    if (v && !json_is_null(v))
        pl_ct_put_pystr_(b, v);
    else if (v)
        pl_ct_put_(b, "NONE");
    if (b->oom)
        return;
    for (size_t i = from; i < b->len; i++)
        if (b->p[i] >= 'a' && b->p[i] <= 'z')
            b->p[i] = (char)(b->p[i] - 'a' + 'A');
}

/* value['type'] | upper == T */
static bool type_is(json_t *value, const char *t)
{
    pl_ct_buf s = {0};
    put_upper(&s, json_object_get(value, "type"));
    bool r = s.p ? !strcmp(s.p, t) : !*t;
    free(s.p);
    return r;
}

static void put_required(pl_ct_buf *b, json_t *req)
{
    size_t i;
    json_t *r;
    pl_ct_put_(b, "required:[");
    json_array_foreach(json_is_array(req) ? req : NULL, i, r) {
        if (i)
            pl_ct_put_(b, ",");
        pl_ct_put_(b, Q);
        pl_ct_put_pystr_(b, r);
        pl_ct_put_(b, Q);
    }
    pl_ct_put_(b, "]");
}

static void put_params(pl_ct_buf *b, json_t *props);

static void comma(pl_ct_buf *b, bool *add)
{
    if (*add)
        pl_ct_put_(b, ",");
    *add = true;
}

/* An array property's items mapping. */
static void put_items(pl_ct_buf *b, json_t *items)
{
    size_t n;
    kv *m = sorted(b, items, &n);
    bool first = true;
    pl_ct_put_(b, "items:{");
    for (size_t i = 0; i < n; i++) {
        if (json_is_null(m[i].v))
            continue;
        if (!first)
            pl_ct_put_(b, ",");
        first = false;
        if (!strcmp(m[i].key, "properties")) {
            pl_ct_put_(b, "properties:{");
            if (json_is_object(m[i].v))
                put_params(b, m[i].v);
            pl_ct_put_(b, "}");
        } else if (!strcmp(m[i].key, "required")) {
            put_required(b, m[i].v);
        } else if (!strcmp(m[i].key, "type")) {
            pl_ct_put_(b, "type:");
            if (json_is_string(m[i].v)) {
                pl_ct_put_(b, Q);
                put_upper(b, m[i].v);
                pl_ct_put_(b, Q);
            } else {
                size_t k;
                json_t *t;
                pl_ct_put_(b, "[");
                json_array_foreach(m[i].v, k, t) {
                    if (k)
                        pl_ct_put_(b, ",");
                    pl_ct_put_(b, Q);
                    put_upper(b, t);
                    pl_ct_put_(b, Q);
                }
                pl_ct_put_(b, "]");
            }
        } else {
            pl_ct_put_(b, m[i].key);
            pl_ct_put_(b, ":");
            put_argument(b, m[i].v, true);
        }
    }
    pl_ct_put_(b, "}");
    free(m);
}

/* The template's format_parameters: each property that is not a schema
 * keyword, as KEY:{description,enum|items,nullable,properties,required,type}. */
static void put_params(pl_ct_buf *b, json_t *props)
{
    static const char *const standard[] = {"description", "type", "properties", "required",
                                           "nullable"};
    size_t n;
    kv *m = sorted(b, props, &n);
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        bool std = false;
        for (size_t k = 0; k < sizeof standard / sizeof *standard; k++)
            std |= !strcmp(m[i].key, standard[k]);
        if (std)
            continue;
        json_t *v = m[i].v;
        bool add = false;
        if (!first)
            pl_ct_put_(b, ",");
        first = false;
        pl_ct_put_(b, m[i].key);
        pl_ct_put_(b, ":{");
        if (truthy(v, "description")) {
            pl_ct_put_(b, "description:" Q);
            pl_ct_put_pystr_(b, json_object_get(v, "description"));
            pl_ct_put_(b, Q);
            add = true;
        }
        if (type_is(v, "STRING")) {
            if (truthy(v, "enum")) {
                comma(b, &add);
                pl_ct_put_(b, "enum:");
                put_argument(b, json_object_get(v, "enum"), true);
            }
        } else if (type_is(v, "ARRAY")) {
            json_t *items = json_object_get(v, "items");
            if (json_is_object(items) && json_object_size(items)) {
                comma(b, &add);
                put_items(b, items);
            }
        }
        if (truthy(v, "nullable")) {
            comma(b, &add);
            pl_ct_put_(b, "nullable:true");
        }
        if (type_is(v, "OBJECT")) {
            json_t *p = json_object_get(v, "properties");
            comma(b, &add);
            pl_ct_put_(b, "properties:{");
            put_params(b, json_is_object(p) ? p : v);
            pl_ct_put_(b, "}");
            if (truthy(v, "required")) {
                comma(b, &add);
                put_required(b, json_object_get(v, "required"));
            }
        }
        comma(b, &add);
        pl_ct_put_(b, "type:" Q);
        put_upper(b, json_object_get(v, "type"));
        pl_ct_put_(b, Q "}");
    }
    free(m);
}

/* A string field as {{ x }} prints it: undefined prints nothing. */
static void put_field(pl_ct_buf *b, json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (v)
        pl_ct_put_pystr_(b, v);
}

/* The template's format_function_declaration (its output is trimmed, and
 * starts and ends with no white space unless the name or description
 * does; the trim is applied to the whole). */
static void put_declaration(pl_ct_buf *b, json_t *tool)
{
    json_t *fn = json_object_get(tool, "function");
    pl_ct_put_(b, "declaration:");
    put_field(b, fn, "name");
    pl_ct_put_(b, "{description:" Q);
    put_field(b, fn, "description");
    pl_ct_put_(b, Q);
    json_t *params = json_object_get(fn, "parameters");
    if (pl_ct_truthy_(params)) {
        pl_ct_put_(b, ",parameters:{");
        if (truthy(params, "properties")) {
            pl_ct_put_(b, "properties:{");
            put_params(b, json_object_get(params, "properties"));
            pl_ct_put_(b, "},");
        }
        if (truthy(params, "required")) {
            put_required(b, json_object_get(params, "required"));
            pl_ct_put_(b, ",");
        }
        if (truthy(params, "type")) {
            pl_ct_put_(b, "type:" Q);
            put_upper(b, json_object_get(params, "type"));
            pl_ct_put_(b, Q "}");
        }
    }
    json_t *resp = json_object_get(fn, "response");
    if (resp) {
        pl_ct_put_(b, ",response:{");
        if (truthy(resp, "description")) {
            pl_ct_put_(b, "description:" Q);
            put_field(b, resp, "description");
            pl_ct_put_(b, Q ",");
        }
        if (type_is(resp, "OBJECT")) {
            pl_ct_put_(b, "type:" Q);
            put_upper(b, json_object_get(resp, "type"));
            pl_ct_put_(b, Q "}");
        }
    }
    pl_ct_put_(b, "}");
}

static void put_tools(const pl_ct_ctx *c)
{
    size_t i;
    json_t *t;
    json_array_foreach(c->kw.tools, i, t) {
        pl_ct_buf *s = c->scratch;
        s->len = 0;
        put_declaration(s, t);
        PUT(c, "<|tool>");
        if (s->p)
            pl_ct_put_stripped_(c->out, s->p, s->len);
        c->out->oom |= s->oom;
        PUT(c, "<tool|>");
    }
}

/* ---- turns ---- */

/* The template's strip_thinking: each <|channel>...<channel|> dropped
 * (text after a <|channel> that is never closed too), then trimmed. */
static void put_stripped_thinking(const pl_ct_ctx *c, const char *t)
{
    pl_ct_buf *s = c->scratch;
    s->len = 0;
    const char *end = t + strlen(t);
    while (t <= end) {
        const char *close = strstr(t, "<channel|>");
        const char *part_end = close ? close : end;
        const char *open = memmem(t, (size_t)(part_end - t), "<|channel>", 10);
        pl_ct_putn_(s, t, (size_t)((open ? open : part_end) - t));
        if (!close)
            break;
        t = close + 10;
    }
    if (s->p)
        pl_ct_put_stripped_(c->out, s->p, s->len);
    c->out->oom |= s->oom;
}

static void put_trimmed(const pl_ct_ctx *c, const char *t)
{
    pl_ct_put_stripped_(c->out, t, strlen(t));
}

/* A history call's arguments: a JSON string is parsed (as vLLM and
 * llama.cpp hand them to the template); an object is written key:value in
 * key order, anything else as the string it is. */
static void put_call(const pl_ct_ctx *c, json_t *call)
{
    json_t *fn = json_object_get(call, "function");
    json_t *a = json_object_get(fn, "arguments");
    json_t *parsed = json_is_string(a)
        ? json_loadb(json_string_value(a), json_string_length(a), JSON_DECODE_ANY, NULL)
        : json_incref(a);
    PUT(c, "<|tool_call>call:");
    put_field(c->out, fn, "name");
    PUT(c, "{");
    if (json_is_object(parsed)) {
        size_t n;
        kv *m = sorted(c->out, parsed, &n);
        for (size_t i = 0; i < n; i++) {
            if (i)
                PUT(c, ",");
            PUT(c, m[i].key);
            PUT(c, ":");
            put_argument(c->out, m[i].v, false);
        }
        free(m);
    } else if (json_is_string(a)) {
        pl_ct_putn_(c->out, json_string_value(a), json_string_length(a));
    }
    PUT(c, "}<tool_call|>");
    json_decref(parsed);
}

/* The results that follow call turn i: each "tool" message up to the
 * next other one, named after its call. parley's messages carry no
 * tool_call_id, so the k-th result answers the k-th call (what clients
 * send, and the order llama.cpp's server pairs them in). Returns how many
 * were written, or -1 (rejected: a result with no call to answer). */
static int put_results(const pl_ct_ctx *c, int i, json_t *calls)
{
    int k = 0;
    for (int j = i + 1; j < c->n && pl_ct_role_is_(c, j, "tool"); j++, k++) {
        json_t *fn = json_object_get(json_array_get(calls, (size_t)k), "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!name)
            return pl_ct_reject_(c, "a tool result answers no call of the turn before it");
        PUT(c, "<|tool_response>response:");
        PUT(c, name);
        PUT(c, "{value:");
        if (c->msgs[j].content) {   /* a null content prints as Python's None */
            PUT(c, Q);
            PUT(c, c->msgs[j].content);
            PUT(c, Q);
        } else {
            PUT(c, "None");
        }
        PUT(c, "}<tool_response|>");
    }
    return k;
}

/* The role of the nearest message before i that is not a tool result. */
static const char *prev_role(const pl_ct_ctx *c, int from, int i)
{
    for (int j = i - 1; j >= from; j--)
        if (!pl_ct_role_is_(c, j, "tool"))
            return pl_ct_role_(c, j);
    return NULL;
}

enum { PREV_NONE, PREV_TOOL_CALL, PREV_TOOL_RESPONSE, PREV_OTHER };

int pl_ct_render_gemma4_(const pl_ct_ctx *c)
{
    bool thinking = c->kw.enable_thinking == PL_THINKING_ON;
    bool tools = c->kw.tools && pl_ct_truthy_(c->kw.tools);
    bool sys = pl_ct_role_is_(c, 0, "system") || pl_ct_role_is_(c, 0, "developer");
    int prev = PREV_NONE, from = 0;
    PUT(c, c->bos);
    if (thinking || tools || sys) {
        PUT(c, "<|turn>system\n");
        if (thinking) {
            PUT(c, "<|think|>\n");
            prev = PREV_OTHER;
        }
        if (sys) {
            put_trimmed(c, pl_ct_content_(c, 0));
            from = 1;
        }
        if (tools) {
            put_tools(c);
            prev = PREV_OTHER;
        }
        PUT(c, "<turn|>\n");
    }
    int last_user = -1;
    for (int i = from; i < c->n; i++)
        if (pl_ct_role_is_(c, i, "user"))
            last_user = i;
    for (int i = from; i < c->n; i++) {
        if (pl_ct_role_is_(c, i, "tool"))
            continue;
        prev = PREV_NONE;
        bool model = pl_ct_role_is_(c, i, "assistant");
        const char *before = prev_role(c, from, i);
        if (!(model && before && !strcmp(before, "assistant"))) {
            PUT(c, "<|turn>");
            PUT(c, model ? "model" : pl_ct_role_(c, i));
            PUT(c, "\n");
        }
        json_t *calls = c->msgs[i].tool_calls;
        bool has_calls = calls && json_array_size(calls) > 0;
        const char *thought = c->msgs[i].reasoning;
        if (thought && *thought && i > last_user && has_calls) {
            PUT(c, "<|channel>thought\n");
            PUT(c, thought);
            PUT(c, "\n<channel|>");
        }
        int results = 0;
        if (has_calls) {
            size_t k;
            json_t *call;
            json_array_foreach(calls, k, call)
                put_call(c, call);
            prev = PREV_TOOL_CALL;
            results = put_results(c, i, calls);
            if (results < 0)
                return -1;
            if (results)
                prev = PREV_TOOL_RESPONSE;
        }
        const char *content = c->msgs[i].content;
        if (content) {
            if (model)
                put_stripped_thinking(c, content);
            else
                put_trimmed(c, content);
        }
        if (prev == PREV_TOOL_CALL && !results)
            PUT(c, "<|tool_response>");
        else if (!(results && !(content && *content)))
            PUT(c, "<turn|>\n");
    }
    if (c->agp && prev != PREV_TOOL_RESPONSE && prev != PREV_TOOL_CALL) {
        PUT(c, "<|turn>model\n");
        if (!thinking)
            PUT(c, "<|channel>thought\n<channel|>");
    }
    return 0;
}
