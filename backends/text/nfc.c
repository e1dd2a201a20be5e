/* nfc.c - Unicode Normalization Form C (UAX #15) for the tokenizers whose
 * tokenizer.json normalises text first (Qwen's NFC): canonical
 * decomposition, canonical ordering of combining marks, then canonical
 * composition, with Hangul syllables computed. Tables: nfc_tables.h
 * (scripts/gen_nfc_tables.py). Text of code points below U+0300 (ASCII and
 * Latin-1, which NFC leaves alone) is copied without decoding.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/text/nfc_tables.h"
#include "backends/text/tokenizer_internal.h"

#define N_(t) (sizeof(t) / sizeof((t)[0]))

enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7,
       L_COUNT = 19, V_COUNT = 21, T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT,
       S_COUNT = L_COUNT * N_COUNT };

static int ccc_(uint32_t cp)
{
    size_t lo = 0, hi = N_(nfc_ccc);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < nfc_ccc[mid][0])
            hi = mid;
        else if (cp > nfc_ccc[mid][1])
            lo = mid + 1;
        else
            return (int)nfc_ccc[mid][2];
    }
    return 0;
}

static const uint32_t *decomp_(uint32_t cp)
{
    size_t lo = 0, hi = N_(nfc_decomp);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp == nfc_decomp[mid][0])
            return nfc_decomp[mid];
        if (cp < nfc_decomp[mid][0])
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* The primary composite of a + b, or 0. */
static uint32_t compose_(uint32_t a, uint32_t b)
{
    if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 &&
        b > T_BASE && b < T_BASE + T_COUNT)
        return a + (b - T_BASE);
    size_t lo = 0, hi = N_(nfc_comp);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const uint32_t *e = nfc_comp[mid];
        if (a == e[0] && b == e[1])
            return e[2];
        if (a < e[0] || (a == e[0] && b < e[1]))
            hi = mid;
        else
            lo = mid + 1;
    }
    return 0;
}

/* Append cp's full canonical decomposition to v (room checked by caller:
 * a code point decomposes into at most 4). */
static size_t decompose_(uint32_t cp, uint32_t *v, size_t n)
{
    if (cp >= S_BASE && cp < S_BASE + S_COUNT) {
        uint32_t s = cp - S_BASE;
        v[n++] = L_BASE + s / N_COUNT;
        v[n++] = V_BASE + (s % N_COUNT) / T_COUNT;
        if (s % T_COUNT)
            v[n++] = T_BASE + s % T_COUNT;
        return n;
    }
    const uint32_t *d = decomp_(cp);
    if (!d) {
        v[n++] = cp;
        return n;
    }
    n = decompose_(d[1], v, n);
    return d[2] ? decompose_(d[2], v, n) : n;
}

/* Lenient UTF-8 decoding: a bad sequence is one U+FFFD per byte. */
static uint32_t next_cp_(const uint8_t *s, size_t len, size_t *i)
{
    uint8_t b = s[*i];
    size_t k = b < 0x80 ? 1 : b >= 0xc2 && b < 0xe0 ? 2 : b >= 0xe0 && b < 0xf0 ? 3 :
               b >= 0xf0 && b < 0xf5 ? 4 : 0;
    uint32_t cp = k == 1 ? b : (uint32_t)(b & (0x7f >> k));
    if (k == 0 || *i + k > len)
        k = 0;
    for (size_t j = 1; j < k; j++) {
        if ((s[*i + j] & 0xc0) != 0x80) {
            k = 0;
            break;
        }
        cp = cp << 6 | (s[*i + j] & 0x3f);
    }
    if (k == 0 || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) {
        (*i)++;
        return 0xfffd;
    }
    *i += k;
    return cp;
}

/* Stable insertion sort of each run of marks by combining class. */
static void reorder_(uint32_t *v, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        int c = ccc_(v[i]);
        for (size_t j = i; c && j > 0 && ccc_(v[j - 1]) > c; j--) {
            uint32_t t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    }
}

/* Canonical composition in place; returns the new length. */
static size_t recompose_(uint32_t *v, size_t n)
{
    if (n == 0)
        return 0;
    size_t starter = 0, out = 1;
    int last = ccc_(v[0]) ? 256 : 0;
    for (size_t i = 1; i < n; i++) {
        int c = ccc_(v[i]);
        uint32_t comp = compose_(v[starter], v[i]);
        if (comp && (last < c || last == 0)) {
            v[starter] = comp;
            continue;
        }
        if (c == 0)
            starter = out;
        last = c;
        v[out++] = v[i];
    }
    return out;
}

int pl_tok_nfc(const char *s, size_t len, char **out, size_t *out_len)
{
    size_t i = 0;
    while (i < len && (uint8_t)s[i] < 0xcc)   /* below U+0300 */
        i++;
    if (i == len) {
        *out = malloc(len + 1);
        if (!*out)
            return -1;
        memcpy(*out, s, len);
        *out_len = len;
        return 0;
    }
    uint32_t *v = malloc(sizeof(uint32_t) * (4 * len + 4));
    char *o = malloc(4 * len + 4);
    if (!v || !o) {
        free(v);
        free(o);
        return -1;
    }
    size_t n = 0;
    for (i = 0; i < len;)
        n = decompose_(next_cp_((const uint8_t *)s, len, &i), v, n);
    reorder_(v, n);
    n = recompose_(v, n);
    size_t k = 0;
    for (size_t j = 0; j < n; j++)
        k += pl_tok_utf8_put(v[j], o + k);
    free(v);
    *out = o;
    *out_len = k;
    return 0;
}
