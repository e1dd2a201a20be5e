/* tool_hermes.c - tool formats "hermes" (Qwen 2.5 / Hermes) and "generic"
 * (tool_format.h): the tools in <tools></tools> in the system turn, each
 * call a JSON object in <tool_call></tool_call>. Qwen's template wraps
 * "tool" turns in <tool_response> itself; a template without tools gets
 * them as user turns, wrapped the same way. */
#include <stdlib.h>
#include <string.h>

#include "backends/text/tool_format.h"
#include "src/base/evbuf.h"

static const char PRE[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char POST[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>";

static char *render_tools_(json_t *tools)
{
    struct evbuffer *b = evbuffer_new();
    if (!b)
        return NULL;
    evbuffer_add_printf(b, "%s", PRE);
    pl_tool_put_tools_json(b, tools, "\n", "");
    evbuffer_add_printf(b, "%s", POST);
    return pl_evbuffer_take(b);
}

static int render_calls_(struct evbuffer *b, json_t *calls)
{
    size_t k;
    json_t *c;
    json_array_foreach(calls, k, c) {
        evbuffer_add_printf(b, "%s<tool_call>\n", k ? "\n" : "");
        pl_tool_put_call_json(b, c, "arguments");
        evbuffer_add_printf(b, "\n</tool_call>");
    }
    return 0;
}

static void call_regex_(struct evbuffer *b, const char *name, const char *args_re)
{
    evbuffer_add_printf(b, "<tool_call>\\n\\{\"name\": %s, \"arguments\": %s\\}\\n</tool_call>",
                        name, args_re);
}

static char *reply_regex_(const char *one, bool many, int max)
{
    return pl_tool_list_regex("", "\\n", "", one, many, max);
}

/* <tool_call> blocks; text around them is content. cut: the last block
 * may be unfinished (dropped unless its JSON is whole). */
static bool parse_(json_t *tools, const char *t, size_t n, bool cut, json_t *calls,
                   struct evbuffer *content)
{
    const char *end = t + n;
    bool any = false;
    while (t < end) {
        const char *o = memmem(t, (size_t)(end - t), OPEN, sizeof OPEN - 1);
        evbuffer_add(content, t, (size_t)((o ? o : end) - t));
        if (!o)
            break;
        any = true;
        const char *body = o + sizeof OPEN - 1;
        const char *c = memmem(body, (size_t)(end - body), CLOSE, sizeof CLOSE - 1);
        size_t bn = (size_t)((c ? c : end) - body);
        if (!c && cut)
            return pl_tool_call_add_complete(tools, calls, body, bn);
        if (!pl_tool_call_add_text(tools, calls, body, bn))
            return false;
        t = c ? c + sizeof CLOSE - 1 : end;
    }
    return any;
}

const pl_tool_format pl_tool_hermes = {
    .name = "hermes",
    .opener = OPEN,
    .render_tools = render_tools_,
    .render_calls = render_calls_,
    .call_regex = call_regex_,
    .reply_regex = reply_regex_,
    .parse = parse_,
};

const pl_tool_format pl_tool_generic = {
    .name = "generic",
    .result_role = "user",
    .result_wrap = "<tool_response>\n%s\n</tool_response>",
    .merge_user_runs = true,
    .opener = OPEN,
    .render_tools = render_tools_,
    .render_calls = render_calls_,
    .call_regex = call_regex_,
    .reply_regex = reply_regex_,
    .parse = parse_,
};
