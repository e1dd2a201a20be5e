/* test_kv_groups.c - cache groups (schedulers/kv_layout.h) in the block
 * manager and the batch scheduler: the layout of Gemma 3's 5-in-6 sliding
 * pattern, each group's need, a long sequence on a sliding layout holding
 * only its window's blocks, released blocks waiting for prefix reuse, a
 * prefix hit that restores every group at the same position (and one that
 * must stop short where a sliding block was evicted), partial-block reuse
 * with a copy per group, and the idle invariant after all of it. The
 * "device" samples an id that depends only on the sequence and position. */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "schedulers/batch.h"
#include "schedulers/kv_layout.h"

#define BS 4
#define W 10                      /* sliding window, positions */

/* Gemma 3's pattern: every 6th layer full, the others sliding. */
static void gemma3_windows(int *w, int n)
{
    for (int l = 0; l < n; l++)
        w[l] = (l + 1) % 6 == 0 ? 0 : W;
}

Test(kv_layout, gemma3_pattern)
{
    int w[18];
    gemma3_windows(w, 18);
    pl_kv_layout lo;
    cr_assert_eq(pl_kv_layout_init(&lo, 18, w, true), 0);
    cr_assert_eq(lo.n_slots, 3, "3 full layers: blocks of 3 layers");
    cr_assert_eq(lo.n_kinds, 2);
    cr_assert_eq(lo.kind_window[0], 0, "full first");
    cr_assert_eq(lo.kind_window[1], W);
    cr_assert_eq(lo.kind_groups[0], 1);
    cr_assert_eq(lo.kind_groups[1], 5);
    cr_assert_eq(lo.n_groups, 6);
    int per_slot[6][3] = {{0}};
    for (int l = 0; l < 18; l++) {
        int g = lo.layer_group[l];
        cr_assert(g >= 0 && g < 6);
        cr_assert_eq(lo.group_window[g], w[l], "layer %d in a group of its kind", l);
        per_slot[g][lo.layer_slot[l]]++;
    }
    for (int g = 0; g < 6; g++)
        for (int s = 0; s < 3; s++)
            cr_assert_eq(per_slot[g][s], 1, "group %d slot %d holds one layer", g, s);
    /* Grouped off: one full group of every layer. */
    cr_assert_eq(pl_kv_layout_init(&lo, 18, w, false), 0);
    cr_assert_eq(lo.n_groups, 1);
    cr_assert_eq(lo.n_slots, 18);
}

Test(kv_layout, padding_none_and_bad)
{
    /* 2 full, 5 sliding: groups of 2, the last sliding one padded. */
    int w[8] = {0, W, W, W, 0, W, W, PL_KV_WINDOW_NONE};
    pl_kv_layout lo;
    cr_assert_eq(pl_kv_layout_init(&lo, 8, w, true), 0);
    cr_assert_eq(lo.n_slots, 2);
    cr_assert_eq(lo.kind_groups[1], 3);
    cr_assert_eq(lo.layer_group[7], -1, "a layer without paged K/V is in no group");
    int none[2] = {PL_KV_WINDOW_NONE, PL_KV_WINDOW_NONE};
    cr_assert_eq(pl_kv_layout_init(&lo, 2, none, true), -1, "nothing paged");
    int many[5] = {1, 2, 3, 4, 5};
    cr_assert_eq(pl_kv_layout_init(&lo, 5, many, true), -1, "more windows than kinds");
    int neg[1] = {-2};
    cr_assert_eq(pl_kv_layout_init(&lo, 1, neg, true), -1);
}

Test(kv_layout, need)
{
    /* W = 10, bs = 4: a row reads 9 positions before it, at most 4 blocks
     * (ceil(9 / 4) + 1 = 4). */
    cr_assert_eq(pl_kv_layout_group_need(W, BS, 3), 1);
    cr_assert_eq(pl_kv_layout_group_need(W, BS, 12), 3);
    cr_assert_eq(pl_kv_layout_group_need(W, BS, 1000), 4);
    cr_assert_eq(pl_kv_layout_group_need(0, BS, 1000), 250);
    int kw[2] = {0, W}, kg[2] = {1, 5};
    cr_assert_eq(pl_kv_layout_need(2, kw, kg, BS, 1000), 250 + 5 * 4);
    cr_assert_eq(pl_kv_layout_need(0, kw, kg, BS, 1000), 250, "no kinds: one full group");
    /* Gemma 3 270M at 8,192 tokens, W = 512, bs = 16: 512 + 5 * 33 blocks
     * of 3 layers against 512 blocks of 18 layers before: 0.22x. */
    int gw[2] = {0, 512};
    long after = pl_kv_layout_need(2, gw, kg, 16, 8192) * 3;
    cr_assert_eq(after, (512 + 5 * 33) * 3);
    cr_assert_lt((double)after / (512.0 * 18), 0.3);
}

/* ---- the scheduler over a grouped pool ---- */

typedef struct harness {
    pl_kv_layout lo;
    pl_kv_blocks *kv;
    pl_batch *b;
    pl_batch_config cfg;
    pl_batch_step st;
} harness;

static void h_init(harness *h, int num_blocks, int budget, bool partial)
{
    int w[6];
    gemma3_windows(w, 6);           /* 1 full layer, 5 sliding: 6 groups */
    cr_assert_eq(pl_kv_layout_init(&h->lo, 6, w, true), 0);
    cr_assert_eq(h->lo.n_groups, 6);
    h->cfg = (pl_batch_config){.max_num_seqs = 4, .max_num_batched_tokens = budget,
                               .max_model_len = 256, .partial_prefix = partial,
                               .layout = &h->lo};
    h->kv = pl_kv_blocks_new_grouped(num_blocks, BS, true, h->lo.n_groups);
    h->b = pl_batch_new(&h->cfg, h->kv);
    cr_assert_not_null(h->b);
    cr_assert_eq(pl_batch_step_init(&h->st, &h->cfg, BS), 0);
}

static void h_free(harness *h)
{
    pl_batch_step_free(&h->st);
    pl_batch_free(h->b);
    pl_kv_blocks_free(h->kv);
}

static int32_t sample_for(uint64_t id, int pos)
{
    return (int32_t)((id * 31 + (uint64_t)pos * 7) % 97) + 1;
}

static pl_batch_seq *add(harness *h, uint64_t id, const int32_t *p, int n, int max_new)
{
    pl_batch_seq *s = pl_batch_add(h->b, id, p, n, max_new, 0, NULL, NULL);
    cr_assert_not_null(s);
    return s;
}

/* Every row of the step reads blocks its tables hold: for each group, the
 * blocks from the window's start (full: 0) to the row's own. */
static void check_tables(const harness *h)
{
    const pl_step_input *in = &h->st.in;
    cr_assert_eq(in->n_groups, h->lo.n_groups);
    for (int r = 0; r < in->n_rows; r++) {
        int k = in->row_seq[r], pos = in->positions[r];
        for (int g = 0; g < in->n_groups; g++) {
            const int32_t *bt = in->block_table +
                ((size_t)k * in->n_groups + g) * in->max_blocks_per_seq;
            int w = h->lo.group_window[g];
            int first = w > 0 && pos + 1 > w ? pos + 1 - w : 0;
            for (int i = first / BS; i <= pos / BS; i++)
                cr_assert(bt[i] >= 0, "row %d (pos %d) group %d block %d", r, pos, g, i);
        }
    }
}

/* One synchronous step: schedule, check the tables, append samples;
 * finishes sequences at max_new. Returns the rows. */
static void h_process(harness *h)
{
    pl_step_input *in = &h->st.in;
    for (int k = 0; k < in->n_seqs; k++) {
        pl_batch_seq *s = h->st.seqs[k];
        if (in->seq_sample[k] && pl_batch_append(h->b, s, sample_for(s->id, in->seq_ctx_len[k])) &&
            pl_batch_seq_generated(s) >= s->max_new)
            pl_batch_finish(h->b, s);
    }
    pl_batch_step_retire(h->b, &h->st);
}

static int h_step(harness *h)
{
    int rows = pl_batch_schedule(h->b, &h->st);
    check_tables(h);
    h_process(h);
    return rows;
}

static int group_used(const harness *h, int g)
{
    pl_kv_group_stats gs;
    pl_kv_blocks_group_stats(h->kv, g, &gs);
    return gs.used;
}

static void assert_idle(const harness *h)
{
    char why[128] = "";
    cr_assert(pl_kv_blocks_check_idle(h->kv, why, sizeof why), "%s", why);
}

Test(kv_groups, long_sequence_holds_its_window)
{
    harness h;
    h_init(&h, 400, 8, false);
    int32_t p[100];
    for (int i = 0; i < 100; i++)
        p[i] = 1000 + i;
    pl_batch_seq *s = add(&h, 1, p, 100, 60);
    int win = pl_kv_layout_group_need(W, BS, 1 << 20);      /* 4 */
    int max_full = 0;
    while (pl_batch_has_seqs(h.b)) {
        cr_assert_gt(h_step(&h), 0);
        if (!pl_batch_has_seqs(h.b))
            break;
        int ctx = s->num_computed;
        cr_assert_eq(group_used(&h, 0), (ctx + BS - 1) / BS, "the full group holds all");
        for (int g = 1; g < 6; g++)
            /* The window plus the blocks of one chunk of 8 rows. */
            cr_assert_leq(group_used(&h, g), win + 8 / BS, "group %d at %d", g, ctx);
        max_full = group_used(&h, 0);
    }
    cr_assert_geq(max_full, 159 / BS);
    /* Every block went back; the committed ones wait for prefix reuse. */
    pl_kv_stats st;
    pl_kv_blocks_stats(h.kv, &st);
    cr_assert_eq(st.used, 0);
    for (int g = 0; g < 6; g++) {
        pl_kv_group_stats gs;
        pl_kv_blocks_group_stats(h.kv, g, &gs);
        cr_assert_geq(gs.cached, 159 / BS, "group %d's released blocks stay cached", g);
    }
    assert_idle(&h);
    h_free(&h);
}

Test(kv_groups, prefix_hit_restores_every_group)
{
    harness h;
    h_init(&h, 400, 64, false);
    int32_t p[60];
    for (int i = 0; i < 60; i++)
        p[i] = 2000 + i;
    add(&h, 1, p, 60, 2);
    while (pl_batch_has_seqs(h.b))
        h_step(&h);
    /* The same 60 ids then more: their 15 blocks are reused although the
     * sliding groups released blocks 0..11 long ago (they wait on the
     * cached-free list); the new sequence holds only the window before
     * position 60 of them. */
    int32_t q[70];
    memcpy(q, p, sizeof p);
    for (int i = 60; i < 70; i++)
        q[i] = 3000 + i;
    pl_batch_seq *s = add(&h, 2, q, 70, 3);
    h_step(&h);
    cr_assert_eq(s->n_cached, 60, "hit of 15 blocks in every group");
    cr_assert_eq(s->live_from[0], 0);
    for (int g = 1; g < 6; g++) {
        const int32_t *t = s->blocks + (size_t)g * (256 / BS);
        cr_assert_eq(s->live_from[g], (60 + 1 - W) / BS, "group %d: the window before 60", g);
        for (int i = 0; i < s->live_from[g]; i++)
            cr_assert_eq(t[i], -1, "group %d block %d not held", g, i);
        for (int i = s->live_from[g]; i < s->n_blocks; i++)
            cr_assert_geq(t[i], 0);
    }
    while (pl_batch_has_seqs(h.b))
        h_step(&h);
    assert_idle(&h);
    h_free(&h);
}

Test(kv_groups, hit_stops_where_a_window_block_is_gone)
{
    /* A pool small enough that a second long sequence evicts the first's
     * cached blocks: a later lookup may only hit where every group still
     * has the window before the hit. Whatever it hits, the step's tables
     * cover every row (check_tables) and the invariant holds. */
    harness h;
    h_init(&h, 120, 64, true);
    int32_t p[80], r[80];
    for (int i = 0; i < 80; i++) {
        p[i] = 4000 + i;
        r[i] = 5000 + i;
    }
    add(&h, 1, p, 80, 1);
    while (pl_batch_has_seqs(h.b))
        h_step(&h);
    add(&h, 2, r, 80, 1);
    while (pl_batch_has_seqs(h.b))
        h_step(&h);
    pl_kv_stats st;
    pl_kv_blocks_stats(h.kv, &st);
    cr_assert_gt(st.evictions, 0, "the second sequence evicted cached blocks");
    pl_batch_seq *s = add(&h, 3, p, 80, 2);
    h_step(&h);
    cr_assert_leq(s->n_cached, 76);
    for (int g = 0; g < 6; g++) {
        const int32_t *t = s->blocks + (size_t)g * (256 / BS);
        for (int i = s->live_from[g]; i < s->n_blocks; i++)
            cr_assert_geq(t[i], 0);
    }
    while (pl_batch_has_seqs(h.b))
        h_step(&h);
    assert_idle(&h);
    h_free(&h);
}

Test(kv_groups, partial_reuse_copies_each_group)
{
    harness h;
    h_init(&h, 400, 64, true);
    int32_t p[30];
    for (int i = 0; i < 30; i++)
        p[i] = 6000 + i;
    add(&h, 1, p, 30, 1);                   /* ends mid-block: tail kept */
    while (pl_batch_has_seqs(h.b))
        h_step(&h);
    int32_t q[40];
    memcpy(q, p, sizeof p);
    for (int i = 30; i < 40; i++)
        q[i] = 7000 + i;
    pl_batch_seq *s = add(&h, 2, q, 40, 1);
    int rows = pl_batch_schedule(h.b, &h.st);
    cr_assert_eq(h.st.n_copies, 6, "one copy per group");
    cr_assert_eq(s->n_cached, 30, "7 full blocks and the tail's 2 positions");
    cr_assert_eq(rows, 40 - 30);
    for (int c = 0; c < h.st.n_copies; c++)
        cr_assert_neq(h.st.copy_src[c], h.st.copy_dst[c]);
    check_tables(&h);
    h_process(&h);
    while (pl_batch_has_seqs(h.b))
        h_step(&h);
    assert_idle(&h);
    h_free(&h);
}

Test(kv_groups, groups_never_alias)
{
    /* The same ids committed in two groups are two cache entries. */
    pl_kv_blocks *kv = pl_kv_blocks_new_grouped(8, BS, true, 2);
    int32_t ids[BS] = {1, 2, 3, 4};
    int32_t a = pl_kv_blocks_alloc_in(kv, 0), b = pl_kv_blocks_alloc_in(kv, 1);
    pl_kv_blocks_commit(kv, a, PL_KV_HASH_ROOT, ids);
    pl_kv_blocks_commit(kv, b, PL_KV_HASH_ROOT, ids);
    cr_assert_eq(pl_kv_blocks_find(kv, 0, PL_KV_HASH_ROOT, ids), a);
    cr_assert_eq(pl_kv_blocks_find(kv, 1, PL_KV_HASH_ROOT, ids), b);
    pl_kv_group_stats g0, g1;
    pl_kv_blocks_group_stats(kv, 0, &g0);
    pl_kv_blocks_group_stats(kv, 1, &g1);
    cr_assert(g0.used == 1 && g1.used == 1 && g0.cached == 1 && g1.cached == 1);
    pl_kv_blocks_release(kv, a);
    pl_kv_blocks_release(kv, b);
    char why[128] = "";
    cr_assert(pl_kv_blocks_check_idle(kv, why, sizeof why), "%s", why);
    pl_kv_blocks_free(kv);
}

/* A prefill chunk of a whole 100-token prompt needs the sliding groups'
 * blocks of all its positions at once (6 groups x 25 blocks), more than
 * the 64-block cache; the sequence keeps far fewer once computed (the
 * full group's 30 and 4 per sliding group at 120 positions). Asked whole,
 * the chunk never got its blocks and, nothing else running to free any,
 * the sequence waited forever (a debate on Gemma 3 under --kv-cache-mb
 * pressure stopped dispatching). It must take the chunk that fits, run
 * to the end, and give every block back. The same with another sequence
 * running beside it: the long one waits for it, then goes. */
Test(kv_groups, a_chunk_larger_than_the_cache_shrinks_to_fit)
{
    harness h;
    h_init(&h, 64, 128, false);
    int32_t p[100], q[8];
    for (int i = 0; i < 100; i++)
        p[i] = 3000 + i;
    for (int i = 0; i < 8; i++)
        q[i] = 5000 + i;
    long steady = pl_kv_layout_need(h.lo.n_kinds, h.lo.kind_window, h.lo.kind_groups, BS, 120);
    cr_assert_leq(steady, 64, "the sequence fits once computed (%ld blocks)", steady);
    cr_assert_gt(6 * 25, 64, "its whole first chunk does not");
    pl_batch_seq *other = add(&h, 1, q, 8, 30);
    pl_batch_seq *s = add(&h, 2, p, 100, 20);
    (void)other;
    int steps = 0;
    while (pl_batch_has_seqs(h.b)) {
        cr_assert_gt(h_step(&h), 0, "step %d scheduled nothing (%d computed of %d)", steps,
                     s->num_computed, s->n_tokens);
        cr_assert_lt(++steps, 400);
        pl_kv_stats st;
        pl_kv_blocks_stats(h.kv, &st);
        cr_assert_leq(st.used, 64);
    }
    assert_idle(&h);
    h_free(&h);
}
