/* test_json_dump.c - src/base/json_dump.c held to jansson's own
 * json_dumps(JSON_COMPACT | JSON_ENCODE_ANY), byte for byte: escapes,
 * UTF-8, integers at their limits, reals, keys with NUL bytes, nesting,
 * 3,000 random trees, and the failures (invalid UTF-8, a cycle, a refusing
 * sink, a text past the 4 KiB buffer). */
#include <criterion/criterion.h>

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/base/json_dump.h"

static void same_as_jansson(const json_t *v)
{
    char *want = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    size_t n = 0;
    char *got = pl_json_dumps(v, &n);
    cr_assert_not_null(want);
    cr_assert_not_null(got, "pl_json_dumps failed where json_dumps gave %s", want);
    cr_expect_str_eq(got, want);
    cr_expect_eq(n, strlen(want));
    free(want);
    free(got);
}

static void same_text(const char *json)
{
    json_error_t e;
    json_t *v = json_loads(json, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
    cr_assert_not_null(v, "%s: %s", json, e.text);
    same_as_jansson(v);
    json_decref(v);
}

Test(json_dump, scalars_and_containers)
{
    const char *cases[] = {
        "null", "true", "false", "0", "-1", "42", "9223372036854775807",
        "-9223372036854775808", "0.5", "-0.0", "1e300", "1.5e-300", "0.1", "123456789.125",
        "3.0", "1e22", "2.5e-7", "\"\"", "[]", "{}", "[[]]", "{\"a\":{}}",
        "[1,2.5,\"x\",null,true,false,[],{}]",
        "{\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"message\":{\"content\":\"hi\"}}]}",
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        same_text(cases[i]);
}

Test(json_dump, string_escapes_and_utf8)
{
    const char *cases[] = {
        "\"quote \\\" backslash \\\\ slash / tab \\t nl \\n cr \\r bs \\b ff \\f\"",
        "\"\\u0001\\u001f\\u007f \\u0000 nul\"",
        "\"caf\\u00e9 \\u4e2d\\u6587 \\ud83d\\ude00 \\u2028\\u2029 \\uffff\"",
        "{\"\\n\":\"\\\"\"}",
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        same_text(cases[i]);
    json_t *o = json_object();   /* jansson's parser refuses a NUL in a key */
    json_object_setn_new(o, "k\0ey", 4, json_integer(1));
    same_as_jansson(o);
    json_decref(o);
}

Test(json_dump, integer_limits)
{
    json_int_t vals[] = {LLONG_MIN, LLONG_MIN + 1, -10, -9, 9, 10, 99, 100, LLONG_MAX};
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
        json_t *v = json_integer(vals[i]);
        same_as_jansson(v);
        json_decref(v);
    }
}

/* Texts longer than the 4 KiB stack buffer, in one string and in many. */
Test(json_dump, long_texts)
{
    size_t n = 20000;
    char *s = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        s[i] = (char)(i % 97 == 0 ? '"' : 'a' + (char)(i % 26));
    s[n] = '\0';
    json_t *a = json_array();
    json_array_append_new(a, json_string(s));
    for (int i = 0; i < 3000; i++)
        json_array_append_new(a, json_pack("{s:i,s:s}", "i", i, "t", "x\ny"));
    same_as_jansson(a);
    json_decref(a);
    free(s);
}

static uint64_t rng_ = 0x9E3779B97F4A7C15ull;
static uint64_t next_(void)
{
    rng_ ^= rng_ << 13;
    rng_ ^= rng_ >> 7;
    rng_ ^= rng_ << 17;
    return rng_;
}

static json_t *random_string_(void)
{
    static const char *pieces[] = {"a", "Z", " ", "\"", "\\", "/", "\n", "\t", "\x01",
                                   "\x1f", "\x7f", "\xc3\xa9", "\xe4\xb8\xad",
                                   "\xf0\x9f\x98\x80", "\xe2\x80\xa8", "{", "}", ":"};
    char buf[256];
    size_t n = 0, k = next_() % 12;
    for (size_t i = 0; i < k; i++) {
        const char *p = pieces[next_() % (sizeof pieces / sizeof *pieces)];
        size_t l = strlen(p);
        memcpy(buf + n, p, l);
        n += l;
    }
    if (next_() % 8 == 0)
        buf[n++] = '\0';   /* an embedded NUL */
    return json_stringn(buf, n);
}

static json_t *random_tree_(int depth)
{
    unsigned kind = (unsigned)(next_() % (depth > 5 ? 6 : 8));
    switch (kind) {
    case 0: return json_null();
    case 1: return json_boolean(next_() & 1);
    case 2: return json_integer((json_int_t)next_() >> (next_() % 64));
    case 3: {
        double d = (double)(int64_t)next_() / (double)(1ull << (next_() % 60));
        return json_real(next_() % 4 ? d : d * 1e-200);
    }
    case 4:
    case 5: return random_string_();
    case 6: {
        json_t *a = json_array();
        for (unsigned i = 0, n = (unsigned)(next_() % 5); i < n; i++)
            json_array_append_new(a, random_tree_(depth + 1));
        return a;
    }
    default: {
        json_t *o = json_object();
        for (unsigned i = 0, n = (unsigned)(next_() % 5); i < n; i++) {
            json_t *k = random_string_();
            json_object_setn_new(o, json_string_value(k), json_string_length(k),
                                 random_tree_(depth + 1));
            json_decref(k);
        }
        return o;
    }
    }
}

Test(json_dump, random_trees)
{
    for (int i = 0; i < 3000; i++) {
        json_t *v = random_tree_(0);
        cr_assert_not_null(v);
        same_as_jansson(v);
        json_decref(v);
    }
}

Test(json_dump, failures)
{
    /* Invalid UTF-8 (a stray continuation, an overlong form, a surrogate,
     * past U+10FFFF, a cut sequence): jansson fails, and so must this. */
    const char *bad[] = {"a\x80", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe4\xb8"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *o = json_pack("{s:o}", "k", json_stringn_nocheck(bad[i], strlen(bad[i])));
        char *j = json_dumps(o, JSON_COMPACT);
        cr_expect_null(j, "jansson dumped bad case %zu", i);
        free(j);
        cr_expect_null(pl_json_dumps(o, NULL), "bad case %zu", i);
        json_decref(o);
    }
    cr_expect_null(pl_json_dumps(NULL, NULL));

    /* A cycle: stopped by the depth limit, not the stack. */
    json_t *a = json_array(), *b = json_array();
    json_array_append(a, b);
    json_array_append(b, a);
    cr_expect_null(pl_json_dumps(a, NULL));
    json_array_clear(b);
    json_decref(a);
    json_decref(b);
}

static int refuse_second_(void *ud, const char *bytes, size_t n)
{
    (void)bytes;
    (void)n;
    return ++*(int *)ud > 1 ? -1 : 0;
}

Test(json_dump, sink_refusal_stops_the_dump)
{
    json_t *a = json_array();
    for (int i = 0; i < 5000; i++)
        json_array_append_new(a, json_integer(i));
    int calls = 0;
    cr_expect_eq(pl_json_dump(a, refuse_second_, &calls), -1);
    cr_expect_eq(calls, 2, "the dump went on after the sink refused (%d calls)", calls);
    json_decref(a);
}
