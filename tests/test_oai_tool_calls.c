/* test_oai_tool_calls.c - a model's reply read for tool calls
 * (api/oai_tool_calls.c), in each call format: complete calls, a call cut
 * by max_tokens, text around them, the finish_reason. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

#include "api/oai_params.h"
#include "api/oai_tools.h"

static json_t *body;
static pl_oai_params p;

static void setup_(const char *format, const char *tool_choice)
{
    char js[512];
    snprintf(js, sizeof js, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
             "\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_w\","
             "\"parameters\":{\"type\":\"object\"}}}],\"tool_choice\":%s}", tool_choice);
    body = json_loads(js, 0, NULL);
    pl_err e;
    cr_assert_eq(pl_oai_parse(body, true, &p, &e), 0, "%s", e.message);
    p.tool_format = pl_tool_format_find(format);
    cr_assert_not_null(p.tool_format, "%s", format);
}

static void teardown_(void)
{
    pl_oai_params_free(&p);
    json_decref(body);
    body = NULL;
}

TestSuite(oai_tool_calls, .fini = teardown_);

/* The reply as the API makes it: calls (their arguments), content, finish. */
static void reply_(const char *text, pl_finish f, int n_calls, const char *content,
                   bool text_is_content, const char *finish)
{
    pl_oai_tool_reply r;
    pl_oai_tools_reply(&p, text, strlen(text), f, &r);
    cr_expect_eq(r.text_is_content, text_is_content, "%s: text_is_content", text);
    cr_expect_eq(json_array_size(r.calls), (size_t)n_calls, "%s: calls", text);
    for (int i = 0; i < n_calls; i++) {
        json_t *fn = json_object_get(json_array_get(r.calls, (size_t)i), "function");
        cr_expect_str_eq(json_string_value(json_object_get(fn, "name")), "get_w");
        cr_expect_str_eq(json_string_value(json_object_get(fn, "arguments")), "{\"c\":1}");
    }
    if (content)
        cr_expect(r.content && !strcmp(r.content, content), "%s: content '%s'", text,
                  r.content ? r.content : "(null)");
    else
        cr_expect_null(r.content, "%s: content '%s'", text, r.content);
    cr_expect_str_eq(r.finish, finish, "%s", text);
    pl_oai_tool_reply_free(&r);
}

#define CALL "{\"name\": \"get_w\", \"arguments\": {\"c\": 1}}"
#define TAGGED "<tool_call>\n" CALL "\n</tool_call>"

Test(oai_tool_calls, tagged_cut_keeps_complete_calls)
{
    setup_("hermes", "\"auto\"");
    reply_(TAGGED "\n" TAGGED, PL_FINISH_STOP, 2, NULL, false, "tool_calls");
    reply_(TAGGED "\n<tool_call>\n{\"name\": \"get_w\", \"argu", PL_FINISH_LENGTH, 1, NULL,
           false, "length");
    reply_("Let me see. " TAGGED "\n<tool_call>\n{\"na", PL_FINISH_LENGTH, 1, "Let me see.",
           false, "length");
    reply_("Let me see. <tool_call>\n{\"name\": \"get_w\"", PL_FINISH_LENGTH, 0,
           "Let me see.", false, "length");
    /* cut inside the opener itself: no call was begun, but no text either */
    reply_("Let me see. <tool_ca", PL_FINISH_LENGTH, 0, "Let me see.", false, "length");
    reply_("just words, cut", PL_FINISH_LENGTH, 0, NULL, true, "length");
    reply_("just words", PL_FINISH_STOP, 0, NULL, true, "stop");
}

Test(oai_tool_calls, forced_call_is_never_text)
{
    setup_("hermes", "\"required\"");
    reply_("<tool_call>\n{\"name\": \"get", PL_FINISH_LENGTH, 0, NULL, false, "length");
    reply_("<tool_", PL_FINISH_LENGTH, 0, NULL, false, "length");
    reply_(TAGGED, PL_FINISH_STOP, 1, NULL, false, "tool_calls");
}

Test(oai_tool_calls, named_call_finishes_stop)
{
    setup_("hermes", "{\"type\":\"function\",\"function\":{\"name\":\"get_w\"}}");
    reply_(TAGGED, PL_FINISH_STOP, 1, NULL, false, "stop");
    reply_(TAGGED "\n<tool_call>\n{", PL_FINISH_LENGTH, 1, NULL, false, "length");
}

Test(oai_tool_calls, llama3_and_mistral_cut)
{
    setup_("llama3", "\"auto\"");
    reply_("{\"name\": \"get_w\", \"parameters\": {\"c\": 1}}", PL_FINISH_STOP, 1, NULL, false,
           "tool_calls");
    reply_("{\"name\": \"get_w\", \"parameters\": {\"c\": 1}}", PL_FINISH_LENGTH, 1, NULL, false,
           "length");
    reply_("{\"name\": \"get_w\", \"parameters\": {\"c\"", PL_FINISH_LENGTH, 0, NULL, false,
           "length");
    teardown_();
    setup_("mistral", "\"auto\"");
    reply_("[TOOL_CALLS] [" CALL ", " CALL "]", PL_FINISH_STOP, 2, NULL, false, "tool_calls");
    reply_("[TOOL_CALLS] [" CALL ", {\"name\": \"get_w\", \"argu", PL_FINISH_LENGTH, 1, NULL,
           false, "length");
    reply_("[TOOL_CA", PL_FINISH_LENGTH, 0, NULL, false, "length");
}
