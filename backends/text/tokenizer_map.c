/* tokenizer_map.c - the tokenizer's hash maps: token text -> id, and a
 * (left id, right id) pair -> BPE merge rank. Open addressing with linear
 * probing, sized to at most half full; built once, read-only afterwards.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/text/tokenizer_internal.h"

static uint64_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static uint64_t hash_pair(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    return k ^ (k >> 33);
}

static uint32_t cap_for(uint32_t n)
{
    uint32_t cap = 16;
    while (cap < 2 * n + 1)
        cap <<= 1;
    return cap;
}

/* The two Bloom bits of a hash: from its high half (the table index
 * takes the low bits). */
static inline uint64_t bloom_bit(const pl_tok_strmap *m, uint64_t h, int k)
{
    return (h >> (32 + 16 * k)) * 0x9E3779B1u & (8ull * m->cap - 1);
}

static inline bool bloom_has(const pl_tok_strmap *m, uint64_t h)
{
    uint64_t a = bloom_bit(m, h, 0), b = bloom_bit(m, h, 1);
    return (m->bloom[a >> 6] >> (a & 63) & 1) && (m->bloom[b >> 6] >> (b & 63) & 1);
}

int pl_tok_strmap_init(pl_tok_strmap *m, const pl_tokenizer *t)
{
    m->cap = cap_for((uint32_t)t->n_vocab);
    m->slots = malloc(sizeof *m->slots * m->cap);
    m->bloom = calloc(m->cap / 8, sizeof *m->bloom);
    if (!m->slots || !m->bloom)
        return -1;
    memset(m->slots, 0xff, sizeof *m->slots * m->cap);
    /* Later ids win for duplicate texts, like llama.cpp's token_to_id. */
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const char *s = pl_tok_text(t, id);
        size_t len = t->text_len[id];
        uint64_t h = hash_bytes(s, len);
        for (int k = 0; k < 2; k++) {
            uint64_t b = bloom_bit(m, h, k);
            m->bloom[b >> 6] |= 1ull << (b & 63);
        }
        uint32_t i = (uint32_t)h & (m->cap - 1);
        for (;; i = (i + 1) & (m->cap - 1)) {
            int32_t o = m->slots[i];
            if (o < 0) {
                m->slots[i] = id;
                break;
            }
            if (t->text_len[o] == len && !memcmp(pl_tok_text(t, o), s, len)) {
                m->slots[i] = id;
                break;
            }
        }
    }
    return 0;
}

int32_t pl_tok_strmap_get(const pl_tok_strmap *m, const pl_tokenizer *t,
                          const char *s, size_t len)
{
    uint64_t h = hash_bytes(s, len);
    if (!bloom_has(m, h))
        return -1;
    uint32_t i = (uint32_t)h & (m->cap - 1);
    for (;; i = (i + 1) & (m->cap - 1)) {
        int32_t o = m->slots[i];
        if (o < 0)
            return -1;
        if (t->text_len[o] == len && !memcmp(pl_tok_text(t, o), s, len))
            return o;
    }
}

void pl_tok_strmap_free(pl_tok_strmap *m)
{
    free(m->slots);
    free(m->bloom);
    m->slots = NULL;
    m->bloom = NULL;
}

int pl_tok_pairmap_init(pl_tok_pairmap *m, uint32_t n)
{
    m->cap = cap_for(n);
    m->keys = malloc(sizeof *m->keys * m->cap);
    m->rank = malloc(sizeof *m->rank * m->cap);
    m->merged = malloc(sizeof *m->merged * m->cap);
    if (!m->keys || !m->rank || !m->merged) {
        pl_tok_pairmap_free(m);
        return -1;
    }
    memset(m->keys, 0xff, sizeof *m->keys * m->cap);
    return 0;
}

void pl_tok_pairmap_put(pl_tok_pairmap *m, int32_t l, int32_t r,
                        int32_t rank, int32_t merged)
{
    uint64_t k = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    uint32_t i = (uint32_t)hash_pair(k) & (m->cap - 1);
    for (;; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == k)
            return;
        if (m->keys[i] == ~0ull) {
            m->keys[i] = k;
            m->rank[i] = rank;
            m->merged[i] = merged;
            return;
        }
    }
}

int32_t pl_tok_pairmap_get(const pl_tok_pairmap *m, int32_t l, int32_t r,
                           int32_t *merged)
{
    uint64_t k = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    uint32_t i = (uint32_t)hash_pair(k) & (m->cap - 1);
    for (;; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == k) {
            *merged = m->merged[i];
            return m->rank[i];
        }
        if (m->keys[i] == ~0ull)
            return -1;
    }
}

void pl_tok_pairmap_free(pl_tok_pairmap *m)
{
    free(m->keys);
    free(m->rank);
    free(m->merged);
    m->keys = NULL;
    m->rank = m->merged = NULL;
}
