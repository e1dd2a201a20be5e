/* kv_ckpt.c - recurrent-state checkpoint slots keyed by prefix hash,
 * evicted in next-need order (kv_ckpt.h). Slots are few (tens to
 * hundreds): lookups and victims scan them. */
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
} ck_entry;

struct pl_kv_ckpt {
    int n;
    size_t slot_bytes;
    ck_entry *e;              /* (n) */
    uint64_t clock;
    uint64_t saves, restores, evictions;
};

pl_kv_ckpt *pl_kv_ckpt_new(int n_slots, size_t slot_bytes)
{
    if (n_slots < 1)
        return NULL;
    pl_kv_ckpt *ck = calloc(1, sizeof *ck);
    if (!ck || !(ck->e = calloc((size_t)n_slots, sizeof *ck->e))) {
        free(ck);
        return NULL;
    }
    ck->n = n_slots;
    ck->slot_bytes = slot_bytes;
    return ck;
}

void pl_kv_ckpt_free(pl_kv_ckpt *ck)
{
    if (!ck)
        return;
    free(ck->e);
    free(ck);
}

static int find_(const pl_kv_ckpt *ck, uint64_t hash)
{
    for (int i = 0; i < ck->n; i++)
        if (ck->e[i].used && ck->e[i].hash == hash)
            return i;
    return -1;
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

/* A free slot, else the one of the furthest need (finished conversations
 * first), the least recently used among equals. */
static int victim_(const pl_kv_ckpt *ck)
{
    int best = -1;
    for (int i = 0; i < ck->n; i++) {
        const ck_entry *x = &ck->e[i];
        if (!x->used)
            return i;
        if (best < 0 || x->need > ck->e[best].need ||
            (x->need == ck->e[best].need && x->stamp < ck->e[best].stamp))
            best = i;
    }
    return best;
}

int pl_kv_ckpt_take(pl_kv_ckpt *ck, uint64_t hash, uint64_t key, uint64_t tick)
{
    if (find_(ck, hash) >= 0)
        return -1;
    int i = victim_(ck);
    ck->evictions += ck->e[i].used;
    ck->e[i] = (ck_entry){true, hash, key, tick, ++ck->clock, 0};
    ck->saves++;
    return i;
}

void pl_kv_ckpt_drop(pl_kv_ckpt *ck, int slot)
{
    if (slot >= 0 && slot < ck->n && ck->e[slot].used) {
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
