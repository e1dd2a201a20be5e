/* utf8.c - UTF-8 checks and Python-style replacement (see utf8.h). */
#include "src/base/utf8.h"

#include <stdlib.h>
#include <string.h>

size_t pl_utf8_seq_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t need;
    unsigned min;
    if (c < 0x80)
        return 1;
    if ((c & 0xE0) == 0xC0) { need = 2; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { need = 3; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { need = 4; min = 0x10000; }
    else return 0;
    if (need > n)
        return 0;
    unsigned cp = c & (0x7F >> need);
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return need;
}

/* As Python's and browsers' decoders replace: the second byte's range is
 * narrower after E0, ED, F0 and F4, so an overlong form, a surrogate or a
 * code point past U+10FFFF is ill-formed from its second byte on. */
size_t pl_utf8_bad_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t need = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                : c >= 0xF0 && c <= 0xF4 ? 4 : 1;
    size_t k = 1;
    for (; k < need && k < n; k++) {
        unsigned lo = 0x80, hi = 0xBF;
        if (k == 1 && c == 0xE0)
            lo = 0xA0;                 /* no overlongs */
        else if (k == 1 && c == 0xED)
            hi = 0x9F;                 /* no surrogates */
        else if (k == 1 && c == 0xF0)
            lo = 0x90;
        else if (k == 1 && c == 0xF4)
            hi = 0x8F;                 /* up to U+10FFFF */
        if (s[k] < lo || s[k] > hi)
            break;
    }
    return k;
}

bool pl_utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t k = p[i] < 0x80 ? 1 : pl_utf8_seq_len(p + i, len - i);
        if (!k)
            return false;
        i += k;
    }
    return true;
}

char *pl_utf8_lossy(const char *s, size_t len, size_t *out_len)
{
    char *t = malloc(3 * len + 1);
    if (!t)
        return NULL;
    const unsigned char *p = (const unsigned char *)s;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t k = p[i] < 0x80 ? 1 : pl_utf8_seq_len(p + i, len - i);
        if (k) {
            memcpy(t + n, p + i, k);
            n += k;
            i += k;
        } else {
            memcpy(t + n, PL_UTF8_REPLACEMENT, 3);
            n += 3;
            i += pl_utf8_bad_len(p + i, len - i);
        }
    }
    t[n] = '\0';
    *out_len = n;
    return t;
}

json_t *pl_json_string_lossy(const char *s, size_t len)
{
    json_t *j = json_stringn(s ? s : "", s ? len : 0);
    if (j || !s)
        return j;
    size_t n;
    char *t = pl_utf8_lossy(s, len, &n);
    if (!t)
        return NULL;
    j = json_stringn_nocheck(t, n);
    free(t);
    return j;
}
