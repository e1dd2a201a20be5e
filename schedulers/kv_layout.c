/* kv_layout.c - layers to cache groups: kinds by window, groups of
 * n_slots layers (kv_layout.h). */
#include "schedulers/kv_layout.h"

#include <string.h>

/* The kinds of the paged layers, full first then by window; each layer's
 * kind into kind[l] (-1: none), each kind's layers into cnt. */
static int find_kinds_(pl_kv_layout *lo, const int *window, bool grouped, int *cnt, int *kind)
{
    for (int l = 0; l < lo->n_layer; l++) {
        if (window[l] < PL_KV_WINDOW_NONE)
            return -1;
        int w = window[l] == PL_KV_WINDOW_NONE ? PL_KV_WINDOW_NONE : grouped ? window[l] : 0;
        int k = 0;
        while (w != PL_KV_WINDOW_NONE && k < lo->n_kinds && lo->kind_window[k] < w)
            k++;
        if (w == PL_KV_WINDOW_NONE || (k < lo->n_kinds && lo->kind_window[k] == w))
            continue;
        if (lo->n_kinds == PL_KV_MAX_KINDS)
            return -1;
        memmove(lo->kind_window + k + 1, lo->kind_window + k,
                (size_t)(lo->n_kinds - k) * sizeof *lo->kind_window);
        lo->kind_window[k] = w;
        lo->n_kinds++;
    }
    if (lo->n_kinds == 0)
        return -1;
    for (int l = 0; l < lo->n_layer; l++) {
        kind[l] = -1;
        int w = grouped ? window[l] : 0;
        for (int k = 0; window[l] != PL_KV_WINDOW_NONE && k < lo->n_kinds; k++)
            if (lo->kind_window[k] == w) {
                kind[l] = k;
                cnt[k]++;
            }
    }
    return 0;
}

int pl_kv_layout_init(pl_kv_layout *lo, int n_layer, const int *window, bool grouped)
{
    memset(lo, 0, sizeof *lo);
    if (n_layer < 1 || n_layer > PL_KV_MAX_LAYERS || !window)
        return -1;
    lo->n_layer = n_layer;
    int cnt[PL_KV_MAX_KINDS] = {0}, seen[PL_KV_MAX_KINDS] = {0}, first[PL_KV_MAX_KINDS];
    int kind[PL_KV_MAX_LAYERS];
    if (find_kinds_(lo, window, grouped, cnt, kind) < 0) {
        memset(lo, 0, sizeof *lo);
        return -1;
    }
    lo->n_slots = n_layer;
    for (int k = 0; k < lo->n_kinds; k++)
        lo->n_slots = cnt[k] < lo->n_slots ? cnt[k] : lo->n_slots;
    for (int k = 0; k < lo->n_kinds; k++) {
        lo->kind_groups[k] = (cnt[k] + lo->n_slots - 1) / lo->n_slots;
        first[k] = lo->n_groups;
        for (int j = 0; j < lo->kind_groups[k]; j++)
            lo->group_window[lo->n_groups++] = lo->kind_window[k];
    }
    for (int l = 0; l < n_layer; l++) {
        lo->layer_group[l] = lo->layer_slot[l] = -1;
        if (kind[l] < 0)
            continue;
        int i = seen[kind[l]]++;
        lo->layer_group[l] = (short)(first[kind[l]] + i / lo->n_slots);
        lo->layer_slot[l] = (short)(i % lo->n_slots);
    }
    return 0;
}

int pl_kv_layout_init_full(pl_kv_layout *lo, int n_layer)
{
    int w[PL_KV_MAX_LAYERS] = {0};
    return n_layer > PL_KV_MAX_LAYERS ? -1 : pl_kv_layout_init(lo, n_layer, w, false);
}

int pl_kv_layout_group_need(int w, int block_size, long n_pos)
{
    long all = (n_pos + block_size - 1) / block_size;
    if (w <= 0)
        return all > 1 << 30 ? 1 << 30 : (int)all;
    long win = (w - 1 + block_size - 1) / block_size + 1;
    return (int)(win < all ? win : all);
}

long pl_kv_layout_need(int n_kinds, const int *kind_window, const int *kind_groups,
                       int block_size, long n_pos)
{
    if (n_kinds <= 0)
        return pl_kv_layout_group_need(0, block_size, n_pos);
    long n = 0;
    for (int k = 0; k < n_kinds; k++)
        n += (long)kind_groups[k] * pl_kv_layout_group_need(kind_window[k], block_size, n_pos);
    return n;
}
