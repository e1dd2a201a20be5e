/* pretokenize.c - gpt2-style pre-tokenization: split text into words with
 * the regexes llama.cpp uses for each tokenizer.ggml.pre, applied in
 * sequence (each regex splits the pieces of the previous one; text between
 * matches stays a piece of its own). PCRE2 with UTF, UCP and JIT; the
 * regexes are compiled once per tokenizer.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/text/tokenizer_internal.h"

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+" \
                "| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_CONTRACTIONS_CI \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_LLAMA3 RE_CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+" \
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2 RE_CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+" \
    "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* Qwen3.5's: qwen2's with combining marks (\p{M}) inside words, as
 * llama.cpp 0.3.36's LLAMA_VOCAB_PRE_TYPE_QWEN35. */
#define RE_QWEN35 RE_CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+" \
    "|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* gpt-oss's o200k (tokenizer.ggml.pre "gpt-4o"), as llama.cpp writes it:
 * tiktoken's upper- and lower-case letter classes become "a letter that
 * is not a-z" and "a letter that is not A-Z", so that a non-ASCII letter
 * counts as both (llama.cpp matches its categories that way). */
#define RE_GPT4O_WORD(A, B)                                                      \
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))" A "((?=[\\p{L}])([^A-Z]))" B \
    RE_CONTRACTIONS_CI "?"
#define RE_GPT4O RE_GPT4O_WORD("*", "+") "|" RE_GPT4O_WORD("+", "*")                \
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define PL_PRETOK_MAX_RE 4

typedef struct pre_def {
    const char *names[10];       /* tokenizer.ggml.pre values, NULL ended */
    const char *re[PL_PRETOK_MAX_RE + 1];
    bool ignore_merges;
} pre_def;

static const pre_def pre_defs[] = {
    {{"default", NULL},
     {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]",
      NULL}, false},
    {{"gpt2", "gpt-2", "mpt", "olmo", "jais", "phi-2", NULL},
     {RE_GPT2, NULL}, false},
    {{"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone",
      "minerva-7b", NULL},
     {"\\p{N}", RE_GPT2, NULL}, false},
    {{"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", NULL},
     {RE_LLAMA3, NULL}, true},
    {{"qwen2", "qwen2.5", "deepseek-r1-qwen", "stablelm2", NULL},
     {RE_QWEN2, NULL}, false},
    {{"qwen35", NULL}, {RE_QWEN35, NULL}, false},
    {{"gpt-4o", "llama4", NULL}, {RE_GPT4O, NULL}, false},
};

struct pl_pretok {
    pcre2_code *re[PL_PRETOK_MAX_RE];
    int n_re;
};

static const pre_def *pre_find(const char *pre)
{
    if (!pre || !*pre)
        pre = "default";
    for (size_t i = 0; i < sizeof pre_defs / sizeof pre_defs[0]; i++)
        for (const char *const *n = pre_defs[i].names; *n; n++)
            if (!strcmp(*n, pre))
                return &pre_defs[i];
    return NULL;
}

pl_pretok *pl_pretok_init_regex(const char *const *re, int n, char *err,
                                size_t errlen)
{
    if (n < 1 || n > PL_PRETOK_MAX_RE) {
        snprintf(err, errlen, "%d pre-tokenizer regexes (1 to %d supported)", n,
                 PL_PRETOK_MAX_RE);
        return NULL;
    }
    pl_pretok *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (; p->n_re < n; p->n_re++) {
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *c = pcre2_compile((PCRE2_SPTR)re[p->n_re],
                                      PCRE2_ZERO_TERMINATED,
                                      PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
        if (!c) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(ec, msg, sizeof msg);
            snprintf(err, errlen, "pre-tokenizer regex: %s at %zu", msg,
                     (size_t)eo);
            pl_pretok_free(p);
            return NULL;
        }
        pcre2_jit_compile(c, PCRE2_JIT_COMPLETE); /* interpreter if no JIT */
        p->re[p->n_re] = c;
    }
    return p;
}

pl_pretok *pl_pretok_init(const char *pre, bool *ignore_merges, char *err,
                          size_t errlen)
{
    const pre_def *d = pre_find(pre);
    if (!d) {
        snprintf(err, errlen, "unsupported tokenizer.ggml.pre '%s' "
                 "(supported: default, gpt2, smollm, llama3/llama-bpe, "
                 "qwen2, gpt-4o and their aliases)", pre);
        return NULL;
    }
    int n = 0;
    while (d->re[n])
        n++;
    *ignore_merges = d->ignore_merges;
    return pl_pretok_init_regex(d->re, n, err, errlen);
}

void pl_pretok_free(pl_pretok *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n_re; i++)
        pcre2_code_free(p->re[i]);
    free(p);
}

size_t pl_tok_utf8_put(uint32_t cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* llama.cpp's lenient decoder: lead-byte length, continuation bytes
 * checked, overlong forms and surrogates accepted. Returns the code point
 * and sets *n, or returns -1 (then one byte is replaced by U+FFFD). */
static int32_t utf8_get(const uint8_t *s, size_t len, size_t *n)
{
    uint8_t b = s[0];
    if (b < 0x80) {
        *n = 1;
        return b;
    }
    size_t k = b < 0xc0 ? 0 : b < 0xe0 ? 2 : b < 0xf0 ? 3 : b < 0xf8 ? 4 : 0;
    if (k == 0 || k > len)
        return -1;
    uint32_t cp = b & (0x7f >> k);
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return -1;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    *n = k;
    return (int32_t)cp;
}

/* Re-encode text as llama.cpp sees it (norm) and a copy PCRE2 accepts as
 * valid UTF-8 (match): surrogates become U+E000 and code points past
 * U+10FFFF U+FFFD; both keep the byte offsets of norm. */
static size_t normalise(const char *text, size_t len, char *norm, char *match)
{
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t n = 1;
        int32_t cp = utf8_get((const uint8_t *)text + i, len - i, &n);
        if (cp < 0 || cp > 0x10ffff)
            cp = 0xfffd;
        size_t w = pl_tok_utf8_put((uint32_t)cp, norm + o);
        if (cp >= 0xd800 && cp < 0xe000)
            pl_tok_utf8_put(0xe000, match + o);
        else
            memcpy(match + o, norm + o, w);
        o += w;
        i += n;
    }
    return o;
}

typedef struct span {
    size_t off, len;
} span;

typedef struct spans {
    span *v;
    size_t n, cap;
} spans;

static int spans_push(spans *s, size_t off, size_t len)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        span *v = realloc(s->v, sizeof *v * cap);
        if (!v)
            return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (span){off, len};
    return 0;
}

/* Split one piece with one regex; appends matches and the text between. */
static int split_piece(const pcre2_code *re, pcre2_match_data *md,
                       const char *subj, span piece, spans *out)
{
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    size_t start = 0, last = 0;
    while (start < piece.len) {
        int rc = pcre2_match(re, (PCRE2_SPTR)subj + piece.off, piece.len,
                             start, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) /* e.g. JIT stack: retry */
            rc = pcre2_match(re, (PCRE2_SPTR)subj + piece.off, piece.len,
                             start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                             NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0)
            return -1;
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* empty match: step one character */
            start = ms + pl_tok_utf8_len((uint8_t)subj[piece.off + ms]);
            continue;
        }
        if (ms > last && spans_push(out, piece.off + last, ms - last))
            return -1;
        if (spans_push(out, piece.off + ms, me - ms))
            return -1;
        start = last = me;
    }
    if (last < piece.len && spans_push(out, piece.off + last, piece.len - last))
        return -1;
    return 0;
}

int pl_pretok_split(const pl_pretok *p, const char *text, size_t len,
                    pl_pretok_word_fn fn, void *ctx)
{
    int rc = -1;
    spans a = {0}, b = {0};
    pcre2_match_data *md = NULL;
    char *norm = malloc(3 * len + 4), *match = malloc(3 * len + 4);
    if (!norm || !match)
        goto done;
    size_t n = normalise(text, len, norm, match);
    if (n == 0) {
        rc = 0;
        goto done;
    }
    if (spans_push(&a, 0, n))
        goto done;
    for (int r = 0; r < p->n_re; r++) {
        md = pcre2_match_data_create_from_pattern(p->re[r], NULL);
        if (!md)
            goto done;
        b.n = 0;
        for (size_t i = 0; i < a.n; i++)
            if (split_piece(p->re[r], md, match, a.v[i], &b))
                goto done;
        spans t = a;
        a = b;
        b = t;
        pcre2_match_data_free(md);
        md = NULL;
    }
    for (size_t i = 0; i < a.n; i++)
        if (fn(ctx, norm + a.v[i].off, a.v[i].len))
            goto done;
    rc = 0;
done:
    pcre2_match_data_free(md);
    free(a.v);
    free(b.v);
    free(norm);
    free(match);
    return rc;
}
