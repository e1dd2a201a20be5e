/* batch_internal.h - the batch scheduler's state, shared by batch.c
 * (queues, admission, preemption) and batch_step.c (filling a step). */
#ifndef PL_BATCH_INTERNAL_H
#define PL_BATCH_INTERNAL_H

#include "schedulers/batch.h"

struct pl_batch {
    pl_batch_config cfg;
    pl_kv_blocks *kv;             /* borrowed */
    int block_size;
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

void pl_batch_commit_(pl_batch *b, pl_batch_seq *s);
bool pl_batch_ensure_blocks_(pl_batch *b, pl_batch_seq *s, int n_pos);
void pl_batch_preempt_(pl_batch *b, pl_batch_seq *s);
void pl_batch_admit_(pl_batch *b, pl_batch_seq *s);
void pl_batch_unadmit_(pl_batch *b, pl_batch_seq *s);
void pl_batch_sort_running_(pl_batch *b);

#endif
