/* test_chat_harmony.c - gpt-oss's chat template
 * (backends/text/chat_template_harmony.c) against jinja2.
 *
 * tests/fixtures/harmony_templates.json (gen_harmony_fixtures.py) holds the
 * template's source, tool sets, conversations (reasoning, final answers,
 * tool calls and results) and what jinja2 rendered for each (with and
 * without the generation prompt, with tools, at each reasoning effort), or
 * that it raised. The source must be detected as harmony, every rendering
 * must match byte for byte, every raise must be a 400 on "messages" (but
 * where "parley" gives what parley renders instead).
 */
#include <criterion/criterion.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/text/chat_template.h"
#include "tests/helpers/chat_fixture.h"

static json_t *doc;

static void load(void)
{
    const char *src = getenv("PARLEY_SRC");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/harmony_templates.json", src ? src : ".");
    json_error_t jerr;
    doc = json_load_file(path, 0, &jerr);
    cr_assert_not_null(doc, "cannot load %s: %s", path, jerr.text);
}

static void unload(void)
{
    json_decref(doc);
}

TestSuite(chat_harmony, .init = load, .fini = unload);

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

Test(chat_harmony, detected)
{
    pl_chat_style s;
    const char *src = json_string_value(json_object_get(doc, "template"));
    cr_assert_eq(pl_chat_style_init(&s, src), 0);
    cr_assert_eq(s.tmpl, PL_CHAT_TMPL_HARMONY);
    cr_assert_str_eq(pl_chat_tmpl_name(s.tmpl), "harmony");
    pl_chat_style_free(&s);
}

Test(chat_harmony, renders_as_jinja2)
{
    pl_chat_style s;
    cr_assert_eq(pl_chat_style_init(&s, json_string_value(json_object_get(doc, "template"))), 0);
    size_t i;
    json_t *c;
    int n_checked = 0, n_errors = 0;
    json_array_foreach(json_object_get(doc, "cases"), i, c) {
        int n;
        const char *conv = json_string_value(json_object_get(c, "conversation"));
        pl_chat_message *m = chat_fixture_messages(conversation(conv), "thinking", &n);
        const char *tools = json_string_value(json_object_get(c, "tools"));
        pl_chat_kwargs kw = {
            .reasoning_effort = json_string_value(json_object_get(c, "reasoning_effort")),
            .tools = tools ? json_object_get(json_object_get(doc, "tools"), tools) : NULL,
            .date = json_string_value(json_object_get(doc, "date")),
        };
        bool agp = json_is_true(json_object_get(c, "add_generation_prompt"));
        const char *want = json_string_value(json_object_get(c, "expected"));
        if (!want)
            want = json_string_value(json_object_get(c, "parley"));
        char *out = NULL;
        pl_err err = {0};
        int rc = pl_chat_style_render_kw(&s, m, n, agp, "<|startoftext|>", "<|return|>", &kw,
                                         &out, &err);
        if (want) {
            cr_assert_eq(rc, 0, "case %zu (%s, tools %s): %s", i, conv, tools, err.message);
            size_t d = chat_fixture_first_diff(out, want);
            cr_expect_str_eq(out, want, "case %zu (%s, tools %s) differs at byte %zu:\n"
                             "parley: %.80s\njinja2: %.80s", i, conv, tools, d, out + d,
                             want + d);
            n_checked++;
        } else {
            cr_expect_eq(rc, -1, "case %zu (%s): jinja2 raised, parley rendered", i, conv);
            cr_expect_eq(err.status, 400);
            cr_expect_str_eq(err.param, "messages");
            cr_expect(strstr(err.message, json_string_value(json_object_get(c, "error"))),
                      "case %zu: %s", i, err.message);
            n_errors++;
        }
        free(out);
        free(m);
    }
    cr_expect_gt(n_checked, 40);
    cr_expect_gt(n_errors, 5);
    pl_chat_style_free(&s);
}

/* Without a date the system message carries today's, as strftime_now. */
Test(chat_harmony, today_by_default)
{
    pl_chat_style s;
    pl_chat_style_from_tmpl(&s, PL_CHAT_TMPL_HARMONY);
    pl_chat_message m = {"user", "hi"};
    char *out = NULL, today[16];
    pl_err err;
    time_t now = time(NULL);
    strftime(today, sizeof today, "%Y-%m-%d", localtime(&now));
    cr_assert_eq(pl_chat_style_render(&s, &m, 1, true, "", "", &out, &err), 0);
    char want[64];
    snprintf(want, sizeof want, "Current date: %s\n", today);
    cr_expect(strstr(out, want), "%s", out);
    free(out);
}
