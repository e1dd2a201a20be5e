/* tokenizer_hf.c - tokenizer.json into a pl_tokenizer_vocab (the model's
 * vocabulary, merges and added tokens; which BPE flavour it is from its
 * normalizer and pre-tokenizer), then pl_tokenizer_init; the
 * tokenizer_config.json half is in tokenizer_hf_config.c.
 */
#include "backends/text/tokenizer_hf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/text/tokenizer_hf_internal.h"
#include "src/base/log.h"

#define RE_GPT2_BYTELEVEL "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+" \
                          "| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

static int fail_oom_(char *err, size_t n)
{
    snprintf(err, n, "out of memory reading the tokenizer");
    return -1;
}

/* ---- vocabulary ---- */

static int max_id_(hf_tok *h, json_t *vocab, json_t *added, char *err, size_t n)
{
    const char *k;
    json_t *v;
    long long max = -1;
    json_object_foreach(vocab, k, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= (1 << 24))
            return snprintf(err, n, "%s: key 'model.vocab.%s': the id must be an integer in "
                            "[0, 2^24)", h->tj.path, k), -1;
        max = json_integer_value(v) > max ? json_integer_value(v) : max;
    }
    size_t i;
    json_each_(added, i, v) {
        json_t *id = json_object_get(v, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= (1 << 24) || !json_is_string(json_object_get(v, "content")))
            return snprintf(err, n, "%s: key 'added_tokens[%zu]': needs an id in [0, 2^24) "
                            "and a content string", h->tj.path, i), -1;
        max = json_integer_value(id) > max ? json_integer_value(id) : max;
    }
    if (max < 0)
        return snprintf(err, n, "%s: key 'model.vocab': empty", h->tj.path), -1;
    h->n = (int32_t)max + 1;
    return 0;
}

static int alloc_vocab_(hf_tok *h)
{
    size_t n = (size_t)h->n;
    h->tok = calloc(n, sizeof *h->tok);
    h->len = calloc(n, sizeof *h->len);
    h->types = malloc(n * sizeof *h->types);
    h->scores = malloc(n * sizeof *h->scores);
    if (!h->tok || !h->len || !h->types || !h->scores)
        return -1;
    for (size_t i = 0; i < n; i++) {
        h->tok[i] = "";
        h->types[i] = PL_TOKEN_TYPE_UNUSED;
        h->scores[i] = -INFINITY;
    }
    return 0;
}

static int read_vocab_(hf_tok *h, char *err, size_t n)
{
    json_t *vocab = pl_hf_json_get(&h->tj, "model.vocab");
    json_t *added = pl_hf_json_get(&h->tj, "added_tokens");
    if (!json_is_object(vocab))
        return pl_hf_json_fail(&h->tj, "model.vocab", err, n, "missing, or not an object");
    if (added && !json_is_array(added))
        return pl_hf_json_fail(&h->tj, "added_tokens", err, n, "must be a list");
    if (max_id_(h, vocab, added, err, n) < 0)
        return -1;
    if (alloc_vocab_(h) < 0)
        return fail_oom_(err, n);
    const char *k;
    json_t *v;
    json_object_foreach(vocab, k, v) {
        int32_t id = (int32_t)json_integer_value(v);
        if (h->types[id] != PL_TOKEN_TYPE_UNUSED)
            return snprintf(err, n, "%s: key 'model.vocab.%s': id %d is also '%s'", h->tj.path,
                            k, (int)id, h->tok[id]), -1;
        h->tok[id] = k;
        h->len[id] = (uint32_t)strlen(k);
        h->types[id] = PL_TOKEN_TYPE_NORMAL;
    }
    size_t i;
    int strip = 0;
    const char *example = NULL;
    json_each_(added, i, v) {
        int32_t id = (int32_t)json_integer_value(json_object_get(v, "id"));
        h->tok[id] = json_string_value(json_object_get(v, "content"));
        h->len[id] = (uint32_t)json_string_length(json_object_get(v, "content"));
        h->types[id] = json_is_true(json_object_get(v, "special")) ? PL_TOKEN_TYPE_CONTROL
                                                                   : PL_TOKEN_TYPE_USER_DEFINED;
        if (json_is_true(json_object_get(v, "lstrip")) ||
            json_is_true(json_object_get(v, "rstrip")) ||
            json_is_true(json_object_get(v, "single_word"))) {
            strip++;
            example = example ? example : h->tok[id];
        }
    }
    if (strip)     /* said once: the ids around such a token may differ */
        pl_warn("%s: %d added tokens ask for lstrip, rstrip or single_word (e.g. '%.40s'); "
                "parley matches them exactly, keeping the spaces around them", h->tj.path,
                strip, example);
    return 0;
}

static uint32_t hash_(const char *s, size_t len)
{
    uint32_t x = 2166136261u;      /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        x = (x ^ (uint8_t)s[i]) * 16777619u;
    return x;
}

int pl_hf_tok_map_init_(hf_tok *h)
{
    h->map_cap = 64;
    while (h->map_cap < 2u * (uint32_t)h->n)
        h->map_cap *= 2;
    h->map = malloc(sizeof *h->map * h->map_cap);
    if (!h->map)
        return -1;
    memset(h->map, 0xff, sizeof *h->map * h->map_cap);
    for (int32_t i = 0; i < h->n; i++) {
        if (h->types[i] == PL_TOKEN_TYPE_UNUSED || pl_hf_tok_lookup_(h, h->tok[i], h->len[i]) >= 0)
            continue;
        uint32_t k = hash_(h->tok[i], h->len[i]) & (h->map_cap - 1);
        while (h->map[k] >= 0)
            k = (k + 1) & (h->map_cap - 1);
        h->map[k] = i;
    }
    return 0;
}

void pl_hf_tok_map_free_(hf_tok *h)
{
    free(h->map);
    h->map = NULL;
}

int32_t pl_hf_tok_lookup_(const hf_tok *h, const char *s, size_t len)
{
    for (uint32_t k = hash_(s, len) & (h->map_cap - 1); h->map[k] >= 0;
         k = (k + 1) & (h->map_cap - 1)) {
        int32_t id = h->map[k];
        if (h->len[id] == len && !memcmp(h->tok[id], s, len))
            return id;
    }
    return -1;
}

int32_t pl_hf_tok_find_(const hf_tok *h, const char *s)
{
    return s && h->map ? pl_hf_tok_lookup_(h, s, strlen(s)) : -1;
}

/* ---- the flavour: normalizer and pre-tokenizer ---- */

static bool str_is_(json_t *j, const char *key, const char *want)
{
    const char *s = json_string_value(json_object_get(j, key));
    return s && !strcmp(s, want);
}

/* A Replace of " " by U+2581, or a Prepend of U+2581. */
static bool space_op_(json_t *j, const char *type)
{
    if (!str_is_(j, "type", type))
        return false;
    if (!strcmp(type, "Prepend"))
        return str_is_(j, "prepend", "\xe2\x96\x81");
    return str_is_(json_object_get(j, "pattern"), "String", " ") &&
           str_is_(j, "content", "\xe2\x96\x81");
}

static int normalizer_step_(hf_tok *h, json_t *j, const char *key, char *err, size_t n)
{
    if (str_is_(j, "type", "NFC"))
        h->v.nfc = true;
    else if (space_op_(j, "Replace"))
        h->space_to_meta = true;
    else if (space_op_(j, "Prepend"))
        h->v.add_space_prefix = 1;
    else
        return snprintf(err, n, "%s: key '%s.type': normalizer %s is not supported (parley "
                        "reads NFC, Replace ' ' by U+2581 and Prepend U+2581)", h->tj.path,
                        key, json_string_value(json_object_get(j, "type")) ?: "?"), -1;
    return 0;
}

static int add_regex_(hf_tok *h, const char *re, const char *key, char *err, size_t n)
{
    if (h->n_regex == HF_MAX_RE)
        return snprintf(err, n, "%s: key '%s': more than %d split steps", h->tj.path, key,
                        HF_MAX_RE), -1;
    h->regex[h->n_regex] = strdup(re);
    if (!h->regex[h->n_regex])
        return fail_oom_(err, n);
    h->n_regex++;
    return 0;
}

/* A Split step: a regex, or a literal string (quoted for PCRE2). */
static int split_step_(hf_tok *h, json_t *j, const char *key, char *err, size_t n)
{
    json_t *pat = json_object_get(j, "pattern");
    const char *re = json_string_value(json_object_get(pat, "Regex"));
    const char *lit = json_string_value(json_object_get(pat, "String"));
    if (lit && !strcmp(lit, " ") && str_is_(j, "behavior", "MergedWithPrevious"))
        return h->split_space = true, 0;    /* Gemma: spaces are gone by then */
    if (!str_is_(j, "behavior", "Isolated") || json_is_true(json_object_get(j, "invert")) ||
        (!re && !lit))
        return snprintf(err, n, "%s: key '%s': only Isolated Split steps with a pattern are "
                        "supported", h->tj.path, key), -1;
    if (re)
        return add_regex_(h, re, key, err, n);
    char q[512];
    if (strlen(lit) > 200 || strstr(lit, "\\E"))
        return snprintf(err, n, "%s: key '%s': split string too long", h->tj.path, key), -1;
    snprintf(q, sizeof q, "\\Q%s\\E", lit);
    return add_regex_(h, q, key, err, n);
}

static int pre_step_(hf_tok *h, json_t *j, const char *key, char *err, size_t n)
{
    char k[96];
    snprintf(k, sizeof k, "%s.type", key);
    if (str_is_(j, "type", "Split"))
        return split_step_(h, j, k, err, n);
    if (str_is_(j, "type", "Digits"))
        return add_regex_(h, json_is_true(json_object_get(j, "individual_digits")) ? "\\p{N}"
                                                                                   : "\\p{N}+",
                          k, err, n);
    if (str_is_(j, "type", "ByteLevel")) {
        if (json_is_true(json_object_get(j, "add_prefix_space")))
            return snprintf(err, n, "%s: key '%s.add_prefix_space': true is not supported",
                            h->tj.path, key), -1;
        h->byte_level = true;
        json_t *ur = json_object_get(j, "use_regex");
        return ur && !json_is_true(ur) ? 0 : add_regex_(h, RE_GPT2_BYTELEVEL, k, err, n);
    }
    if (str_is_(j, "type", "Metaspace")) {
        const char *ps = json_string_value(json_object_get(j, "prepend_scheme"));
        if (!str_is_(j, "replacement", "\xe2\x96\x81") || json_is_true(json_object_get(j, "split")))
            return snprintf(err, n, "%s: key '%s': only Metaspace with replacement U+2581 and "
                            "split false is supported", h->tj.path, key), -1;
        h->space_to_meta = true;
        h->v.add_space_prefix = !ps || strcmp(ps, "never") ? 1 : 0;
        h->v.space_prefix_first = ps && !strcmp(ps, "first");
        h->v.space_prefix_if_none = true;
        return 0;
    }
    return snprintf(err, n, "%s: key '%s': pre-tokenizer %s is not supported (parley reads "
                    "ByteLevel, Split, Digits and Metaspace)", h->tj.path, k,
                    json_string_value(json_object_get(j, "type")) ?: "?"), -1;
}

typedef int (*step_fn)(hf_tok *h, json_t *j, const char *key, char *err, size_t n);

/* tokenizer.json's normalizer or pre_tokenizer: one step, or a Sequence of
 * them under list; fn gets each with its key path. */
static int each_step_(hf_tok *h, const char *section, const char *list, step_fn fn,
                      char *err, size_t n)
{
    json_t *j = pl_hf_json_get(&h->tj, section), *v;
    char key[96];
    size_t i;
    if (!j)
        return 0;
    if (!str_is_(j, "type", "Sequence"))
        return fn(h, j, section, err, n);
    json_each_(json_object_get(j, list), i, v) {
        snprintf(key, sizeof key, "%s.%s[%zu]", section, list, i);
        if (fn(h, v, key, err, n) < 0)
            return -1;
    }
    return 0;
}

/* A BertNormalizer switch: true, false, or null (then dflt). */
static bool bert_switch_(json_t *j, const char *key, bool dflt)
{
    json_t *v = json_object_get(j, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* WordPiece: BertNormalizer, BertPreTokenizer, "##" continuation pieces. */
static int read_wordpiece_(hf_tok *h, char *err, size_t n)
{
    json_t *norm = pl_hf_json_get(&h->tj, "normalizer");
    const char *pfx = json_string_value(pl_hf_json_get(&h->tj, "model.continuing_subword_prefix"));
    json_t *max = pl_hf_json_get(&h->tj, "model.max_input_chars_per_word");
    if (pfx && strcmp(pfx, "##"))
        return pl_hf_json_fail(&h->tj, "model.continuing_subword_prefix", err, n,
                               "'%.16s' is not supported (parley reads \"##\")", pfx);
    if (norm && !json_is_null(norm) && !str_is_(norm, "type", "BertNormalizer"))
        return pl_hf_json_fail(&h->tj, "normalizer", err, n, "a WordPiece model needs "
                               "BertNormalizer or none");
    if (!str_is_(pl_hf_json_get(&h->tj, "pre_tokenizer"), "type", "BertPreTokenizer"))
        return pl_hf_json_fail(&h->tj, "pre_tokenizer", err, n, "a WordPiece model needs "
                               "BertPreTokenizer");
    if (max && (!json_is_integer(max) || json_integer_value(max) <= 0 ||
                json_integer_value(max) > (1 << 20)))
        return pl_hf_json_fail(&h->tj, "model.max_input_chars_per_word", err, n,
                               "must be a positive integer");
    bool on = norm && json_is_object(norm);
    h->v.model = PL_TOKENIZER_MODEL_BERT;
    h->v.wpm_clean_text = on && bert_switch_(norm, "clean_text", true);
    h->v.wpm_chinese = on && bert_switch_(norm, "handle_chinese_chars", true);
    h->v.wpm_lowercase = on && bert_switch_(norm, "lowercase", true);
    h->v.wpm_strip_accents = on && bert_switch_(norm, "strip_accents", h->v.wpm_lowercase);
    h->v.wpm_max_word_chars = max ? (int32_t)json_integer_value(max) : 100;
    return 0;
}

/* Byte-level BPE, SentencePiece-style or WordPiece; the steps must agree. */
static int read_flavour_(hf_tok *h, char *err, size_t n)
{
    const char *type = "?";
    h->v.add_space_prefix = 0;
    if (pl_hf_json_str(&h->tj, "model.type", true, &type, err, n) < 0)
        return -1;
    if (!strcmp(type, "WordPiece"))
        return read_wordpiece_(h, err, n);
    if (strcmp(type, "BPE"))
        return pl_hf_json_fail(&h->tj, "model.type", err, n, "%s models are not supported "
                               "(parley reads BPE and WordPiece)", type);
    const char *pfx = json_string_value(pl_hf_json_get(&h->tj, "model.continuing_subword_prefix"));
    const char *sfx = json_string_value(pl_hf_json_get(&h->tj, "model.end_of_word_suffix"));
    if ((pfx && *pfx) || (sfx && *sfx))
        return pl_hf_json_fail(&h->tj, pfx && *pfx ? "model.continuing_subword_prefix"
                               : "model.end_of_word_suffix", err, n, "not supported");
    if (each_step_(h, "normalizer", "normalizers", normalizer_step_, err, n) < 0 ||
        each_step_(h, "pre_tokenizer", "pretokenizers", pre_step_, err, n) < 0)
        return -1;
    if (h->byte_level && !h->space_to_meta && !h->v.add_space_prefix) {
        h->v.model = PL_TOKENIZER_MODEL_GPT2;
        h->v.pre_regex = (const char *const *)h->regex;
        h->v.n_pre_regex = h->n_regex;
        bool im = false;
        pl_hf_json_bool(&h->tj, "model.ignore_merges", false, &im, NULL, 0);
        h->v.ignore_merges = im ? 1 : -1;
        return h->n_regex ? 0 : pl_hf_json_fail(&h->tj, "pre_tokenizer", err, n,
                                                "byte-level BPE without a split pattern");
    }
    if (h->space_to_meta && !h->byte_level && (h->n_regex == 0)) {
        h->v.model = PL_TOKENIZER_MODEL_LLAMA;
        return 0;
    }
    return pl_hf_json_fail(&h->tj, "pre_tokenizer", err, n, "neither byte-level BPE "
                           "(ByteLevel) nor SentencePiece-style BPE (spaces as U+2581, no split "
                           "steps)");
}

/* ---- merges ---- */

/* Merge i as its two sides. */
static int merge_sides_(json_t *m, const char **l, size_t *ll, const char **r, size_t *rl)
{
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *l = json_string_value(json_array_get(m, 0));
        *r = json_string_value(json_array_get(m, 1));
        *ll = json_string_length(json_array_get(m, 0));
        *rl = json_string_length(json_array_get(m, 1));
        return 0;
    }
    const char *s = json_string_value(m), *sp = s && s[0] ? strchr(s + 1, ' ') : NULL;
    if (!sp)
        return -1;
    *l = s;
    *ll = (size_t)(sp - s);
    *r = sp + 1;
    *rl = strlen(sp + 1);
    return 0;
}

/* SentencePiece-style: a token's score is minus the rank of the first
 * merge that makes it, so the SentencePiece merge order (highest score
 * first) is the merges' order; tokens no merge makes keep -inf and are
 * never formed by merging. */
static int spm_scores_(hf_tok *h, json_t *merges, char *err, size_t n)
{
    json_t *m;
    size_t i;
    char buf[1024];
    json_each_(merges, i, m) {
        const char *l, *r;
        size_t ll, rl;
        if (merge_sides_(m, &l, &ll, &r, &rl) < 0)
            return snprintf(err, n, "%s: key 'model.merges[%zu]': not a pair", h->tj.path,
                            i), -1;
        if (ll + rl >= sizeof buf)
            continue;
        memcpy(buf, l, ll);
        memcpy(buf + ll, r, rl);
        buf[ll + rl] = '\0';
        int32_t id = h->map ? pl_hf_tok_lookup_(h, buf, ll + rl) : -1;
        if (id >= 0 && h->scores[id] == -INFINITY)
            h->scores[id] = -(float)i;
    }
    return 0;
}

/* Byte-level: each merge as "left right" (pairs given as lists joined). */
static int gpt2_merges_(hf_tok *h, json_t *merges, char *err, size_t n)
{
    size_t cnt = json_array_size(merges);
    h->merges = calloc(cnt + 1, sizeof *h->merges);
    h->merge_lens = calloc(cnt + 1, sizeof *h->merge_lens);
    if (!h->merges || !h->merge_lens)
        return fail_oom_(err, n);
    for (size_t i = 0; i < cnt; i++) {
        const char *l, *r;
        size_t ll, rl;
        if (merge_sides_(json_array_get(merges, i), &l, &ll, &r, &rl) < 0)
            return snprintf(err, n, "%s: key 'model.merges[%zu]': not a pair", h->tj.path,
                            i), -1;
        char *s = malloc(ll + rl + 2);
        if (!s)
            return fail_oom_(err, n);
        memcpy(s, l, ll);
        s[ll] = ' ';
        memcpy(s + ll + 1, r, rl);
        s[ll + rl + 1] = '\0';
        h->merges[i] = s;
        h->merge_lens[i] = (uint32_t)(ll + rl + 1);
        h->n_merges = (int32_t)i + 1;
    }
    h->v.merges = (const char *const *)h->merges;
    h->v.merge_lens = h->merge_lens;
    h->v.n_merges = h->n_merges;
    return 0;
}

static int read_merges_(hf_tok *h, char *err, size_t n)
{
    json_t *m = pl_hf_json_get(&h->tj, "model.merges");
    if (!m)
        m = json_array();           /* a vocabulary of single symbols */
    else
        json_incref(m);
    int rc = !json_is_array(m) ? pl_hf_json_fail(&h->tj, "model.merges", err, n, "not a list")
             : h->v.model == PL_TOKENIZER_MODEL_GPT2 ? gpt2_merges_(h, m, err, n)
                                                     : spm_scores_(h, m, err, n);
    json_decref(m);
    return rc;
}

/* ---- the tokenizer ---- */

/* SentencePiece-style vocabularies: <0xNN> are byte tokens, the unknown
 * token is the model's unk_token. */
static void mark_types_(hf_tok *h)
{
    const char *unk = json_string_value(pl_hf_json_get(&h->tj, "model.unk_token"));
    for (int32_t i = 0; h->v.model == PL_TOKENIZER_MODEL_LLAMA && i < h->n; i++)
        if (h->len[i] == 6 && !strncmp(h->tok[i], "<0x", 3) && h->tok[i][5] == '>' &&
            h->types[i] == PL_TOKEN_TYPE_NORMAL)
            h->types[i] = PL_TOKEN_TYPE_BYTE;
    h->v.unk = pl_hf_tok_find_(h, unk);
    if (h->v.unk >= 0)
        h->types[h->v.unk] = PL_TOKEN_TYPE_UNKNOWN;
}

static void hf_tok_free_(hf_tok *h)
{
    for (int i = 0; i < h->n_regex; i++)
        free(h->regex[i]);
    for (int32_t i = 0; h->merges && i < h->n_merges; i++)
        free((char *)h->merges[i]);
    free(h->merges);
    free(h->merge_lens);
    free(h->tok);
    free(h->len);
    free(h->types);
    free(h->scores);
    pl_hf_tok_map_free_(h);
    pl_hf_json_free(&h->tj);
    pl_hf_json_free(&h->cj);
}

static int build_(hf_tok *h, const char *dir, pl_hf_text *text, char *err, size_t n)
{
    if (pl_hf_json_load(&h->tj, dir, "tokenizer.json", true, err, n) < 0 ||
        pl_hf_json_load(&h->cj, dir, "tokenizer_config.json", false, err, n) < 0 ||
        read_vocab_(h, err, n) < 0 || read_flavour_(h, err, n) < 0)
        return -1;
    if (pl_hf_tok_map_init_(h) < 0)
        return fail_oom_(err, n);
    if (h->v.model != PL_TOKENIZER_MODEL_BERT && read_merges_(h, err, n) < 0)
        return -1;
    mark_types_(h);
    h->v.n_tokens = h->n;
    h->v.tokens = h->tok;
    h->v.token_lens = h->len;
    h->v.types = h->types;
    h->v.scores = h->v.model == PL_TOKENIZER_MODEL_LLAMA ? h->scores : NULL;
    return pl_hf_tok_specials_(h, dir, text, err, n);
}

pl_tokenizer *pl_tokenizer_from_hf(const char *dir, pl_hf_text *text, char *err,
                                   size_t errlen)
{
    hf_tok h;
    pl_tokenizer *t = NULL;
    pl_hf_text tx = {0};
    memset(&h, 0, sizeof h);
    h.v.bos = h.v.eos = h.v.unk = h.v.pad = h.v.eot = h.v.eom = -1;
    h.v.add_bos = h.v.add_eos = -1;
    if (build_(&h, dir, &tx, err, errlen) == 0)
        t = pl_tokenizer_init(&h.v, err, errlen);
    hf_tok_free_(&h);
    if (t && text)
        *text = tx;
    else
        pl_hf_text_free(&tx);
    return t;
}
