/* test_constrain.c - backends/constrain: the regex engine against
 * hand-checked matches, JSON schemas against documents, and token masks
 * against brute force (each allowed token keeps the automaton alive, each
 * refused one kills it) on a synthetic vocabulary and on SmolLM2's. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "backends/constrain/constraint.h"
#include "backends/constrain/json_schema.h"
#include "backends/constrain/regex.h"
#include "backends/constrain/token_fsm.h"
#include "backends/formats/gguf.h"
#include "backends/text/tokenizer.h"
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

static void expect_schema_ws(const char *schema, const char *doc, bool want, pl_json_ws ws)
{
    json_error_t je;
    json_t *s = json_loads(schema, 0, &je);
    cr_assert_not_null(s, "%s", je.text);
    char err[400] = "";
    char *re = pl_json_schema_regex(s, ws, err, sizeof err);
    cr_assert_not_null(re, "%s: %s", schema, err);
    pl_dfa *d = compile(re);
    cr_expect_eq(pl_dfa_match(d, doc, strlen(doc)), want, "%s on %s (ws %d, regex %s)", schema,
                 doc, (int)ws, re);
    pl_dfa_free(d);
    free(re);
    json_decref(s);
}

/* Compact documents: the same answer with either whitespace. */
static void expect_schema(const char *schema, const char *doc, bool want)
{
    expect_schema_ws(schema, doc, want, PL_JSON_WS_COMPACT);
    expect_schema_ws(schema, doc, want, PL_JSON_WS_FLEXIBLE);
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
        char *re = pl_json_schema_regex(s, PL_JSON_WS_FLEXIBLE, err, sizeof err);
        cr_expect_null(re, "%s", bad[i][0]);
        cr_expect(strstr(err, bad[i][1]) != NULL, "%s: %s", bad[i][0], err);
        free(re);
        json_decref(s);
    }
}

Test(json_schema, json_object_and_choices)
{
    char *re = pl_json_object_regex(PL_JSON_WS_COMPACT);
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

static const char mask_schemas_0[] =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
    "\"n\":{\"type\":\"number\",\"minimum\":-5,\"maximum\":70},\"ok\":{\"type\":\"boolean\"}},"
    "\"required\":[\"name\",\"n\"]}";
static const char mask_schemas_1[] =
    "{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",\"\\u00e9t\\u00e9\"]},\"maxItems\":3}";

/* ---- flexible whitespace ---- */

static const char WS_OBJ[] =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
    "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":"
    "\"string\"}},\"home\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
    "\"string\"}},\"required\":[\"city\"]}},\"required\":[\"name\"]}";

static const char WS_NO_STRINGS[] =
    "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"},\"flags\":{\"type\":"
    "\"array\",\"items\":{\"type\":\"boolean\"}},\"in\":{\"properties\":{\"x\":{\"type\":"
    "\"number\"},\"e\":{\"enum\":[\"a b\",2]}}}},\"required\":[\"n\"]}";

/* Flexible only: a document as json.dumps(indent=...), JSON.stringify and
 * models write it. */
static void expect_flexible_only(const char *schema, const char *doc)
{
    expect_schema_ws(schema, doc, true, PL_JSON_WS_FLEXIBLE);
    expect_schema_ws(schema, doc, false, PL_JSON_WS_COMPACT);
}

Test(json_schema, flexible_whitespace_as_writers_put_it)
{
    expect_flexible_only(WS_OBJ, "{\n  \"name\": \"Ann\",\n  \"age\": 42,\n  \"tags\": [\n"
                                 "    \"a\",\n    \"b\"\n  ],\n  \"home\": {\n    \"city\": "
                                 "\"Oslo\"\n  }\n}");
    expect_flexible_only(WS_OBJ, "{\"name\":\"Ann\",\"age\":42,\"tags\":[\"a\",\"b\"]}");
    expect_flexible_only(WS_OBJ, "{\n\t\"name\": \"Ann\",\n\n\t\"age\": 7\n}");
    expect_flexible_only(WS_OBJ, "{ \"name\" : \"Ann\" , \"tags\": [ ] }");
    expect_flexible_only(WS_OBJ, "{\n                    \"name\": \"x\"}");   /* 20 */
    expect_flexible_only("{\"properties\":{\"a\":{\"type\":\"null\"}}}", "{ }");
    expect_flexible_only("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}",
                         "{\n  \"x\": 1,\n  \"y\": 2\n}");
    /* Bounded, and only between tokens. */
    const char *bad[] = {
        "{\n                     \"name\": \"x\"}",             /* 21 spaces */
        "{\n\n\n  \"name\": \"x\"}",                            /* 3 newlines */
        "{\"name\":  \"x\"}",                                   /* 2 spaces after ':' */
        "{\"name\"\n: \"x\"}",
        " {\"name\": \"x\"}",
        "{\"name\": \"x\"}\n",
        "{\"name\": \"x\",}",
        "{\"name\": \"x\" \"age\": 1}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        expect_schema(WS_OBJ, bad[i], false);
}

/* A random text the DFA accepts: random bytes, then (past `steps`) the
 * shortest way to an accepting state. dist: bytes to acceptance. */
static size_t dfa_walk(const pl_dfa *d, const int *dist, int steps, char *out, size_t cap)
{
    size_t n = 0;
    int32_t q = 0;
    while (n + 1 < cap) {
        if (d->accept[q] && (dist[q] == 0 || rand() % 8 == 0) && (int)n >= steps / 4)
            break;
        int32_t next[256];
        int k = 0;
        for (int b = 0; b < 256; b++) {
            int32_t t = d->trans[(size_t)q * 256 + (size_t)b];
            if (t >= 0 && ((int)n < steps || dist[t] < dist[q]))
                next[k++] = (int32_t)b;
        }
        if (k == 0 && d->accept[q])
            break;
        cr_assert_gt(k, 0);
        int b = next[rand() % k];
        out[n++] = (char)b;
        q = d->trans[(size_t)q * 256 + (size_t)b];
    }
    out[n] = '\0';
    return n;
}

static int *dfa_dist(const pl_dfa *d)
{
    int *dist = malloc(sizeof *dist * (size_t)d->n_states);
    for (int q = 0; q < d->n_states; q++)
        dist[q] = d->accept[q] ? 0 : 1 << 28;
    for (bool changed = true; changed;) {
        changed = false;
        for (int q = 0; q < d->n_states; q++)
            for (int b = 0; b < 256; b++) {
                int32_t t = d->trans[(size_t)q * 256 + (size_t)b];
                if (t >= 0 && dist[t] + 1 < dist[q]) {
                    dist[q] = dist[t] + 1;
                    changed = true;
                }
            }
    }
    return dist;
}

/* Whitespace outside strings removed, then ", " and ": " put back: the
 * text as the compact grammar writes it. Returns the longest run of
 * whitespace outside strings. */
static int to_compact(const char *s, char *out)
{
    bool str = false, esc = false;
    int run = 0, longest = 0;
    for (; *s; s++) {
        if (str) {
            *out++ = *s;
            str = esc || *s != '"';
            esc = !esc && *s == '\\';
        } else if (!strchr(" \t\n\r", *s)) {
            *out++ = *s;
            str = *s == '"';
            if (*s == ',' || *s == ':')
                *out++ = ' ';
            run = 0;
        } else if (++run > longest) {
            longest = run;
        }
    }
    *out = '\0';
    return longest;
}

/* The longest run of whitespace bytes the DFA accepts anywhere, or -1
 * when a run can go on forever. */
static int ws_run(const pl_dfa *d, int32_t q, int *memo, int depth)
{
    if (depth > d->n_states)
        return -1;
    if (memo[q] != -2)
        return memo[q];
    int best = 0;
    for (const char *w = " \t\n\r"; *w; w++) {
        int32_t t = d->trans[(size_t)q * 256 + (unsigned char)*w];
        int r = t >= 0 ? ws_run(d, t, memo, depth + 1) : 0;
        if (r < 0)
            return -1;
        if (t >= 0 && r + 1 > best)
            best = r + 1;
    }
    return memo[q] = best;
}

/* Random texts of the flexible grammar are JSON, at most 22 whitespace
 * bytes in a row, and the compact grammar's texts once respaced. Without
 * free strings (where spaces are text) the DFA itself must bound runs. */
static void check_flexible(char *flex_re, char *compact_re, unsigned seed, bool strings)
{
    pl_dfa *f = compile(flex_re), *c = compile(compact_re);
    int *dist = dfa_dist(f), *memo = malloc(sizeof *memo * (size_t)f->n_states);
    for (int q = 0; q < f->n_states; q++)
        memo[q] = -2;
    int longest = 0;
    for (int q = 0; !strings && q < f->n_states; q++) {
        int r = ws_run(f, q, memo, 0);
        cr_assert_geq(r, 0, "unbounded whitespace in %s", flex_re);
        longest = r > longest ? r : longest;
    }
    cr_expect(strings || longest == 22, "two newlines and 20 spaces at most: %d", longest);
    srand(seed);
    static char text[8192], compact[16384];
    for (int i = 0; i < 300; i++) {
        size_t n = dfa_walk(f, dist, 40 + i % 200, text, sizeof text);
        json_error_t je;
        json_t *j = json_loadb(text, n, JSON_DECODE_ANY, &je);
        cr_assert_not_null(j, "not JSON: %s (%s)", text, je.text);
        json_decref(j);
        cr_assert_leq(to_compact(text, compact), 22, "%s", text);
        cr_assert(pl_dfa_match(c, compact, strlen(compact)), "%s\nas %s", text, compact);
    }
    free(dist), free(memo), free(flex_re), free(compact_re);
    pl_dfa_free(f), pl_dfa_free(c);
}

Test(json_schema, flexible_texts_are_compact_texts_spaced_and_bounded, .timeout = 60)
{
    const char *schemas[] = {WS_OBJ, mask_schemas_0, mask_schemas_1, WS_NO_STRINGS};
    for (size_t i = 0; i < sizeof schemas / sizeof *schemas; i++) {
        json_t *s = json_loads(schemas[i], 0, NULL);
        char err[400];
        check_flexible(pl_json_schema_regex(s, PL_JSON_WS_FLEXIBLE, err, sizeof err),
                       pl_json_schema_regex(s, PL_JSON_WS_COMPACT, err, sizeof err),
                       (unsigned)i + 1, schemas[i] != WS_NO_STRINGS);
        json_decref(s);
    }
    check_flexible(pl_json_object_regex(PL_JSON_WS_FLEXIBLE),
                   pl_json_object_regex(PL_JSON_WS_COMPACT), 11, true);
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

static const char *mask_schemas[] = {mask_schemas_0, mask_schemas_1};

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
                            "\", \"", "null", "\\n", " ", "\n", ",\n  ", "{\n    "};
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
    pl_constraint_cache *c = pl_constraint_cache_new(&src, PL_JSON_WS_FLEXIBLE);
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
    pl_constraint_cache *c = pl_constraint_cache_new(&src, PL_JSON_WS_FLEXIBLE);
    check_constraints(c, &src);
    pl_constraint_cache_free(c);
    pl_tokenizer_free(t);
    pl_gguf_free(g);
}
