/* regex_dfa.c - parse tree -> Thompson NFA -> DFA (subset construction over
 * byte equivalence classes) -> minimal DFA (Moore's partition refinement),
 * with states that cannot reach acceptance removed. */
#include "backends/constrain/regex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/constrain/regex_internal.h"

#define SET_EPS (-1)
#define SET_ACCEPT (-2)

typedef struct nfa_state {
    int32_t out1, out2;          /* next states; -1 = none */
    int32_t set;                 /* index into sets, SET_EPS or SET_ACCEPT */
} nfa_state;

typedef struct nfa {
    nfa_state *st;
    int n, cap, max;
    uint8_t (*sets)[32];         /* distinct byte sets */
    int n_sets, cap_sets;
    int32_t *set_hash;           /* open addressing over sets; -1 empty */
    int hash_cap;
    bool failed;
} nfa;

static uint32_t set_hash_(const uint8_t *s)
{
    uint32_t h = 2166136261u;
    for (int i = 0; i < 32; i++)
        h = (h ^ s[i]) * 16777619u;
    return h;
}

static int nfa_grow_sets_(nfa *a)
{
    int nc = a->cap_sets ? a->cap_sets * 2 : 64;
    void *ns = realloc(a->sets, (size_t)nc * 32);
    int32_t *nh = malloc(sizeof(int32_t) * (size_t)nc * 2);
    if (!ns || !nh) {
        free(nh);
        if (ns)
            a->sets = ns;
        return -1;
    }
    a->sets = ns;
    a->cap_sets = nc;
    free(a->set_hash);
    a->set_hash = nh;
    a->hash_cap = nc * 2;
    memset(nh, 0xff, sizeof(int32_t) * (size_t)a->hash_cap);
    for (int i = 0; i < a->n_sets; i++) {
        uint32_t h = set_hash_(a->sets[i]) & (uint32_t)(a->hash_cap - 1);
        while (nh[h] >= 0)
            h = (h + 1) & (uint32_t)(a->hash_cap - 1);
        nh[h] = i;
    }
    return 0;
}

static int32_t nfa_set_(nfa *a, const uint8_t *s)
{
    if (a->n_sets * 2 >= a->cap_sets && nfa_grow_sets_(a) < 0)
        return -1;
    uint32_t h = set_hash_(s) & (uint32_t)(a->hash_cap - 1);
    for (; a->set_hash[h] >= 0; h = (h + 1) & (uint32_t)(a->hash_cap - 1))
        if (!memcmp(a->sets[a->set_hash[h]], s, 32))
            return a->set_hash[h];
    memcpy(a->sets[a->n_sets], s, 32);
    a->set_hash[h] = a->n_sets;
    return a->n_sets++;
}

static int32_t nfa_add_(nfa *a, int32_t set, int32_t out1, int32_t out2)
{
    if (a->failed)
        return -1;
    if (a->n == a->cap) {
        int nc = a->cap ? a->cap * 2 : 256;
        nfa_state *ns = a->n >= a->max ? NULL : realloc(a->st, sizeof *ns * (size_t)nc);
        if (!ns) {
            a->failed = true;
            return -1;
        }
        a->st = ns;
        a->cap = nc;
    }
    a->st[a->n] = (nfa_state){out1, out2, set};
    return a->n++;
}

/* States matching node, then continuing at next. Returns the entry. */
static int32_t gen_(nfa *a, const rx_node *nd, int32_t next);

static int32_t gen_cat_(nfa *a, const rx_node *nd, int32_t next)
{
    int k = 0;
    for (const rx_node *c = nd->kid; c; c = c->next)
        k++;
    const rx_node **kids = malloc(sizeof *kids * (size_t)(k ? k : 1));
    if (!kids) {
        a->failed = true;
        return -1;
    }
    k = 0;
    for (const rx_node *c = nd->kid; c; c = c->next)
        kids[k++] = c;
    while (k-- > 0 && !a->failed)
        next = gen_(a, kids[k], next);
    free(kids);
    return next;
}

static int32_t gen_rep_(nfa *a, const rx_node *nd, int32_t next)
{
    int32_t tail = next;
    if (nd->max < 0) {
        int32_t loop = nfa_add_(a, SET_EPS, -1, next);
        if (loop < 0)
            return -1;
        int32_t body = gen_(a, nd->kid, loop);
        if (body < 0)
            return -1;
        a->st[loop].out1 = body;
        tail = loop;
    } else {
        for (int i = nd->min; i < nd->max && !a->failed; i++)
            tail = nfa_add_(a, SET_EPS, gen_(a, nd->kid, tail), next);
    }
    for (int i = 0; i < nd->min && !a->failed; i++)
        tail = gen_(a, nd->kid, tail);
    return a->failed ? -1 : tail;
}

static int32_t gen_(nfa *a, const rx_node *nd, int32_t next)
{
    if (a->failed)
        return -1;
    switch (nd->type) {
    case RX_EMPTY:
        return next;
    case RX_SET: {
        int32_t s = nfa_set_(a, nd->set);
        if (s < 0) {
            a->failed = true;
            return -1;
        }
        return nfa_add_(a, s, next, -1);
    }
    case RX_CAT:
        return gen_cat_(a, nd, next);
    case RX_ALT: {
        int32_t entry = -1;
        for (const rx_node *c = nd->kid; c && !a->failed; c = c->next)
            entry = entry < 0 ? gen_(a, c, next)
                              : nfa_add_(a, SET_EPS, gen_(a, c, next), entry);
        return entry < 0 ? next : entry;
    }
    case RX_REP:
        return gen_rep_(a, nd, next);
    }
    return -1;
}

/* ---- subset construction ---- */

typedef struct subset {
    const nfa *a;
    int n_classes;
    uint8_t class_of[256];
    uint8_t rep[256];            /* a byte of each class */
    int32_t *mark;               /* (a->n) generation stamps */
    int32_t gen;
    int32_t *stack, *tmp;        /* (a->n) */
    int32_t *pool;               /* all subsets, concatenated */
    size_t pool_n, pool_cap;
    int64_t *off;                /* (n_states + 1) offsets into pool */
    int32_t *trans;              /* (n_states, n_classes) */
    uint8_t *accept;
    int n_states, cap_states, max_states;
    int32_t *hash;               /* subset -> state; -1 empty */
    int hash_cap;
} subset;

static void byte_classes_(subset *s)
{
    memset(s->class_of, 0, sizeof s->class_of);
    s->n_classes = 1;
    for (int k = 0; k < s->a->n_sets; k++) {
        int16_t remap[512];
        memset(remap, 0xff, sizeof remap);
        int n = 0;
        for (int b = 0; b < 256; b++) {
            int in = (s->a->sets[k][b >> 3] >> (b & 7)) & 1;
            int key = s->class_of[b] * 2 + in;
            if (remap[key] < 0)
                remap[key] = (int16_t)n++;
            s->class_of[b] = (uint8_t)remap[key];
        }
        s->n_classes = n;
    }
    for (int b = 255; b >= 0; b--)
        s->rep[s->class_of[b]] = (uint8_t)b;
}

static int cmp_i32_(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

/* Epsilon closure of the n seeds in s->tmp, kept states only (byte sets
 * and accept), sorted, into s->tmp; returns the count. */
static int closure_(subset *s, int n)
{
    s->gen++;
    int sp = 0, out = 0;
    for (int i = 0; i < n; i++)
        if (s->tmp[i] >= 0 && s->mark[s->tmp[i]] != s->gen) {
            s->mark[s->tmp[i]] = s->gen;
            s->stack[sp++] = s->tmp[i];
        }
    while (sp > 0) {
        int32_t q = s->stack[--sp];
        const nfa_state *st = &s->a->st[q];
        if (st->set != SET_EPS) {
            s->tmp[out++] = q;
            continue;
        }
        int32_t o[2] = {st->out1, st->out2};
        for (int k = 0; k < 2; k++)
            if (o[k] >= 0 && s->mark[o[k]] != s->gen) {
                s->mark[o[k]] = s->gen;
                s->stack[sp++] = o[k];
            }
    }
    qsort(s->tmp, (size_t)out, sizeof *s->tmp, cmp_i32_);
    return out;
}

static uint32_t subset_hash_(const int32_t *v, int n)
{
    uint32_t h = 2166136261u ^ (uint32_t)n;
    for (int i = 0; i < n; i++)
        h = (h ^ (uint32_t)v[i]) * 16777619u;
    return h;
}

static int grow_states_(subset *s)
{
    int nc = s->cap_states ? s->cap_states * 2 : 64;
    int64_t *off = realloc(s->off, sizeof *off * ((size_t)nc + 1));
    if (off)
        s->off = off;
    int32_t *tr = realloc(s->trans, sizeof *tr * (size_t)nc * (size_t)s->n_classes);
    if (tr)
        s->trans = tr;
    uint8_t *acc = realloc(s->accept, (size_t)nc);
    if (acc)
        s->accept = acc;
    int32_t *h = malloc(sizeof *h * (size_t)nc * 2);
    if (!off || !tr || !acc || !h) {
        free(h);
        return -1;
    }
    free(s->hash);
    s->hash = h;
    s->hash_cap = nc * 2;
    s->cap_states = nc;
    memset(h, 0xff, sizeof *h * (size_t)s->hash_cap);
    for (int i = 0; i < s->n_states; i++) {
        uint32_t k = subset_hash_(s->pool + s->off[i], (int)(s->off[i + 1] - s->off[i]));
        for (k &= (uint32_t)(s->hash_cap - 1); h[k] >= 0; k = (k + 1) & (uint32_t)(s->hash_cap - 1))
            ;
        h[k] = i;
    }
    return 0;
}

/* The state for the subset in s->tmp[0..n): found or added. -1 on
 * overflow or OOM (-2). */
static int32_t state_of_(subset *s, int n)
{
    uint32_t k = subset_hash_(s->tmp, n);
    if (s->n_states)
        for (uint32_t i = k & (uint32_t)(s->hash_cap - 1); s->hash[i] >= 0;
             i = (i + 1) & (uint32_t)(s->hash_cap - 1)) {
            int32_t d = s->hash[i];
            if (s->off[d + 1] - s->off[d] == n &&
                !memcmp(s->pool + s->off[d], s->tmp, sizeof(int32_t) * (size_t)n))
                return d;
        }
    if (s->n_states == s->max_states)
        return -1;
    if (s->n_states * 2 >= s->cap_states && grow_states_(s) < 0)
        return -2;
    if (s->pool_n + (size_t)n > s->pool_cap) {
        size_t nc = s->pool_cap ? s->pool_cap * 2 : 4096;
        while (nc < s->pool_n + (size_t)n)
            nc *= 2;
        int32_t *np = realloc(s->pool, sizeof *np * nc);
        if (!np)
            return -2;
        s->pool = np;
        s->pool_cap = nc;
    }
    int32_t d = s->n_states++;
    memcpy(s->pool + s->pool_n, s->tmp, sizeof(int32_t) * (size_t)n);
    s->off[d] = (int64_t)s->pool_n;
    s->pool_n += (size_t)n;
    s->off[d + 1] = (int64_t)s->pool_n;
    s->accept[d] = 0;
    for (int i = 0; i < n; i++)
        if (s->a->st[s->tmp[i]].set == SET_ACCEPT)
            s->accept[d] = 1;
    uint32_t i = k & (uint32_t)(s->hash_cap - 1);
    while (s->hash[i] >= 0)
        i = (i + 1) & (uint32_t)(s->hash_cap - 1);
    s->hash[i] = d;
    return d;
}

/* Build every state's transitions. 0, -1 (too many states), -2 (OOM). */
static int explore_(subset *s, int32_t start)
{
    s->tmp[0] = start;
    int32_t d0 = state_of_(s, closure_(s, 1));
    if (d0 < 0)
        return d0;
    for (int d = 0; d < s->n_states; d++) {
        for (int c = 0; c < s->n_classes; c++) {
            int b = s->rep[c], n = 0;
            for (int64_t i = s->off[d]; i < s->off[d + 1]; i++) {
                const nfa_state *st = &s->a->st[s->pool[i]];
                if (st->set >= 0 && ((s->a->sets[st->set][b >> 3] >> (b & 7)) & 1))
                    s->tmp[n++] = st->out1;
            }
            int32_t t = n ? state_of_(s, closure_(s, n)) : -1;
            if (n && t < 0)
                return t;
            s->trans[(size_t)d * (size_t)s->n_classes + (size_t)c] = t;
        }
    }
    return 0;
}

/* ---- minimisation and pruning ---- */

typedef struct sig_ctx {
    const int32_t *sig;          /* (n, w) */
    int w;
} sig_ctx;

static int sig_cmp_(const void *x, const void *y, void *ud)
{
    const sig_ctx *c = ud;
    const int32_t *a = c->sig + (size_t)*(const int32_t *)x * (size_t)c->w;
    const int32_t *b = c->sig + (size_t)*(const int32_t *)y * (size_t)c->w;
    for (int i = 0; i < c->w; i++)
        if (a[i] != b[i])
            return a[i] < b[i] ? -1 : 1;
    return 0;
}

/* Moore refinement: part[d] ends as the class of d; returns their count. */
static int minimise_(const subset *s, int32_t *part)
{
    int n = s->n_states, C = s->n_classes, w = C + 1, n_parts = 0;
    int32_t *sig = malloc(sizeof *sig * (size_t)n * (size_t)w);
    int32_t *idx = malloc(sizeof *idx * (size_t)n);
    if (!sig || !idx) {
        free(sig);
        free(idx);
        return -1;
    }
    for (int d = 0; d < n; d++)
        part[d] = s->accept[d];
    for (int prev = -1;;) {
        for (int d = 0; d < n; d++) {
            int32_t *g = sig + (size_t)d * (size_t)w;
            g[0] = part[d];
            for (int c = 0; c < C; c++) {
                int32_t t = s->trans[(size_t)d * (size_t)C + (size_t)c];
                g[1 + c] = t < 0 ? -1 : part[t];
            }
            idx[d] = d;
        }
        sig_ctx ctx = {sig, w};
        qsort_r(idx, (size_t)n, sizeof *idx, sig_cmp_, &ctx);
        n_parts = 0;
        for (int i = 0; i < n; i++) {
            if (i > 0 && sig_cmp_(&idx[i - 1], &idx[i], &ctx) != 0)
                n_parts++;
            part[idx[i]] = n_parts;
        }
        n_parts++;
        if (n_parts == prev)
            break;
        prev = n_parts;
    }
    free(sig);
    free(idx);
    return n_parts;
}

/* The minimal DFA over 256 bytes, renumbered so the start is 0, without
 * states that cannot reach acceptance. */
static pl_dfa *finish_(const subset *s, const int32_t *part, int n_parts)
{
    int C = s->n_classes;
    int32_t *rep = malloc(sizeof *rep * (size_t)n_parts);    /* part -> a state */
    int32_t *num = malloc(sizeof *num * (size_t)n_parts);    /* part -> new id */
    uint8_t *live = calloc((size_t)n_parts, 1);
    pl_dfa *d = calloc(1, sizeof *d);
    if (!rep || !num || !live || !d)
        goto oom;
    for (int i = 0; i < s->n_states; i++)
        rep[part[i]] = i;
    for (int p = 0; p < n_parts; p++)
        live[p] = s->accept[rep[p]];
    for (bool changed = true; changed;) {
        changed = false;
        for (int p = 0; p < n_parts; p++)
            for (int c = 0; c < C && !live[p]; c++) {
                int32_t t = s->trans[(size_t)rep[p] * (size_t)C + (size_t)c];
                if (t >= 0 && live[part[t]])
                    live[p] = changed = true;
            }
    }
    int n = 0, p0 = part[0];
    num[p0] = live[p0] ? n++ : -1;
    for (int p = 0; p < n_parts; p++)
        if (p != p0)
            num[p] = live[p] ? n++ : -1;
    if (n == 0)
        goto oom;                 /* matches nothing: reported by the caller */
    d->n_states = n;
    d->trans = malloc(sizeof *d->trans * (size_t)n * 256);
    d->accept = malloc((size_t)n);
    if (!d->trans || !d->accept)
        goto oom;
    for (int p = 0; p < n_parts; p++) {
        if (num[p] < 0)
            continue;
        d->accept[num[p]] = s->accept[rep[p]];
        for (int b = 0; b < 256; b++) {
            int32_t t = s->trans[(size_t)rep[p] * (size_t)C + s->class_of[b]];
            d->trans[(size_t)num[p] * 256 + (size_t)b] = t < 0 ? -1 : num[part[t]];
        }
    }
    free(rep);
    free(num);
    free(live);
    return d;
oom:
    free(rep);
    free(num);
    free(live);
    pl_dfa_free(d);
    return NULL;
}

static void subset_free_(subset *s)
{
    free(s->mark);
    free(s->stack);
    free(s->tmp);
    free(s->pool);
    free(s->off);
    free(s->trans);
    free(s->accept);
    free(s->hash);
}

static pl_dfa *determinise_(const nfa *a, int32_t start, int max_states, char *err,
                            size_t errlen)
{
    subset s = {.a = a, .max_states = max_states * 4};
    pl_dfa *d = NULL;
    int32_t *part = NULL;
    byte_classes_(&s);
    s.mark = calloc((size_t)a->n, sizeof *s.mark);
    s.stack = malloc(sizeof *s.stack * (size_t)a->n);
    s.tmp = malloc(sizeof *s.tmp * (size_t)a->n);
    if (!s.mark || !s.stack || !s.tmp || grow_states_(&s) < 0)
        goto oom;
    int rc = explore_(&s, start);
    if (rc == -1) {
        snprintf(err, errlen, "regex: too complex (more than %d automaton states)",
                 s.max_states);
        goto done;
    }
    if (rc < 0 || !(part = malloc(sizeof *part * (size_t)s.n_states)))
        goto oom;
    int n_parts = minimise_(&s, part);
    if (n_parts < 0)
        goto oom;
    if (n_parts > max_states) {
        snprintf(err, errlen, "regex: too complex (%d automaton states; at most %d)",
                 n_parts, max_states);
        goto done;
    }
    d = finish_(&s, part, n_parts);
    if (!d)
        snprintf(err, errlen, "regex: the pattern matches nothing (or out of memory)");
    goto done;
oom:
    snprintf(err, errlen, "regex: out of memory");
done:
    free(part);
    subset_free_(&s);
    return d;
}

pl_dfa *pl_regex_compile(const char *pattern, size_t len, int flags, int max_states,
                         char *err, size_t errlen)
{
    rx_arena ar = {0};
    nfa a = {.max = max_states * 64};
    pl_dfa *d = NULL;
    rx_node *root = rx_parse_(&ar, pattern, len, flags, err, errlen);
    if (!root)
        goto done;
    int32_t acc = nfa_add_(&a, SET_ACCEPT, -1, -1);
    int32_t start = acc < 0 ? -1 : gen_(&a, root, acc);
    if (a.failed || start < 0) {
        snprintf(err, errlen, "regex: too large (more than %d NFA states) or out of memory",
                 a.max);
        goto done;
    }
    d = determinise_(&a, start, max_states, err, errlen);
done:
    rx_arena_free_(&ar);
    free(a.st);
    free(a.sets);
    free(a.set_hash);
    return d;
}

int pl_regex_check(const char *pattern, size_t len, int flags, char *err, size_t errlen)
{
    rx_arena ar = {0};
    int rc = rx_parse_(&ar, pattern, len, flags, err, errlen) ? 0 : -1;
    rx_arena_free_(&ar);
    return rc;
}

void pl_dfa_free(pl_dfa *d)
{
    if (!d)
        return;
    free(d->trans);
    free(d->accept);
    free(d);
}

bool pl_dfa_match(const pl_dfa *d, const char *s, size_t n)
{
    int32_t q = 0;
    for (size_t i = 0; i < n && q >= 0; i++)
        q = d->trans[(size_t)q * 256 + (unsigned char)s[i]];
    return q >= 0 && d->accept[q];
}

int pl_regex_escape_append(char **buf, size_t *len, size_t *cap, const char *text, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (*len + 3 > *cap) {
            size_t nc = *cap ? *cap * 2 : 256;
            char *nb = realloc(*buf, nc);
            if (!nb)
                return -1;
            *buf = nb;
            *cap = nc;
        }
        if (strchr("\\^$.|?*+()[]{}-/", text[i]) && text[i])
            (*buf)[(*len)++] = '\\';
        (*buf)[(*len)++] = text[i];
        (*buf)[*len] = '\0';
    }
    return 0;
}
