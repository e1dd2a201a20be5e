/* test_respond.c - JSON escaping for SSE chunks. */
#include <criterion/criterion.h>
#include <event2/buffer.h>
#include <jansson.h>
#include <string.h>

#include "api/respond.h"

static char *escape(const char *s, size_t n)
{
    struct evbuffer *b = evbuffer_new();
    evbuffer_add(b, "\"", 1);
    pl_json_escape(b, s, n);
    evbuffer_add(b, "\"", 2);
    char *out = strdup((const char *)evbuffer_pullup(b, -1));
    evbuffer_free(b);
    return out;
}

Test(respond, escapes_round_trip_through_jansson)
{
    const char *cases[] = {"plain", "quote\" back\\slash", "nl\ncr\rtab\t", "\x01\x1f",
                           "caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *e = escape(cases[i], strlen(cases[i]));
        json_error_t err;
        json_t *j = json_loads(e, JSON_DECODE_ANY, &err);
        cr_assert_not_null(j, "%s: %s", e, err.text);
        cr_expect_str_eq(json_string_value(j), cases[i]);
        json_decref(j);
        free(e);
    }
}

Test(respond, invalid_utf8_becomes_replacement)
{
    char *e = escape("a\xFF" "b\xC3", 4);
    cr_expect_str_eq(e, "\"a\xEF\xBF\xBD" "b\xEF\xBF\xBD\"");
    free(e);
    e = escape("\xED\xA0\x80", 3);          /* a UTF-16 surrogate */
    json_t *j = json_loads(e, JSON_DECODE_ANY, NULL);
    cr_expect_not_null(j, "%s", e);
    json_decref(j);
    free(e);
}
