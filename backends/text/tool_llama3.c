/* tool_llama3.c - tool format "llama3" (tool_format.h): Llama 3.1's JSON
 * calls, {"name": ..., "parameters": {...}}, the tool list before the
 * first user turn's text, results in "ipython" turns. One call a reply. */
#include "backends/text/tool_format.h"
#include "src/base/evbuf.h"

static const char PRE[] =
    "Given the following functions, please respond with a JSON for a function call with "
    "its proper arguments that best answers the given prompt.\n\nRespond in the format "
    "{\"name\": function name, \"parameters\": dictionary of argument name and its value}."
    " Do not use variables.\n";

static char *render_tools_(json_t *tools)
{
    struct evbuffer *b = evbuffer_new();
    if (!b)
        return NULL;
    evbuffer_add_printf(b, "%s", PRE);
    pl_tool_put_tools_json(b, tools, "\n", "");
    return pl_evbuffer_take(b);
}

static int render_calls_(struct evbuffer *b, json_t *calls)
{
    size_t k;
    json_t *c;
    json_array_foreach(calls, k, c) {
        if (k)
            evbuffer_add(b, "\n", 1);
        pl_tool_put_call_json(b, c, "parameters");
    }
    return 0;
}

static void call_regex_(struct evbuffer *b, const char *name, const char *args_re)
{
    evbuffer_add_printf(b, "\\{\"name\": %s, \"parameters\": %s\\}", name, args_re);
}

static char *reply_regex_(const char *one, bool many, int max)
{
    return pl_tool_list_regex("", "", "", one, false, max);   /* one call a reply */
}

/* The reply is one JSON object (a cut one: what is whole of it). */
static bool parse_(json_t *tools, const char *t, size_t n, bool cut, json_t *calls,
                   struct evbuffer *content)
{
    return n && t[0] == '{' &&
           (cut ? pl_tool_call_add_complete(tools, calls, t, n)
                : pl_tool_call_add_text(tools, calls, t, n));
}

const pl_tool_format pl_tool_llama3 = {
    .name = "llama3",
    .tools_in_user = true,
    .result_role = "ipython",
    .merge_user_runs = true,
    .opener = "{",
    .render_tools = render_tools_,
    .render_calls = render_calls_,
    .call_regex = call_regex_,
    .reply_regex = reply_regex_,
    .parse = parse_,
};
