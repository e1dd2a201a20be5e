/* test_oai_wire.c - api/oai_wire.c's stream chunks, read back with
 * jansson: index, the text key, logprobs (chat entries with bytes and
 * top_logprobs; completions' four arrays with text_offset), a masked
 * token's -9999, an echoed prompt's null, and the finish chunk. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/oai_wire.h"

/* The one event in b: "data: {...}\n\n", parsed; b is emptied. */
static json_t *event_json(struct evbuffer *b)
{
    size_t n = evbuffer_get_length(b);
    char *s = malloc(n + 1);
    cr_assert_not_null(s);
    evbuffer_remove(b, s, n);
    s[n] = '\0';
    cr_assert(n > 8 && !strncmp(s, "data: ", 6) && !strcmp(s + n - 2, "\n\n"), "%s", s);
    json_error_t e;
    json_t *v = json_loadb(s + 6, n - 8, JSON_ALLOW_NUL, &e);
    cr_assert_not_null(v, "%s: %s", s, e.text);
    free(s);
    return v;
}

static const pl_top_logprob tops[2][2] = {
    {{"hi", 2, -0.25f}, {"h\xc3\xa9", 3, -1.5f}},
    {{" \"x\"", 4, -2.0f}, {"\n", 1, -INFINITY}},
};
static const pl_token_logprob lps[2] = {
    {"h\xc3\xa9", 3, -0.125f, 2, tops[0]},
    {" \"x\"", 4, -INFINITY, 2, tops[1]},
};

static pl_delta two_tokens(void)
{
    static const int32_t ids[2] = {7, 300};
    return (pl_delta){.text = "h\xc3\xa9 \"x\"", .len = 7, .tokens = ids, .n_tokens = 2,
                      .logprobs = lps};
}

static void expect_bytes(json_t *arr, const char *tok, size_t len)
{
    cr_assert(json_is_array(arr));
    cr_assert_eq(json_array_size(arr), len);
    for (size_t i = 0; i < len; i++)
        cr_expect_eq(json_integer_value(json_array_get(arr, i)), (unsigned char)tok[i]);
}

static void expect_lp(json_t *v, float want)
{
    double w = isfinite(want) ? want : -9999.0;
    cr_assert(json_is_number(v));
    cr_expect(fabs(json_number_value(v) - w) < 1e-6, "%g vs %g", json_number_value(v), w);
}

Test(oai_wire, chat_delta_chunk_with_logprobs)
{
    char *prefix = pl_oai_chunk_prefix("chatcmpl-1", true, 1700000000, "m", false);
    struct evbuffer *b = evbuffer_new();
    pl_delta d = two_tokens();
    size_t offset = 0;
    pl_oai_put_delta_chunk(b, prefix, true, 12, &d, &offset);
    json_t *v = event_json(b);
    cr_expect_str_eq(json_string_value(json_object_get(v, "id")), "chatcmpl-1");
    cr_expect_eq(json_integer_value(json_object_get(v, "created")), 1700000000);
    json_t *c = json_array_get(json_object_get(v, "choices"), 0);
    cr_expect_eq(json_integer_value(json_object_get(c, "index")), 12);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(c, "delta"), "content")),
                     "h\xc3\xa9 \"x\"");
    cr_expect(json_is_null(json_object_get(c, "finish_reason")));
    json_t *content = json_object_get(json_object_get(c, "logprobs"), "content");
    cr_assert_eq(json_array_size(content), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *e = json_array_get(content, i);
        cr_expect_eq(json_string_length(json_object_get(e, "token")), lps[i].token_len);
        expect_lp(json_object_get(e, "logprob"), lps[i].logprob);
        expect_bytes(json_object_get(e, "bytes"), lps[i].token, lps[i].token_len);
        json_t *top = json_object_get(e, "top_logprobs");
        cr_assert_eq(json_array_size(top), 2);
        for (size_t k = 0; k < 2; k++) {
            json_t *t = json_array_get(top, k);
            cr_expect(!memcmp(json_string_value(json_object_get(t, "token")), tops[i][k].token,
                              tops[i][k].token_len));
            expect_lp(json_object_get(t, "logprob"), tops[i][k].logprob);
            expect_bytes(json_object_get(t, "bytes"), tops[i][k].token, tops[i][k].token_len);
        }
    }
    json_decref(v);

    pl_oai_put_finish_chunk(b, prefix, true, 3, PL_FINISH_LENGTH);
    v = event_json(b);
    c = json_array_get(json_object_get(v, "choices"), 0);
    cr_expect_eq(json_integer_value(json_object_get(c, "index")), 3);
    cr_expect_str_eq(json_string_value(json_object_get(c, "finish_reason")), "length");
    cr_expect_eq(json_object_size(json_object_get(c, "delta")), 0);
    json_decref(v);
    evbuffer_free(b);
    free(prefix);
}

Test(oai_wire, completions_delta_chunk_with_logprobs_and_offsets)
{
    char *prefix = pl_oai_chunk_prefix("cmpl-1", false, 5, "m", true);
    struct evbuffer *b = evbuffer_new();
    pl_delta d = two_tokens();
    size_t offset = 1234567;
    pl_oai_put_delta_chunk(b, prefix, false, 0, &d, &offset);
    cr_expect_eq(offset, 1234567 + 3 + 4);
    json_t *v = event_json(b);
    cr_expect(json_is_null(json_object_get(v, "usage")));
    json_t *c = json_array_get(json_object_get(v, "choices"), 0);
    cr_expect_eq(json_integer_value(json_object_get(c, "index")), 0);
    cr_expect_str_eq(json_string_value(json_object_get(c, "text")), "h\xc3\xa9 \"x\"");
    json_t *lp = json_object_get(c, "logprobs");
    json_t *toks = json_object_get(lp, "tokens"), *tlp = json_object_get(lp, "token_logprobs");
    json_t *top = json_object_get(lp, "top_logprobs"), *off = json_object_get(lp, "text_offset");
    cr_assert_eq(json_array_size(toks), 2);
    cr_expect_str_eq(json_string_value(json_array_get(toks, 1)), " \"x\"");
    expect_lp(json_array_get(tlp, 0), -0.125f);
    expect_lp(json_array_get(tlp, 1), -INFINITY);
    expect_lp(json_object_get(json_array_get(top, 0), "hi"), -0.25f);
    expect_lp(json_object_get(json_array_get(top, 1), "\n"), -INFINITY);
    cr_expect_eq(json_integer_value(json_array_get(off, 0)), 1234567);
    cr_expect_eq(json_integer_value(json_array_get(off, 1)), 1234570);
    json_decref(v);
    evbuffer_free(b);
    free(prefix);
}

Test(oai_wire, echoed_prompt_first_token_is_null)
{
    static const pl_token_logprob first = {"A", 1, NAN, 0, NULL};
    static const int32_t id = 1;
    pl_delta d = {.text = "A", .len = 1, .tokens = &id, .n_tokens = 1, .logprobs = &first,
                  .prompt = true};
    struct evbuffer *b = evbuffer_new();
    size_t offset = 0;
    pl_oai_put_delta_chunk(b, "data: {\"choices\":[", false, 2147483647, &d, &offset);
    json_t *v = event_json(b);
    json_t *c = json_array_get(json_object_get(v, "choices"), 0);
    cr_expect_eq(json_integer_value(json_object_get(c, "index")), 2147483647);
    json_t *lp = json_object_get(c, "logprobs");
    cr_expect(json_is_null(json_array_get(json_object_get(lp, "token_logprobs"), 0)));
    cr_expect(json_is_null(json_array_get(json_object_get(lp, "top_logprobs"), 0)));
    cr_expect_eq(json_integer_value(json_array_get(json_object_get(lp, "text_offset"), 0)), 0);
    json_decref(v);
    evbuffer_free(b);
}

/* A token longer than put_bytes' 64-byte run: every byte, in order. */
Test(oai_wire, long_token_bytes)
{
    char tok[300];
    for (size_t i = 0; i < sizeof tok; i++)
        tok[i] = (char)(i * 37 % 256);
    pl_token_logprob lp = {tok, sizeof tok, -1.0f, 0, NULL};
    static const int32_t id = 9;
    pl_delta d = {.text = "x", .len = 1, .tokens = &id, .n_tokens = 1, .logprobs = &lp};
    struct evbuffer *b = evbuffer_new();
    size_t offset = 0;
    pl_oai_put_delta_chunk(b, "data: {\"choices\":[", true, 0, &d, &offset);
    json_t *v = event_json(b);
    json_t *c = json_array_get(json_object_get(v, "choices"), 0);
    json_t *e = json_array_get(json_object_get(json_object_get(c, "logprobs"), "content"), 0);
    expect_bytes(json_object_get(e, "bytes"), tok, sizeof tok);
    json_decref(v);
    evbuffer_free(b);
}
