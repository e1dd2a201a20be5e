/* json_dump.c - compact JSON text from a jansson tree (see json_dump.h). */
#include "src/base/json_dump.h"
#include "src/base/utf8.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    pl_json_sink sink;
    void *ud;
    size_t used;
    bool failed;
    char buf[4096];
} dumper;

static void flush_(dumper *d)
{
    if (d->used && !d->failed && d->sink(d->ud, d->buf, d->used) != 0)
        d->failed = true;
    d->used = 0;
}

static void put_(dumper *d, const char *s, size_t n)
{
    if (n > sizeof d->buf - d->used) {
        flush_(d);
        if (n >= sizeof d->buf) {   /* a long run goes straight through */
            if (!d->failed && d->sink(d->ud, s, n) != 0)
                d->failed = true;
            return;
        }
    }
    memcpy(d->buf + d->used, s, n);
    d->used += n;
}

static void putc_(dumper *d, char c)
{
    if (d->used == sizeof d->buf)
        flush_(d);
    d->buf[d->used++] = c;
}

/* The escape for a byte below 0x20, a quote or a backslash. */
static void put_escape_(dumper *d, unsigned char c)
{
    static const char hex[] = "0123456789ABCDEF";
    char e[6] = {'\\', 0};
    switch (c) {
    case '"': e[1] = '"'; break;
    case '\\': e[1] = '\\'; break;
    case '\b': e[1] = 'b'; break;
    case '\f': e[1] = 'f'; break;
    case '\n': e[1] = 'n'; break;
    case '\r': e[1] = 'r'; break;
    case '\t': e[1] = 't'; break;
    default:
        memcpy(e + 1, "u00", 3);
        e[4] = hex[c >> 4];
        e[5] = hex[c & 15];
        put_(d, e, 6);
        return;
    }
    put_(d, e, 2);
}

static int put_string_(dumper *d, const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t run = 0, i = 0;
    putc_(d, '"');
    while (i < n) {
        unsigned char c = s[i];
        if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
            i++;
            continue;
        }
        if (c >= 0x80) {
            size_t k = pl_utf8_seq_len(s + i, n - i);
            if (!k)
                return -1;
            i += k;
            continue;
        }
        put_(d, str + run, i - run);
        put_escape_(d, c);
        run = ++i;
    }
    put_(d, str + run, n - run);
    putc_(d, '"');
    return 0;
}

char *pl_json_fmt_uint(char *end, unsigned long long v)
{
    do {
        *--end = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return end;
}

static void put_integer_(dumper *d, json_int_t v)
{
    char t[24];
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    char *p = pl_json_fmt_uint(t + sizeof t, u);
    if (v < 0)
        *--p = '-';
    put_(d, p, (size_t)(t + sizeof t - p));
}

static int put_value_(dumper *d, const json_t *v, int depth);

static int put_object_(dumper *d, const json_t *o, int depth)
{
    putc_(d, '{');
    bool first = true;
    for (void *it = json_object_iter((json_t *)o); it;
         it = json_object_iter_next((json_t *)o, it)) {
        const char *key = json_object_iter_key(it);
#if JANSSON_VERSION_HEX >= 0x020e00
        size_t key_len = json_object_iter_key_len(it);
#else
        size_t key_len = strlen(key);
#endif
        if (!first)
            putc_(d, ',');
        first = false;
        if (put_string_(d, key, key_len) < 0)
            return -1;
        putc_(d, ':');
        if (put_value_(d, json_object_iter_value(it), depth + 1) < 0)
            return -1;
    }
    putc_(d, '}');
    return 0;
}

static int put_value_(dumper *d, const json_t *v, int depth)
{
    if (!v || depth > PL_JSON_DUMP_MAX_DEPTH || d->failed)
        return -1;
    switch (json_typeof(v)) {
    case JSON_NULL: put_(d, "null", 4); return 0;
    case JSON_TRUE: put_(d, "true", 4); return 0;
    case JSON_FALSE: put_(d, "false", 5); return 0;
    case JSON_INTEGER: put_integer_(d, json_integer_value(v)); return 0;
    case JSON_REAL: {
        char t[128];   /* jansson's own form: it picks the shortest round trip */
        size_t n = json_dumpb(v, t, sizeof t, JSON_ENCODE_ANY | JSON_COMPACT);
        if (n == 0 || n > sizeof t)
            return -1;
        put_(d, t, n);
        return 0;
    }
    case JSON_STRING:
        return put_string_(d, json_string_value(v), json_string_length(v));
    case JSON_ARRAY: {
        size_t n = json_array_size(v);
        putc_(d, '[');
        for (size_t i = 0; i < n; i++) {
            if (i)
                putc_(d, ',');
            if (put_value_(d, json_array_get(v, i), depth + 1) < 0)
                return -1;
        }
        putc_(d, ']');
        return 0;
    }
    case JSON_OBJECT:
        return put_object_(d, v, depth);
    }
    return -1;
}

int pl_json_dump(const json_t *v, pl_json_sink sink, void *ud)
{
    dumper d;
    d.sink = sink;
    d.ud = ud;
    d.used = 0;
    d.failed = false;
    if (put_value_(&d, v, 0) < 0)
        return -1;
    flush_(&d);
    return d.failed ? -1 : 0;
}

typedef struct {
    char *p;
    size_t n, cap;
} growbuf;

static int grow_sink_(void *ud, const char *bytes, size_t n)
{
    growbuf *g = ud;
    if (g->n + n + 1 > g->cap) {
        size_t cap = g->cap ? g->cap : 256;
        while (cap < g->n + n + 1)
            cap *= 2;
        char *p = realloc(g->p, cap);
        if (!p)
            return -1;
        g->p = p;
        g->cap = cap;
    }
    memcpy(g->p + g->n, bytes, n);
    g->n += n;
    g->p[g->n] = '\0';
    return 0;
}

char *pl_json_dumps(const json_t *v, size_t *len)
{
    growbuf g = {0};
    if (pl_json_dump(v, grow_sink_, &g) < 0 || !g.p) {
        free(g.p);
        return NULL;
    }
    if (len)
        *len = g.n;
    return g.p;
}
