/* tokenizer_wpm.c - WordPiece (BERT) as the tokenizers library does it:
 * BertNormalizer (clean_text, handle_chinese_chars, strip_accents,
 * lowercase), BertPreTokenizer (words split at whitespace, each
 * punctuation character a word of its own), then the WordPiece model
 * (greedy longest match, "##" before a word's continuation pieces, the
 * unknown token for a word with any unmatched rest or over the model's
 * max_input_chars_per_word). The per-code-point Unicode facts come from
 * the library itself (wpm_tables.h, scripts/gen_wpm_tables.py).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/text/tokenizer_internal.h"
#include "backends/text/wpm_tables.h"

#define WPM_PREFIX "##"
#define WPM_PREFIX_LEN 2

/* Growable code point vector (one per encode call). */
typedef struct cps {
    uint32_t *v;
    size_t n, cap;
} cps;

static int cps_push_(cps *c, uint32_t cp)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        uint32_t *v = realloc(c->v, cap * sizeof *v);
        if (!v)
            return -1;
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n++] = cp;
    return 0;
}

static unsigned flags_(uint32_t cp)
{
    size_t lo = 0, hi = sizeof wpm_flags / sizeof wpm_flags[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < wpm_flags[mid][0])
            hi = mid;
        else if (cp > wpm_flags[mid][1])
            lo = mid + 1;
        else
            return wpm_flags[mid][2];
    }
    return 0;
}

static const uint32_t *map_(const uint32_t (*m)[6], size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < m[mid][0])
            hi = mid;
        else if (cp > m[mid][0])
            lo = mid + 1;
        else
            return m[mid];
    }
    return NULL;
}

/* UTF-8 -> code point; an invalid sequence is U+FFFD for one byte. */
static uint32_t next_cp_(const uint8_t *s, size_t len, size_t *i)
{
    uint8_t b = s[*i];
    size_t n = b < 0x80 ? 1 : (b & 0xe0) == 0xc0 ? 2 : (b & 0xf0) == 0xe0 ? 3
               : (b & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 0 || *i + n > len) {
        (*i)++;
        return 0xfffd;
    }
    uint32_t cp = n == 1 ? b : n == 2 ? b & 0x1f : n == 3 ? b & 0x0f : b & 0x07;
    for (size_t k = 1; k < n; k++) {
        if ((s[*i + k] & 0xc0) != 0x80) {
            (*i)++;
            return 0xfffd;
        }
        cp = cp << 6 | (s[*i + k] & 0x3f);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) {
        (*i)++;
        return 0xfffd;
    }
    *i += n;
    return cp;
}

/* Lowercase (when asked) and push one code point. */
static int push_lower_(const pl_tokenizer *t, cps *out, uint32_t cp)
{
    const uint32_t *m = t->wpm_lowercase
                            ? map_(wpm_lower, sizeof wpm_lower / sizeof wpm_lower[0], cp)
                            : NULL;
    if (!m)
        return cps_push_(out, cp);
    for (uint32_t k = 0; k < m[1]; k++)
        if (cps_push_(out, m[2 + k]))
            return -1;
    return 0;
}

/* Strip accents (NFD without non-spacing marks), then lowercase. */
static int push_stripped_(const pl_tokenizer *t, cps *out, uint32_t cp)
{
    if (!t->wpm_strip_accents)
        return push_lower_(t, out, cp);
    if (flags_(cp) & WPM_MARK)
        return 0;
    if (cp >= 0xac00 && cp <= 0xd7a3) {          /* Hangul: L V (T) */
        uint32_t s = cp - 0xac00, tt = s % 28;
        if (push_lower_(t, out, 0x1100 + s / 588) ||
            push_lower_(t, out, 0x1161 + (s % 588) / 28))
            return -1;
        return tt ? push_lower_(t, out, 0x11a7 + tt) : 0;
    }
    const uint32_t *m = map_(wpm_strip, sizeof wpm_strip / sizeof wpm_strip[0], cp);
    if (!m)
        return push_lower_(t, out, cp);
    for (uint32_t k = 0; k < m[1]; k++)
        if (push_lower_(t, out, m[2 + k]))
            return -1;
    return 0;
}

/* BertNormalizer over one raw fragment. */
static int normalize_(const pl_tokenizer *t, const char *text, size_t len, cps *out)
{
    for (size_t i = 0; i < len;) {
        uint32_t cp = next_cp_((const uint8_t *)text, len, &i);
        unsigned f = flags_(cp);
        if (t->wpm_clean_text && (f & WPM_DROP))
            continue;
        if (t->wpm_clean_text && (f & WPM_SPACE))
            cp = ' ';
        bool cjk = t->wpm_chinese && (f & WPM_CJK);
        if ((cjk && cps_push_(out, ' ')) || push_stripped_(t, out, cp) ||
            (cjk && cps_push_(out, ' ')))
            return -1;
    }
    return 0;
}

/* WordPiece of one word (n code points); buf has room for twice its
 * UTF-8 bytes plus the prefix, off for n + 1 offsets. */
static int word_(const pl_tokenizer *t, const uint32_t *w, size_t n, char *buf,
                 size_t *off, pl_tok_ids *out)
{
    if (n > (size_t)t->wpm_max_word_chars)
        return pl_tok_ids_push(out, t->unk);
    off[0] = 0;
    for (size_t k = 0; k < n; k++)
        off[k + 1] = off[k] + pl_tok_utf8_put(w[k], buf + off[k]);
    char *piece = buf + off[n];
    int first = out->n;
    for (size_t start = 0; start < n;) {
        int32_t id = -1;
        size_t end = n, pre = start ? WPM_PREFIX_LEN : 0;
        memcpy(piece, WPM_PREFIX, WPM_PREFIX_LEN);
        for (; end > start && id < 0; end--) {
            memcpy(piece + pre, buf + off[start], off[end] - off[start]);
            id = pl_tok_strmap_get(&t->map, t, piece, pre + off[end] - off[start]);
        }
        if (id < 0) {
            out->n = first;
            return pl_tok_ids_push(out, t->unk);
        }
        if (pl_tok_ids_push(out, id))
            return -1;
        start = end + 1;
    }
    return 0;
}

int pl_tok_wpm_encode(const pl_tokenizer *t, const char *text, size_t len, pl_tok_ids *out)
{
    cps c = {0};
    char *buf = NULL;
    size_t *off = NULL;
    int rc = -1;
    if (normalize_(t, text, len, &c))
        goto done;
    buf = malloc(8 * c.n + WPM_PREFIX_LEN + 1);
    off = malloc((c.n + 1) * sizeof *off);
    if (!buf || !off)
        goto done;
    size_t w0 = 0;
    for (size_t i = 0; i <= c.n; i++) {
        unsigned f = i < c.n ? flags_(c.v[i]) : WPM_WS;
        if (!(f & (WPM_WS | WPM_PUNCT)))
            continue;
        if (i > w0 && word_(t, c.v + w0, i - w0, buf, off, out))
            goto done;
        if ((f & WPM_PUNCT) && !(f & WPM_WS) && word_(t, c.v + i, 1, buf, off, out))
            goto done;
        w0 = i + 1;
    }
    rc = 0;
done:
    free(c.v);
    free(buf);
    free(off);
    return rc;
}

int pl_tok_wpm_prepare(pl_tokenizer *t, const pl_tokenizer_vocab *v, char *err, size_t errlen)
{
    t->wpm_clean_text = v->wpm_clean_text;
    t->wpm_chinese = v->wpm_chinese;
    t->wpm_strip_accents = v->wpm_strip_accents;
    t->wpm_lowercase = v->wpm_lowercase;
    t->wpm_max_word_chars = v->wpm_max_word_chars > 0 ? v->wpm_max_word_chars : 100;
    if (v->unk < 0 || v->unk >= t->n_vocab) {
        snprintf(err, errlen, "a WordPiece vocabulary needs an unknown token");
        return -1;
    }
    size_t total = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        total += t->text_len[i] + 2;
    if (!(t->bytes = malloc(total + 1))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t o = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {  /* "##x" -> "x", "x" -> " x" */
        const char *s = pl_tok_text(t, i);
        size_t n = t->text_len[i];
        bool cont = n > WPM_PREFIX_LEN && !memcmp(s, WPM_PREFIX, WPM_PREFIX_LEN);
        bool plain = t->types[i] == PL_TOKEN_TYPE_NORMAL && !cont;
        t->bytes_off[i] = (uint32_t)o;
        if (plain)
            t->bytes[o++] = ' ';
        memcpy(t->bytes + o, s + (cont ? WPM_PREFIX_LEN : 0), n - (cont ? WPM_PREFIX_LEN : 0));
        o += n - (cont ? WPM_PREFIX_LEN : 0);
        t->bytes_len[i] = (uint32_t)(o - t->bytes_off[i]);
        t->bytes[o++] = '\0';
    }
    return 0;
}
