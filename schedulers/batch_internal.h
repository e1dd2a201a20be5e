/* batch_internal.h - the batch scheduler's state, shared by batch.c
 * (queues, admission, preemption) and batch_step.c (filling a step). */
#ifndef PL_BATCH_INTERNAL_H
#define PL_BATCH_INTERNAL_H

#include <stddef.h>

#include "schedulers/batch.h"

struct pl_batch {
    pl_batch_config cfg;
    pl_kv_blocks *kv;             /* borrowed */
    int block_size;
    int n_groups;                 /* cache groups (kv_layout.h), >= 1 */
    int group_window[PL_KV_MAX_LAYERS]; /* (n_groups) 0: full, else W */
    int n_kinds;                  /* the layout's kinds (0: one full group) */
    int kind_window[PL_KV_MAX_KINDS], kind_groups[PL_KV_MAX_KINDS];
    int32_t *scratch;             /* (n_groups + 1, max_blocks) prefix lookup */
    uint64_t *scratch_h;          /* (max_blocks + 1) its chained hashes */
    uint64_t *commit_h;           /* (max_blocks + 1) pl_batch_commit_'s:
                                     [i] the hash of a sequence's first i
                                     blocks, for those it just committed */
    int max_blocks;               /* per sequence: ceil(max_model_len / bs) */
    int max_len;                  /* longest sequence: min(max_model_len,
                                     all KV blocks), so one always fits */
    pl_batch_seq **running;       /* (max_num_seqs) sorted by (prio, arrival)
                                     at the start of each schedule */
    int n_running;
    pl_batch_seq **waiting;       /* sorted by (priority, arrival) */
    int n_waiting, waiting_cap;
    int32_t *free_slots;          /* stack of unused slots */
    int n_free_slots;
    uint64_t n_arrivals;
    uint64_t n_steps;
    pl_batch_step *cur;           /* the step being scheduled */
};

/* Group g's block table of s: (max_blocks) ids, -1 where a sliding group
 * released (or never took) the block. */
static inline int32_t *pl_batch_seq_table_(const pl_batch *b, const pl_batch_seq *s, int g)
{
    return s->blocks + (size_t)g * (size_t)b->max_blocks;
}

/* batch_kv.c: a sequence's blocks across the cache groups. */
void pl_batch_commit_(pl_batch *b, pl_batch_seq *s);
bool pl_batch_ensure_blocks_(pl_batch *b, pl_batch_seq *s, int n_pos);
void pl_batch_release_blocks_(pl_batch *b, pl_batch_seq *s);
void pl_batch_release_front_(pl_batch *b, pl_batch_seq *s, int first);
void pl_batch_keep_tail_(pl_batch *b, pl_batch_seq *s);
int pl_batch_lookup_(pl_batch *b, pl_batch_seq *s, int max_hit);
void pl_batch_admit_partial_(pl_batch *b, pl_batch_seq *s);
long pl_batch_seq_lacks_(const pl_batch *b, const pl_batch_seq *s, long n_pos, bool held);
void pl_batch_ck_saves_(pl_batch *b, pl_batch_seq *s, int first, int c0);
void pl_batch_ck_share_(pl_batch *b, pl_batch_seq *s);
long pl_batch_need_(const pl_batch *b, long n_pos);
void pl_batch_preempt_(pl_batch *b, pl_batch_seq *s);
void pl_batch_admit_(pl_batch *b, pl_batch_seq *s);
void pl_batch_unadmit_(pl_batch *b, pl_batch_seq *s);
void pl_batch_sort_running_(pl_batch *b);

#endif
