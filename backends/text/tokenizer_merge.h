/* tokenizer_merge.h - the symbol list and priority queue that both BPE
 * flavours (gpt2 ranks, SentencePiece scores) merge with: a doubly linked
 * list of symbols over one word and a binary heap of candidate pairs,
 * so a word of n bytes costs O(n log n). Internal to the tokenizer.
 */
#ifndef PL_TOKENIZER_MERGE_H
#define PL_TOKENIZER_MERGE_H

#include <stdint.h>
#include <stdlib.h>

/** A candidate merge of symbols left and right (adjacent when pushed). */
typedef struct pl_tok_pair {
    float prio;                  /**< higher merges first */
    int32_t left, right;
    uint32_t size;               /**< left.n + right.n when pushed */
    int32_t merged;              /**< id of the merged symbol (gpt2) */
} pl_tok_pair;

/** One symbol of the word being merged. */
typedef struct pl_tok_sym {
    uint32_t off;                /**< byte offset in the word */
    uint32_t n;                  /**< byte length; 0 = merged away */
    int32_t prev, next;          /**< list links, -1 at the ends */
    int32_t id;                  /**< token id or -1 */
} pl_tok_sym;

/** Scratch for one encode call, grown as words get longer. */
typedef struct pl_tok_merge {
    pl_tok_sym *sym;             /**< (cap) */
    pl_tok_pair *heap;           /**< (hcap) */
    size_t cap, hcap, hn;
} pl_tok_merge;

/** Make room for n symbols and empty the queue. Returns 0 or -1. */
static inline int pl_tok_merge_reserve(pl_tok_merge *m, size_t n)
{
    m->hn = 0;
    if (n <= m->cap)
        return 0;
    size_t cap = m->cap ? m->cap : 64;
    while (cap < n)
        cap *= 2;
    pl_tok_sym *s = realloc(m->sym, sizeof *s * cap);
    if (!s)
        return -1;
    m->sym = s;
    m->cap = cap;
    return 0;
}

static inline void pl_tok_merge_free(pl_tok_merge *m)
{
    free(m->sym);
    free(m->heap);
}

/* a before b: higher priority, then the leftmost pair. */
static inline int pl_tok_pair_before(const pl_tok_pair *a,
                                     const pl_tok_pair *b)
{
    return a->prio > b->prio || (a->prio == b->prio && a->left < b->left);
}

static inline int pl_tok_merge_push(pl_tok_merge *m, pl_tok_pair p)
{
    if (m->hn == m->hcap) {
        size_t cap = m->hcap ? 2 * m->hcap : 128;
        pl_tok_pair *h = realloc(m->heap, sizeof *h * cap);
        if (!h)
            return -1;
        m->heap = h;
        m->hcap = cap;
    }
    size_t i = m->hn++;
    while (i > 0 && pl_tok_pair_before(&p, &m->heap[(i - 1) / 2])) {
        m->heap[i] = m->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    m->heap[i] = p;
    return 0;
}

static inline pl_tok_pair pl_tok_merge_pop(pl_tok_merge *m)
{
    pl_tok_pair top = m->heap[0], last = m->heap[--m->hn];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m->hn)
            break;
        if (c + 1 < m->hn && pl_tok_pair_before(&m->heap[c + 1], &m->heap[c]))
            c++;
        if (!pl_tok_pair_before(&m->heap[c], &last))
            break;
        m->heap[i] = m->heap[c];
        i = c;
    }
    if (m->hn)
        m->heap[i] = last;
    return top;
}

/** Lay out one symbol per UTF-8 character (llama.cpp's lead-byte rule)
 *  of s[0..len); ids are left at -1. Returns the symbol count. */
static inline size_t pl_tok_merge_chars(pl_tok_merge *m, const char *s,
                                        size_t len)
{
    static const uint8_t lut[16] = {1, 1, 1, 1, 1, 1, 1, 1,
                                    1, 1, 1, 1, 2, 2, 3, 4};
    size_t k = 0;
    for (size_t o = 0; o < len; k++) {
        size_t n = lut[(uint8_t)s[o] >> 4];
        if (n > len - o)
            n = len - o;
        pl_tok_sym *y = &m->sym[k];
        y->off = (uint32_t)o;
        y->n = (uint32_t)n;
        y->prev = (int32_t)k - 1;
        y->id = -1;
        o += n;
        y->next = o == len ? -1 : (int32_t)k + 1;
    }
    return k;
}

/** Merge pair p (still valid) into its left symbol. */
static inline void pl_tok_merge_apply(pl_tok_merge *m, const pl_tok_pair *p)
{
    pl_tok_sym *l = &m->sym[p->left], *r = &m->sym[p->right];
    l->n += r->n;
    r->n = 0;
    l->next = r->next;
    if (r->next >= 0)
        m->sym[r->next].prev = p->left;
}

/** Whether p still joins two live, unchanged symbols. */
static inline int pl_tok_pair_valid(const pl_tok_merge *m,
                                    const pl_tok_pair *p)
{
    const pl_tok_sym *l = &m->sym[p->left], *r = &m->sym[p->right];
    return l->n && r->n && l->n + r->n == p->size && l->next == p->right;
}

#endif
