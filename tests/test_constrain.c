/* test_constrain.c - backends/engine/constrain: the regex engine against
 * hand-checked matches, JSON schemas against documents, and token masks
 * against brute force (each allowed token keeps the automaton alive, each
 * refused one kills it) on a synthetic vocabulary and on SmolLM2's. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/constrain/constraint.h"
#include "backends/engine/constrain/json_schema.h"
#include "backends/engine/constrain/regex.h"
#include "backends/engine/constrain/token_fsm.h"
#include "backends/engine/model/gguf.h"
#include "backends/engine/text/tokenizer.h"
#include "tests/helpers/model_path.h"

static pl_dfa *compile(const char *re)
{
    char err[256] = "";
    pl_dfa *d = pl_regex_compile(re, strlen(re), 0, 4096, err, sizeof err);
    cr_assert_not_null(d, "%s: %s", re, err);
    return d;
}

static void expect(const char *re, const char *s, bool want)
{
    pl_dfa *d = compile(re);
    cr_expect_eq(pl_dfa_match(d, s, strlen(s)), want, "/%s/ on \"%s\": want %d", re, s,
                 want);
    pl_dfa_free(d);
}

Test(regex, literals_classes_quantifiers)
{
    expect("abc", "abc", true);
    expect("abc", "abcd", false);
    expect("^abc$", "abc", true);
    expect("a|bc|", "", true);
    expect("a|bc", "bc", true);
    expect("(ab)+", "ababab", true);
    expect("(ab)+", "", false);
    expect("(?:ab)*c", "c", true);
    expect("a{2,3}", "aaaa", false);
    expect("a{2,3}", "aaa", true);
    expect("a{2}", "aa", true);
    expect("a{2,}", "aaaaaaa", true);
    expect("a{2,}", "a", false);
    expect("x?y", "y", true);
    expect("[a-c]+", "abcabc", true);
    expect("[a-c]+", "abd", false);
    expect("[^a-c]", "d", true);
    expect("[^a-c]", "b", false);
    expect("[^a-c]", "é", true);          /* one whole UTF-8 character */
    expect("\\d{3}-\\d{4}", "555-1234", true);
    expect("\\w+\\s\\w+", "hello world", true);
    expect("\\W", "a", false);
    expect("\\D", "5", false);
    expect("\\S+", "a\t", false);
    expect("a.c", "a\nc", false);
    expect("a.c", "a€c", true);
    expect("a.c", "a\xe2\x82", false);  /* half a character */
    expect("\\x41\\u00e9", "Aé", true);
    expect("[éà]", "à", true);
    expect("\\.\\*\\(", ".*(", true);
    expect("a{", "a{", true);              /* a literal brace */
    expect("colou?r", "color", true);
    expect("(a|b)*?c", "ababc", true);     /* lazy: the same language */
}

Test(regex, errors_name_the_construct)
{
    const char *bad[] = {"(?=a)", "a\\1", "a^b", "a$b", "[b-a]", "(a", "a)", "*a",
                         "a{3,2}", "a++", "\\b", "[]"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char err[256] = "";
        pl_dfa *d = pl_regex_compile(bad[i], strlen(bad[i]), 0, 4096, err, sizeof err);
        cr_expect_null(d, "%s compiled", bad[i]);
        cr_expect(strstr(err, "regex:") != NULL, "%s: %s", bad[i], err);
        pl_dfa_free(d);
    }
    char err[256];
    cr_expect_null(pl_regex_compile("(?=a)", 5, 0, 64, err, sizeof err));
    cr_expect(strstr(err, "lookaround"), "%s", err);
    cr_expect_null(pl_regex_compile("a{1000}{1000}", 13, 0, 64, err, sizeof err));
    cr_expect(strstr(err, "too"), "%s", err);
}

static void expect_schema(const char *schema, const char *doc, bool want)
{
    json_error_t je;
    json_t *s = json_loads(schema, 0, &je);
    cr_assert_not_null(s, "%s", je.text);
    char err[400] = "";
    char *re = pl_json_schema_regex(s, err, sizeof err);
    cr_assert_not_null(re, "%s: %s", schema, err);
    pl_dfa *d = compile(re);
    cr_expect_eq(pl_dfa_match(d, doc, strlen(doc)), want, "%s on %s (regex %s)", schema, doc,
                 re);
    pl_dfa_free(d);
    free(re);
    json_decref(s);
}

Test(json_schema, shapes)
{
    const char *obj = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
                      "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
                      "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},"
                      "\"maxItems\":2}},\"required\":[\"name\"]}";
    expect_schema(obj, "{\"name\": \"Ann\", \"age\": 42, \"tags\": [\"a\", \"b\"]}", true);
    expect_schema(obj, "{\"name\": \"Ann\"}", true);
    expect_schema(obj, "{\"name\": \"Ann\", \"tags\": []}", true);
    expect_schema(obj, "{\"age\": 42}", false);
    expect_schema(obj, "{\"name\": \"Ann\", \"age\": 151}", false);
    expect_schema(obj, "{\"name\": \"Ann\", \"tags\": [\"a\", \"b\", \"c\"]}", false);
    const char *opt = "{\"properties\":{\"a\":{\"type\":\"null\"},\"b\":{\"type\":\"boolean\"}}}";
    expect_schema(opt, "{}", true);
    expect_schema(opt, "{\"b\": true}", true);
    expect_schema(opt, "{\"a\": null, \"b\": false}", true);
    expect_schema(opt, "{, \"b\": false}", false);
    const char *num = "{\"type\":\"number\",\"minimum\":-2.5,\"maximum\":3}";
    expect_schema(num, "-2", true);
    expect_schema(num, "2.75", true);
    expect_schema(num, "3", true);
    expect_schema(num, "3.5", false);
    expect_schema(num, "-3", false);
    expect_schema(num, "-1.5", true);
    const char *in = "{\"type\":\"integer\",\"minimum\":-120,\"maximum\":1234}";
    for (int v = -130; v <= 1300; v += 7) {
        char doc[16];
        snprintf(doc, sizeof doc, "%d", v);
        expect_schema(in, doc, v >= -120 && v <= 1234);
    }
    expect_schema(in, "007", false);
    const char *en = "{\"enum\":[\"red\",1,null,{\"a\":[1]}]}";
    expect_schema(en, "\"red\"", true);
    expect_schema(en, "{\"a\":[1]}", true);
    expect_schema(en, "\"blue\"", false);
    const char *str = "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}";
    expect_schema(str, "\"ab\"", true);
    expect_schema(str, "\"aé\\n\"", true);
    expect_schema(str, "\"abcd\"", false);
    expect_schema(str, "\"a\"", false);
    const char *pat = "{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}\\\\d+$\"}";
    expect_schema(pat, "\"AB12\"", true);
    expect_schema(pat, "\"AB\"", false);
    const char *ref = "{\"$defs\":{\"P\":{\"type\":\"object\",\"properties\":{\"x\":"
                      "{\"const\":1}},\"required\":[\"x\"]}},\"type\":\"array\","
                      "\"items\":{\"$ref\":\"#/$defs/P\"},\"minItems\":1}";
    expect_schema(ref, "[{\"x\": 1}, {\"x\": 1}]", true);
    expect_schema(ref, "[]", false);
    const char *any = "{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}";
    expect_schema(any, "\"x\"", true);
    expect_schema(any, "12", true);
    expect_schema(any, "1.5", false);
}

Test(json_schema, unsupported_keywords_are_named)
{
    const char *bad[][2] = {
        {"{\"type\":\"string\",\"format\":\"date-time\"}", "'format'"},
        {"{\"type\":\"array\",\"prefixItems\":[]}", "'prefixItems'"},
        {"{\"$ref\":\"http://x/y\"}", "$ref"},
        {"{\"type\":\"strin\"}", "strin"},
        {"{\"not\":{}}", "'not'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *s = json_loads(bad[i][0], 0, NULL);
        char err[400] = "";
        char *re = pl_json_schema_regex(s, err, sizeof err);
        cr_expect_null(re, "%s", bad[i][0]);
        cr_expect(strstr(err, bad[i][1]) != NULL, "%s: %s", bad[i][0], err);
        free(re);
        json_decref(s);
    }
}

Test(json_schema, json_object_and_choices)
{
    char *re = pl_json_object_regex();
    pl_dfa *d = compile(re);
    const char *ok[] = {"{}", "{\"a\": 1}", "{\"a\": {\"b\": [1, \"x\", null]}, \"c\": true}"};
    for (size_t i = 0; i < 3; i++)
        cr_expect(pl_dfa_match(d, ok[i], strlen(ok[i])), "%s", ok[i]);
    cr_expect_not(pl_dfa_match(d, "[1]", 3));
    cr_expect_not(pl_dfa_match(d, "{\"a\" 1}", 7));
    pl_dfa_free(d);
    free(re);
    const char *ch[] = {"A) yes", "B) no (really)", "C"};
    re = pl_choice_regex(ch, 3);
    d = compile(re);
    for (int i = 0; i < 3; i++)
        cr_expect(pl_dfa_match(d, ch[i], strlen(ch[i])));
    cr_expect_not(pl_dfa_match(d, "B) no", 5));
    pl_dfa_free(d);
    free(re);
}

/* ---- token masks against brute force ---- */

typedef struct synth_vocab {
    int n;
    char **tok;
    size_t *len;
    int eog;
} synth_vocab;

static const char *synth_bytes(void *ud, int32_t id, size_t *len)
{
    synth_vocab *v = ud;
    if (id < 0 || id >= v->n || id == v->eog) {
        *len = 0;
        return NULL;
    }
    *len = v->len[id];
    return v->tok[id];
}

static bool synth_eog(void *ud, int32_t id)
{
    return id == ((synth_vocab *)ud)->eog;
}

/* Every state of f, or 200 random ones: each token's bit equals whether
 * walking its bytes from the state stays alive; end tokens are allowed
 * exactly in accepting states. */
static void brute_force(const pl_token_fsm *f, const pl_vocab_source *src, unsigned seed)
{
    srand(seed);
    int n_check = f->n_states < 200 ? f->n_states : 200;
    for (int k = 0; k < n_check; k++) {
        int32_t q = f->n_states < 200 ? k : rand() % f->n_states;
        for (int32_t t = 0; t < src->n_vocab; t++) {
            size_t len;
            const char *b = src->token_bytes(src->ud, t, &len);
            bool alive;
            if (src->is_eog(src->ud, t)) {
                alive = f->dfa->accept[q];
            } else {
                int32_t s = (b && len) ? q : -1;
                for (size_t i = 0; i < len && s >= 0; i++)
                    s = f->dfa->trans[(size_t)s * 256 + (unsigned char)b[i]];
                alive = s >= 0;
                if (alive)
                    cr_assert_eq(pl_token_fsm_next(f, q, t), s);
            }
            cr_assert_eq(pl_token_fsm_allowed(f, q, t), alive, "state %d token %d", q, t);
            if (!alive)
                cr_assert_eq(pl_token_fsm_next(f, q, t), -1);
        }
    }
}

static const char *mask_schemas[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
    "\"n\":{\"type\":\"number\",\"minimum\":-5,\"maximum\":70},\"ok\":{\"type\":\"boolean\"}},"
    "\"required\":[\"name\",\"n\"]}",
    "{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",\"\\u00e9t\\u00e9\"]},\"maxItems\":3}",
};

static void check_constraints(pl_constraint_cache *c, const pl_vocab_source *src)
{
    pl_err err;
    for (size_t i = 0; i < sizeof mask_schemas / sizeof *mask_schemas; i++) {
        const pl_token_fsm *f = pl_constraint_get(c, PL_CONSTRAINT_JSON_SCHEMA,
                                                  mask_schemas[i], &err);
        cr_assert_not_null(f, "%s", err.message);
        brute_force(f, src, (unsigned)i + 1);
        pl_token_fsm_release(f);
    }
    const pl_token_fsm *f = pl_constraint_get(c, PL_CONSTRAINT_JSON_OBJECT, NULL, &err);
    cr_assert_not_null(f, "%s", err.message);
    brute_force(f, src, 7);
    const pl_token_fsm *g = pl_constraint_get(c, PL_CONSTRAINT_JSON_OBJECT, NULL, &err);
    cr_assert_eq(f, g, "the cache returns the same automaton");
    pl_token_fsm_release(f);
    pl_token_fsm_release(g);
    f = pl_constraint_get(c, PL_CONSTRAINT_REGEX, "[0-9]{1,3}(\\.[0-9]+)? (apples|€)", &err);
    cr_assert_not_null(f, "%s", err.message);
    brute_force(f, src, 9);
    pl_token_fsm_release(f);
    cr_assert_null(pl_constraint_get(c, PL_CONSTRAINT_JSON_SCHEMA, "{\"format\":\"uri\"}",
                                     &err));
    cr_expect_eq(err.status, 400);
    cr_expect(strstr(err.message, "'format'"), "%s", err.message);
}

Test(token_fsm, masks_match_brute_force_synthetic)
{
    synth_vocab v = {.n = 600, .eog = 3};
    v.tok = calloc((size_t)v.n, sizeof *v.tok);
    v.len = calloc((size_t)v.n, sizeof *v.len);
    srand(42);
    const char *pieces[] = {"\"", "{", "}", ": ", ", ", "name", "true", "ap", "ples", "€",
                            "\xe2", "\x82\xac", "é", "é", "1", "0.", "-", "[", "]", "\"a",
                            "\", \"", "null", "\\n", " "};
    for (int i = 0; i < v.n; i++) {
        char buf[32] = "";
        if (i < 256) {
            buf[0] = (char)i;
            v.len[i] = 1;
        } else {
            int k = 1 + rand() % 3;
            for (int j = 0; j < k; j++)
                strcat(buf, pieces[rand() % (sizeof pieces / sizeof *pieces)]);
            v.len[i] = strlen(buf);
        }
        v.tok[i] = malloc(v.len[i] + 1);
        memcpy(v.tok[i], buf, v.len[i] + 1);
    }
    pl_vocab_source src = {v.n, synth_bytes, synth_eog, &v};
    pl_constraint_cache *c = pl_constraint_cache_new(&src);
    check_constraints(c, &src);
    pl_constraint_cache_free(c);
    for (int i = 0; i < v.n; i++)
        free(v.tok[i]);
    free(v.tok);
    free(v.len);
}

static const char *tok_bytes_real(void *ud, int32_t id, size_t *len)
{
    if (pl_tokenizer_token_type(ud, id) == PL_TOKEN_TYPE_CONTROL) {
        *len = 0;
        return NULL;
    }
    return pl_tokenizer_token_bytes(ud, id, len);
}

static bool tok_eog_real(void *ud, int32_t id)
{
    return pl_tokenizer_is_eog(ud, id);
}

Test(token_fsm, masks_match_brute_force_smollm2, .timeout = 240)
{
    PL_TEST_MODEL_OR_SKIP();
    const char *path = pl_test_model_path();
    char err[256];
    pl_gguf *g = pl_gguf_open(path, err, sizeof err);
    cr_assert_not_null(g, "%s", err);
    pl_tokenizer *t = pl_tokenizer_from_gguf(g, err, sizeof err);
    cr_assert_not_null(t, "%s", err);
    pl_vocab_source src = {pl_tokenizer_n_vocab(t), tok_bytes_real, tok_eog_real, t};
    pl_constraint_cache *c = pl_constraint_cache_new(&src);
    check_constraints(c, &src);
    pl_constraint_cache_free(c);
    pl_tokenizer_free(t);
    pl_gguf_free(g);
}
