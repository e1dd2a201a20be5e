/* test_json_pack.c - src/base/json_pack.c: a format jansson refuses stops
 * the process (so the test that reaches it fails), other failures are an
 * error the caller sees (NULL). */
#include <criterion/criterion.h>

#include <signal.h>

#include "src/base/json_pack.h"

Test(json_pack, packs_like_json_pack)
{
    json_t *o = pl_json_pack("{s:s?, s:o, s:f}", "a", NULL, "b", json_null(), "c", 0.5);
    cr_assert_not_null(o);
    cr_expect(json_is_null(json_object_get(o, "a")));
    cr_expect(json_real_value(json_object_get(o, "c")) == 0.5);
    json_decref(o);
}

Test(json_pack, null_argument_is_an_error_not_a_crash)
{
    cr_expect_null(pl_json_pack("{s:s}", "a", (const char *)NULL));
    cr_expect_null(pl_json_pack("{s:s}", "a", "\xff\xfe"), "invalid UTF-8");
}

/* The format that lost "accuracy" from every job status. */
Test(json_pack, refused_format_aborts, .signal = SIGABRT)
{
    json_t *o = pl_json_pack("{s:i, s:f?}", "n", 1, "ratio", 0.5);
    json_decref(o);
}
