/* kv_layout.h - how a model's layers map onto cache groups (DESIGN.md,
 * "Cache groups").
 *
 * Each layer is of one kind: full attention (window 0), sliding window W
 * (W > 0, one kind per distinct W), or none (window PL_KV_WINDOW_NONE:
 * layers that take no paged K/V, such as recurrent layers or layers that
 * reuse another layer's K/V). The paged kinds share one pool of KV blocks
 * (schedulers/kv_blocks.h) whose blocks all have the same size, as
 * vLLM's hybrid allocator does: a block holds the K/V of n_slots layers
 * for block_size positions, n_slots being the fewest layers of any paged
 * kind; each kind is cut into groups of n_slots layers (the last one
 * padded), and every group keeps its own block table per sequence. A
 * sliding group's sequence only holds the blocks covering the last W
 * positions, so the pool serves full and sliding layers in proportion to
 * what they really keep.
 *
 * With groups off (a runner that supports one table only), every paged
 * layer is one full group: one block holds all layers, as before.
 *
 * Pure data: no threads, no I/O.
 */
#ifndef PL_KV_LAYOUT_H
#define PL_KV_LAYOUT_H

#include <stdbool.h>

#define PL_KV_WINDOW_NONE (-1)
/** Distinct paged kinds (full + sliding windows) a layout may have. */
#define PL_KV_MAX_KINDS 4
/** Layers a layout describes, at most. */
#define PL_KV_MAX_LAYERS 512

typedef struct pl_kv_layout {
    int n_layer;
    int n_slots;              /**< layers whose K/V one block holds */
    int n_groups;             /**< block tables per sequence (>= 1) */
    int n_kinds;              /**< distinct windows among the groups, the
                                   full kind (window 0) first when there is
                                   one, then windows in increasing order;
                                   groups follow the same order */
    int kind_window[PL_KV_MAX_KINDS]; /**< each kind's window (0: full) */
    int kind_groups[PL_KV_MAX_KINDS]; /**< how many groups of that kind */
    int group_window[PL_KV_MAX_LAYERS]; /**< (n_groups) 0: full, else W */
    short layer_group[PL_KV_MAX_LAYERS]; /**< (n_layer) its group, -1: no
                                              paged K/V */
    short layer_slot[PL_KV_MAX_LAYERS];  /**< (n_layer) its slot in its
                                              group's blocks */
} pl_kv_layout;

/**
 * Build the layout of n_layer layers of windows window[l] (0, W > 0, or
 * PL_KV_WINDOW_NONE). With grouped false, every paged layer is treated as
 * full and falls in one group. At least one layer must be paged. Returns
 * 0, or -1 on bad arguments (n_layer out of [1, PL_KV_MAX_LAYERS], no
 * paged layer, more than PL_KV_MAX_KINDS windows). Plain data: copy it
 * freely, nothing to free.
 */
int pl_kv_layout_init(pl_kv_layout *lo, int n_layer, const int *window, bool grouped);

/** The layout of one full group of n_layer layers (the layout before
 *  cache groups, and what a runner without groups gets). */
int pl_kv_layout_init_full(pl_kv_layout *lo, int n_layer);

/** Blocks of block_size positions one sequence of n_pos positions holds
 *  in a group of window w while it runs: all of them when full (w == 0),
 *  at most ceil((w - 1) / block_size) + 1 of a sliding group (the window
 *  before the position it writes, and that one's block), n_pos > 0. */
int pl_kv_layout_group_need(int w, int block_size, long n_pos);

/** The same summed over the groups of kinds kind_window[0..n_kinds)
 *  (kind_groups of each); n_kinds 0: one full group. */
long pl_kv_layout_need(int n_kinds, const int *kind_window, const int *kind_groups,
                       int block_size, long n_pos);

#endif
