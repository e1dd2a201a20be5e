/* test_yaml_load.c - src/base/yaml_load.c: anchors, aliases and merge keys
 * as PyYAML reads them, a billion-laughs file refused with bounded work,
 * and nothing left to free after a refusal. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>

#include "src/base/yaml_load.h"

static json_t *load(const char *y, pl_linemap *lm, char *err, size_t errlen)
{
    return pl_yaml_load_buf("t.yaml", y, strlen(y), lm, err, errlen);
}

/* What PyYAML's yaml.dump writes for an object used twice. */
Test(yaml_load, anchors_and_aliases_as_pyyaml_writes_them)
{
    const char *y =
        "sampling: &id001\n"
        "  temperature: 0.7\n"
        "  stop: [\"\\n\\n\"]\n"
        "agents:\n"
        "- id: a\n"
        "  sampling: *id001\n"
        "- id: b\n"
        "  sampling: *id001\n"
        "names: [&n x, *n]\n";
    pl_linemap lm;
    char err[256];
    json_t *j = load(y, &lm, err, sizeof err);
    cr_assert_not_null(j, "%s", err);
    json_t *s0 = json_object_get(json_object_get(json_array_get(json_object_get(j, "agents"), 0),
                                                 "sampling"), "temperature");
    json_t *s1 = json_object_get(json_array_get(json_object_get(j, "agents"), 1), "sampling");
    cr_expect(json_real_value(s0) == 0.7);
    cr_expect(json_equal(s1, json_object_get(j, "sampling")));
    /* a copy, not the same node: editing one leaves the other */
    cr_expect_neq(s1, json_object_get(j, "sampling"));
    cr_expect_str_eq(json_string_value(json_array_get(json_object_get(j, "names"), 1)), "x");
    cr_expect_eq(pl_linemap_line(&lm, "agents[1].sampling"), 8);
    cr_expect_eq(pl_linemap_line(&lm, "agents[1].sampling.temperature"), 8);
    json_decref(j);
    pl_linemap_free(&lm);
}

Test(yaml_load, merge_keys)
{
    const char *y =
        "base: &b {model: m, temperature: 0.2, role: participant}\n"
        "extra: &e {seed: 1, role: other}\n"
        "a:\n"
        "  <<: [*b, *e]\n"
        "  temperature: 0.9\n"
        "quoted: {\"<<\": 1}\n";
    pl_linemap lm;
    char err[256];
    json_t *j = load(y, &lm, err, sizeof err);
    cr_assert_not_null(j, "%s", err);
    json_t *a = json_object_get(j, "a");
    cr_expect_null(json_object_get(a, "<<"));
    cr_expect_str_eq(json_string_value(json_object_get(a, "model")), "m");
    cr_expect(json_real_value(json_object_get(a, "temperature")) == 0.9, "its own key wins");
    cr_expect_str_eq(json_string_value(json_object_get(a, "role")), "participant",
                     "the earlier source wins");
    cr_expect_eq(json_integer_value(json_object_get(a, "seed")), 1);
    cr_expect_eq(pl_linemap_line(&lm, "a.model"), 4);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(j, "quoted"), "<<")), 1,
                 "a quoted << is an ordinary key");
    json_decref(j);
    pl_linemap_free(&lm);
    char err2[256];
    cr_expect_null(load("a: {<<: 3}\n", &lm, err2, sizeof err2));
    cr_expect(strstr(err2, "t.yaml:1: a merge key"), "%s", err2);
}

/* Ten levels of ten aliases each: 10^10 values if expanded. Refused after
 * at most the bound's worth of copying. */
Test(yaml_load, billion_laughs_refused, .timeout = 10)
{
    char y[4096];
    size_t n = (size_t)snprintf(y, sizeof y, "l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for (int i = 1; i < 10; i++)
        n += (size_t)snprintf(y + n, sizeof y - n,
                              "l%d: &l%d [*l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d]\n",
                              i, i, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1);
    pl_linemap lm;
    char err[256];
    cr_expect_null(load(y, &lm, err, sizeof err));
    cr_expect(strstr(err, "aliases expand to more than"), "%s", err);
    cr_expect_null(lm.lines, "a refused file leaves nothing to free");
}

Test(yaml_load, bad_aliases)
{
    pl_linemap lm;
    char err[256];
    cr_expect_null(load("a: *nope\n", &lm, err, sizeof err));
    cr_expect(strstr(err, "t.yaml:1: alias of an unknown anchor"), "%s", err);
    cr_expect_null(load("a: &x [1, *x]\n", &lm, err, sizeof err), "no cycles");
    cr_expect(strstr(err, "unknown anchor"), "%s", err);
}

/* issue 36.14: the line map of a refused file was allocated and never
 * handed back (LeakSanitizer in `parley run bad.yaml`). */
Test(yaml_load, refused_file_leaves_no_line_map)
{
    pl_linemap lm = {0};
    char err[256];
    cr_expect_null(load("a: 1\nb: [1, 2\n", &lm, err, sizeof err));
    cr_expect_null(lm.lines);
    cr_expect_null(load("a: 1\na: 2\n", &lm, err, sizeof err));
    cr_expect_null(lm.lines);
    cr_expect_null(pl_yaml_load_file("/nonexistent/x.yaml", &lm, err, sizeof err));
    cr_expect_null(lm.lines);
}
