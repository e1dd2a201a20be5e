/* test_tokenizer.c - the tokenizer against llama.cpp's tokenization
 * (fixtures from tests/fixtures/gen_tokenizer_fixtures.py via
 * llama-cpp-python) on the default SmolLM2 model (gpt2/smollm BPE) and a
 * tiny SentencePiece vocabulary; token bytes, decode, errors, invalid
 * UTF-8, and encode speed on ~100 KB of text.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/formats/gguf.h"
#include "backends/text/tokenizer.h"

#include "tests/helpers/model_path.h"

static const char *src_path(char *buf, size_t n, const char *rel)
{
    const char *src = getenv("PARLEY_SRC");
    snprintf(buf, n, "%s/%s", src ? src : ".", rel);
    return buf;
}

/* Open a GGUF and its tokenizer; skips the test when the file is absent. */
static pl_tokenizer *load(const char *path, pl_gguf **g)
{
    char err[256];
    if (access(path, R_OK) != 0)
        cr_skip_test("model not found: %s", path);
    *g = pl_gguf_open(path, err, sizeof err);
    cr_assert_not_null(*g, "gguf: %s", err);
    pl_tokenizer *t = pl_tokenizer_from_gguf(*g, err, sizeof err);
    cr_assert_not_null(t, "tokenizer: %s", err);
    return t;
}

static pl_tokenizer *load_smollm(pl_gguf **g)
{
    PL_TEST_MODEL_OR_SKIP();
    return load(pl_test_model_path(), g);
}

static pl_tokenizer *load_tiny_spm(pl_gguf **g)
{
    char p[4096];
    return load(src_path(p, sizeof p, "tests/fixtures/tiny_spm.gguf"), g);
}

static size_t unhex(const char *h, char *out)
{
    size_t n = strlen(h) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(h + 2 * i, "%2x", &v);
        out[i] = (char)v;
    }
    return n;
}

static void check_hashed(const pl_tokenizer *t, const char *s, size_t len,
                         json_t *want, const char *what)
{
    int32_t *ids;
    int n;
    cr_assert_eq(pl_tokenizer_encode(t, s, len, false, false, &ids, &n), 0);
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++)
        for (int b = 0; b < 4; b++)
            h = (h ^ (((uint32_t)ids[i] >> (8 * b)) & 0xff)) * 0x100000001b3ull;
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
    cr_expect_eq(n, json_integer_value(json_object_get(want, "n_ids")),
                 "%s: %d ids", what, n);
    cr_expect_str_eq(hex, json_string_value(json_object_get(want, "fnv1a64")),
                     "%s: ids differ", what);
    free(ids);
}

/* Long runs of one unit (whitespace, digits, emoji, ...). */
static void check_runs(const pl_tokenizer *t, json_t *runs)
{
    for (size_t r = 0; r < json_array_size(runs); r++) {
        json_t *run = json_array_get(runs, r);
        const char *unit = json_string_value(json_object_get(run, "unit"));
        const char *suf = json_string_value(json_object_get(run, "suffix"));
        size_t rep = (size_t)json_integer_value(json_object_get(run, "repeat"));
        size_t ul = strlen(unit), len = 0;
        char *s = malloc(ul * rep + strlen(suf) + 1);
        for (size_t i = 0; i < rep; i++, len += ul)
            memcpy(s + len, unit, ul);
        memcpy(s + len, suf, strlen(suf));
        len += strlen(suf);
        char what[64];
        snprintf(what, sizeof what, "run of '%s' x %zu", unit, rep);
        check_hashed(t, s, len, run, what);
        free(s);
    }
}

/* The fixture's ~100 KB text: its parts appended in a fixed order until
 * min_len bytes; llama.cpp's ids are stored as a count and FNV-1a hash. */
static void check_long(const pl_tokenizer *t, json_t *lg)
{
    json_t *parts = json_object_get(lg, "parts");
    size_t min_len = (size_t)json_integer_value(json_object_get(lg, "min_len"));
    size_t np = json_array_size(parts), len = 0;
    cr_assert_gt(np, 0);
    char *s = malloc(min_len + 4096);
    for (size_t i = 0; len < min_len; i++) {
        json_t *p = json_array_get(parts, (i * 7 + i / 3) % np);
        memcpy(s + len, json_string_value(p), json_string_length(p));
        len += json_string_length(p);
    }
    check_hashed(t, s, len, lg, "100 KB text");
    free(s);
    check_runs(t, json_object_get(lg, "runs"));
}

/* Encode every fixture case; returns the number of mismatches. */
static int check_fixture(const pl_tokenizer *t, const char *rel, int *n_cases)
{
    char p[4096];
    json_error_t je;
    json_t *root = json_load_file(src_path(p, sizeof p, rel), 0, &je);
    cr_assert_not_null(root, "fixture %s: %s", rel, je.text);
    json_t *cases = json_object_get(root, "cases");
    int bad = 0;
    *n_cases = (int)json_array_size(cases);
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        json_t *jt = json_object_get(c, "text");
        static char buf[1 << 16];
        size_t len;
        if (jt) {
            len = json_string_length(jt);
            memcpy(buf, json_string_value(jt), len);
        } else {
            len = unhex(json_string_value(json_object_get(c, "hex")), buf);
        }
        bool special = json_is_true(json_object_get(c, "special"));
        bool add = json_is_true(json_object_get(c, "add_special"));
        json_t *want = json_object_get(c, "ids");
        int32_t *ids;
        int n;
        cr_assert_eq(pl_tokenizer_encode(t, buf, len, add, special, &ids, &n), 0);
        bool same = (size_t)n == json_array_size(want);
        for (int k = 0; same && k < n; k++)
            same = ids[k] == json_integer_value(json_array_get(want, (size_t)k));
        if (!same) {
            bad++;
            fprintf(stderr, "MISMATCH case %zu (special=%d add=%d) \"%.*s\"\n  got:",
                    i, special, add, (int)len, buf);
            for (int k = 0; k < n; k++)
                fprintf(stderr, " %d", ids[k]);
            fprintf(stderr, "\n want:");
            for (size_t k = 0; k < json_array_size(want); k++)
                fprintf(stderr, " %lld",
                        (long long)json_integer_value(json_array_get(want, k)));
            fprintf(stderr, "\n");
        }
        free(ids);
    }
    if (json_object_get(root, "long"))
        check_long(t, json_object_get(root, "long"));
    json_decref(root);
    return bad;
}

Test(tokenizer, smollm2_matches_llama_cpp)
{
    pl_gguf *g;
    pl_tokenizer *t = load_smollm(&g);
    int n;
    int bad = check_fixture(t, "tests/fixtures/tokenizer_smollm2.json", &n);
    cr_assert_geq(n, 300);
    cr_assert_eq(bad, 0, "%d of %d cases differ from llama.cpp", bad, n);
    pl_tokenizer_free(t);
    pl_gguf_free(g);
}

Test(tokenizer, tiny_spm_matches_llama_cpp)
{
    pl_gguf *g;
    pl_tokenizer *t = load_tiny_spm(&g);
    int n;
    int bad = check_fixture(t, "tests/fixtures/tokenizer_tiny_spm.json", &n);
    cr_assert_geq(n, 300);
    cr_assert_eq(bad, 0, "%d of %d cases differ from llama.cpp", bad, n);
    pl_tokenizer_free(t);
    pl_gguf_free(g);
}

/* Gemma 3's 262k SentencePiece vocabulary (byte fallback, 6,249 control
 * and 165 user-defined tokens, runs of spaces and newlines among them):
 * accents, CJK, emoji, code, whitespace runs, invalid UTF-8, Gemma's chat
 * markers, a ~100 KB text and long runs, as llama.cpp tokenises them. */
Test(tokenizer, gemma3_matches_llama_cpp)
{
    PL_TEST_GEMMA_OR_SKIP();
    pl_gguf *g;
    pl_tokenizer *t = load(pl_test_gemma_path(), &g);
    int n;
    int bad = check_fixture(t, "tests/fixtures/tokenizer_gemma3.json", &n);
    cr_assert_geq(n, 400);
    cr_assert_eq(bad, 0, "%d of %d cases differ from llama.cpp", bad, n);
    cr_assert_eq(pl_tokenizer_n_vocab(t), 262144);
    cr_assert(pl_tokenizer_is_eog(t, pl_tokenizer_find(t, "<end_of_turn>", 13)));
    pl_tokenizer_free(t);
    pl_gguf_free(g);
}

/* The small gpt2 vocabularies under the other pre-tokenizers. */
static void check_small_bpe(const char *name)
{
    char gg[256], js[256], p[4096];
    pl_gguf *g;
    snprintf(gg, sizeof gg, "tests/fixtures/bpe_%s.gguf", name);
    snprintf(js, sizeof js, "tests/fixtures/tokenizer_bpe_%s.json", name);
    pl_tokenizer *t = load(src_path(p, sizeof p, gg), &g);
    int n;
    int bad = check_fixture(t, js, &n);
    cr_assert_geq(n, 250);
    cr_assert_eq(bad, 0, "%s: %d of %d cases differ from llama.cpp", name,
                 bad, n);
    pl_tokenizer_free(t);
    pl_gguf_free(g);
}

Test(tokenizer, pre_gpt2_matches_llama_cpp) { check_small_bpe("gpt2"); }
Test(tokenizer, pre_llama3_matches_llama_cpp) { check_small_bpe("llama3"); }
Test(tokenizer, pre_qwen2_matches_llama_cpp) { check_small_bpe("qwen2"); }
Test(tokenizer, pre_default_matches_llama_cpp) { check_small_bpe("default"); }
Test(tokenizer, pre_gpt4o_matches_llama_cpp) { check_small_bpe("gpt4o"); }
/* Qwen3.5's (tokenizer.ggml.pre "qwen35"): combining marks inside words. */
Test(tokenizer, pre_qwen35_matches_llama_cpp) { check_small_bpe("qwen35"); }

static void assert_bytes(const pl_tokenizer *t, const char *text, const char *want)
{
    int32_t id = pl_tokenizer_find(t, text, strlen(text));
    cr_assert_geq(id, 0, "token '%s' not found", text);
    size_t len;
    const char *b = pl_tokenizer_token_bytes(t, id, &len);
    cr_assert_eq(len, strlen(want), "bytes of '%s'", text);
    cr_assert_eq(memcmp(b, want, len), 0, "bytes of '%s'", text);
}

Test(tokenizer, smollm2_specials_and_bytes)
{
    pl_gguf *g;
    pl_tokenizer *t = load_smollm(&g);
    cr_assert_eq(pl_tokenizer_n_vocab(t), 49152);
    cr_assert_eq(pl_tokenizer_bos(t), 1);
    cr_assert_eq(pl_tokenizer_eos(t), 2);
    cr_assert(pl_tokenizer_is_eog(t, 2));   /* <|im_end|> */
    cr_assert(pl_tokenizer_is_eog(t, 0));   /* <|endoftext|> */
    cr_assert_not(pl_tokenizer_is_eog(t, 1));
    cr_assert_not(pl_tokenizer_is_eog(t, 100));
    cr_assert_eq(pl_tokenizer_token_type(t, 1), PL_TOKEN_TYPE_CONTROL);
    assert_bytes(t, "\xc4\xa0the", " the");  /* Ġthe */
    assert_bytes(t, "\xc4\x8a", "\n");       /* Ċ */
    assert_bytes(t, "<|im_start|>", "<|im_start|>");
    size_t len;
    cr_assert_null(pl_tokenizer_token_bytes(t, -1, &len));
    cr_assert_null(pl_tokenizer_token_bytes(t, 49152, &len));
    pl_tokenizer_free(t);
    pl_gguf_free(g);
}

Test(tokenizer, decode_round_trips)
{
    pl_gguf *g;
    pl_tokenizer *t = load_smollm(&g);
    const char *s[] = {"Hello, world! It's 2024.", "日本語 😀👍🏽 مرحبا",
                       "  code:\n\tx = 1;\r\n", ""};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        int32_t *ids;
        int n;
        cr_assert_eq(pl_tokenizer_encode(t, s[i], strlen(s[i]), false, false,
                                         &ids, &n), 0);
        char buf[256];
        size_t len = pl_tokenizer_decode(t, ids, n, false, buf, sizeof buf);
        cr_assert_eq(len, strlen(s[i]));
        cr_assert_str_eq(buf, s[i]);
        free(ids);
    }
    const char *chat = "<|im_start|>user\nhi<|im_end|>";
    int32_t *ids;
    int n;
    cr_assert_eq(pl_tokenizer_encode(t, chat, strlen(chat), false, true, &ids, &n), 0);
    char buf[64];
    cr_assert_eq(pl_tokenizer_decode(t, ids, n, false, buf, sizeof buf), 7);
    cr_assert_str_eq(buf, "user\nhi");
    cr_assert_eq(pl_tokenizer_decode(t, ids, n, true, buf, sizeof buf), strlen(chat));
    cr_assert_str_eq(buf, chat);
    cr_assert_eq(pl_tokenizer_decode(t, ids, n, true, buf, 4), strlen(chat));
    free(ids);
    pl_tokenizer_free(t);
    pl_gguf_free(g);
}

Test(tokenizer, spm_token_bytes)
{
    pl_gguf *g;
    pl_tokenizer *t = load_tiny_spm(&g);
    cr_assert_eq(pl_tokenizer_bos(t), 1);
    assert_bytes(t, "<0x41>", "A");
    assert_bytes(t, "<0x0A>", "\n");
    assert_bytes(t, "\xe2\x96\x81the", " the");
    assert_bytes(t, "<|im_end|>", "<|im_end|>");
    cr_assert(pl_tokenizer_is_eog(t, 2));
    cr_assert(pl_tokenizer_is_eog(t, pl_tokenizer_find(t, "<|im_end|>", 10)));
    int32_t *ids;
    int n;
    const char *s = "the 😀 dog";  /* emoji by byte fallback */
    cr_assert_eq(pl_tokenizer_encode(t, s, strlen(s), true, false, &ids, &n), 0);
    cr_assert_eq(ids[0], 1);
    char buf[64];
    pl_tokenizer_decode(t, ids, n, false, buf, sizeof buf);
    cr_assert_str_eq(buf, " the 😀 dog"); /* the SPM leading space */
    free(ids);
    pl_tokenizer_free(t);
    pl_gguf_free(g);
}

static pl_tokenizer *tiny_gpt2(const char *pre, char *err, size_t errlen)
{
    const char *toks[] = {"a", "b", "ab", "<|x|>"};
    uint32_t lens[] = {1, 1, 2, 5};
    int32_t types[] = {1, 1, 1, 3};
    const char *merges[] = {"a b"};
    uint32_t mlens[] = {3};
    pl_tokenizer_vocab v = {
        .model = PL_TOKENIZER_MODEL_GPT2, .pre = pre, .n_tokens = 4,
        .tokens = toks, .token_lens = lens, .types = types, .n_merges = 1,
        .merges = merges, .merge_lens = mlens, .bos = 3, .eos = 3, .unk = -1,
        .pad = -1, .eot = -1, .eom = -1, .add_bos = -1, .add_eos = -1,
        .add_space_prefix = -1};
    return pl_tokenizer_init(&v, err, errlen);
}

Test(tokenizer, errors_name_the_unsupported_thing)
{
    char err[256];
    cr_assert_null(tiny_gpt2("klingon", err, sizeof err));
    cr_assert(strstr(err, "klingon"), "%s", err);
    pl_tokenizer_vocab v = {.model = 7};
    cr_assert_null(pl_tokenizer_init(&v, err, sizeof err));
    cr_assert(strstr(err, "unsupported"), "%s", err);
    const char *pres[] = {"gpt2", "smollm", "llama3", "llama-bpe", "qwen2",
                          "default", NULL};
    for (int i = 0; i < 7; i++) {
        pl_tokenizer *t = tiny_gpt2(pres[i], err, sizeof err);
        cr_assert_not_null(t, "%s: %s", pres[i] ? pres[i] : "(none)", err);
        int32_t *ids;
        int n;
        cr_assert_eq(pl_tokenizer_encode(t, "ab<|x|>", 7, true, true, &ids, &n), 0);
        bool bos = !strcmp(pres[i] ? pres[i] : "", "llama3") ||
                   !strcmp(pres[i] ? pres[i] : "", "llama-bpe");
        cr_assert_eq(n, 2 + bos, "%s", pres[i] ? pres[i] : "(none)");
        cr_assert_eq(ids[bos], 2);
        cr_assert_eq(ids[bos + 1], 3);
        free(ids);
        pl_tokenizer_free(t);
    }
}

/* A GGUF v3 image with string metadata only (key, value pairs). */
static size_t mini_gguf(uint8_t *buf, const char *const *kv, int n)
{
    size_t o = 0;
    uint32_t v32;
    uint64_t v64;
#define PUT(p, n) (memcpy(buf + o, (p), (n)), o += (n))
    PUT("GGUF", 4);
    v32 = 3;
    PUT(&v32, 4);
    v64 = 0;
    PUT(&v64, 8);
    v64 = (uint64_t)n;
    PUT(&v64, 8);
    for (int i = 0; i < n; i++) {
        v64 = strlen(kv[2 * i]);
        PUT(&v64, 8);
        PUT(kv[2 * i], v64);
        v32 = PL_GGUF_TYPE_STRING;
        PUT(&v32, 4);
        v64 = strlen(kv[2 * i + 1]);
        PUT(&v64, 8);
        PUT(kv[2 * i + 1], v64);
    }
#undef PUT
    return o;
}

Test(tokenizer, gguf_errors_name_the_problem)
{
    static uint8_t buf[4096];
    char err[256];
    const char *rwkv[] = {"tokenizer.ggml.model", "rwkv"};
    const char *bert[] = {"tokenizer.ggml.model", "bert"};
    const char *none[] = {"general.name", "x"};
    const char *notoks[] = {"tokenizer.ggml.model", "gpt2"};
    const char *gemma4[] = {"tokenizer.ggml.model", "gemma4"};
    struct { const char *const *kv; const char *want; } cases[] = {
        {rwkv, "'rwkv'"}, {none, "tokenizer.ggml.model"},
        {notoks, "tokenizer.ggml.tokens"}, {bert, "tokenizer.ggml.tokens"},
        {gemma4, "tokenizer.ggml.tokens"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t n = mini_gguf(buf, cases[i].kv, 1);
        pl_gguf *g = pl_gguf_parse(buf, n, err, sizeof err);
        cr_assert_not_null(g, "%s", err);
        cr_assert_null(pl_tokenizer_from_gguf(g, err, sizeof err));
        cr_assert(strstr(err, cases[i].want), "'%s' lacks '%s'", err,
                  cases[i].want);
        pl_gguf_free(g);
    }
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Random bytes (often invalid UTF-8, with special-token fragments) never
 * crash, and every id is in range. */
static void fuzz(const pl_tokenizer *t)
{
    static const char *bits[] = {"<|im_start|>", "<|im_", "\xf0\x9f", "\xe4\xbd",
                                 " ", "\n", "'s", "12", "\xff", "[UD]", "<0x41>"};
    uint64_t s = 0x9e3779b97f4a7c15ull;
    char buf[512];
    for (int it = 0; it < 3000; it++) {
        size_t len = rng_next(&s) % 200;
        size_t o = 0;
        while (o < len) {
            if (rng_next(&s) % 4 == 0) {
                const char *b = bits[rng_next(&s) % (sizeof bits / sizeof bits[0])];
                size_t bl = strlen(b);
                memcpy(buf + o, b, bl);
                o += bl;
            } else {
                buf[o++] = (char)rng_next(&s);
            }
        }
        int32_t *ids;
        int n;
        cr_assert_eq(pl_tokenizer_encode(t, buf, o, it & 1, it & 2, &ids, &n), 0);
        for (int k = 0; k < n; k++)
            cr_assert(ids[k] >= 0 && ids[k] < pl_tokenizer_n_vocab(t));
        free(ids);
    }
}

Test(tokenizer, fuzz_random_bytes)
{
    pl_gguf *g, *g2;
    pl_tokenizer *t = load_tiny_spm(&g);
    fuzz(t);
    pl_tokenizer_free(t);
    pl_gguf_free(g);
    t = load_smollm(&g2);
    fuzz(t);
    pl_tokenizer_free(t);
    pl_gguf_free(g2);
}

/* CPU time of this thread: unlike wall time, another process busy on the
 * same cores does not inflate it. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ~100 KB of mixed prose, code, numbers and non-Latin text. */
static char *big_text(size_t *len)
{
    static const char *parts[] = {
        "The quick brown fox jumps over the lazy dog. ",
        "It's 2024-06-01 and we've shipped v1.2.3 with 12345 fixes!\n",
        "def f(x):\n    return [i * 2 for i in range(x)]\n\n",
        "日本語のテキストと中文字符。 ", "Привет, мир! ", "emoji 😀🎉 ",
        "    indented\tline\r\n", "\"quoted\" (parens) {braces} <tags/> ",
    };
    size_t cap = 100 * 1024, o = 0;
    char *s = malloc(cap + 128);
    for (size_t i = 0; o < cap; i++) {
        const char *p = parts[(i * 7 + i / 3) % 8];
        size_t n = strlen(p);
        memcpy(s + o, p, n);
        o += n;
    }
    *len = o;
    return s;
}

/* Best of 3 encode times of s[0, len) in CPU seconds; logs the speed. */
static double speed(const pl_tokenizer *t, const char *name, const char *s, size_t len)
{
    int32_t *ids;
    int n = 0;
    double best = 1e9;
    for (int r = 0; r < 3; r++) {
        double t0 = cpu_s();
        cr_assert_eq(pl_tokenizer_encode(t, s, len, false, true, &ids, &n), 0);
        double dt = cpu_s() - t0;
        if (dt < best)
            best = dt;
        free(ids);
    }
    fprintf(stderr, "encode speed %s: %zu bytes -> %d tokens in %.2f ms CPU = "
            "%.0f tokens/s (%.1f MB/s)\n", name, len, n, best * 1e3,
            n / best, len / best / 1e6);
    cr_assert_gt(n, 0);
    return best;
}

/* Not a benchmark: encode time must grow about linearly with the input.
 * A quarter of the text must take more than 1/8 of the time of the whole
 * (linear: 1/4; quadratic: 1/16). CPU time, so a busy machine does not
 * matter; a floor of 2 ms keeps timer noise out of the ratio. */
static void scales_linearly(const pl_tokenizer *t, const char *name, const char *s,
                            size_t len)
{
    char label[128];
    snprintf(label, sizeof label, "%s (1/4)", name);
    double quarter = speed(t, label, s, len / 4);
    double whole = speed(t, name, s, len);
    if (quarter < 0.002)
        quarter = 0.002;
    cr_assert_lt(whole, 8 * quarter, "%s: %.1f ms for all, %.1f ms for a quarter",
                 name, whole * 1e3, quarter * 1e3);
}

Test(tokenizer, encode_time_is_linear_100kb, .timeout = 120)
{
    pl_gguf *g, *g2;
    size_t len;
    char *s = big_text(&len);
    pl_tokenizer *t = load_smollm(&g);
    scales_linearly(t, "smollm2 (gpt2 BPE), mixed text", s, len);
    char *one = malloc(len);
    memset(one, 'a', len); /* one 100 KB word: no quadratic merge blowup */
    scales_linearly(t, "smollm2, one 100 KB word", one, len);
    pl_tokenizer_free(t);
    pl_gguf_free(g);
    t = load_tiny_spm(&g2);
    scales_linearly(t, "tiny SPM, mixed text", s, len);
    scales_linearly(t, "tiny SPM, one 100 KB word", one, len);
    pl_tokenizer_free(t);
    pl_gguf_free(g2);
    free(one);
    free(s);
}

/* tokenizer.ggml.model "gemma4" (the tiny Gemma 4 GGUF, gen_gemma4.py):
 * ids equal llama.cpp 0.3.36's on tiny_gemma4_tokens.json's strings
 * (gen_gemma4_tokens.py), BOS always added, and they decode back to the
 * text. */
Test(tokenizer, gemma4_gguf_matches_llama_cpp)
{
    char path[4096];
    pl_gguf *g;
    pl_tokenizer *t = load(src_path(path, sizeof path, "tests/fixtures/tiny_gemma4_e2b.gguf"),
                           &g);
    json_error_t jerr;
    json_t *doc = json_load_file(src_path(path, sizeof path,
                                          "tests/fixtures/tiny_gemma4_tokens.json"), 0, &jerr);
    cr_assert_not_null(doc, "%s", jerr.text);
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(doc, "cases"), i, c) {
        const char *text = json_string_value(json_object_get(c, "text"));
        json_t *want = json_object_get(json_object_get(c, "llama"), "e2b");
        int32_t *ids = NULL;
        int n = 0;
        cr_assert_eq(pl_tokenizer_encode(t, text, strlen(text), true, false, &ids, &n), 0);
        cr_assert_eq((size_t)n, json_array_size(want), "%s: %d ids", text, n);
        for (int k = 0; k < n; k++)
            cr_expect_eq(ids[k], json_integer_value(json_array_get(want, (size_t)k)),
                         "%s: id %d", text, k);
        cr_assert_eq(ids[0], 2, "BOS first");
        char out[1024];
        size_t len = pl_tokenizer_decode(t, ids + 1, n - 1, false, out, sizeof out);
        cr_assert_lt(len, sizeof out);
        cr_expect_str_eq(out, text);
        free(ids);
    }
    json_decref(doc);
    pl_tokenizer_free(t);
    pl_gguf_free(g);
}
