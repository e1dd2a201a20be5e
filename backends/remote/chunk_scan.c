/* chunk_scan.c - the fast path for streamed chunks (see chunk_scan.h). */
#include "backends/remote/chunk_scan.h"

#include <stdlib.h>
#include <string.h>

typedef struct scan {
    const char *p, *end;
} scan;

static int hex4(const char *p);

static void ws(scan *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t'))
        c->p++;
}

static bool eat(scan *c, char ch)
{
    ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A string: *s, *n the raw bytes between the quotes. */
static bool str(scan *c, const char **s, size_t *n)
{
    if (!eat(c, '"'))
        return false;
    const char *b = c->p;
    while (c->p < c->end && *c->p != '"') {
        if ((unsigned char)*c->p < 0x20)
            return false;
        if (*c->p == '\\') {
            if (c->end - c->p < 2 || !strchr("\"\\/bfnrtu", c->p[1]) || !c->p[1])
                return false;
            if (c->p[1] == 'u' && (c->end - c->p < 6 || hex4(c->p + 2) < 0))
                return false;
            c->p += c->p[1] == 'u' ? 6 : 2;
            continue;
        }
        c->p++;
    }
    if (c->p >= c->end)
        return false;
    *s = b;
    *n = (size_t)(c->p - b);
    c->p++;
    return true;
}

static bool is_key(const char *k, size_t n, const char *want)
{
    return strlen(want) == n && !memcmp(k, want, n);
}

static bool digits(scan *c)
{
    const char *b = c->p;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9')
        c->p++;
    return c->p > b;
}

/* A JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static bool number(scan *c)
{
    if (c->p < c->end && *c->p == '-')
        c->p++;
    if (c->p < c->end && *c->p == '0')
        c->p++;
    else if (!digits(c))
        return false;
    if (c->p < c->end && *c->p == '.') {
        c->p++;
        if (!digits(c))
            return false;
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
        c->p++;
        if (c->p < c->end && (*c->p == '+' || *c->p == '-'))
            c->p++;
        if (!digits(c))
            return false;
    }
    return true;
}

/* Skip any value (depth-limited). */
static bool skip(scan *c, int depth)
{
    const char *s;
    size_t n;
    ws(c);
    if (c->p >= c->end || depth > 32)
        return false;
    char ch = *c->p;
    if (ch == '"')
        return str(c, &s, &n);
    if (ch == '{' || ch == '[') {
        char close = ch == '{' ? '}' : ']';
        c->p++;
        if (eat(c, close))
            return true;
        do {
            if (ch == '{' && (!str(c, &s, &n) || !eat(c, ':')))
                return false;
            if (!skip(c, depth + 1))
                return false;
        } while (eat(c, ','));
        return eat(c, close);
    }
    static const char *lits[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t l = strlen(lits[i]);
        if ((size_t)(c->end - c->p) >= l && !memcmp(c->p, lits[i], l)) {
            c->p += l;
            return true;
        }
    }
    return number(c);
}

static bool is_null(scan *c)
{
    ws(c);
    if (c->end - c->p >= 4 && !memcmp(c->p, "null", 4)) {
        c->p += 4;
        return true;
    }
    return false;
}

static int hex4(const char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char h = p[i];
        v <<= 4;
        if (h >= '0' && h <= '9')
            v |= h - '0';
        else if (h >= 'a' && h <= 'f')
            v |= h - 'a' + 10;
        else if (h >= 'A' && h <= 'F')
            v |= h - 'A' + 10;
        else
            return -1;
    }
    return v;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Unescape raw string bytes into s->buf. */
static bool unescape(pl_chunk_scan *s, const char *r, size_t n)
{
    if (n + 1 > s->cap) {
        size_t cap = n + 64;
        char *b = realloc(s->buf, cap);
        if (!b)
            return false;
        s->buf = b;
        s->cap = cap;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (r[i] != '\\') {
            s->buf[o++] = r[i];
            continue;
        }
        if (++i >= n)
            return false;
        const char *esc = strchr("\"\\/bfnrt", r[i]);
        if (esc && r[i]) {
            static const char out[] = "\"\\/\b\f\n\r\t";
            s->buf[o++] = out[esc - "\"\\/bfnrt"];
            continue;
        }
        if (r[i] != 'u' || n - i < 5)
            return false;
        int cp = hex4(r + i + 1);
        i += 4;
        if (cp < 0)
            return false;
        if (cp >= 0xD800 && cp < 0xDC00) {        /* a surrogate pair */
            if (n - i < 7 || r[i + 1] != '\\' || r[i + 2] != 'u')
                return false;
            int lo = hex4(r + i + 3);
            if (lo < 0xDC00 || lo > 0xDFFF)
                return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            i += 6;
        } else if (cp >= 0xDC00 && cp < 0xE000) {
            return false;
        }
        if (cp == 0)
            return false;            /* NUL in text: let jansson decide */
        o += put_utf8(s->buf + o, (unsigned)cp);
    }
    s->len = o;
    return true;
}

/* Whole, well-formed UTF-8 only (the sink's contract); else the full
 * parser decides. */
static bool utf8_ok(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char b = p[i];
        size_t k = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n || (k == 2 && b < 0xC2))
            return false;
        for (size_t j = 1; j < k; j++)
            if ((p[i + j] & 0xC0) != 0x80)
                return false;
        if ((k == 3 && b == 0xE0 && p[i + 1] < 0xA0) || (k == 3 && b == 0xED && p[i + 1] >= 0xA0) ||
            (k == 4 && b == 0xF0 && p[i + 1] < 0x90) || (k == 4 && (b > 0xF4 || (b == 0xF4 && p[i + 1] >= 0x90))))
            return false;
        i += k;
    }
    return true;
}

/* The text member of a choice: "content" in delta (chat) or "text". */
static int text_member(pl_chunk_scan *s, scan *c)
{
    const char *v;
    size_t n;
    if (is_null(c))
        return 1;
    return str(c, &v, &n) && unescape(s, v, n) &&
           utf8_ok((const unsigned char *)s->buf, s->len) ? 1 : 0;
}

static int delta(pl_chunk_scan *s, scan *c)
{
    if (is_null(c))
        return 1;
    if (!eat(c, '{'))
        return 0;
    if (eat(c, '}'))
        return 1;
    do {
        const char *k;
        size_t kn;
        if (!str(c, &k, &kn) || !eat(c, ':'))
            return 0;
        if (is_key(k, kn, "content")) {
            if (!text_member(s, c))
                return 0;
        } else if (is_key(k, kn, "role") || is_key(k, kn, "reasoning_content") ||
                   is_key(k, kn, "reasoning")) {
            if (!skip(c, 0))
                return 0;
        } else if (!is_null(c)) {
            return 0;                /* tool_calls, refusal, ...: the full parser */
        }
    } while (eat(c, ','));
    return eat(c, '}');
}

static int choice(pl_chunk_scan *s, scan *c, bool chat)
{
    if (!eat(c, '{'))
        return 0;
    s->has_choice = true;
    if (eat(c, '}'))
        return 1;
    do {
        const char *k, *v;
        size_t kn, vn;
        if (!str(c, &k, &kn) || !eat(c, ':'))
            return 0;
        int ok;
        if (chat && is_key(k, kn, "delta"))
            ok = delta(s, c);
        else if (!chat && is_key(k, kn, "text"))
            ok = text_member(s, c);
        else if (is_key(k, kn, "finish_reason")) {
            ok = is_null(c);
            if (!ok && (ok = str(c, &v, &vn) && vn < sizeof s->finish)) {
                memcpy(s->finish, v, vn);
                s->finish[vn] = '\0';
            }
        } else if (is_key(k, kn, "logprobs") || is_key(k, kn, "message"))
            ok = is_null(c);         /* logprobs: the full parser builds them */
        else
            ok = skip(c, 0);
        if (!ok)
            return 0;
    } while (eat(c, ','));
    return eat(c, '}');
}

int pl_chunk_scan_read(pl_chunk_scan *s, const char *data, size_t n, bool chat)
{
    scan c = {data, data + n};
    s->len = 0;
    s->finish[0] = '\0';
    s->has_choice = false;
    if (!utf8_ok((const unsigned char *)data, n))
        return 0;
    if (!eat(&c, '{'))
        return 0;
    if (eat(&c, '}'))
        return 0;
    do {
        const char *k;
        size_t kn;
        if (!str(&c, &k, &kn) || !eat(&c, ':'))
            return 0;
        int ok;
        if (is_key(k, kn, "choices")) {
            if (!eat(&c, '['))
                return 0;
            ok = eat(&c, ']') || (choice(s, &c, chat) && eat(&c, ']'));
        } else if (is_key(k, kn, "usage") || is_key(k, kn, "error")) {
            ok = is_null(&c);
        } else if (is_key(k, kn, "object")) {
            const char *v;
            size_t vn;
            ok = str(&c, &v, &vn) && !is_key(v, vn, "error");
        } else {
            ok = skip(&c, 0);
        }
        if (!ok)
            return 0;
    } while (eat(&c, ','));
    if (!eat(&c, '}'))
        return 0;
    ws(&c);
    return c.p == c.end;
}

void pl_chunk_scan_free(pl_chunk_scan *s)
{
    free(s->buf);
    s->buf = NULL;
    s->cap = 0;
}
