/* kv_ckpt.c - recurrent-state checkpoint slots keyed by prefix hash,
 * evicted in next-need order (kv_ckpt.h). Lookups go through an open-
 * addressing index by hash; victims scan the slots (at most 1024). */
#include "schedulers/kv_ckpt.h"

#include <limits.h>
#include <stdlib.h>

#define NEED_DONE INT_MAX

typedef struct ck_entry {
    bool used;
    uint64_t hash, key;
    uint64_t tick;            /* step that writes it */
    uint64_t stamp;           /* last use, for LRU */
    int need;                 /* its conversation's hinted need */
    bool spare;               /* a periodic one (pl_kv_ckpt_take_spare) */
} ck_entry;

struct pl_kv_ckpt {
    int n;
    size_t slot_bytes;
    ck_entry *e;              /* (n) */
    int32_t *ix;              /* (cap) slot or -1, linear probing */
    uint32_t mask;            /* cap - 1, cap a power of two >= 2n */
    uint64_t clock;
    uint64_t saves, restores, evictions;
};

pl_kv_ckpt *pl_kv_ckpt_new(int n_slots, size_t slot_bytes)
{
    if (n_slots < 1)
        return NULL;
    pl_kv_ckpt *ck = calloc(1, sizeof *ck);
    uint32_t cap = 4;
    while (cap < 2u * (uint32_t)n_slots)
        cap <<= 1;
    if (!ck || !(ck->e = calloc((size_t)n_slots, sizeof *ck->e)) ||
        !(ck->ix = malloc(cap * sizeof *ck->ix))) {
        pl_kv_ckpt_free(ck);
        return NULL;
    }
    ck->mask = cap - 1;
    for (uint32_t i = 0; i < cap; i++)
        ck->ix[i] = -1;
    ck->n = n_slots;
    ck->slot_bytes = slot_bytes;
    return ck;
}

void pl_kv_ckpt_free(pl_kv_ckpt *ck)
{
    if (!ck)
        return;
    free(ck->e);
    free(ck->ix);
    free(ck);
}

static uint32_t cell_(uint64_t h) { return (uint32_t)(h ^ h >> 29); }

static int find_(const pl_kv_ckpt *ck, uint64_t hash)
{
    for (uint32_t c = cell_(hash) & ck->mask; ck->ix[c] >= 0; c = (c + 1) & ck->mask)
        if (ck->e[ck->ix[c]].hash == hash)
            return ck->ix[c];
    return -1;
}

/* Remove slot i from the index, re-placing the probe run after it. */
static void unindex_(pl_kv_ckpt *ck, int i)
{
    uint32_t c = cell_(ck->e[i].hash) & ck->mask;
    while (ck->ix[c] != i)
        c = (c + 1) & ck->mask;
    ck->ix[c] = -1;
    for (c = (c + 1) & ck->mask; ck->ix[c] >= 0; c = (c + 1) & ck->mask) {
        int32_t j = ck->ix[c];
        ck->ix[c] = -1;
        uint32_t d = cell_(ck->e[j].hash) & ck->mask;
        while (ck->ix[d] >= 0)
            d = (d + 1) & ck->mask;
        ck->ix[d] = j;
    }
}

static void index_(pl_kv_ckpt *ck, int i)
{
    uint32_t c = cell_(ck->e[i].hash) & ck->mask;
    while (ck->ix[c] >= 0)
        c = (c + 1) & ck->mask;
    ck->ix[c] = i;
}

int pl_kv_ckpt_find(const pl_kv_ckpt *ck, uint64_t hash, uint64_t tick)
{
    int i = find_(ck, hash);
    return i >= 0 && ck->e[i].tick < tick ? i : -1;
}

bool pl_kv_ckpt_has(const pl_kv_ckpt *ck, uint64_t hash)
{
    return find_(ck, hash) >= 0;
}

void pl_kv_ckpt_use(pl_kv_ckpt *ck, int slot)
{
    ck->e[slot].stamp = ++ck->clock;
    ck->restores++;
}

/* Whether x goes before y: the furthest need (finished conversations
 * first), a spare one before one kept for a purpose, the least recently
 * used. */
static bool evict_before_(const ck_entry *x, const ck_entry *y)
{
    if (x->need != y->need)
        return x->need > y->need;
    if (x->spare != y->spare)
        return x->spare;
    return x->stamp < y->stamp;
}

/* A free slot, else the first to evict; with spare_only, only a spare
 * one or a finished conversation's (-1: none). */
static int victim_(const pl_kv_ckpt *ck, bool spare_only)
{
    int best = -1;
    for (int i = 0; i < ck->n; i++) {
        const ck_entry *x = &ck->e[i];
        if (!x->used)
            return i;
        if (spare_only && !x->spare && x->need != NEED_DONE)
            continue;
        if (best < 0 || evict_before_(x, &ck->e[best]))
            best = i;
    }
    return best;
}

static int take_(pl_kv_ckpt *ck, uint64_t hash, uint64_t key, uint64_t tick, bool spare)
{
    if (find_(ck, hash) >= 0)
        return -1;
    int i = victim_(ck, spare);
    if (i < 0)
        return -1;
    if (ck->e[i].used) {
        unindex_(ck, i);
        ck->evictions++;
    }
    ck->e[i] = (ck_entry){true, hash, key, tick, ++ck->clock, 0, spare};
    index_(ck, i);
    ck->saves++;
    return i;
}

int pl_kv_ckpt_take(pl_kv_ckpt *ck, uint64_t hash, uint64_t key, uint64_t tick)
{
    return take_(ck, hash, key, tick, false);
}

int pl_kv_ckpt_take_spare(pl_kv_ckpt *ck, uint64_t hash, uint64_t key, uint64_t tick)
{
    return take_(ck, hash, key, tick, true);
}

void pl_kv_ckpt_drop(pl_kv_ckpt *ck, int slot)
{
    if (slot >= 0 && slot < ck->n && ck->e[slot].used) {
        unindex_(ck, slot);
        ck->e[slot].used = false;
        ck->saves--;
    }
}

void pl_kv_ckpt_hint(pl_kv_ckpt *ck, uint64_t key, int need)
{
    if (key == 0)
        return;
    for (int i = 0; i < ck->n; i++)
        if (ck->e[i].used && ck->e[i].key == key) {
            ck->e[i].need = need < 0 ? NEED_DONE : need;
            if (need < 0)
                ck->e[i].key = 0;   /* forgotten, as kv_blocks forgets it */
        }
}

void pl_kv_ckpt_stats_get(const pl_kv_ckpt *ck, pl_kv_ckpt_stats *st)
{
    int used = 0;
    for (int i = 0; i < ck->n; i++)
        used += ck->e[i].used;
    *st = (pl_kv_ckpt_stats){ck->n, used, ck->slot_bytes, ck->saves, ck->restores,
                             ck->evictions};
}
