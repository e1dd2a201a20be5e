/* test_chunk_scan.c - the streamed-chunk fast path agrees with jansson (the
 * reference) on every chunk it accepts, declines what it does not handle,
 * and survives random mutations of real chunks. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "backends/remote/chunk_scan.h"

/* What jansson says: 1 and the text/finish if it is a plain chunk. */
static int reference(const char *in, size_t n, bool chat, char *text, size_t *len, char *fin)
{
    json_t *j = json_loadb(in, n, 0, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        return 0;
    }
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    json_t *t = chat ? json_object_get(json_object_get(c, "delta"), "content")
                     : json_object_get(c, "text");
    json_t *f = json_object_get(c, "finish_reason");
    *len = json_is_string(t) ? json_string_length(t) : 0;
    if (*len)
        memcpy(text, json_string_value(t), *len);
    snprintf(fin, 24, "%s", json_is_string(f) ? json_string_value(f) : "");
    json_decref(j);
    return 1;
}

static void check(const char *in, bool chat, int want)
{
    pl_chunk_scan s = {0};
    int got = pl_chunk_scan_read(&s, in, strlen(in), chat);
    if (want >= 0)
        cr_assert_eq(got, want, "%s", in);
    if (got) {
        char text[4096], fin[24];
        size_t len;
        cr_assert_eq(reference(in, strlen(in), chat, text, &len, fin), 1, "accepted bad JSON: %s", in);
        cr_assert_eq(s.len, len, "%s", in);
        cr_assert(len == 0 || memcmp(s.buf, text, len) == 0, "%s", in);
        cr_assert_str_eq(s.finish, fin, "%s", in);
    }
    pl_chunk_scan_free(&s);
}

Test(chunk_scan, plain_chunks_match_jansson)
{
    check("{\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","
          "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"logprobs\":null,"
          "\"finish_reason\":null}]}", true, 1);
    check("{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}", true, 1);
    check("{\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}", true, 1);
    check("{\"choices\":[{\"delta\":{\"content\":\"a\\\"b\\\\c\\n\\t\\u00e9\\ud83d\\ude00\\/\"}}]}", true, 1);
    check("{ \"choices\" : [ { \"text\" : \"caf\xc3\xa9 \" , \"finish_reason\" : \"stop\" } ] }", false, 1);
    check("{\"choices\":[],\"usage\":null}", true, 1);
    check("{\"choices\":[{\"delta\":{\"content\":null,\"reasoning_content\":\"hm\"}}]}", true, 1);
    check("{\"choices\":[{\"delta\":{\"content\":\"x\"},\"extra\":[1,2,{\"a\":[true,false,null]}],"
          "\"n\":-1.5e3}]}", true, 1);
}

Test(chunk_scan, declines_what_the_full_parser_must_read)
{
    check("{\"choices\":[{\"delta\":{\"content\":\"x\"},\"logprobs\":{\"content\":[]}}]}", true, 0);
    check("{\"choices\":[],\"usage\":{\"prompt_tokens\":1}}", true, 0);
    check("{\"error\":{\"message\":\"boom\"}}", true, 0);
    check("{\"object\":\"error\",\"message\":\"boom\"}", true, 0);
    check("{\"choices\":[{\"delta\":{\"tool_calls\":[{}]}}]}", true, 0);
    check("{\"choices\":[{\"delta\":{\"content\":\"a\"}},{\"delta\":{\"content\":\"b\"}}]}", true, 0);
    check("{\"choices\": [ oops", true, 0);
    check("{\"choices\":[{\"delta\":{\"content\":\"x\"}}]} trailing", true, 0);
    check("{\"choices\":[{\"delta\":{\"content\":\"\\ud83d\"}}]}", true, 0);   /* lone surrogate */
    check("{\"choices\":[{\"delta\":{\"content\":\"\xff\"}}]}", true, 0);       /* bad UTF-8 */
    check("{\"choices\":[{\"delta\":{\"content\":\"\\u0000\"}}]}", true, 0);
    check("[]", true, 0);
    check("", true, 0);
}

Test(chunk_scan, random_mutations_never_disagree)
{
    const char *seeds[] = {
        "{\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"h\\u00e9llo \\\"w\\\"\"},"
        "\"logprobs\":null,\"finish_reason\":null}]}",
        "{\"choices\":[{\"index\":0,\"text\":\" tok\\n\",\"finish_reason\":\"stop\"}],\"usage\":null}",
    };
    srand(7);
    for (int it = 0; it < 20000; it++) {
        const char *seed = seeds[it % 2];
        char buf[512];
        size_t n = strlen(seed);
        memcpy(buf, seed, n + 1);
        int muts = 1 + rand() % 3;
        for (int m = 0; m < muts; m++) {
            size_t at = (size_t)rand() % n;
            switch (rand() % 3) {
            case 0: buf[at] = (char)(rand() % 256); break;
            case 1: memmove(buf + at, buf + at + 1, n - at); n--; break;
            default: n = at; buf[n] = '\0'; break;
            }
            if (!n)
                break;
        }
        buf[n] = '\0';
        pl_chunk_scan s = {0};
        int got = pl_chunk_scan_read(&s, buf, n, it % 2 == 0);
        if (got && n == strlen(buf))
            check(buf, it % 2 == 0, -1);
        pl_chunk_scan_free(&s);
    }
}
