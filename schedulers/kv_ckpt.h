/* kv_ckpt.h - recurrent-state checkpoints: the prefix cache's entries for
 * a hybrid model's recurrent layers (DESIGN.md, "Cache groups").
 *
 * A recurrent layer's state after position P cannot be rebuilt from paged
 * blocks: a prefix hit at P needs the state saved at exactly P. A
 * checkpoint is a copy of a sequence's whole recurrent state (every
 * recurrent layer's conv and delta-rule state) at a block-aligned
 * position P, keyed by the chained prefix-cache hash of the block that
 * ends at P (kv_blocks.h), so it serves exactly the prompts whose first P
 * tokens the full-attention blocks also serve. The runner preallocates
 * n_slots checkpoint slots of slot_bytes each, carved out of the KV
 * budget; this manager says which slot holds which prefix.
 *
 * Eviction follows the blocks' next-need order: the checkpoint of a
 * finished conversation first, then the furthest hinted need, then the
 * least recently used. A checkpoint saved during step t (the runner
 * writes it while running that step) serves lookups from step t + 1 on.
 *
 * Pure data structure: no threads, no I/O. Not thread-safe.
 */
#ifndef PL_KV_CKPT_H
#define PL_KV_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pl_kv_ckpt pl_kv_ckpt;

/** Counters since creation. */
typedef struct pl_kv_ckpt_stats {
    int slots;                /**< checkpoint slots */
    int used;                 /**< slots holding a checkpoint */
    size_t slot_bytes;        /**< bytes of one checkpoint */
    uint64_t saves;           /**< checkpoints taken */
    uint64_t restores;        /**< prefix hits resumed from one */
    uint64_t evictions;       /**< checkpoints dropped for a new one */
} pl_kv_ckpt_stats;

/** A manager of n_slots (>= 1) slots of slot_bytes each. NULL on bad
 *  arguments or OOM. Free with pl_kv_ckpt_free. */
pl_kv_ckpt *pl_kv_ckpt_new(int n_slots, size_t slot_bytes);
void pl_kv_ckpt_free(pl_kv_ckpt *ck);

/** The slot holding the checkpoint of prefix hash `hash`, saved before
 *  step `tick`, or -1. Read-only. */
int pl_kv_ckpt_find(const pl_kv_ckpt *ck, uint64_t hash, uint64_t tick);

/** Whether some slot holds (or is being written with) hash's checkpoint. */
bool pl_kv_ckpt_has(const pl_kv_ckpt *ck, uint64_t hash);

/** Slot `slot` serves a prefix hit: counted, most recently used. */
void pl_kv_ckpt_use(pl_kv_ckpt *ck, int slot);

/**
 * A slot for a new checkpoint of prefix hash `hash`, saved by a sequence
 * of conversation `key` (0: none) during step `tick`: a free slot, else
 * the victim in next-need order (its checkpoint is dropped). Returns the
 * slot, or -1 when hash has one already (nothing done).
 */
int pl_kv_ckpt_take(pl_kv_ckpt *ck, uint64_t hash, uint64_t key, uint64_t tick);

/**
 * The same for a spare checkpoint (the periodic ones, every ckpt_every
 * blocks), which may only evict spare ones or a finished conversation's:
 * with few slots (a large model's states are MBs each), periodic saves
 * along every prompt would evict the prompt-end and hinted checkpoints
 * the next turn and the next round resume from. Spare ones also go
 * first among checkpoints of the same need. -1 as well when no slot may
 * be taken (nothing done).
 */
int pl_kv_ckpt_take_spare(pl_kv_ckpt *ck, uint64_t hash, uint64_t key, uint64_t tick);

/** Drop slot's checkpoint (a save that will not run). */
void pl_kv_ckpt_drop(pl_kv_ckpt *ck, int slot);

/** Retention hint for conversation key (kv_blocks.h's pl_kv_blocks_hint):
 *  need >= 0, or PL_KV_NEED_DONE (-1): its checkpoints go first. */
void pl_kv_ckpt_hint(pl_kv_ckpt *ck, uint64_t key, int need);

void pl_kv_ckpt_stats_get(const pl_kv_ckpt *ck, pl_kv_ckpt_stats *st);

#endif
