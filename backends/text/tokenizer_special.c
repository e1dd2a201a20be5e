/* tokenizer_special.c - encode's special-token partition in one pass over
 * the text: the text cut into raw fragments and special tokens exactly as
 * llama.cpp's tokenizer_st_partition cuts it (each special token in
 * priority order - longest text first - splits every raw fragment left to
 * right at its non-overlapping occurrences), without one scan of the text
 * per special token (Gemma has 6,414 of them: the scans took 2/3 of its
 * encode time).
 *
 * A trie of the specials' texts gives every (position, token) occurrence
 * in one pass. Taking the occurrences by (priority, position), an
 * occurrence is kept when none of its bytes is already a kept token's:
 * the same cuts as the scans, since a scan finds, in the raw fragment at
 * its cursor, the leftmost occurrence lying wholly inside it. Text with
 * more than MAX_OCC_PER_BYTE occurrences per byte (long runs of spaces,
 * where Gemma's 30 space-run tokens all match at each position) is cut by
 * the scans themselves, whose memory does not grow with the matches.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/text/tokenizer_internal.h"

/* A trie node: its byte, first child, next sibling, and the priority k of
 * the special whose text ends here (-1: none). */
typedef struct pl_tok_trie_node {
    int32_t child, sibling, k;
    uint8_t byte;
} trie_node;

static int32_t node_new(pl_tok_trie *tr, uint8_t byte, int32_t sibling)
{
    if (tr->n == tr->cap) {
        int32_t cap = tr->cap ? 2 * tr->cap : 256;
        trie_node *v = realloc(tr->nodes, sizeof *v * (size_t)cap);
        if (!v)
            return -1;
        tr->nodes = v;
        tr->cap = cap;
    }
    tr->nodes[tr->n] = (trie_node){.child = -1, .sibling = sibling, .k = -1, .byte = byte};
    return tr->n++;
}

/* The child of node p (-1: the root) for byte b, made when absent. */
static int32_t child_of(pl_tok_trie *tr, int32_t p, uint8_t b)
{
    int32_t *head = p < 0 ? &tr->root[b] : &tr->nodes[p].child;
    for (int32_t c = *head; c >= 0; c = tr->nodes[c].sibling)
        if (tr->nodes[c].byte == b)
            return c;
    int32_t c = node_new(tr, b, p < 0 ? -1 : *head);
    if (c >= 0) {
        head = p < 0 ? &tr->root[b] : &tr->nodes[p].child;  /* nodes may have moved */
        *head = c;
    }
    return c;
}

int pl_tok_trie_init(pl_tokenizer *t)
{
    pl_tok_trie *tr = &t->special_trie;
    for (int b = 0; b < 256; b++)
        tr->root[b] = -1;
    for (int32_t k = 0; k < t->n_special; k++) {
        int32_t id = t->special[k], p = -1;
        const uint8_t *s = (const uint8_t *)pl_tok_text(t, id);
        for (uint32_t i = 0; i < t->text_len[id]; i++)
            if ((p = child_of(tr, p, s[i])) < 0)
                return -1;
        if (p >= 0 && tr->nodes[p].k < 0)
            tr->nodes[p].k = k;  /* equal texts: the first keeps it */
    }
    return 0;
}

void pl_tok_trie_free(pl_tok_trie *tr)
{
    free(tr->nodes);
    tr->nodes = NULL;
    tr->n = tr->cap = 0;
}

#define MAX_OCC_PER_BYTE 4

typedef struct occ_vec {
    uint64_t *v;                 /* priority << 32 | position */
    size_t n, cap;
} occ_vec;

static int occ_push(occ_vec *o, uint64_t x)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 64;
        uint64_t *v = realloc(o->v, sizeof *v * cap);
        if (!v)
            return -1;
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = x;
    return 0;
}

/* Every occurrence of a special the call may cut at; 1 when there are
 * too many to keep. */
static int find_occurrences(const pl_tokenizer *t, const char *text, size_t len,
                            bool parse_special, occ_vec *o)
{
    size_t max = MAX_OCC_PER_BYTE * len + 1024;
    const pl_tok_trie *tr = &t->special_trie;
    for (size_t pos = 0; pos < len; pos++) {
        int32_t p = tr->root[(uint8_t)text[pos]];
        for (size_t i = pos + 1; p >= 0; i++) {
            int32_t k = tr->nodes[p].k;
            if (k >= 0 && (parse_special ||
                           t->types[t->special[k]] == PL_TOKEN_TYPE_USER_DEFINED)) {
                if (o->n == max)
                    return 1;
                if (occ_push(o, (uint64_t)k << 32 | pos))
                    return -1;
            }
            if (i == len)
                break;
            int32_t c = tr->nodes[p].child;
            while (c >= 0 && tr->nodes[c].byte != (uint8_t)text[i])
                c = tr->nodes[c].sibling;
            p = c;
        }
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Keep occurrences in (priority, position) order where all their bytes are
 * still raw; at[pos] = the kept special's id + 1 at its first byte. */
static void keep_occurrences(const pl_tokenizer *t, const occ_vec *o, uint8_t *taken,
                             int32_t *at)
{
    for (size_t j = 0; j < o->n; j++) {
        int32_t id = t->special[o->v[j] >> 32];
        size_t pos = (uint32_t)o->v[j], n = t->text_len[id], i = 0;
        while (i < n && !taken[pos + i])
            i++;
        if (i < n)
            continue;
        memset(taken + pos, 1, n);
        at[pos] = id + 1;
    }
}

/* Split every raw fragment of *in at each occurrence of token id's text,
 * into *out (llama.cpp's tokenizer_st_partition for one token). */
static int split_on(const pl_tokenizer *t, int32_t id, const char *text,
                    const pl_tok_frags *in, pl_tok_frags *out)
{
    const char *s = pl_tok_text(t, id);
    size_t sl = t->text_len[id];
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        pl_tok_frag f = in->v[i];
        if (f.id >= 0) {
            if (pl_tok_frags_push(out, f.id, f.off, f.len))
                return -1;
            continue;
        }
        size_t pos = f.off, end = f.off + f.len;
        const char *hit;
        while (end - pos >= sl && (hit = memmem(text + pos, end - pos, s, sl))) {
            size_t h = (size_t)(hit - text);
            if ((h > pos && pl_tok_frags_push(out, -1, pos, h - pos)) ||
                pl_tok_frags_push(out, id, h, sl))
                return -1;
            pos = h + sl;
        }
        if (pos < end && pl_tok_frags_push(out, -1, pos, end - pos))
            return -1;
    }
    return 0;
}

/* The partition by one scan of the text per special token. */
static int partition_scan(const pl_tokenizer *t, const char *text, size_t len,
                          bool parse_special, pl_tok_frags *a)
{
    pl_tok_frags b = {0};
    int rc = -1;
    if (len && pl_tok_frags_push(a, -1, 0, len))
        return -1;
    for (int32_t k = 0; k < t->n_special && a->n; k++) {
        int32_t id = t->special[k];
        if (!parse_special && t->types[id] != PL_TOKEN_TYPE_USER_DEFINED)
            continue;
        if (split_on(t, id, text, a, &b))
            goto done;
        pl_tok_frags tmp = *a;
        *a = b;
        b = tmp;
    }
    rc = 0;
done:
    free(b.v);
    return rc;
}

int pl_tok_partition(const pl_tokenizer *t, const char *text, size_t len, bool parse_special,
                     pl_tok_frags *out)
{
    occ_vec o = {0};
    uint8_t *taken = NULL;
    int32_t *at = NULL;
    int rc = find_occurrences(t, text, len, parse_special, &o);
    if (rc > 0) {
        free(o.v);
        return partition_scan(t, text, len, parse_special, out);
    }
    if (rc < 0)
        goto done;
    rc = -1;
    if (o.n == 0) {
        rc = len ? pl_tok_frags_push(out, -1, 0, len) : 0;
        goto done;
    }
    qsort(o.v, o.n, sizeof *o.v, cmp_u64);
    taken = calloc(len, 1);
    at = calloc(len, sizeof *at);
    if (!taken || !at)
        goto done;
    keep_occurrences(t, &o, taken, at);
    size_t raw = 0;
    for (size_t pos = 0; pos < len;) {
        if (!at[pos]) {
            pos++;
            continue;
        }
        int32_t id = at[pos] - 1;
        if ((pos > raw && pl_tok_frags_push(out, -1, raw, pos - raw)) ||
            pl_tok_frags_push(out, id, pos, t->text_len[id]))
            goto done;
        pos += t->text_len[id];
        raw = pos;
    }
    rc = raw < len ? pl_tok_frags_push(out, -1, raw, len - raw) : 0;
done:
    free(o.v);
    free(taken);
    free(at);
    return rc;
}
