/* regex_parse.c - pattern text into the parse tree of regex_internal.h.
 * Multi-byte UTF-8 characters become sequences of single-byte sets; '.'
 * and negated classes become the alternation of well-formed UTF-8
 * sequences (no surrogates, no overlong forms). */
#include "backends/constrain/regex_internal.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/constrain/regex.h"

#define RX_BLOCK_NODES 256
#define RX_MAX_DEPTH 200
#define RX_MAX_MB 64             /* multi-byte characters listed in a class */

struct rx_block {
    struct rx_block *next;
    rx_node nodes[RX_BLOCK_NODES];
};

rx_node *rx_new_(rx_arena *a, rx_type t)
{
    if (!a->blocks || a->used == RX_BLOCK_NODES) {
        struct rx_block *b = calloc(1, sizeof *b);
        if (!b)
            return NULL;
        b->next = a->blocks;
        a->blocks = b;
        a->used = 0;
    }
    rx_node *n = &a->blocks->nodes[a->used++];
    n->type = t;
    return n;
}

void rx_arena_free_(rx_arena *a)
{
    while (a->blocks) {
        struct rx_block *b = a->blocks;
        a->blocks = b->next;
        free(b);
    }
    a->used = 0;
}

void rx_add_kid_(rx_node *parent, rx_node *kid)
{
    if (parent->last)
        parent->last->next = kid;
    else
        parent->kid = kid;
    parent->last = kid;
}

typedef struct rx_parser {
    rx_arena *a;
    const char *start, *p, *end;
    int flags;
    int depth;
    char *err;
    size_t errlen;
    bool failed;
} rx_parser;

/* A class while it is parsed: ASCII members, "every multi-byte character",
 * and specific multi-byte characters. */
typedef struct rx_class {
    uint8_t ascii[16];
    bool all_mb;
    int n_mb;
    char mb[RX_MAX_MB][4];
    uint8_t mb_len[RX_MAX_MB];
} rx_class;

static rx_node *fail_(rx_parser *ps, const char *fmt, ...)
{
    if (!ps->failed) {
        char msg[200];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        snprintf(ps->err, ps->errlen, "regex: %s at offset %d", msg,
                 (int)(ps->p - ps->start));
    }
    ps->failed = true;
    return NULL;
}

static rx_node *oom_(rx_parser *ps)
{
    return fail_(ps, "out of memory");
}

static void set_add_(uint8_t *set, int b)
{
    set[b >> 3] |= (uint8_t)(1u << (b & 7));
}

static rx_node *set_node_(rx_parser *ps, int lo, int hi)
{
    rx_node *n = rx_new_(ps->a, RX_SET);
    if (!n)
        return oom_(ps);
    for (int b = lo; b <= hi; b++)
        set_add_(n->set, b);
    return n;
}

/* A sequence of byte ranges: ranges[2i], ranges[2i+1]. */
static rx_node *seq_(rx_parser *ps, const int *ranges, int n)
{
    rx_node *cat = rx_new_(ps->a, RX_CAT);
    if (!cat)
        return oom_(ps);
    for (int i = 0; i < n; i++) {
        rx_node *s = set_node_(ps, ranges[2 * i], ranges[2 * i + 1]);
        if (!s)
            return NULL;
        rx_add_kid_(cat, s);
    }
    return cat;
}

/* Every well-formed multi-byte UTF-8 sequence, as alternatives of alt. */
static bool add_any_mb_(rx_parser *ps, rx_node *alt)
{
    static const int forms[][9] = {
        {2, 0xC2, 0xDF, 0x80, 0xBF},
        {3, 0xE0, 0xE0, 0xA0, 0xBF, 0x80, 0xBF},
        {3, 0xE1, 0xEC, 0x80, 0xBF, 0x80, 0xBF},
        {3, 0xED, 0xED, 0x80, 0x9F, 0x80, 0xBF},
        {3, 0xEE, 0xEF, 0x80, 0xBF, 0x80, 0xBF},
        {4, 0xF0, 0xF0, 0x90, 0xBF, 0x80, 0xBF, 0x80, 0xBF},
        {4, 0xF1, 0xF3, 0x80, 0xBF, 0x80, 0xBF, 0x80, 0xBF},
        {4, 0xF4, 0xF4, 0x80, 0x8F, 0x80, 0xBF, 0x80, 0xBF},
    };
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
        int r[8];
        int n = forms[f][0];
        for (int i = 0; i < 2 * n; i++)
            r[i] = forms[f][1 + i];
        rx_node *s = seq_(ps, r, n);
        if (!s)
            return false;
        rx_add_kid_(alt, s);
    }
    return true;
}

/* Bytes a negated or wildcard match may never produce. */
static bool excluded_(const rx_parser *ps, int b)
{
    if (ps->flags & PL_REGEX_JSON_STRING)
        return b < 0x20 || b == '"' || b == '\\' || b == 0x7f;
    return false;
}

/* The node for a finished class. */
static rx_node *class_node_(rx_parser *ps, const rx_class *c)
{
    rx_node *alt = rx_new_(ps->a, RX_ALT);
    rx_node *ascii = rx_new_(ps->a, RX_SET);
    if (!alt || !ascii)
        return oom_(ps);
    bool any = false;
    for (int b = 0; b < 128; b++)
        if ((c->ascii[b >> 3] >> (b & 7)) & 1 && !excluded_(ps, b)) {
            set_add_(ascii->set, b);
            any = true;
        }
    if (any)
        rx_add_kid_(alt, ascii);
    if (c->all_mb && !add_any_mb_(ps, alt))
        return NULL;
    for (int i = 0; i < c->n_mb; i++) {
        rx_node *cat = rx_new_(ps->a, RX_CAT);
        if (!cat)
            return oom_(ps);
        for (int k = 0; k < c->mb_len[i]; k++) {
            int b = (unsigned char)c->mb[i][k];
            rx_node *s = set_node_(ps, b, b);
            if (!s)
                return NULL;
            rx_add_kid_(cat, s);
        }
        rx_add_kid_(alt, cat);
    }
    if (!alt->kid)
        return fail_(ps, "a character class that matches nothing");
    return alt;
}

static void class_range_(rx_class *c, int lo, int hi)
{
    for (int b = lo; b <= hi && b < 128; b++)
        set_add_(c->ascii, b);
}

/* \d \w \s and their negations into c. Returns false for another letter. */
static bool class_shorthand_(const rx_parser *ps, rx_class *c, char e)
{
    rx_class t = {0};
    switch (e | 0x20) {
    case 'd':
        class_range_(&t, '0', '9');
        break;
    case 'w':
        class_range_(&t, '0', '9');
        class_range_(&t, 'A', 'Z');
        class_range_(&t, 'a', 'z');
        class_range_(&t, '_', '_');
        break;
    case 's':
        class_range_(&t, ' ', ' ');
        if (!(ps->flags & PL_REGEX_JSON_STRING))
            class_range_(&t, '\t', '\r');
        break;
    default:
        return false;
    }
    bool neg = e >= 'A' && e <= 'Z';
    for (int i = 0; i < 16; i++)
        c->ascii[i] |= neg ? (uint8_t)~t.ascii[i] : t.ascii[i];
    if (neg)
        c->all_mb = true;
    return true;
}

static int hexval_(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f')
        return (ch | 0x20) - 'a' + 10;
    return -1;
}

static int utf8_encode_(unsigned cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* One literal character (after a backslash when esc) into out; returns its
 * byte length, 0 after a failure. ps->p is past the character. */
static int literal_(rx_parser *ps, bool esc, char *out)
{
    if (esc) {
        char e = *ps->p++;
        static const char simple[] = "n\nt\tr\rf\fv\v0";
        const char *s = strchr(simple, e);
        if (e && s && (s - simple) % 2 == 0) {
            out[0] = e == '0' ? '\0' : s[1];
            return 1;
        }
        if (e == 'x' || e == 'u') {
            int nd = e == 'x' ? 2 : 4;
            unsigned cp = 0;
            for (int i = 0; i < nd; i++) {
                int h = ps->p < ps->end ? hexval_(*ps->p) : -1;
                if (h < 0)
                    return fail_(ps, "bad \\%c escape", e), 0;
                cp = cp * 16 + (unsigned)h;
                ps->p++;
            }
            if (cp >= 0xD800 && cp <= 0xDFFF)
                return fail_(ps, "a surrogate \\u escape"), 0;
            return utf8_encode_(cp, out);
        }
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '1' && e <= '9'))
            return fail_(ps, "escape '\\%c' (back-references, \\b and anchors) is not "
                             "supported", e), 0;
        out[0] = e;
        return 1;
    }
    unsigned char c = (unsigned char)*ps->p;
    int n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (ps->p + n > ps->end)
        return fail_(ps, "truncated UTF-8"), 0;
    memcpy(out, ps->p, (size_t)n);
    ps->p += n;
    return n;
}

static bool class_add_char_(rx_parser *ps, rx_class *c, const char *ch, int n)
{
    if (n == 1) {
        class_range_(c, (unsigned char)ch[0], (unsigned char)ch[0]);
        return true;
    }
    if (c->n_mb == RX_MAX_MB)
        return fail_(ps, "more than %d non-ASCII characters in a class", RX_MAX_MB), false;
    memcpy(c->mb[c->n_mb], ch, (size_t)n);
    c->mb_len[c->n_mb++] = (uint8_t)n;
    return true;
}

/* [...] after the '['. */
static rx_node *parse_class_(rx_parser *ps)
{
    rx_class c = {0};
    bool neg = ps->p < ps->end && *ps->p == '^';
    ps->p += neg;
    bool first = true;
    while (ps->p < ps->end && (*ps->p != ']' || first)) {
        first = false;
        bool esc = *ps->p == '\\';
        ps->p += esc;
        if (ps->p >= ps->end)
            break;
        if (esc && class_shorthand_(ps, &c, *ps->p)) {
            ps->p++;
            continue;
        }
        char lo[4], hi[4];
        int nlo = literal_(ps, esc, lo);
        if (!nlo)
            return NULL;
        if (ps->p + 1 < ps->end && ps->p[0] == '-' && ps->p[1] != ']') {
            ps->p++;
            bool esc2 = *ps->p == '\\';
            ps->p += esc2;
            int nhi = ps->p < ps->end ? literal_(ps, esc2, hi) : 0;
            if (!nhi)
                return ps->failed ? NULL : fail_(ps, "unterminated range");
            if (nlo != 1 || nhi != 1)
                return fail_(ps, "non-ASCII ranges in a class are not supported");
            if ((unsigned char)lo[0] > (unsigned char)hi[0])
                return fail_(ps, "range out of order");
            class_range_(&c, (unsigned char)lo[0], (unsigned char)hi[0]);
        } else if (!class_add_char_(ps, &c, lo, nlo)) {
            return NULL;
        }
    }
    if (ps->p >= ps->end)
        return fail_(ps, "unterminated class");
    ps->p++;
    if (neg) {
        if (c.n_mb)
            return fail_(ps, "a negated class with non-ASCII members is not supported");
        for (int i = 0; i < 16; i++)
            c.ascii[i] = (uint8_t)~c.ascii[i];
        c.all_mb = !c.all_mb;
    }
    return class_node_(ps, &c);
}

/* '.': any character but a newline. */
static rx_node *dot_(rx_parser *ps)
{
    rx_class c = {0};
    class_range_(&c, 0, 127);
    c.ascii['\n' >> 3] &= (uint8_t) ~(1u << ('\n' & 7));
    c.all_mb = true;
    return class_node_(ps, &c);
}

static rx_node *chars_node_(rx_parser *ps, const char *ch, int n)
{
    if ((ps->flags & PL_REGEX_JSON_STRING) && n == 1 && excluded_(ps, (unsigned char)ch[0]))
        return fail_(ps, "a pattern inside a JSON string cannot match '\"', '\\\\' or "
                         "control characters");
    if (n == 1)
        return set_node_(ps, (unsigned char)ch[0], (unsigned char)ch[0]);
    rx_node *cat = rx_new_(ps->a, RX_CAT);
    if (!cat)
        return oom_(ps);
    for (int i = 0; i < n; i++) {
        rx_node *s = set_node_(ps, (unsigned char)ch[i], (unsigned char)ch[i]);
        if (!s)
            return NULL;
        rx_add_kid_(cat, s);
    }
    return cat;
}

static rx_node *parse_alt_(rx_parser *ps);

static rx_node *parse_group_(rx_parser *ps)
{
    int saved = ps->flags;
    if (ps->p < ps->end && *ps->p == '?') {
        if (ps->p + 1 < ps->end && ps->p[1] == ':') {
            ps->p += 2;
        } else if (ps->p + 2 < ps->end && ps->p[1] == 'J' && ps->p[2] == ':') {
            ps->p += 3;           /* parley's own: JSON-string mode inside */
            ps->flags |= PL_REGEX_JSON_STRING;
        } else {
            return fail_(ps, "group '(?%c' (lookaround, named or flagged groups) is not "
                             "supported", ps->p + 1 < ps->end ? ps->p[1] : ' ');
        }
    }
    if (++ps->depth > RX_MAX_DEPTH)
        return fail_(ps, "groups nested too deeply");
    rx_node *n = parse_alt_(ps);
    ps->depth--;
    ps->flags = saved;
    if (!n)
        return NULL;
    if (ps->p >= ps->end || *ps->p != ')')
        return fail_(ps, "missing ')'");
    ps->p++;
    return n;
}

static rx_node *parse_atom_(rx_parser *ps)
{
    char c = *ps->p++;
    if (c == '(')
        return parse_group_(ps);
    if (c == '[')
        return parse_class_(ps);
    if (c == '.')
        return dot_(ps);
    if (c == '*' || c == '+' || c == '?')
        return ps->p--, fail_(ps, "quantifier '%c' with nothing to repeat", c);
    if (c == '\\') {
        if (ps->p >= ps->end)
            return fail_(ps, "trailing backslash");
        rx_class cl = {0};
        if (class_shorthand_(ps, &cl, *ps->p)) {
            ps->p++;
            return class_node_(ps, &cl);
        }
    } else {
        ps->p--;
    }
    char ch[4];
    int n = literal_(ps, c == '\\', ch);
    return n ? chars_node_(ps, ch, n) : NULL;
}

static bool read_int_(rx_parser *ps, int *out)
{
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
        return false;
    long v = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        v = v * 10 + (*ps->p++ - '0');
        if (v > 100000)
            return fail_(ps, "repeat count too large"), false;
    }
    *out = (int)v;
    return true;
}

/* Quantifier at ps->p into min/max; false when there is none. */
static bool quantifier_(rx_parser *ps, int *min, int *max)
{
    char c = *ps->p;
    if (c == '?' || c == '*' || c == '+') {
        ps->p++;
        *min = c == '+';
        *max = c == '?' ? 1 : -1;
        return true;
    }
    if (c != '{')
        return false;
    const char *save = ps->p++;
    if (!read_int_(ps, min)) {
        ps->p = save;
        return false;             /* a literal '{' as in most engines */
    }
    *max = *min;
    if (ps->p < ps->end && *ps->p == ',') {
        ps->p++;
        *max = -1;
        if (ps->p < ps->end && *ps->p != '}' && !read_int_(ps, max))
            return fail_(ps, "bad {m,n}"), false;
    }
    if (ps->p >= ps->end || *ps->p != '}')
        return fail_(ps, "bad {m,n}"), false;
    ps->p++;
    if (*max >= 0 && *max < *min)
        return fail_(ps, "{m,n} with n < m"), false;
    return true;
}

static rx_node *parse_repeat_(rx_parser *ps)
{
    rx_node *atom = parse_atom_(ps);
    int min, max;
    while (atom && ps->p < ps->end && quantifier_(ps, &min, &max)) {
        if (ps->p < ps->end && *ps->p == '+')
            return fail_(ps, "possessive quantifiers are not supported");
        if (ps->p < ps->end && *ps->p == '?')
            ps->p++;              /* lazy: the same language */
        rx_node *r = rx_new_(ps->a, RX_REP);
        if (!r)
            return oom_(ps);
        r->min = min;
        r->max = max;
        rx_add_kid_(r, atom);
        atom = r;
    }
    return ps->failed ? NULL : atom;
}

static rx_node *parse_cat_(rx_parser *ps)
{
    rx_node *cat = rx_new_(ps->a, RX_CAT);
    if (!cat)
        return oom_(ps);
    while (ps->p < ps->end && *ps->p != '|' && *ps->p != ')') {
        if (*ps->p == '^' && ps->p == ps->start) {
            ps->p++;
            continue;
        }
        if (*ps->p == '$' && ps->p + 1 == ps->end && ps->depth == 0) {
            ps->p++;
            continue;
        }
        if (*ps->p == '^' || *ps->p == '$')
            return fail_(ps, "anchor '%c' inside the pattern is not supported", *ps->p);
        rx_node *n = parse_repeat_(ps);
        if (!n)
            return NULL;
        rx_add_kid_(cat, n);
    }
    return cat;
}

static rx_node *parse_alt_(rx_parser *ps)
{
    rx_node *first = parse_cat_(ps);
    if (!first || ps->p >= ps->end || *ps->p != '|')
        return first;
    rx_node *alt = rx_new_(ps->a, RX_ALT);
    if (!alt)
        return oom_(ps);
    rx_add_kid_(alt, first);
    while (ps->p < ps->end && *ps->p == '|') {
        ps->p++;
        rx_node *n = parse_cat_(ps);
        if (!n)
            return NULL;
        rx_add_kid_(alt, n);
    }
    return alt;
}

rx_node *rx_parse_(rx_arena *a, const char *pattern, size_t len, int flags, char *err,
                   size_t errlen)
{
    rx_parser ps = {.a = a, .start = pattern, .p = pattern, .end = pattern + len,
                    .flags = flags, .err = err, .errlen = errlen};
    rx_node *n = parse_alt_(&ps);
    if (n && ps.p < ps.end)
        return fail_(&ps, "unbalanced ')'");
    return n;
}
