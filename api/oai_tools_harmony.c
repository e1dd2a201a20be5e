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
#include <stdlib.h>

#include "api/oai_reasoning.h"
#include "api/oai_tools.h"

/* tool_choice required or named: one call of an allowed function, after
 * an optional analysis message. */
static int add_call_constraint_(pl_oai_params *p, pl_err *err)
{
    if (p->sampling.constraint != PL_CONSTRAINT_NONE)
        return pl_err_set(err, 400, "invalid_request_error", "tool_choice", NULL,
                          "'tool_choice' \"required\" or a named function cannot be combined "
                          "with response_format or guided decoding");
    char *call = pl_oai_tools_one_call_regex(p, err);
    if (!call)
        return -1;
    char *re = pl_oai_reasoning_wrap(PL_OAI_REASONING_HARMONY, call);
    free(call);
    if (!re)
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
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
