/* test_anthropic_req.c - api/anthropic_req.c: Messages bodies into the
 * chat-completions bodies api/oai_params.c validates (blocks, tools,
 * tool_choice, thinking, stop_sequences), the errors naming Anthropic's
 * fields, and api/anthropic_messages.c's error JSON. */
#include <criterion/criterion.h>

#include <string.h>

#include "api/anthropic.h"

static json_t *load(const char *s)
{
    json_error_t je;
    json_t *v = json_loads(s, 0, &je);
    cr_assert_not_null(v, "bad test JSON: %s", je.text);
    return v;
}

/* chat of body equals want (both JSON text). */
static void expect_chat(const char *body, const char *want)
{
    json_t *b = load(body), *w = load(want);
    pl_err e = {0};
    json_t *chat = pl_anthropic_chat_body(b, true, &e);
    cr_assert_not_null(chat, "refused: %s: %s", e.param, e.message);
    char *got = json_dumps(chat, JSON_SORT_KEYS | JSON_COMPACT);
    char *exp = json_dumps(w, JSON_SORT_KEYS | JSON_COMPACT);
    cr_expect_str_eq(got, exp);
    free(got);
    free(exp);
    json_decref(chat);
    json_decref(b);
    json_decref(w);
}

/* body is refused with a 400 naming param, its message holding needle. */
static void expect_bad(const char *body, const char *param, const char *needle)
{
    json_t *b = load(body);
    pl_err e = {0};
    json_t *chat = pl_anthropic_chat_body(b, true, &e);
    cr_expect_null(chat, "accepted: %s", body);
    cr_expect_eq(e.status, 400);
    cr_expect_str_eq(e.param, param);
    cr_expect(strstr(e.message, needle), "'%s' lacks '%s'", e.message, needle);
    json_decref(chat);
    json_decref(b);
}

Test(anthropic_req, text_system_and_sampling)
{
    expect_chat("{\"model\":\"m\",\"max_tokens\":9,\"system\":\"Be brief.\",\"temperature\":0.5,"
                "\"top_k\":3,\"stream\":true,\"stop_sequences\":[\"END\"],"
                "\"metadata\":{\"user_id\":\"u\"},"
                "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                "{\"model\":\"m\",\"max_tokens\":9,\"temperature\":0.5,\"top_k\":3,"
                "\"stream\":true,\"stop\":[\"END\"],\"user\":\"u\",\"messages\":["
                "{\"role\":\"system\",\"content\":\"Be brief.\"},"
                "{\"role\":\"user\",\"content\":\"hi\"}]}");
}

Test(anthropic_req, tool_round_trip_blocks)
{
    expect_chat(
        "{\"model\":\"m\",\"max_tokens\":9,\"messages\":["
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Weather?\","
        "\"cache_control\":{\"type\":\"ephemeral\"}}]},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\","
        "\"signature\":\"s\"},{\"type\":\"redacted_thinking\",\"data\":\"x\"},"
        "{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"w\",\"input\":{\"city\":\"Oslo\"}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\","
        "\"content\":\"12 C\"},{\"type\":\"text\",\"text\":\"thanks\"}]}]}",
        "{\"model\":\"m\",\"max_tokens\":9,\"messages\":["
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Weather?\"}]},"
        "{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"hm\",\"tool_calls\":"
        "[{\"id\":\"t1\",\"type\":\"function\",\"function\":{\"name\":\"w\","
        "\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"t1\",\"content\":\"12 C\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"thanks\"}]}]}");
}

Test(anthropic_req, tools_choice_and_thinking)
{
    expect_chat(
        "{\"model\":\"m\",\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
        "\"tools\":[{\"name\":\"w\",\"description\":\"d\",\"input_schema\":{\"type\":\"object\"}}],"
        "\"tool_choice\":{\"type\":\"any\",\"disable_parallel_tool_use\":true},"
        "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024}}",
        "{\"model\":\"m\",\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"w\",\"description\":\"d\","
        "\"parameters\":{\"type\":\"object\"}}}],\"tool_choice\":\"required\","
        "\"parallel_tool_calls\":false,\"chat_template_kwargs\":{\"enable_thinking\":true}}");
    expect_chat(
        "{\"model\":\"m\",\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
        "\"tool_choice\":{\"type\":\"tool\",\"name\":\"w\"},\"thinking\":{\"type\":\"disabled\"}}",
        "{\"model\":\"m\",\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
        "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"w\"}},"
        "\"chat_template_kwargs\":{\"enable_thinking\":false}}");
}

Test(anthropic_req, errors_name_anthropic_fields)
{
    const char *m = "\"model\":\"m\",\"max_tokens\":9,";
    char b[512];
    expect_bad("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
               "max_tokens", "Field required");
    snprintf(b, sizeof b, "{%s\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
             "{\"role\":\"tool\",\"content\":\"x\"}]}", m);
    expect_bad(b, "messages.1.role", "'user' or 'assistant'");
    snprintf(b, sizeof b, "{%s\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
             "\"text\":\"a\"},{\"type\":\"blob\"}]}]}", m);
    expect_bad(b, "messages.0.content.1", "unknown content block type 'blob'");
    snprintf(b, sizeof b, "{%s\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":"
             "\"tool_result\",\"tool_use_id\":\"t\"}]}]}", m);
    expect_bad(b, "messages.0.content.0", "'tool_result'");
    snprintf(b, sizeof b, "{%s\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
             "\"tool_result\",\"tool_use_id\":\"t\",\"content\":[{\"type\":\"image\"}]}]}]}", m);
    expect_bad(b, "messages.0.content.0.content.0", "'image' are not supported");
    snprintf(b, sizeof b, "{%s\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
             "\"tool_choice\":{\"type\":\"all\"}}", m);
    expect_bad(b, "tool_choice", "must be");
    snprintf(b, sizeof b, "{%s\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
             "\"tools\":[{\"name\":\"bad name\",\"input_schema\":{}}]}", m);
    expect_bad(b, "tools.0", "'name' must match");
    snprintf(b, sizeof b, "{%s\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
             "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":0}}", m);
    expect_bad(b, "thinking.budget_tokens", "positive integer");
    snprintf(b, sizeof b, "{%s\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
             "\"system\":[{\"type\":\"image\"}]}", m);
    expect_bad(b, "system.0", "'image'");
}

Test(anthropic_req, rename_chat_params)
{
    pl_err e = {0};
    snprintf(e.param, sizeof e.param, "tools[2].function.parameters");
    pl_anthropic_rename_param(&e);
    cr_expect_str_eq(e.param, "tools.2.input_schema");
    snprintf(e.param, sizeof e.param, "stop");
    pl_anthropic_rename_param(&e);
    cr_expect_str_eq(e.param, "stop_sequences");
    snprintf(e.param, sizeof e.param, "max_tokens");
    pl_anthropic_rename_param(&e);
    cr_expect_str_eq(e.param, "max_tokens");
}

Test(anthropic_wire, error_json_by_status)
{
    static const struct { int status; const char *type; } t[] = {
        {400, "invalid_request_error"}, {401, "authentication_error"},
        {403, "permission_error"}, {404, "not_found_error"}, {413, "request_too_large"},
        {429, "rate_limit_error"}, {500, "api_error"}, {503, "overloaded_error"},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        pl_err e;
        pl_err_set(&e, t[i].status, "x", i ? NULL : "max_tokens", NULL, "Field required");
        json_t *o = pl_anthropic_error_json(&e);
        char *s = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
        char want[160];
        snprintf(want, sizeof want, "{\"error\":{\"message\":\"%sField required\",\"type\":"
                 "\"%s\"},\"type\":\"error\"}", i ? "" : "max_tokens: ", t[i].type);
        cr_expect_str_eq(s, want);
        free(s);
        json_decref(o);
    }
    cr_expect(pl_anthropic_path("/v1/messages"));
    cr_expect(pl_anthropic_path("/v1/messages?beta=true"));
    cr_expect(pl_anthropic_path("/v1/messages/count_tokens"));
    cr_expect(!pl_anthropic_path("/v1/messagesx"));
    cr_expect(!pl_anthropic_path("/v1/chat/completions"));
    cr_expect(!pl_anthropic_path(NULL));
}
