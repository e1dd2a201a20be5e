/* oai_tools_harmony.c - OpenAI tools on a gpt-oss model (tool_format
 * "harmony"): its template renders the tools (TypeScript declarations in
 * the developer message), history calls and results itself, so the
 * request keeps them as they are (pl_gen_request.tools,
 * pl_chat_message.tool_calls); calls come back from the reply's channels
 * (api/oai_reasoning.c). tool_choice "required" or a named function
 * constrains the reply to one call in the model's own form, after an
 * optional analysis message:
 *
 *   <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{args}
 *
 * The model ends a call with <|call|>, which ends the generation: one call
 * per reply (the template keeps one call per assistant turn too), so
 * parallel_tool_calls has no effect here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/oai_reasoning.h"
#include "api/oai_tools.h"
#include "api/oai_wire.h"
#include "backends/engine/constrain/json_schema.h"
#include "backends/engine/constrain/regex.h"

static int oom_(pl_err *err)
{
    return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
}

/* One function's call as the model writes it, with its arguments' schema. */
static int put_call_(struct evbuffer *b, json_t *fn, int i, pl_err *err)
{
    json_t *params = json_object_get(fn, "parameters");
    const char *name = json_string_value(json_object_get(fn, "name"));
    char msg[400], param[64], *esc = NULL;
    size_t len = 0, cap = 0;
    char *args = params ? pl_json_schema_regex(params, msg, sizeof msg) : pl_json_object_regex();
    snprintf(param, sizeof param, "tools[%d].function.parameters", i);
    if (!args)
        return pl_err_set(err, 400, "invalid_request_error", param, "invalid_constraint",
                          "cannot constrain the call to its parameters: %s",
                          params ? msg : "out of memory");
    if (pl_regex_escape_append(&esc, &len, &cap, name, strlen(name)) < 0) {
        free(args);
        return oom_(err);
    }
    evbuffer_add_printf(b, "<\\|channel\\|>commentary to=functions\\.%s <\\|constrain\\|>json"
                           "<\\|message\\|>%s", esc, args);
    free(args);
    free(esc);
    return 0;
}

/* tool_choice required or named: one call of an allowed function. */
static int add_call_constraint_(pl_oai_params *p, pl_err *err)
{
    if (p->sampling.constraint != PL_CONSTRAINT_NONE)
        return pl_err_set(err, 400, "invalid_request_error", "tool_choice", NULL,
                          "'tool_choice' \"required\" or a named function cannot be combined "
                          "with response_format or guided decoding");
    struct evbuffer *b = evbuffer_new();
    if (!b)
        return oom_(err);
    size_t i;
    json_t *t;
    int k = 0;
    evbuffer_add(b, "(?:", 3);
    json_array_foreach(p->tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (p->tool_choice == PL_TOOL_CHOICE_NAMED && strcmp(name, p->tool_name))
            continue;
        if (k++)
            evbuffer_add(b, "|", 1);
        if (put_call_(b, fn, (int)i, err) < 0) {
            evbuffer_free(b);
            return -1;
        }
    }
    evbuffer_add(b, ")", 1);
    char *calls = pl_evbuffer_take(b);
    char *re = calls ? pl_oai_reasoning_wrap(PL_OAI_REASONING_HARMONY, calls) : NULL;
    free(calls);
    if (!re)
        return oom_(err);
    p->sampling.constraint = PL_CONSTRAINT_REGEX;
    p->sampling.constraint_text = re;
    p->constraint_after_reasoning = true;
    return 0;
}

int pl_oai_tools_prepare_harmony(pl_oai_params *p, json_t *body, pl_err *err)
{
    json_t *msgs = json_object_get(body, "messages");
    p->tools_native = true;
    for (int i = 0; i < p->n_messages; i++) {
        json_t *calls = json_object_get(json_array_get(msgs, (size_t)i), "tool_calls");
        if (json_is_array(calls) && json_array_size(calls) > 0)
            p->messages[i].tool_calls = calls;
    }
    if (p->tools && (p->tool_choice == PL_TOOL_CHOICE_REQUIRED ||
                     p->tool_choice == PL_TOOL_CHOICE_NAMED))
        return add_call_constraint_(p, err);
    return 0;
}
