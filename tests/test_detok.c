/* test_detok.c - the streaming detokeniser: UTF-8 held across token
 * boundaries, stop strings across boundaries, hold-back of stop prefixes
 * that do or do not complete, several stops, flush, no growth per token.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/text/detok.h"
#include "backends/formats/gguf.h"
#include "tests/helpers/model_path.h"

/* Feed one chunk and check the text emitted and the return value. */
static void feed(pl_detok *d, const char *in, const char *want, int want_rc)
{
    pl_detok_out o;
    int rc = pl_detok_feed_bytes(d, in, strlen(in), &o);
    cr_assert_eq(rc, want_rc, "feed '%s': rc %d", in, rc);
    cr_assert_eq(o.len, strlen(want), "feed '%s': got '%.*s' want '%s'", in,
                 (int)o.len, o.text, want);
    cr_assert_eq(memcmp(o.text, want, o.len), 0, "feed '%s': got '%.*s'", in,
                 (int)o.len, o.text);
}

static void flush(pl_detok *d, const char *want)
{
    pl_detok_out o;
    cr_assert_eq(pl_detok_flush(d, &o), 0);
    cr_assert_eq(o.len, strlen(want), "flush: got '%.*s' want '%s'",
                 (int)o.len, o.text, want);
    cr_assert_eq(memcmp(o.text, want, o.len), 0);
}

static void init(pl_detok *d, const char *const *stops, int n)
{
    cr_assert_eq(pl_detok_init(d, NULL, stops, n, false), 0);
}

Test(detok, utf8_split_across_tokens)
{
    pl_detok d;
    init(&d, NULL, 0);
    feed(&d, "hi \xf0\x9f", "hi ", 0);          /* 😀 = F0 9F 98 80 */
    feed(&d, "\x98", "", 0);
    feed(&d, "\x80!", "\xf0\x9f\x98\x80!", 0);
    feed(&d, "\xe4", "", 0);                    /* 你 = E4 BD A0 */
    feed(&d, "\xbd\xa0\xe5\xa5", "\xe4\xbd\xa0", 0);
    feed(&d, "\xbd", "\xe5\xa5\xbd", 0);        /* 好 */
    flush(&d, "");
    pl_detok_free(&d);
}

Test(detok, invalid_bytes_become_replacement)
{
    pl_detok d;
    init(&d, NULL, 0);
    feed(&d, "a\xff" "b", "a\xef\xbf\xbd" "b", 0);
    feed(&d, "\xe4\xbd" "x", "\xef\xbf\xbd\xef\xbf\xbdx", 0); /* broken seq */
    feed(&d, "\x80", "\xef\xbf\xbd", 0);        /* stray continuation */
    feed(&d, "ok\xf0\x9f\x98", "ok", 0);
    flush(&d, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"); /* incomplete at end */
    pl_detok_free(&d);
}

Test(detok, stop_across_boundary)
{
    pl_detok d;
    const char *stops[] = {"STOP"};
    init(&d, stops, 1);
    feed(&d, "hello S", "hello ", 0);
    feed(&d, "T", "", 0);
    pl_detok_out o;
    cr_assert_eq(pl_detok_feed_bytes(&d, "OP world", 8, &o), 1);
    cr_assert_eq(o.stop, 0);
    cr_assert_eq(o.len, 0);
    cr_assert_eq(pl_detok_feed_bytes(&d, "more", 4, &o), 1); /* stays stopped */
    cr_assert_eq(o.len, 0);
    flush(&d, "");
    pl_detok_free(&d);
}

Test(detok, stop_inside_one_token_emits_text_before)
{
    pl_detok d;
    const char *stops[] = {"</s>"};
    init(&d, stops, 1);
    pl_detok_out o;
    cr_assert_eq(pl_detok_feed_bytes(&d, "abc</s>def", 10, &o), 1);
    cr_assert_eq(o.len, 3);
    cr_assert_eq(memcmp(o.text, "abc", 3), 0);
    pl_detok_free(&d);
}

Test(detok, held_prefix_that_does_not_complete)
{
    pl_detok d;
    const char *stops[] = {"</end>"};
    init(&d, stops, 1);
    feed(&d, "a</e", "a", 0);
    feed(&d, "nd", "", 0);
    feed(&d, "x", "</endx", 0);
    feed(&d, "<", "", 0);
    feed(&d, "<", "<", 0);   /* the first '<' can no longer start the stop */
    flush(&d, "<");
    pl_detok_free(&d);
}

Test(detok, multiple_stops_earliest_wins)
{
    pl_detok d;
    const char *stops[] = {"\n\n", "User:", "abc", "b"};
    init(&d, stops, 4);
    feed(&d, "Hi\nUs", "Hi\n", 0);
    pl_detok_out o;
    cr_assert_eq(pl_detok_feed_bytes(&d, "er: x", 5, &o), 1);
    cr_assert_eq(o.stop, 1);
    cr_assert_eq(o.len, 0);
    pl_detok_reset(&d);
    cr_assert_eq(pl_detok_feed_bytes(&d, "xabc", 4, &o), 1);
    cr_assert_eq(o.stop, 2);         /* "abc" at 1 comes before "b" at 2 */
    cr_assert_eq(o.len, 1);
    pl_detok_reset(&d);
    feed(&d, "one\n", "one", 0);
    cr_assert_eq(pl_detok_feed_bytes(&d, "\nafter", 6, &o), 1);
    cr_assert_eq(o.stop, 0);
    cr_assert_eq(o.len, 0);
    pl_detok_free(&d);
}

Test(detok, stop_with_multibyte_text)
{
    pl_detok d;
    const char *stops[] = {"。終"};
    init(&d, stops, 1);
    feed(&d, "日本\xe3\x80", "日本", 0);   /* 。 = E3 80 82, split */
    feed(&d, "\x82", "", 0);                /* a complete stop prefix */
    feed(&d, "X", "。X", 0);
    pl_detok_out o;
    cr_assert_eq(pl_detok_feed_bytes(&d, "。\xe7\xb5", 5, &o), 0);
    cr_assert_eq(o.len, 0);
    cr_assert_eq(pl_detok_feed_bytes(&d, "\x82", 1, &o), 1);
    pl_detok_free(&d);
}

Test(detok, flush_emits_held_stop_prefix)
{
    pl_detok d;
    const char *stops[] = {"###", ""};
    init(&d, stops, 2);
    feed(&d, "text ##", "text ", 0);
    flush(&d, "##");
    flush(&d, "");
    pl_detok_free(&d);
}

Test(detok, no_growth_per_token)
{
    pl_detok d;
    const char *stops[] = {"<|im_end|>", "\n\nUser"};
    init(&d, stops, 2);
    pl_detok_out o;
    for (int i = 0; i < 100; i++)
        pl_detok_feed_bytes(&d, "word <|im", 9, &o);
    size_t hc = d.hold_cap, oc = d.out_cap;
    char *h = d.hold, *out = d.out;
    for (int i = 0; i < 100000; i++)
        cr_assert_eq(pl_detok_feed_bytes(&d, " tok\xe4\xbd\xa0\n", 8, &o), 0);
    cr_assert_eq(d.hold_cap, hc);
    cr_assert_eq(d.out_cap, oc);
    cr_assert_eq(d.hold, h);
    cr_assert_eq(d.out, out);
    pl_detok_free(&d);
}

Test(detok, too_many_stops_rejected)
{
    pl_detok d;
    const char *stops[PL_DETOK_MAX_STOPS + 1];
    for (int i = 0; i <= PL_DETOK_MAX_STOPS; i++)
        stops[i] = "x";
    cr_assert_eq(pl_detok_init(&d, NULL, stops, PL_DETOK_MAX_STOPS + 1, false), -1);
}

/* With the SmolLM2 vocabulary: emoji and CJK are split over byte-level
 * tokens; streaming the ids gives back the text, never half a character. */
Test(detok, smollm2_stream_round_trip)
{
    PL_TEST_MODEL_OR_SKIP();
    const char *path = pl_test_model_path();
    char err[256];
    pl_gguf *g = pl_gguf_open(path, err, sizeof err);
    cr_assert_not_null(g, "%s", err);
    pl_tokenizer *t = pl_tokenizer_from_gguf(g, err, sizeof err);
    cr_assert_not_null(t, "%s", err);
    const char *text = "Hi 😀🎉 你好世界 👨‍👩‍👧 done<|im_end|>after";
    int32_t *ids;
    int n;
    cr_assert_eq(pl_tokenizer_encode(t, text, strlen(text), false, true, &ids, &n), 0);
    const char *stops[] = {"done<"};
    pl_detok d;
    cr_assert_eq(pl_detok_init(&d, t, stops, 1, true), 0);
    char got[256];
    size_t o = 0;
    int held = 0, rc = 0;
    pl_detok_out out;
    for (int i = 0; i < n && rc == 0; i++) {
        rc = pl_detok_feed(&d, ids[i], &out);
        held += out.len == 0;
        if (out.len) { /* every piece ends on a character boundary */
            unsigned char last = (unsigned char)out.text[out.len - 1];
            cr_assert(last < 0x80 || (last & 0xc0) == 0x80);
        }
        memcpy(got + o, out.text, out.len);
        o += out.len;
    }
    cr_assert_eq(rc, 1, "the stop string spans <|im_end|>'s text");
    cr_assert_eq(out.stop, 0);
    const char *want = "Hi 😀🎉 你好世界 👨‍👩‍👧 ";
    cr_assert_eq(o, strlen(want));
    cr_assert_eq(memcmp(got, want, o), 0);
    cr_assert_gt(held, 0, "some byte-level token held half a character");
    pl_detok_free(&d);
    free(ids);
    pl_tokenizer_free(t);
    pl_gguf_free(g);
}

/* ---- unused tokens (a vocabulary's padding) ---- */

#define PUT(p, n) (memcpy(buf + o, (p), (n)), o += (n))
static size_t put_str(uint8_t *buf, size_t o, const char *s)
{
    uint64_t n = strlen(s);
    PUT(&n, 8);
    PUT(s, n);
    return o;
}

/* A GGUF v3 image of a gpt2 tokenizer: tokens[i] of types[i], no merges. */
static size_t vocab_gguf(uint8_t *buf, const char *const *tokens, const int32_t *types, int n)
{
    size_t o = 0;
    uint32_t v32 = 3, t;
    uint64_t v64 = 0;
    PUT("GGUF", 4);
    PUT(&v32, 4);
    PUT(&v64, 8);
    v64 = 4;
    PUT(&v64, 8);
    o = put_str(buf, o, "tokenizer.ggml.model");
    t = PL_GGUF_TYPE_STRING;
    PUT(&t, 4);
    o = put_str(buf, o, "gpt2");
    const char *arrays[] = {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                            "tokenizer.ggml.merges"};
    uint32_t et[] = {PL_GGUF_TYPE_STRING, PL_GGUF_TYPE_INT32, PL_GGUF_TYPE_STRING};
    uint64_t len[] = {(uint64_t)n, (uint64_t)n, 0};
    for (int a = 0; a < 3; a++) {
        o = put_str(buf, o, arrays[a]);
        t = PL_GGUF_TYPE_ARRAY;
        PUT(&t, 4);
        PUT(&et[a], 4);
        PUT(&len[a], 8);
        for (int i = 0; i < (int)len[a]; i++) {
            if (a == 0)
                o = put_str(buf, o, tokens[i]);
            else
                PUT(&types[i], 4);
        }
    }
    o = put_str(buf, o, "tokenizer.ggml.eos_token_id");
    t = PL_GGUF_TYPE_UINT32;
    PUT(&t, 4);
    v32 = 1;
    PUT(&v32, 4);
    return o;
}
#undef PUT

/* Unused tokens (llama.cpp's converter pads a vocabulary with them, as
 * Qwen's: [PAD...]) show as nothing, as llama.cpp's token_to_piece renders
 * them, and so do control tokens; both show with special tokens asked for. */
Test(detok, unused_and_control_tokens_are_hidden)
{
    static uint8_t buf[4096];
    const char *tokens[] = {"a", "<|end|>", "[PAD0]", "b"};
    const int32_t types[] = {1, 3, 5, 1};
    size_t n = vocab_gguf(buf, tokens, types, 4);
    char err[256];
    pl_gguf *g = pl_gguf_parse(buf, n, err, sizeof err);
    cr_assert_not_null(g, "%s", err);
    pl_tokenizer *t = pl_tokenizer_from_gguf(g, err, sizeof err);
    cr_assert_not_null(t, "%s", err);
    cr_assert_eq(pl_tokenizer_token_type(t, 2), PL_TOKEN_TYPE_UNUSED);
    cr_assert(pl_tokenizer_token_hidden(t, 1) && pl_tokenizer_token_hidden(t, 2));
    cr_assert(!pl_tokenizer_token_hidden(t, 0) && !pl_tokenizer_token_hidden(t, 3));
    const int32_t ids[] = {0, 2, 1, 3};
    const char *want[2] = {"ab", "a[PAD0]<|end|>b"};
    for (int special = 0; special < 2; special++) {
        pl_detok d;
        cr_assert_eq(pl_detok_init(&d, t, NULL, 0, special), 0);
        char got[64];
        size_t o = 0;
        pl_detok_out out;
        for (int i = 0; i < 4; i++) {
            cr_assert_eq(pl_detok_feed(&d, ids[i], &out), 0);
            memcpy(got + o, out.text, out.len);
            o += out.len;
        }
        cr_assert_eq(pl_detok_flush(&d, &out), 0);
        memcpy(got + o, out.text, out.len);
        o += out.len;
        cr_assert_eq(o, strlen(want[special]), "special %d: '%.*s'", special, (int)o, got);
        cr_assert_eq(memcmp(got, want[special], o), 0, "special %d: '%.*s'", special, (int)o,
                     got);
        pl_detok_free(&d);
    }
    pl_tokenizer_free(t);
    pl_gguf_free(g);
}
