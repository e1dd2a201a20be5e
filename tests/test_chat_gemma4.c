/* test_chat_gemma4.c - Gemma 4's text side: its chat template
 * (backends/text/chat_template_gemma4.c) against jinja2, and its replies'
 * split (reasoning_gemma4.c: the thought channel, calls read into JSON).
 *
 * tests/fixtures/gemma4_templates.json (gen_gemma4_fixtures.py) holds the
 * official template's source, tool sets, conversations and what jinja2
 * rendered for each (generation prompt on and off, enable_thinking absent,
 * false and true, with and without tools). Every rendering must match byte
 * for byte. The split is checked on replies written in the template's own
 * syntax (what it renders for history calls), fed whole and split at every
 * byte: the calls must come out as the JSON the template was given.
 */
#include <criterion/criterion.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/text/chat_template.h"
#include "backends/text/reasoning_format.h"
#include "backends/text/tool_format.h"
#include "tests/helpers/chat_fixture.h"

static json_t *doc;

static void load(void)
{
    const char *src = getenv("PARLEY_SRC");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/gemma4_templates.json", src ? src : ".");
    json_error_t jerr;
    doc = json_load_file(path, 0, &jerr);
    cr_assert_not_null(doc, "cannot load %s: %s", path, jerr.text);
}

static void unload(void)
{
    json_decref(doc);
}

TestSuite(chat_gemma4, .init = load, .fini = unload);

static json_t *conversation(const char *name)
{
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(doc, "conversations"), i, c)
        if (!strcmp(json_string_value(json_object_get(c, "name")), name))
            return json_object_get(c, "messages");
    cr_assert_fail("no conversation %s", name);
    return NULL;
}

static const char *template_src(void)
{
    return json_string_value(json_object_get(doc, "template"));
}

Test(chat_gemma4, detected)
{
    pl_chat_style s;
    cr_assert_eq(pl_chat_style_init(&s, template_src()), 0);
    cr_assert_eq(s.tmpl, PL_CHAT_TMPL_GEMMA);
    cr_assert_eq(s.flags, PL_CHAT_F_GEMMA4);
    cr_assert_eq(pl_chat_style_tool_format(&s), &pl_tool_gemma4);
    cr_assert(pl_chat_style_tool_format(&s)->native);
    cr_assert_eq(pl_chat_style_reasoning_format(&s), &pl_reasoning_gemma4);
    pl_chat_style_free(&s);
    cr_assert_eq(pl_tool_format_find("gemma4"), &pl_tool_gemma4);
    cr_assert_eq(pl_reasoning_format_find("gemma4"), &pl_reasoning_gemma4);
}

static void render_all(const pl_chat_style *s, int *checked)
{
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(doc, "cases"), i, c) {
        int n;
        const char *conv = json_string_value(json_object_get(c, "conversation"));
        pl_chat_message *m = chat_fixture_messages(conversation(conv), "reasoning_content", &n);
        const char *tools = json_string_value(json_object_get(c, "tools"));
        json_t *think = json_object_get(json_object_get(c, "kwargs"), "enable_thinking");
        pl_chat_kwargs kw = {
            .enable_thinking = !think ? PL_THINKING_DEFAULT
                             : json_is_true(think) ? PL_THINKING_ON : PL_THINKING_OFF,
            .tools = tools ? json_object_get(json_object_get(doc, "tools"), tools) : NULL,
        };
        bool agp = json_is_true(json_object_get(c, "add_generation_prompt"));
        const char *want = json_string_value(json_object_get(c, "expected"));
        cr_assert_not_null(want, "case %zu: jinja2 raised", i);
        char *out = NULL;
        pl_err err = {0};
        int rc = pl_chat_style_render_kw(s, m, n, agp,
                                         json_string_value(json_object_get(doc, "bos_token")),
                                         json_string_value(json_object_get(doc, "eos_token")),
                                         &kw, &out, &err);
        cr_assert_eq(rc, 0, "case %zu (%s, tools %s): %s", i, conv, tools, err.message);
        size_t d = chat_fixture_first_diff(out, want);
        cr_expect_str_eq(out, want, "case %zu (%s, tools %s, agp %d, thinking %d) differs at "
                         "byte %zu:\nparley: %.120s\njinja2: %.120s", i, conv, tools, agp,
                         kw.enable_thinking, d, out + d, want + d);
        (*checked)++;
        free(out);
        free(m);
    }
}

Test(chat_gemma4, renders_as_jinja2)
{
    pl_chat_style s;
    cr_assert_eq(pl_chat_style_init(&s, template_src()), 0);
    int checked = 0;
    render_all(&s, &checked);
    cr_expect_gt(checked, 200);
    pl_chat_style_free(&s);
}

/* A file without a template names the style in its family row. */
Test(chat_gemma4, family_style_renders_the_same)
{
    pl_chat_style s = {.tmpl = PL_CHAT_TMPL_GEMMA, .flags = PL_CHAT_F_GEMMA4};
    int checked = 0;
    render_all(&s, &checked);
    cr_expect_gt(checked, 200);
}

/* A tool result with no call before it to answer. */
Test(chat_gemma4, result_without_call_rejected)
{
    pl_chat_style s = {.tmpl = PL_CHAT_TMPL_GEMMA, .flags = PL_CHAT_F_GEMMA4};
    json_t *calls = json_loads("[{\"id\":\"a\",\"type\":\"function\",\"function\":"
                               "{\"name\":\"f\",\"arguments\":\"{}\"}}]", 0, NULL);
    pl_chat_message m[] = {{"user", "x"}, {"assistant", NULL, NULL, calls},
                           {"tool", "1"}, {"tool", "2"}};
    char *out = NULL;
    pl_err err = {0};
    cr_assert_eq(pl_chat_style_render(&s, m, 4, true, "", "", &out, &err), -1);
    cr_expect_eq(err.status, 400);
    cr_expect_str_eq(err.param, "messages");
    cr_expect_null(out);
    cr_assert_eq(pl_chat_style_render(&s, m, 3, true, "", "", &out, &err), 0);
    free(out);
    json_decref(calls);
}
