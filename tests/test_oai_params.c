/* test_oai_params.c - validation of OpenAI request bodies. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

#include "api/oai_params.h"

/* The params borrow strings from the body: keep the last body alive until
 * the next parse or the end of the test. */
static json_t *body;

static void drop_body(void)
{
    json_decref(body);
    body = NULL;
}

static int parse(const char *js, bool chat, pl_oai_params *p, pl_err *e)
{
    drop_body();
    body = json_loads(js, 0, NULL);
    cr_assert_not_null(body, "bad test JSON %s", js);
    return pl_oai_parse(body, chat, p, e);
}

TestSuite(oai_params, .fini = drop_body);

Test(oai_params, chat_defaults)
{
    pl_oai_params p;
    pl_err e;
    cr_assert_eq(parse("{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},"
                       "{\"role\":\"user\",\"content\":\"u\"}]}", true, &p, &e), 0, "%s", e.message);
    cr_expect_str_eq(p.model, "m");
    cr_expect_eq(p.n_messages, 2);
    cr_expect_str_eq(p.messages[1].role, "user");
    cr_expect_str_eq(p.messages[1].content, "u");
    cr_expect_eq(p.n, 1);
    cr_expect_not(p.stream);
    cr_expect_float_eq(p.sampling.temperature, 1.0, 1e-9);
    cr_expect_float_eq(p.sampling.top_p, 1.0, 1e-9);
    cr_expect_eq(p.sampling.max_tokens, 0);
    pl_oai_params_free(&p);
}

Test(oai_params, sampling_fields)
{
    pl_oai_params p;
    pl_err e;
    cr_assert_eq(parse("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"u\"}],"
                       "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":40,\"min_p\":0.1,"
                       "\"max_completion_tokens\":9,\"stop\":[\"a\",\"bb\"],\"seed\":42,"
                       "\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,"
                       "\"repetition_penalty\":1.1,\"logit_bias\":{\"15\":-100,\"7\":2.5},"
                       "\"logprobs\":true,\"top_logprobs\":3,\"n\":2,\"ignore_eos\":true,"
                       "\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
                       true, &p, &e), 0, "%s", e.message);
    cr_expect_float_eq(p.sampling.temperature, 0.5, 1e-9);
    cr_expect_float_eq(p.sampling.top_p, 0.9, 1e-9);
    cr_expect_float_eq(p.sampling.min_p, 0.1, 1e-9);
    cr_expect_float_eq(p.sampling.presence_penalty, 0.5, 1e-9);
    cr_expect_float_eq(p.sampling.frequency_penalty, -0.5, 1e-9);
    cr_expect_float_eq(p.sampling.repetition_penalty, 1.1, 1e-9);
    cr_expect_eq(p.sampling.top_k, 40);
    cr_expect_eq(p.sampling.max_tokens, 9);
    cr_expect_eq(p.sampling.n_stop, 2);
    cr_expect_str_eq(p.sampling.stop[1], "bb");
    cr_expect(p.sampling.has_seed);
    cr_expect_eq(p.sampling.seed, 42u);
    cr_expect_eq(p.sampling.n_logit_bias, 2);
    float bias15 = 0, bias7 = 0;       /* the object's order is not a contract */
    for (int i = 0; i < p.sampling.n_logit_bias; i++) {
        if (p.sampling.logit_bias[i].token == 15)
            bias15 = p.sampling.logit_bias[i].bias;
        if (p.sampling.logit_bias[i].token == 7)
            bias7 = p.sampling.logit_bias[i].bias;
    }
    cr_expect_float_eq(bias15, -100.0f, 1e-6);
    cr_expect_float_eq(bias7, 2.5f, 1e-6);
    cr_expect(p.sampling.logprobs);
    cr_expect_eq(p.sampling.top_logprobs, 3);
    cr_expect_eq(p.n, 2);
    cr_expect(p.sampling.ignore_eos);
    cr_expect(p.stream && p.include_usage);
    pl_oai_params_free(&p);
}

Test(oai_params, content_parts_are_joined)
{
    pl_oai_params p;
    pl_err e;
    cr_assert_eq(parse("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
                       "[{\"type\":\"text\",\"text\":\"ab\"},{\"type\":\"text\",\"text\":\"cd\"}]}]}",
                       true, &p, &e), 0);
    cr_expect_str_eq(p.messages[0].content, "abcd");
    pl_oai_params_free(&p);
    cr_expect_eq(parse("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
                       "[{\"type\":\"image_url\",\"image_url\":{}}]}]}", true, &p, &e), -1);
    cr_expect_str_eq(e.param, "messages[0].content");
    pl_oai_params_free(&p);
}

Test(oai_params, completion_prompts)
{
    pl_oai_params p;
    pl_err e;
    cr_assert_eq(parse("{\"model\":\"m\",\"prompt\":[\"only\"],\"logprobs\":2}", false, &p, &e), 0);
    cr_expect_str_eq(p.prompt, "only");
    cr_expect_eq(p.sampling.top_logprobs, 2);
    pl_oai_params_free(&p);
    cr_assert_eq(parse("{\"model\":\"m\",\"prompt\":[1,2,3]}", false, &p, &e), 0);
    cr_expect_eq(p.n_prompt_tokens, 3);
    cr_expect_eq(p.prompt_tokens[2], 3);
    pl_oai_params_free(&p);
    /* A batch: one prompt per entry, strings or token arrays. */
    cr_assert_eq(parse("{\"model\":\"m\",\"prompt\":[\"a\",\"b\"],\"n\":3}", false, &p, &e), 0);
    cr_expect_eq(p.n_prompts, 2);
    cr_expect_str_eq(p.prompts[1].text, "b");
    cr_expect_eq(pl_oai_n_choices(&p), 6);
    pl_oai_params_free(&p);
    cr_assert_eq(parse("{\"model\":\"m\",\"prompt\":[[5],[6,7]]}", false, &p, &e), 0);
    cr_expect_eq(p.n_prompts, 2);
    cr_expect_eq(p.prompts[1].n_tokens, 2);
    cr_expect_eq(p.prompts[1].tokens[1], 7);
    pl_oai_params_free(&p);
    cr_expect_eq(parse("{\"model\":\"m\",\"prompt\":[\"a\",[1,\"x\"]]}", false, &p, &e), -1);
    cr_expect_str_eq(e.param, "prompt");
    cr_expect(strstr(e.message, "prompt[1][1]") != NULL, "%s", e.message);
    pl_oai_params_free(&p);
}

Test(oai_params, errors_name_the_param)
{
    static const struct { const char *body, *param; } cases[] = {
        {"{\"messages\":[]}", "model"},
        {"{\"model\":null,\"messages\":[]}", "model"},
        {"{\"model\":\"m\"}", "messages"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"function\",\"content\":\"x\"}]}", "messages[0].role"},
        {"{\"model\":\"m\",\"messages\":[{\"content\":\"x\"}]}", "messages[0].role"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":2.01}", "temperature"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_p\":0}", "top_p"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}", "max_tokens"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1.5}", "max_tokens"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"\"]}", "stop"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"auto\"}", "tool_choice"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"xml\"}}", "response_format.type"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\"}}", "response_format.json_schema"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"guided_choice\":[]}", "guided_choice"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"structured_outputs\":{\"grammar\":\"root ::= x\"}}", "structured_outputs.grammar"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"guided_regex\":\"a\",\"guided_choice\":[\"b\"]}", "guided_regex"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"3\":101}}", "logit_bias"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":1000}", "n"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"seed\":\"7\"}", "seed"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":\"yes\"}", "stream"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pl_oai_params p;
        pl_err e;
        cr_expect_eq(parse(cases[i].body, true, &p, &e), -1, "%s accepted", cases[i].body);
        cr_expect_eq(e.status, 400);
        cr_expect_str_eq(e.param, cases[i].param, "%s", cases[i].body);
        pl_oai_params_free(&p);
    }
}

/* The legacy functions / function_call fields as tools / tool_choice
 * (older LangChain, instructor's FUNCTIONS mode), history included;
 * prediction and web_search_options keep their 400. */
Test(oai_params, legacy_functions_become_tools)
{
    pl_oai_params p;
    pl_err e;
    cr_assert_eq(parse("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"w?\"},"
                       "{\"role\":\"assistant\",\"content\":null,\"function_call\":{\"name\":"
                       "\"get_w\",\"arguments\":\"{}\"}},{\"role\":\"function\",\"name\":"
                       "\"get_w\",\"content\":\"21\"}],\"functions\":[{\"name\":\"get_w\","
                       "\"parameters\":{\"type\":\"object\"}}],\"function_call\":{\"name\":"
                       "\"get_w\"}}", true, &p, &e), 0, "%s", e.message);
    cr_expect(p.legacy_functions);
    cr_expect_eq(json_array_size(p.tools), 1);
    cr_expect_eq(p.tool_choice, PL_TOOL_CHOICE_NAMED);
    cr_expect_str_eq(p.tool_name, "get_w");
    cr_expect_not(p.parallel_tool_calls, "one function_call per reply");
    cr_expect_str_eq(p.messages[2].role, "tool");
    json_t *m = json_object_get(body, "messages");
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(m, 2), "tool_call_id")),
                     json_string_value(json_object_get(json_array_get(json_object_get(
                         json_array_get(m, 1), "tool_calls"), 0), "id")));
    pl_oai_params_free(&p);
    cr_assert_eq(parse("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                       "\"functions\":[{\"name\":\"f\"}],\"function_call\":\"none\"}", true, &p,
                       &e), 0, "%s", e.message);
    cr_expect_eq(p.tool_choice, PL_TOOL_CHOICE_NONE);
    pl_oai_params_free(&p);
    static const struct { const char *extra, *param; } bad[] = {
        {"\"functions\":[{\"name\":\"f\"}],\"tools\":[]", "functions"},
        {"\"functions\":{}", "functions"},
        {"\"function_call\":\"auto\"", "function_call"},
        {"\"functions\":[{\"name\":\"f\"}],\"function_call\":\"always\"", "function_call"},
        {"\"functions\":[{\"name\":\"f\"}],\"function_call\":\"auto\",\"tool_choice\":\"auto\"",
         "function_call"},
        {"\"functions\":[{\"name\":\"bad name\"}]", "tools[0]"},
        {"\"prediction\":{\"type\":\"content\",\"content\":\"x\"}", "prediction"},
        {"\"web_search_options\":{}", "web_search_options"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char js[512];
        snprintf(js, sizeof js, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
                 "\"content\":\"x\"}],%s}", bad[i].extra);
        cr_expect_eq(parse(js, true, &p, &e), -1, "%s accepted", js);
        cr_expect_eq(e.status, 400);
        cr_expect_str_eq(e.param, bad[i].param, "%s: %s", js, e.message);
        pl_oai_params_free(&p);
    }
    cr_expect_eq(parse("{\"model\":\"m\",\"prompt\":\"x\",\"functions\":[{\"name\":\"f\"}]}",
                       false, &p, &e), -1, "not a completions field");
    cr_expect_str_eq(e.param, "functions");
    pl_oai_params_free(&p);
}

Test(oai_params, null_means_absent_and_tools_empty_is_fine)
{
    pl_oai_params p;
    pl_err e;
    cr_assert_eq(parse("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                       "\"temperature\":null,\"tools\":[],\"stop\":null}", true, &p, &e), 0,
                 "%s", e.message);
    cr_expect_float_eq(p.sampling.temperature, 1.0, 1e-9);
    pl_oai_params_free(&p);
}

/* vLLM's chat_template_kwargs: enable_thinking reaches the request; other
 * keys are the template's (ignored where unused, as by Jinja); a
 * non-boolean enable_thinking or a non-object is a 400 naming it. */
Test(oai_params, chat_template_kwargs_enable_thinking)
{
    static const char *const msgs = "\"messages\":[{\"role\":\"user\",\"content\":\"u\"}]";
    static const struct { const char *kw; pl_thinking want; const char *param; } cases[] = {
        {"", PL_THINKING_DEFAULT, NULL},
        {",\"chat_template_kwargs\":null", PL_THINKING_DEFAULT, NULL},
        {",\"chat_template_kwargs\":{}", PL_THINKING_DEFAULT, NULL},
        {",\"chat_template_kwargs\":{\"enable_thinking\":false}", PL_THINKING_OFF, NULL},
        {",\"chat_template_kwargs\":{\"enable_thinking\":true,\"x\":1}", PL_THINKING_ON, NULL},
        {",\"chat_template_kwargs\":{\"enable_thinking\":\"false\"}", 0,
         "chat_template_kwargs.enable_thinking"},
        {",\"chat_template_kwargs\":[1]", 0, "chat_template_kwargs"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char js[256];
        snprintf(js, sizeof js, "{\"model\":\"m\",%s%s}", msgs, cases[i].kw);
        pl_oai_params p;
        pl_err e = {0};
        int rc = parse(js, true, &p, &e);
        if (cases[i].param) {
            cr_expect_eq(rc, -1, "%s", js);
            cr_expect_eq(e.status, 400);
            cr_expect_str_eq(e.param, cases[i].param);
            pl_oai_params_free(&p);
            continue;
        }
        cr_assert_eq(rc, 0, "%s: %s", js, e.message);
        pl_gen_request r;
        pl_oai_to_request(&p, &r);
        cr_expect_eq(r.thinking, cases[i].want, "%s", js);
        pl_oai_params_free(&p);
    }
}
