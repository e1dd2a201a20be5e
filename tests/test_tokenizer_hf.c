/* test_tokenizer_hf.c - tokenizer.json and tokenizer_config.json
 * (backends/text/tokenizer_hf*.c): for each style the families use
 * (tests/fixtures/hf_tok/), the ids of varied texts equal the `tokenizers`
 * library's (tests/fixtures/gen_hf_tokenizer_fixtures.py), with and
 * without the special tokens; the chat template and special tokens come
 * from tokenizer_config.json (a string, a list, or chat_template.jinja);
 * what parley does not read is refused naming the file and the key. And
 * NFC itself on a few canonical cases.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/text/tokenizer_hf.h"
#include "backends/text/tokenizer_internal.h"

static const char *src_(void)
{
    const char *s = getenv("PARLEY_SRC");
    return s ? s : ".";
}

static void expect_ids(const pl_tokenizer *t, const char *style, json_t *text, json_t *want,
                       bool special)
{
    int32_t *ids;
    int n;
    cr_assert_eq(pl_tokenizer_encode(t, json_string_value(text), json_string_length(text),
                                     special, true, &ids, &n), 0);
    bool same = (size_t)n == json_array_size(want);
    for (int i = 0; same && i < n; i++)
        same = ids[i] == json_integer_value(json_array_get(want, (size_t)i));
    char got[2048] = "";
    for (int i = 0; i < n && strlen(got) < 2000; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%d ", ids[i]);
    char *w = json_dumps(want, JSON_COMPACT);
    cr_expect(same, "%s%s: '%s':\n ours %s\n  ref %s", style, special ? " (special)" : "",
              json_string_value(text), got, w);
    free(w);
    free(ids);
}

Test(tokenizer_hf, equals_the_tokenizers_library)
{
    char p[1024];
    json_error_t je;
    snprintf(p, sizeof p, "%s/tests/fixtures/hf_tokenizer_fixtures.json", src_());
    json_t *fix = json_load_file(p, 0, &je), *f;
    cr_assert(fix, "%s: %s", p, je.text);
    const char *style;
    json_object_foreach(fix, style, f) {
        char dir[1024], err[512];
        snprintf(dir, sizeof dir, "%s/tests/fixtures/hf_tok/%s", src_(), style);
        pl_tokenizer *t = pl_tokenizer_from_hf(dir, NULL, err, sizeof err);
        cr_assert(t, "%s: %s", style, err);
        json_t *texts = json_object_get(f, "texts");
        for (size_t i = 0; i < json_array_size(texts); i++) {
            expect_ids(t, style, json_array_get(texts, i),
                       json_array_get(json_object_get(f, "plain"), i), false);
            expect_ids(t, style, json_array_get(texts, i),
                       json_array_get(json_object_get(f, "special"), i), true);
        }
        pl_tokenizer_free(t);
    }
    json_decref(fix);
}

Test(tokenizer_hf, specials_and_template_from_the_config)
{
    char dir[1024], err[512];
    pl_hf_text tx;
    snprintf(dir, sizeof dir, "%s/tests/fixtures/hf_tok/llama3", src_());
    pl_tokenizer *t = pl_tokenizer_from_hf(dir, &tx, err, sizeof err);
    cr_assert(t, "%s", err);
    cr_expect_str_eq(tx.bos_text, "<|begin_of_text|>");
    cr_expect_str_eq(tx.eos_text, "<|eot_id|>");
    cr_assert(tx.chat_template);
    cr_expect(strstr(tx.chat_template, "<|start_header_id|>"));
    pl_tokenizer_specials sp;
    pl_tokenizer_specials_get(t, &sp);
    cr_expect(sp.add_bos);
    cr_expect_eq(sp.bos, pl_tokenizer_find(t, "<|begin_of_text|>", 17));
    cr_expect(pl_tokenizer_is_eog(t, pl_tokenizer_find(t, "<|eot_id|>", 10)));
    cr_expect_eq(pl_tokenizer_token_type(t, sp.bos), PL_TOKEN_TYPE_CONTROL);
    pl_hf_text_free(&tx);
    pl_tokenizer_free(t);
    snprintf(dir, sizeof dir, "%s/tests/fixtures/hf_tok/gemma", src_());
    t = pl_tokenizer_from_hf(dir, &tx, err, sizeof err);
    cr_assert(t, "%s", err);
    pl_tokenizer_specials_get(t, &sp);
    cr_expect_eq(sp.model, PL_TOKENIZER_MODEL_LLAMA);
    cr_expect_eq(sp.unk, 3);
    cr_expect_eq(pl_tokenizer_token_type(t, pl_tokenizer_find(t, "<0x41>", 6)),
                 PL_TOKEN_TYPE_BYTE);
    size_t len;
    const char *b = pl_tokenizer_token_bytes(t, pl_tokenizer_find(t, "<0x41>", 6), &len);
    cr_expect(len == 1 && b[0] == 'A');
    pl_hf_text_free(&tx);
    pl_tokenizer_free(t);
}

/* ---- files written here ---- */

static char dir_[256];

static void put(const char *name, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir_, name);
    FILE *f = fopen(p, "w");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
}

static void setup(void)
{
    snprintf(dir_, sizeof dir_, "/tmp/parley_tokhf_%d_XXXXXX", (int)getpid());
    cr_assert(mkdtemp(dir_));
}

static void teardown(void)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_);
    cr_expect_eq(system(cmd), 0);
}

#define VOCAB_ "\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]"
#define BYTELEVEL_ "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false}"

static void refused(const char *tokenizer_json, const char *config, const char *key)
{
    char err[512] = "";
    put("tokenizer.json", tokenizer_json);
    put("tokenizer_config.json", config ? config : "{}");
    pl_tokenizer *t = pl_tokenizer_from_hf(dir_, NULL, err, sizeof err);
    cr_expect_null(t, "accepted: %s", tokenizer_json);
    cr_expect(strstr(err, config ? "tokenizer_config.json" : "tokenizer.json"), "%s", err);
    cr_expect(strstr(err, key), "'%s' not in: %s", key, err);
    pl_tokenizer_free(t);
}

Test(tokenizer_hf, refuses_what_it_does_not_read, .init = setup, .fini = teardown)
{
    char err[512] = "";
    cr_expect_null(pl_tokenizer_from_hf(dir_, NULL, err, sizeof err));
    cr_expect(strstr(err, "tokenizer.json") && strstr(err, "missing"), "%s", err);
    refused("{\"model\":", NULL, "tokenizer.json:1");
    refused("{\"model\":{\"type\":\"Unigram\"," VOCAB_ "}}", NULL, "model.type");
    refused("{\"model\":{\"type\":\"WordPiece\"}}", NULL, "model.vocab");
    refused("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-4}}}", NULL, "model.vocab.a");
    refused("{\"normalizer\":{\"type\":\"Lowercase\"},\"model\":{\"type\":\"BPE\"," VOCAB_
            "}," BYTELEVEL_ "}", NULL, "normalizer.type");
    refused("{\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":"
            "\"Whitespace\"}]},\"model\":{\"type\":\"BPE\"," VOCAB_ "}}", NULL,
            "pre_tokenizer.pretokenizers[0].type");
    refused("{\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true},"
            "\"model\":{\"type\":\"BPE\"," VOCAB_ "}}", NULL, "add_prefix_space");
    refused("{\"model\":{\"type\":\"BPE\"," VOCAB_ "}}", NULL, "pre_tokenizer");
    refused("{\"model\":{\"type\":\"BPE\"," VOCAB_ ",\"continuing_subword_prefix\":\"##\"},"
            BYTELEVEL_ "}", NULL, "continuing_subword_prefix");
    refused("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[7]}," BYTELEVEL_ "}",
            NULL, "model.merges[0]");
    refused("{\"model\":{\"type\":\"BPE\"," VOCAB_ "}," BYTELEVEL_ "}",
            "{\"eos_token\":\"</s>\"}", "eos_token");
    refused("{\"model\":{\"type\":\"BPE\"," VOCAB_ "}," BYTELEVEL_ "}",
            "{\"chat_template\":[{\"name\":\"tool_use\",\"template\":\"x\"}]}", "chat_template");
}

Test(tokenizer_hf, chat_template_sources, .init = setup, .fini = teardown)
{
    char err[512];
    pl_hf_text tx;
    put("tokenizer.json", "{\"model\":{\"type\":\"BPE\"," VOCAB_ "}," BYTELEVEL_ "}");
    put("tokenizer_config.json", "{\"chat_template\":[{\"name\":\"default\",\"template\":\"D\"},"
        "{\"name\":\"rag\",\"template\":\"R\"}]}");
    pl_tokenizer *t = pl_tokenizer_from_hf(dir_, &tx, err, sizeof err);
    cr_assert(t, "%s", err);
    cr_expect_str_eq(tx.chat_template, "D");
    pl_hf_text_free(&tx);
    pl_tokenizer_free(t);
    put("tokenizer_config.json", "{}");
    put("chat_template.jinja", "{{ messages }}");
    t = pl_tokenizer_from_hf(dir_, &tx, err, sizeof err);
    cr_assert(t, "%s", err);
    cr_expect_str_eq(tx.chat_template, "{{ messages }}");
    cr_expect_str_eq(tx.bos_text, "");
    pl_hf_text_free(&tx);
    pl_tokenizer_free(t);
}

static void nfc_is(const char *in, const char *want)
{
    char *out;
    size_t n;
    cr_assert_eq(pl_tok_nfc(in, strlen(in), &out, &n), 0);
    cr_expect(n == strlen(want) && !memcmp(out, want, n), "NFC(%s) = %.*s", in, (int)n, out);
    free(out);
}

Test(tokenizer_hf, nfc)
{
    nfc_is("plain ascii", "plain ascii");
    nfc_is("e\xcc\x81", "\xc3\xa9");                       /* e + acute -> é */
    nfc_is("\xc3\xa9", "\xc3\xa9");                        /* é stays */
    nfc_is("a\xcc\xa3\xcc\x81", "\xe1\xba\xa1\xcc\x81");      /* a + dot below, acute */
    nfc_is("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", "\xea\xb0\x81"); /* jamo -> 각 */
    nfc_is("\xe2\x84\xab", "\xc3\x85");                    /* angstrom sign -> Å */
    nfc_is("q\xcc\x87\xcc\xa3", "q\xcc\xa3\xcc\x87");      /* marks reordered by class */
}
