/* kv_blocks.c - paged KV block manager: free list, ref counts, prefix
 * cache keyed by chained block hashes, LRU eviction of cached free blocks. */
#include "schedulers/kv_blocks.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LIST_NONE = 0, LIST_FREE = 1, LIST_CACHED = 2 };

typedef struct kv_block {
    int32_t ref;
    int32_t prev, next;       /* links on the free or cached-free list */
    int32_t hnext;            /* next block in the same hash bucket */
    int32_t pnext;            /* next block in the same parent bucket */
    uint64_t tick;            /* scheduling tick of its commit */
    uint8_t list;             /* LIST_* */
    uint16_t group;           /* the cache group it was allocated in */
    bool hashed;
    int32_t n_ids;            /* committed ids: block_size, or fewer for a
                                 finished sequence's tail (partial reuse only,
                                 not in the full-block table) */
    int32_t conv;             /* slot in convs of its last user, -1 none,
                                 CONV_DONE: that conversation finished */
    uint64_t hash, parent;
} kv_block;

#define CONV_DONE (-2)

typedef struct kv_conv {
    uint64_t key;             /* 0: slot free */
    int need;
    int next_free;
    int n_cached;             /* its blocks on the cached-free list */
} kv_conv;

typedef struct kv_list {
    int32_t head, tail;       /* head = least recently released */
    int n;
} kv_list;

/* One cache group's share of the pool (kv_layout.h). */
typedef struct kv_group_count {
    int used, cached_free, cached;
} kv_group_count;

struct pl_kv_blocks {
    int num_blocks, block_size;
    int n_groups;
    kv_group_count *gc;       /* (n_groups) */
    bool prefix_caching;
    kv_block *b;              /* (num_blocks) */
    int32_t *ids;             /* (num_blocks, block_size) committed ids */
    int32_t *buckets;         /* (n_buckets) first block of each chain */
    int32_t *pbuckets;        /* (n_buckets) by parent hash: partial reuse */
    uint64_t tick;
    uint64_t partial_hits, partial_tokens, tails;
    uint32_t bucket_mask;
    kv_list lists[3];
    int used, cached;
    uint64_t queries, hits, evictions;
    /* retention hints: conversation key -> next need (slots, an open
     * addressing index over them, a free list of slots) */
    kv_conv *convs;
    int n_convs, cap_convs, free_conv;
    int32_t *conv_index;      /* (conv_index_cap) slot or -1; -2 deleted */
    int conv_index_cap;
    int conv_cells;           /* index cells not -1 (live + tombstones) */
    int n_live;               /* slots in use */
    int n_far;                /* hinted conversations with need > 0 */
    bool next_need;           /* evict by hint (else plain LRU) */
    uint64_t done_released, need_evictions;
};

/* A cached-free block counts for its conversation (d = +1 as it joins
 * the list, -1 as it leaves or changes hands): pl_kv_blocks_needed_now. */
static void count_cached_(pl_kv_blocks *kv, int32_t id, int d)
{
    const kv_block *blk = &kv->b[id];
    if (blk->list == LIST_CACHED && blk->conv >= 0)
        kv->convs[blk->conv].n_cached += d;
}

/* The same for the block's group (list membership changes only). */
static void count_group_list_(pl_kv_blocks *kv, int32_t id, int d)
{
    const kv_block *blk = &kv->b[id];
    if (blk->list == LIST_CACHED)
        kv->gc[blk->group].cached_free += d;
}

/* Tag block id with conversation slot c (or -1, CONV_DONE). */
static void set_conv_(pl_kv_blocks *kv, int32_t id, int32_t c)
{
    count_cached_(kv, id, -1);
    kv->b[id].conv = c;
    count_cached_(kv, id, +1);
}

static void list_push_tail_(pl_kv_blocks *kv, int which, int32_t id)
{
    kv_list *l = &kv->lists[which];
    kv_block *blk = &kv->b[id];
    blk->list = (uint8_t)which;
    count_cached_(kv, id, +1);
    count_group_list_(kv, id, +1);
    blk->next = -1;
    blk->prev = l->tail;
    if (l->tail >= 0)
        kv->b[l->tail].next = id;
    else
        l->head = id;
    l->tail = id;
    l->n++;
}

/* Finished conversations' cached blocks go to the head: evicted first. */
static void list_push_head_(pl_kv_blocks *kv, int which, int32_t id)
{
    kv_list *l = &kv->lists[which];
    kv_block *blk = &kv->b[id];
    blk->list = (uint8_t)which;
    count_cached_(kv, id, +1);
    count_group_list_(kv, id, +1);
    blk->prev = -1;
    blk->next = l->head;
    if (l->head >= 0)
        kv->b[l->head].prev = id;
    else
        l->tail = id;
    l->head = id;
    l->n++;
}

static void list_remove_(pl_kv_blocks *kv, int32_t id)
{
    kv_block *blk = &kv->b[id];
    kv_list *l = &kv->lists[blk->list];
    count_cached_(kv, id, -1);
    count_group_list_(kv, id, -1);
    if (blk->prev >= 0)
        kv->b[blk->prev].next = blk->next;
    else
        l->head = blk->next;
    if (blk->next >= 0)
        kv->b[blk->next].prev = blk->prev;
    else
        l->tail = blk->prev;
    l->n--;
    blk->list = LIST_NONE;
    blk->prev = blk->next = -1;
}

pl_kv_blocks *pl_kv_blocks_new(int num_blocks, int block_size,
                               bool prefix_caching)
{
    return pl_kv_blocks_new_grouped(num_blocks, block_size, prefix_caching, 1);
}

pl_kv_blocks *pl_kv_blocks_new_grouped(int num_blocks, int block_size,
                                       bool prefix_caching, int n_groups)
{
    if (num_blocks <= 0 || block_size <= 0 || n_groups < 1 || n_groups > UINT16_MAX)
        return NULL;
    pl_kv_blocks *kv = calloc(1, sizeof *kv);
    if (!kv)
        return NULL;
    kv->n_groups = n_groups;
    kv->gc = calloc((size_t)n_groups, sizeof *kv->gc);
    uint32_t nb = 16;
    while (nb < (uint32_t)num_blocks * 2u)
        nb <<= 1;
    kv->num_blocks = num_blocks;
    kv->block_size = block_size;
    kv->prefix_caching = prefix_caching;
    kv->bucket_mask = nb - 1;
    kv->free_conv = -1;
    kv->b = calloc((size_t)num_blocks, sizeof *kv->b);
    kv->ids = malloc((size_t)num_blocks * (size_t)block_size * sizeof *kv->ids);
    kv->buckets = malloc(nb * sizeof *kv->buckets);
    kv->pbuckets = malloc(nb * sizeof *kv->pbuckets);
    if (!kv->gc || !kv->b || !kv->ids || !kv->buckets || !kv->pbuckets)
        goto fail;
    for (uint32_t i = 0; i < nb; i++)
        kv->buckets[i] = kv->pbuckets[i] = -1;
    for (int i = 0; i < 3; i++)
        kv->lists[i] = (kv_list){-1, -1, 0};
    for (int32_t i = 0; i < num_blocks; i++) {
        kv->b[i].hnext = kv->b[i].pnext = -1;
        kv->b[i].conv = -1;
        list_push_tail_(kv, LIST_FREE, i);
    }
    return kv;
fail:
    pl_kv_blocks_free(kv);
    return NULL;
}

void pl_kv_blocks_free(pl_kv_blocks *kv)
{
    if (!kv)
        return;
    free(kv->gc);
    free(kv->b);
    free(kv->ids);
    free(kv->buckets);
    free(kv->pbuckets);
    free(kv->convs);
    free(kv->conv_index);
    free(kv);
}

int pl_kv_blocks_block_size(const pl_kv_blocks *kv) { return kv->block_size; }

int pl_kv_blocks_num_blocks(const pl_kv_blocks *kv) { return kv->num_blocks; }

int pl_kv_blocks_num_available(const pl_kv_blocks *kv)
{
    return kv->lists[LIST_FREE].n + kv->lists[LIST_CACHED].n;
}

uint64_t pl_kv_blocks_hash(uint64_t parent, const int32_t *ids, int n)
{
    /* FNV-1a over the parent hash and the ids, then a 64-bit finaliser
     * (splitmix) so that nearby inputs spread over the buckets. */
    uint64_t h = 0xcbf29ce484222325ull ^ parent;
    for (int i = 0; i < n; i++) {
        uint32_t v = (uint32_t)ids[i];
        for (int k = 0; k < 4; k++) {
            h ^= (v >> (8 * k)) & 0xffu;
            h *= 0x100000001b3ull;
        }
    }
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
    return h;
}

static uint32_t conv_hash_(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (uint32_t)key;
}

static void table_remove_(pl_kv_blocks *kv, int32_t id)
{
    kv_block *blk = &kv->b[id];
    int32_t *pp = &kv->buckets[blk->hash & kv->bucket_mask];
    while (*pp >= 0 && *pp != id)
        pp = &kv->b[*pp].hnext;
    if (*pp == id)
        *pp = blk->hnext;
    blk->hnext = -1;
    pp = &kv->pbuckets[conv_hash_(blk->parent) & kv->bucket_mask];
    while (*pp >= 0 && *pp != id)
        pp = &kv->b[*pp].pnext;
    if (*pp == id)
        *pp = blk->pnext;
    blk->pnext = -1;
    blk->hashed = false;
    kv->cached--;
    kv->gc[blk->group].cached--;
}

static int32_t table_find_(const pl_kv_blocks *kv, int group, uint64_t h, uint64_t parent,
                           const int32_t *ids)
{
    size_t bs = (size_t)kv->block_size;
    for (int32_t id = kv->buckets[h & kv->bucket_mask]; id >= 0;
         id = kv->b[id].hnext) {
        const kv_block *blk = &kv->b[id];
        if (blk->hash == h && blk->parent == parent && blk->n_ids == (int32_t)bs &&
            blk->group == group &&
            memcmp(kv->ids + (size_t)id * bs, ids, bs * sizeof *ids) == 0)
            return id;
    }
    return -1;
}

static int need_of_(const pl_kv_blocks *kv, int32_t id)
{
    int32_t c = kv->b[id].conv;
    return c >= 0 ? kv->convs[c].need : c == CONV_DONE ? INT_MAX : 0;
}

/* The cached-free block to evict: the furthest next need, then the least
 * recently released (finished conversations released theirs already). */
static int32_t victim_(pl_kv_blocks *kv)
{
    int32_t best = kv->lists[LIST_CACHED].head;
    if (!kv->next_need || kv->n_far == 0 || best < 0 || kv->b[best].conv == CONV_DONE)
        return best;
    int best_need = need_of_(kv, best);
    for (int32_t id = kv->b[best].next; id >= 0; id = kv->b[id].next) {
        int nd = need_of_(kv, id);
        if (nd > best_need) {
            best = id;
            best_need = nd;
        }
    }
    if (best != kv->lists[LIST_CACHED].head)
        kv->need_evictions++;
    return best;
}

int32_t pl_kv_blocks_alloc(pl_kv_blocks *kv)
{
    return pl_kv_blocks_alloc_in(kv, 0);
}

int32_t pl_kv_blocks_alloc_in(pl_kv_blocks *kv, int group)
{
    int32_t id = kv->lists[LIST_FREE].head;
    if (id < 0) {
        id = victim_(kv);
        if (id < 0)
            return -1;
        table_remove_(kv, id);
        kv->evictions++;
    }
    list_remove_(kv, id);
    kv->b[id].conv = -1;
    kv->b[id].ref = 1;
    kv->b[id].group = (uint16_t)group;
    kv->used++;
    kv->gc[group].used++;
    return id;
}

void pl_kv_blocks_ref(pl_kv_blocks *kv, int32_t id)
{
    kv_block *blk = &kv->b[id];
    if (blk->ref == 0) {
        list_remove_(kv, id);
        kv->used++;
        kv->gc[blk->group].used++;
    }
    blk->ref++;
}

void pl_kv_blocks_release(pl_kv_blocks *kv, int32_t id)
{
    kv_block *blk = &kv->b[id];
    if (blk->ref <= 0)
        abort();                       /* double release: broken invariant */
    if (--blk->ref > 0)
        return;
    kv->used--;
    kv->gc[blk->group].used--;
    list_push_tail_(kv, blk->hashed ? LIST_CACHED : LIST_FREE, id);
}

/* ---- retention hints ---- */

/* The index position of key: its slot's cell, or the first free cell. */
static int32_t *conv_cell_(const pl_kv_blocks *kv, uint64_t key, bool for_insert)
{
    uint32_t mask = (uint32_t)kv->conv_index_cap - 1;
    int32_t *tomb = NULL;
    for (uint32_t i = conv_hash_(key) & mask;; i = (i + 1) & mask) {
        int32_t *cell = &kv->conv_index[i];
        if (*cell == -1)
            return for_insert && tomb ? tomb : cell;
        if (*cell == -2) {
            if (!tomb)
                tomb = cell;
        } else if (kv->convs[*cell].key == key) {
            return cell;
        }
    }
}

/* Rebuild the index at cap cells (a power of two > 2 * live slots). */
static int conv_reindex_(pl_kv_blocks *kv, int cap)
{
    int32_t *ix = malloc((size_t)cap * sizeof *ix);
    if (!ix)
        return -1;
    free(kv->conv_index);
    kv->conv_index = ix;
    kv->conv_index_cap = cap;
    for (int i = 0; i < cap; i++)
        ix[i] = -1;
    kv->conv_cells = 0;
    for (int c = 0; c < kv->n_convs; c++)
        if (kv->convs[c].key) {
            *conv_cell_(kv, kv->convs[c].key, true) = c;
            kv->conv_cells++;
        }
    return 0;
}

/* The slot of key, made when absent (need 0). -1 on OOM. */
static int32_t conv_slot_(pl_kv_blocks *kv, uint64_t key)
{
    if (kv->conv_index) {
        int32_t *cell = conv_cell_(kv, key, false);
        if (*cell >= 0)
            return *cell;
    }
    int32_t c = kv->free_conv;
    if (c >= 0) {
        kv->free_conv = kv->convs[c].next_free;
    } else {
        if (kv->n_convs == kv->cap_convs) {
            int cap = kv->cap_convs ? 2 * kv->cap_convs : 64;
            kv_conv *v = realloc(kv->convs, (size_t)cap * sizeof *v);
            if (!v)
                return -1;
            kv->convs = v;
            kv->cap_convs = cap;
        }
        c = kv->n_convs++;
    }
    kv->convs[c] = (kv_conv){key, 0, -1, 0};
    kv->n_live++;
    /* Rebuilt while at most half the cells are taken (tombstones count). */
    if ((kv->conv_cells + 1) * 2 > kv->conv_index_cap) {
        int cap = 128;
        while (cap < (kv->n_live + 1) * 4)
            cap <<= 1;
        if (conv_reindex_(kv, cap) < 0) {
            kv->convs[c] = (kv_conv){0, 0, kv->free_conv, 0};
            kv->free_conv = c;
            kv->n_live--;
            return -1;
        }
    } else {
        int32_t *cell = conv_cell_(kv, key, true);
        kv->conv_cells += *cell == -1;
        *cell = c;
    }
    return c;
}

void pl_kv_blocks_set_next_need(pl_kv_blocks *kv, bool on) { kv->next_need = on; }

int pl_kv_blocks_hint(pl_kv_blocks *kv, uint64_t key, int need)
{
    if (key == 0)
        return 0;
    if (need != PL_KV_NEED_DONE) {
        int32_t c = conv_slot_(kv, key);
        if (c < 0)
            return 0;
        kv->n_far += (need > 0) - (kv->convs[c].need > 0);
        kv->convs[c].need = need;
        return 0;
    }
    int32_t *cell = kv->conv_index ? conv_cell_(kv, key, false) : NULL;
    if (!cell || *cell < 0)
        return 0;
    int32_t c = *cell, released = 0;
    /* Finished: its cached-free blocks are the first to go. They keep
     * their contents meanwhile: another conversation may share them (the
     * same persona or preamble) and retags them when it releases them. */
    for (int32_t id = 0; id < kv->num_blocks; id++) {
        kv_block *blk = &kv->b[id];
        if (blk->conv != c)
            continue;
        set_conv_(kv, id, CONV_DONE);
        if (blk->list == LIST_CACHED) {
            list_remove_(kv, id);
            list_push_head_(kv, LIST_CACHED, id);
            released++;
        }
    }
    kv->done_released += (uint64_t)released;
    kv->n_far -= kv->convs[c].need > 0;
    kv->convs[c] = (kv_conv){0, 0, kv->free_conv, 0};
    kv->free_conv = c;
    kv->n_live--;
    *cell = -2;
    return released;
}

void pl_kv_blocks_release_tagged(pl_kv_blocks *kv, int32_t id, uint64_t key)
{
    pl_kv_blocks_release(kv, id);
    kv_block *blk = &kv->b[id];
    if (blk->ref == 0 && blk->hashed) {
        /* Only hinted keys tag: a key nobody hints (an API client's
         * prompt_cache_key) would otherwise hold a slot forever. */
        int32_t *cell = key && kv->conv_index ? conv_cell_(kv, key, false) : NULL;
        set_conv_(kv, id, cell && *cell >= 0 ? *cell : -1);
    }
}

void pl_kv_blocks_release_front(pl_kv_blocks *kv, int32_t id)
{
    pl_kv_blocks_release(kv, id);
    kv_block *blk = &kv->b[id];
    if (blk->ref == 0 && blk->hashed) {
        list_remove_(kv, id);
        list_push_head_(kv, LIST_CACHED, id);
        set_conv_(kv, id, CONV_DONE);
        kv->done_released++;
    }
}

bool pl_kv_blocks_hinted(const pl_kv_blocks *kv, uint64_t key)
{
    return key && kv->conv_index && *conv_cell_(kv, key, false) >= 0;
}

int pl_kv_blocks_needed_now(const pl_kv_blocks *kv)
{
    int n = 0;
    for (int c = 0; c < kv->n_convs; c++)
        if (kv->convs[c].key && kv->convs[c].need == 0)
            n += kv->convs[c].n_cached;
    return n;
}

int pl_kv_blocks_held_prefix(const pl_kv_blocks *kv, const int32_t *tokens, int n,
                             int max_blocks)
{
    uint64_t parent = PL_KV_HASH_ROOT;
    int bs = kv->block_size, hit = 0;
    for (; kv->prefix_caching && hit < max_blocks && (hit + 1) * bs <= n; hit++) {
        const int32_t *ids = tokens + (size_t)hit * (size_t)bs;
        uint64_t h = pl_kv_blocks_hash(parent, ids, bs);
        int32_t id = table_find_(kv, 0, h, parent, ids);
        if (id < 0 || !pl_kv_blocks_held(kv, id))
            break;
        parent = h;
    }
    return hit;
}

bool pl_kv_blocks_held(const pl_kv_blocks *kv, int32_t id)
{
    const kv_block *blk = &kv->b[id];
    bool kept = blk->list == LIST_CACHED && blk->conv >= 0 && kv->convs[blk->conv].key &&
                kv->convs[blk->conv].need == 0;
    return blk->ref > 0 || kept;
}

int32_t pl_kv_blocks_find(const pl_kv_blocks *kv, int group, uint64_t parent,
                          const int32_t *ids)
{
    if (!kv->prefix_caching)
        return -1;
    return table_find_(kv, group, pl_kv_blocks_hash(parent, ids, kv->block_size), parent, ids);
}

int pl_kv_blocks_refcount(const pl_kv_blocks *kv, int32_t id) { return kv->b[id].ref; }

int pl_kv_blocks_lookup(pl_kv_blocks *kv, const int32_t *tokens, int n,
                        int max_blocks, int32_t *out_blocks,
                        uint64_t *last_hash)
{
    uint64_t parent = PL_KV_HASH_ROOT;
    int bs = kv->block_size, hit = 0;
    if (kv->prefix_caching) {
        for (; hit < max_blocks && (hit + 1) * bs <= n; hit++) {
            const int32_t *ids = tokens + (size_t)hit * (size_t)bs;
            uint64_t h = pl_kv_blocks_hash(parent, ids, bs);
            int32_t id = table_find_(kv, 0, h, parent, ids);
            if (id < 0)
                break;
            pl_kv_blocks_ref(kv, id);
            out_blocks[hit] = id;
            parent = h;
        }
    }
    if (last_hash)
        *last_hash = parent;
    return hit;
}

void pl_kv_blocks_set_tick(pl_kv_blocks *kv, uint64_t tick) { kv->tick = tick; }

int32_t pl_kv_blocks_lookup_partial(pl_kv_blocks *kv, uint64_t parent,
                                    const int32_t *tokens, int max_k, int *k_out)
{
    int32_t id = pl_kv_blocks_find_partial(kv, 0, parent, tokens, max_k, k_out);
    if (id >= 0)
        pl_kv_blocks_count_partial(kv, *k_out);
    return id;
}

void pl_kv_blocks_count_partial(pl_kv_blocks *kv, int k)
{
    kv->partial_hits++;
    kv->partial_tokens += (uint64_t)k;
}

int32_t pl_kv_blocks_find_partial(const pl_kv_blocks *kv, int group, uint64_t parent,
                                  const int32_t *tokens, int max_k, int *k_out)
{
    int32_t best = -1;
    int best_k = 0, bs = kv->block_size;
    if (max_k > bs - 1)
        max_k = bs - 1;
    *k_out = 0;
    if (!kv->prefix_caching || max_k < 1)
        return -1;
    for (int32_t id = kv->pbuckets[conv_hash_(parent) & kv->bucket_mask]; id >= 0;
         id = kv->b[id].pnext) {
        const kv_block *blk = &kv->b[id];
        /* Committed in an earlier tick: its step ran before any copy
         * queued now (a block committed this tick may be unwritten). */
        if (!blk->hashed || blk->parent != parent || blk->tick >= kv->tick ||
            blk->group != group)
            continue;
        const int32_t *ids = kv->ids + (size_t)id * (size_t)bs;
        int k = 0;
        while (k < max_k && k < blk->n_ids && ids[k] == tokens[k])
            k++;
        if (k > best_k) {
            best_k = k;
            best = id;
        }
    }
    *k_out = best_k;
    return best;
}

void pl_kv_blocks_count(pl_kv_blocks *kv, int queried, int hit)
{
    kv->queries += (uint64_t)queried;
    kv->hits += (uint64_t)hit;
}

uint64_t pl_kv_blocks_commit(pl_kv_blocks *kv, int32_t id, uint64_t parent,
                             const int32_t *ids)
{
    size_t bs = (size_t)kv->block_size;
    uint64_t h = pl_kv_blocks_hash(parent, ids, (int)bs);
    kv_block *blk = &kv->b[id];
    if (!kv->prefix_caching || blk->hashed || table_find_(kv, blk->group, h, parent, ids) >= 0)
        return h;
    blk->hashed = true;
    blk->hash = h;
    blk->parent = parent;
    blk->n_ids = (int32_t)bs;
    memcpy(kv->ids + (size_t)id * bs, ids, bs * sizeof *ids);
    int32_t *head = &kv->buckets[h & kv->bucket_mask];
    blk->hnext = *head;
    *head = id;
    head = &kv->pbuckets[conv_hash_(parent) & kv->bucket_mask];
    blk->pnext = *head;
    *head = id;
    blk->tick = kv->tick;
    kv->cached++;
    kv->gc[blk->group].cached++;
    return h;
}

bool pl_kv_blocks_commit_tail(pl_kv_blocks *kv, int32_t id, uint64_t parent,
                              const int32_t *ids, int n)
{
    kv_block *blk = &kv->b[id];
    if (!kv->prefix_caching || blk->hashed || n < 1 || n >= kv->block_size)
        return false;
    int32_t *head = &kv->pbuckets[conv_hash_(parent) & kv->bucket_mask];
    for (int32_t o = *head; o >= 0; o = kv->b[o].pnext)
        if (kv->b[o].parent == parent && kv->b[o].n_ids >= n && kv->b[o].group == blk->group &&
            memcmp(kv->ids + (size_t)o * (size_t)kv->block_size, ids,
                   (size_t)n * sizeof *ids) == 0)
            return false;             /* one already serves these ids */
    blk->hashed = true;
    blk->hash = 0;
    blk->parent = parent;
    blk->n_ids = n;
    memcpy(kv->ids + (size_t)id * (size_t)kv->block_size, ids, (size_t)n * sizeof *ids);
    blk->pnext = *head;
    *head = id;
    blk->tick = kv->tick;
    kv->cached++;
    kv->gc[blk->group].cached++;
    kv->tails++;
    return true;
}

void pl_kv_blocks_stats(const pl_kv_blocks *kv, pl_kv_stats *st)
{
    st->num_blocks = kv->num_blocks;
    st->block_size = kv->block_size;
    st->used = kv->used;
    st->free = kv->lists[LIST_FREE].n;
    st->cached_free = kv->lists[LIST_CACHED].n;
    st->cached = kv->cached;
    st->queries = kv->queries;
    st->hits = kv->hits;
    st->evictions = kv->evictions;
    st->done_released = kv->done_released;
    st->need_evictions = kv->need_evictions;
    st->partial_hits = kv->partial_hits;
    st->partial_tokens = kv->partial_tokens;
    st->tails = kv->tails;
}

int pl_kv_blocks_num_groups(const pl_kv_blocks *kv) { return kv->n_groups; }

void pl_kv_blocks_group_stats(const pl_kv_blocks *kv, int group, pl_kv_group_stats *st)
{
    const kv_group_count *c = &kv->gc[group];
    *st = (pl_kv_group_stats){c->used, c->cached_free, c->cached};
}

static bool fail_(char *why, int whylen, const char *msg, int32_t id)
{
    if (why && whylen > 0)
        snprintf(why, (size_t)whylen, "%s (block %d)", msg, (int)id);
    return false;
}

/* Walk one list forwards, checking links and membership tags. */
static bool check_list_(const pl_kv_blocks *kv, int which, int *seen,
                        char *why, int whylen)
{
    int n = 0;
    int32_t prev = -1;
    for (int32_t id = kv->lists[which].head; id >= 0; id = kv->b[id].next) {
        const kv_block *blk = &kv->b[id];
        if (blk->list != which || blk->prev != prev || seen[id]++)
            return fail_(why, whylen, "list links broken", id);
        if (which == LIST_CACHED && !blk->hashed)
            return fail_(why, whylen, "unhashed block on cached-free list", id);
        if (which == LIST_FREE && blk->hashed)
            return fail_(why, whylen, "hashed block on free list", id);
        if (++n > kv->num_blocks)
            return fail_(why, whylen, "list cycle", id);
        prev = id;
    }
    if (n != kv->lists[which].n || kv->lists[which].tail != prev)
        return fail_(why, whylen, "list count or tail mismatch", prev);
    return true;
}

static bool in_parent_bucket_(const pl_kv_blocks *kv, int32_t id)
{
    int32_t o = kv->pbuckets[conv_hash_(kv->b[id].parent) & kv->bucket_mask];
    while (o >= 0 && o != id)
        o = kv->b[o].pnext;
    return o == id;
}

bool pl_kv_blocks_check_idle(const pl_kv_blocks *kv, char *why, int whylen)
{
    int *seen = calloc((size_t)kv->num_blocks, sizeof *seen);
    bool ok = seen != NULL;
    if (ok && kv->used != 0)
        ok = fail_(why, whylen, "blocks still in use", -1);
    for (int i = 0; ok && i < kv->num_blocks; i++)
        if (kv->b[i].ref != 0)
            ok = fail_(why, whylen, "nonzero ref", i);
    if (ok)
        ok = check_list_(kv, LIST_FREE, seen, why, whylen) &&
             check_list_(kv, LIST_CACHED, seen, why, whylen);
    for (int i = 0; ok && i < kv->num_blocks; i++) {
        if (!seen[i])
            ok = fail_(why, whylen, "block on no list (leaked)", i);
        else if (kv->b[i].hashed && kv->b[i].n_ids == kv->block_size &&
                 table_find_(kv, kv->b[i].group, kv->b[i].hash, kv->b[i].parent,
                             kv->ids + (size_t)i * (size_t)kv->block_size) != i)
            ok = fail_(why, whylen, "hashed block missing from table", i);
        else if (kv->b[i].hashed && !in_parent_bucket_(kv, i))
            ok = fail_(why, whylen, "committed block missing from its parent bucket", i);
    }
    if (ok && kv->cached != kv->lists[LIST_CACHED].n)
        ok = fail_(why, whylen, "cached count mismatch", -1);
    long g_cached = 0, g_free = 0;
    for (int g = 0; ok && g < kv->n_groups; g++) {
        if (kv->gc[g].used != 0)
            ok = fail_(why, whylen, "a group's blocks still in use", g);
        g_cached += kv->gc[g].cached;
        g_free += kv->gc[g].cached_free;
    }
    if (ok && (g_cached != kv->cached || g_free != kv->lists[LIST_CACHED].n))
        ok = fail_(why, whylen, "group counts mismatch", -1);
    long tagged = 0, counted = 0;
    for (int32_t id = 0; ok && id < kv->num_blocks; id++)
        tagged += kv->b[id].list == LIST_CACHED && kv->b[id].conv >= 0;
    for (int c = 0; ok && c < kv->n_convs; c++)
        counted += kv->convs[c].key ? kv->convs[c].n_cached : 0;
    if (ok && tagged != counted)
        ok = fail_(why, whylen, "conversation cached-free counts mismatch", -1);
    free(seen);
    return ok;
}
