/* regex_gbnf.c - a regex as a GBNF grammar (llama.cpp's grammar format), so
 * that a llama-server upstream enforces the language parley's DFA accepts.
 *
 * The parse tree (regex_internal.h) is over bytes, GBNF over code points.
 * Every byte set above 0x7F in a tree is part of a UTF-8 sequence node (a
 * concatenation of 2-4 sets: lead bytes, then continuation bytes), which
 * becomes a class of code-point ranges. llama.cpp refuses left recursion,
 * which its expansion of x* and x+ creates when x matches the empty string;
 * such a repetition is written over the non-empty parts of x instead: if
 * every part of x matches "", then (y1 y2 ... yn)* = (y1 | y2 | ... | yn)*,
 * and ""-alternatives add nothing under a star.
 */
#include "backends/constrain/regex.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/constrain/regex_internal.h"

#define GB_MAX_BYTES (8u << 20)  /* a grammar larger than this is refused */

typedef struct gb_buf {
    char *p;
    size_t len, cap;
    bool failed;
} gb_buf;

typedef struct cp_range {
    uint32_t lo, hi;
} cp_range;

typedef struct cp_set {
    cp_range *r;
    int n, cap;
    bool failed;
} cp_set;

typedef enum gb_ctx {
    GB_TOP,                      /* the whole rule, or one alternative */
    GB_ITEM,                     /* one item of a sequence */
    GB_REPEATED,                 /* the operand of a quantifier */
} gb_ctx;

static void put_(gb_buf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (b->len + n + 1 > nc)
            nc *= 2;
        char *p = nc <= GB_MAX_BYTES ? realloc(b->p, nc) : NULL;
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void puts_(gb_buf *b, const char *s)
{
    put_(b, s, strlen(s));
}

static bool has_(const uint8_t *set, int c)
{
    return (set[c >> 3] >> (c & 7)) & 1;
}

/* ---- what a node matches ---- */

/* only false: whether n matches the empty string; only true: whether it
 * matches nothing else. */
static bool empty_(const rx_node *n, bool only)
{
    switch (n->type) {
    case RX_EMPTY:
        return true;
    case RX_SET:
        return false;
    case RX_CAT:
        for (const rx_node *k = n->kid; k; k = k->next)
            if (!empty_(k, only))
                return false;
        return true;
    case RX_ALT:                 /* some kid matches "", or every kid only "" */
        for (const rx_node *k = n->kid; k; k = k->next)
            if (empty_(k, only) != only)
                return !only;
        return only;
    case RX_REP:
        return (only ? n->max : n->min) == 0 || empty_(n->kid, only);
    }
    return false;
}

static bool nullable_(const rx_node *n)
{
    return empty_(n, false);
}

static bool only_empty_(const rx_node *n)
{
    return empty_(n, true);
}

/* The byte length k of the UTF-8 sequences a concatenation of k byte sets
 * spells (a lead set for length k, then continuation sets), or 0. */
static int utf8_len_(const rx_node *n)
{
    static const int lead_lo[5] = {0, 0, 0xC2, 0xE0, 0xF0}, lead_hi[5] = {0, 0, 0xDF, 0xEF, 0xF4};
    if (n->type != RX_CAT)
        return 0;
    int k = 0;
    for (const rx_node *c = n->kid; c; c = c->next, k++)
        if (c->type != RX_SET || k >= 4)
            return 0;
    if (k < 2)
        return 0;
    int i = 0;
    for (const rx_node *c = n->kid; c; c = c->next, i++)
        for (int b = 0; b < 256; b++)
            if (has_(c->set, b) && (i == 0 ? b < lead_lo[k] || b > lead_hi[k]
                                           : b < 0x80 || b > 0xBF))
                return 0;
    return k;
}

/* ---- classes of code points ---- */

static void range_add_(cp_set *s, uint32_t lo, uint32_t hi)
{
    if (s->n && s->r[s->n - 1].hi + 1 == lo) {    /* extend the last one */
        s->r[s->n - 1].hi = hi;
        return;
    }
    if (s->n == s->cap) {
        int nc = s->cap ? s->cap * 2 : 16;
        cp_range *r = realloc(s->r, sizeof *r * (size_t)nc);
        if (!r) {
            s->failed = true;
            return;
        }
        s->r = r;
        s->cap = nc;
    }
    s->r[s->n++] = (cp_range){lo, hi};
}

/* The code points of the sequences from set `c` on, after the bits v. */
static void utf8_ranges_(cp_set *s, const rx_node *c, uint32_t v, int left)
{
    bool full_tail = true;
    for (const rx_node *t = c; t; t = t->next)
        for (int b = 0x80; b <= 0xBF; b++)
            full_tail = full_tail && has_(t->set, b);
    if (full_tail) {
        uint32_t lo = v << (6 * left);
        range_add_(s, lo, lo | ((1u << (6 * left)) - 1));
        return;
    }
    for (int b = 0x80; b <= 0xBF; b++)
        if (has_(c->set, b))
            utf8_ranges_(s, c->next, (v << 6) | (uint32_t)(b & 0x3F), left - 1);
}

static int range_cmp_(const void *a, const void *b)
{
    const cp_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Whether n is one character out of a class; its code points into s. */
static bool class_of_(const rx_node *n, cp_set *s)
{
    if (n->type == RX_SET) {
        for (int b = 128; b < 256; b++)
            if (has_(n->set, b))
                return false;          /* a stray byte: not a character */
        for (int b = 0; b < 128; b++)
            if (has_(n->set, b))
                range_add_(s, (uint32_t)b, (uint32_t)b);
        return true;
    }
    if (n->type == RX_ALT) {
        for (const rx_node *k = n->kid; k; k = k->next)
            if (!class_of_(k, s))
                return false;
        return n->kid != NULL;
    }
    int k = utf8_len_(n);
    if (!k)
        return false;
    for (int b = 0; b < 256; b++)
        if (has_(n->kid->set, b))
            utf8_ranges_(s, n->kid->next, (uint32_t)b & (0x7Fu >> k), k - 1);
    return true;
}

/* Sorted, overlaps and neighbours merged. */
static void class_normalise_(cp_set *s)
{
    qsort(s->r, (size_t)s->n, sizeof *s->r, range_cmp_);
    int w = 0;
    for (int i = 0; i < s->n; i++) {
        if (w && s->r[i].lo <= s->r[w - 1].hi + 1) {
            if (s->r[i].hi > s->r[w - 1].hi)
                s->r[w - 1].hi = s->r[i].hi;
        } else {
            s->r[w++] = s->r[i];
        }
    }
    s->n = w;
}

/* One code point inside "..." or [...]: letters, digits and space as they
 * are, everything else escaped by value. */
static void put_cp_(gb_buf *b, uint32_t c)
{
    char t[16];
    if ((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == ' ')
        snprintf(t, sizeof t, "%c", (char)c);
    else if (c < 0x100)
        snprintf(t, sizeof t, "\\x%02X", (unsigned)c);
    else if (c < 0x10000)
        snprintf(t, sizeof t, "\\u%04X", (unsigned)c);
    else
        snprintf(t, sizeof t, "\\U%08X", (unsigned)c);
    puts_(b, t);
}

static void put_class_(gb_buf *b, cp_set *s)
{
    class_normalise_(s);
    if (s->n == 1 && s->r[0].lo == s->r[0].hi) {
        puts_(b, "\"");
        put_cp_(b, s->r[0].lo);
        puts_(b, "\"");
        return;
    }
    puts_(b, "[");
    for (int i = 0; i < s->n; i++) {
        put_cp_(b, s->r[i].lo);
        if (s->r[i].hi != s->r[i].lo) {
            puts_(b, "-");
            put_cp_(b, s->r[i].hi);
        }
    }
    puts_(b, "]");
}

/* ---- the expression ---- */

static void put_node_(gb_buf *b, const rx_node *n, gb_ctx ctx);

/* The one code point n matches, or -1. */
static long single_cp_(const rx_node *n)
{
    cp_set s = {0};
    long cp = -1;
    if (class_of_(n, &s) && !s.failed) {
        class_normalise_(&s);
        if (s.n == 1 && s.r[0].lo == s.r[0].hi)
            cp = s.r[0].lo;
    }
    free(s.r);
    return cp;
}

/* A sequence; runs of single characters become one "literal". */
static void put_cat_(gb_buf *b, const rx_node *n)
{
    bool in_lit = false, first = true;
    for (const rx_node *k = n->kid; k; k = k->next) {
        if (only_empty_(k))
            continue;
        long cp = single_cp_(k);
        if (cp >= 0 && in_lit) {
            put_cp_(b, (uint32_t)cp);
            continue;
        }
        if (in_lit)
            puts_(b, "\"");
        in_lit = false;
        if (!first)
            puts_(b, " ");
        first = false;
        if (cp >= 0) {
            puts_(b, "\"");
            put_cp_(b, (uint32_t)cp);
            in_lit = true;
        } else {
            put_node_(b, k, GB_ITEM);
        }
    }
    if (in_lit)
        puts_(b, "\"");
    if (first)
        puts_(b, "\"\"");
}

/* Alternatives whose star is the star of n, none of them matching "";
 * *first tells whether one was written yet. */
static void put_star_body_(gb_buf *b, const rx_node *n, bool *first)
{
    if (!nullable_(n)) {
        puts_(b, *first ? "" : " | ");
        *first = false;
        put_node_(b, n, GB_TOP);
        return;
    }
    if (n->type == RX_REP) {
        if (n->max != 0)
            put_star_body_(b, n->kid, first);
        return;
    }
    for (const rx_node *k = n->kid; k; k = k->next)   /* RX_CAT, RX_ALT */
        put_star_body_(b, k, first);
}

static void put_rep_(gb_buf *b, const rx_node *n)
{
    if (n->max == -1 && nullable_(n->kid)) {   /* x{m,} = x* when x matches "" */
        puts_(b, "(");
        bool first = true;
        put_star_body_(b, n->kid, &first);
        puts_(b, ")*");
        return;
    }
    if (n->min == 1 && n->max == 1) {
        put_node_(b, n->kid, GB_REPEATED);
        return;
    }
    put_node_(b, n->kid, GB_REPEATED);
    char q[48];
    if (n->min == 0 && n->max == 1)
        snprintf(q, sizeof q, "?");
    else if (n->min == 0 && n->max == -1)
        snprintf(q, sizeof q, "*");
    else if (n->min == 1 && n->max == -1)
        snprintf(q, sizeof q, "+");
    else if (n->max == -1)
        snprintf(q, sizeof q, "{%d,}", n->min);
    else if (n->min == n->max)
        snprintf(q, sizeof q, "{%d}", n->min);
    else
        snprintf(q, sizeof q, "{%d,%d}", n->min, n->max);
    puts_(b, q);
}

static void put_alt_(gb_buf *b, const rx_node *n, gb_ctx ctx)
{
    bool paren = ctx != GB_TOP;
    puts_(b, paren ? "(" : "");
    for (const rx_node *k = n->kid; k; k = k->next) {
        if (k != n->kid)
            puts_(b, " | ");
        put_node_(b, k, GB_TOP);
    }
    puts_(b, paren ? ")" : "");
}

static void put_node_(gb_buf *b, const rx_node *n, gb_ctx ctx)
{
    cp_set s = {0};
    if (b->failed)
        return;
    if (only_empty_(n)) {
        puts_(b, "\"\"");
    } else if (class_of_(n, &s)) {
        if (s.failed)
            b->failed = true;
        else
            put_class_(b, &s);
    } else if (n->type == RX_SET) {
        b->failed = true;              /* a byte outside any UTF-8 sequence */
    } else if (n->type == RX_REP) {
        bool paren = ctx == GB_REPEATED;
        puts_(b, paren ? "(" : "");
        put_rep_(b, n);
        puts_(b, paren ? ")" : "");
    } else if (n->type == RX_ALT) {
        put_alt_(b, n, ctx);
    } else {
        bool paren = ctx == GB_REPEATED;
        puts_(b, paren ? "(" : "");
        put_cat_(b, n);
        puts_(b, paren ? ")" : "");
    }
    free(s.r);
}

char *pl_regex_gbnf(const char *pattern, size_t len, char *err, size_t errlen)
{
    rx_arena a = {0};
    gb_buf b = {0};
    rx_node *root = rx_parse_(&a, pattern, len, 0, err, errlen);
    if (root) {
        puts_(&b, "root ::= ");
        put_node_(&b, root, GB_TOP);
        puts_(&b, "\n");
        if (b.failed)
            snprintf(err, errlen, "regex: cannot write it as a grammar (a byte that is not "
                     "UTF-8, or a grammar over %u bytes)", GB_MAX_BYTES);
    }
    rx_arena_free_(&a);
    if (!root || b.failed) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
