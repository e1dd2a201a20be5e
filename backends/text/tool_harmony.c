/* tool_harmony.c - tool format "harmony" (gpt-oss; tool_format.h): native.
 * Its template renders the tools (TypeScript declarations in the developer
 * message), history calls and results itself, and calls come back from the
 * reply's channels (reasoning_harmony.c). A forced reply is one call in the
 * model's own form, after an optional analysis message:
 *
 *   <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{args}
 *
 * The model ends a call with <|call|>, which ends the generation: one call
 * per reply (the template keeps one call per assistant turn too), so
 * parallel_tool_calls has no effect here. */
#include <string.h>

#include "backends/text/reasoning_format.h"
#include "backends/text/tool_format.h"

/* The name unquoted: the escaped quotes stripped. */
static void call_regex_(struct evbuffer *b, const char *name, const char *args_re)
{
    evbuffer_add_printf(b, "<\\|channel\\|>commentary to=functions\\.%.*s "
                           "<\\|constrain\\|>json<\\|message\\|>%s",
                        (int)strlen(name) - 2, name + 1, args_re);
}

static char *reply_regex_(const char *one, bool many, int max)
{
    return pl_reasoning_harmony.wrap(one);
}

const pl_tool_format pl_tool_harmony = {
    .name = "harmony",
    .native = true,
    .call_regex = call_regex_,
    .reply_regex = reply_regex_,
};
