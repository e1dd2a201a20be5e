/* tool_mistral.c - tool format "mistral" (tool_format.h): the tools in
 * [AVAILABLE_TOOLS] [...][/AVAILABLE_TOOLS] before the first user turn's
 * text, calls as one JSON array after [TOOL_CALLS], results as user turns
 * in [TOOL_RESULTS] ... [/TOOL_RESULTS]. */
#include <ctype.h>
#include <string.h>

#include "backends/text/tool_format.h"
#include "src/base/evbuf.h"

static const char OPEN[] = "[TOOL_CALLS]";

static char *render_tools_(json_t *tools)
{
    struct evbuffer *b = evbuffer_new();
    if (!b)
        return NULL;
    evbuffer_add_printf(b, "[AVAILABLE_TOOLS] [");
    pl_tool_put_tools_json(b, tools, "", ", ");
    evbuffer_add_printf(b, "][/AVAILABLE_TOOLS]");
    return pl_evbuffer_take(b);
}

static int render_calls_(struct evbuffer *b, json_t *calls)
{
    size_t k;
    json_t *c;
    evbuffer_add_printf(b, "[TOOL_CALLS] [");
    json_array_foreach(calls, k, c) {
        if (k)
            evbuffer_add(b, ", ", 2);
        pl_tool_put_call_json(b, c, "arguments");
    }
    evbuffer_add(b, "]", 1);
    return 0;
}

static void call_regex_(struct evbuffer *b, const char *name, const char *args_re)
{
    evbuffer_add_printf(b, "\\{\"name\": %s, \"arguments\": %s\\}", name, args_re);
}

static char *reply_regex_(const char *one, bool many, int max)
{
    return pl_tool_list_regex("\\[TOOL_CALLS\\] \\[", ", ", "\\]", one, many, max);
}

static bool parse_(json_t *tools, const char *t, size_t n, bool cut, json_t *calls,
                   struct evbuffer *content)
{
    if (n < sizeof OPEN - 1 || memcmp(t, OPEN, sizeof OPEN - 1))
        return false;
    t += sizeof OPEN - 1, n -= sizeof OPEN - 1;
    while (n && isspace((unsigned char)*t))
        t++, n--;
    json_t *arr = json_loadb(t, n, 0, NULL);
    if (!arr && cut && n && *t == '[')
        return pl_tool_call_add_complete(tools, calls, t + 1, n - 1);
    size_t i;
    json_t *o;
    bool ok = json_is_array(arr) && json_array_size(arr) > 0;
    json_array_foreach(arr, i, o) {
        ok = ok && pl_tool_call_add(tools, calls, o);
    }
    json_decref(arr);
    return ok;
}

const pl_tool_format pl_tool_mistral = {
    .name = "mistral",
    .tools_in_user = true,
    .result_role = "user",
    .result_wrap = "[TOOL_RESULTS] %s [/TOOL_RESULTS]",
    .merge_user_runs = true,
    .opener = OPEN,
    .render_tools = render_tools_,
    .render_calls = render_calls_,
    .call_regex = call_regex_,
    .reply_regex = reply_regex_,
    .parse = parse_,
};
