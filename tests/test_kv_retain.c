/* test_kv_retain.c - retention by next need in the KV block manager: which
 * cached-free block is evicted (furthest next need, then LRU), a finished
 * conversation's blocks freed at once, and the key table under churn. */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "schedulers/kv_blocks.h"

#define BS 4

/* One committed block per conversation key: content base+0..3, released
 * by key so that it is tagged. Returns its id. */
static int32_t cached_block(pl_kv_blocks *kv, uint64_t key, int32_t base)
{
    int32_t ids[BS] = {base, base + 1, base + 2, base + 3};
    int32_t b = pl_kv_blocks_alloc(kv);
    cr_assert_geq(b, 0);
    pl_kv_blocks_commit(kv, b, PL_KV_HASH_ROOT, ids);
    pl_kv_blocks_release_tagged(kv, b, key);
    return b;
}

static bool still_cached(pl_kv_blocks *kv, int32_t base)
{
    int32_t ids[BS] = {base, base + 1, base + 2, base + 3}, out[1];
    int hit = pl_kv_blocks_lookup(kv, ids, BS, 1, out, NULL);
    if (hit)
        pl_kv_blocks_release(kv, out[0]);
    return hit == 1;
}

/* Four cached-free blocks, released in the order A, B, C, D (A least
 * recent); D has no key. Hints: A 0 (now), B 5, C 2. */
static pl_kv_blocks *four(bool next_need)
{
    pl_kv_blocks *kv = pl_kv_blocks_new(4, BS, true);
    pl_kv_blocks_set_next_need(kv, next_need);
    pl_kv_blocks_hint(kv, 1, 0);
    pl_kv_blocks_hint(kv, 2, 0);
    pl_kv_blocks_hint(kv, 3, 0);
    cached_block(kv, 1, 100);
    cached_block(kv, 2, 200);
    cached_block(kv, 3, 300);
    cached_block(kv, 0, 400);
    pl_kv_blocks_hint(kv, 2, 5);   /* hints change after the release */
    pl_kv_blocks_hint(kv, 3, 2);
    cr_assert_eq(pl_kv_blocks_num_available(kv), 4);
    return kv;
}

Test(kv_retain, evicts_furthest_need_then_lru)
{
    pl_kv_blocks *kv = four(true);
    int32_t got[4];
    got[0] = pl_kv_blocks_alloc(kv);
    cr_assert_not(still_cached(kv, 200), "B (need 5) goes first");
    cr_assert(still_cached(kv, 100) && still_cached(kv, 300) && still_cached(kv, 400));
    got[1] = pl_kv_blocks_alloc(kv);
    cr_assert_not(still_cached(kv, 300), "then C (need 2)");
    cr_assert(still_cached(kv, 100) && still_cached(kv, 400));
    /* A and D are both need 0 (D: no key): least recently released first.
     * still_cached re-released A and D in that order, so A is the LRU. */
    got[2] = pl_kv_blocks_alloc(kv);
    cr_assert_not(still_cached(kv, 100), "then A, the LRU of the need-0 pair");
    cr_assert(still_cached(kv, 400));
    got[3] = pl_kv_blocks_alloc(kv);
    pl_kv_stats st;
    pl_kv_blocks_stats(kv, &st);
    cr_assert_eq(st.evictions, 4);
    cr_assert_geq(st.need_evictions, 2, "B and C skipped the LRU block");
    for (int i = 0; i < 4; i++)
        pl_kv_blocks_release(kv, got[i]);
    char why[128];
    cr_assert(pl_kv_blocks_check_idle(kv, why, sizeof why), "%s", why);
    pl_kv_blocks_free(kv);
}

/* The cached-free blocks of conversations needed now (need 0), which
 * admission keeps (issue 41): they follow the hints, a block taken back
 * into use, an eviction and a finished conversation. */
Test(kv_retain, counts_the_blocks_needed_now)
{
    pl_kv_blocks *kv = four(true);     /* A need 0, B 5, C 2, D untagged */
    char why[128];
    cr_assert_eq(pl_kv_blocks_needed_now(kv), 1, "A's block");
    pl_kv_blocks_hint(kv, 2, 0);
    cr_assert_eq(pl_kv_blocks_needed_now(kv), 2, "A's and B's");
    cr_assert(still_cached(kv, 100), "A's block in use and back");
    cr_assert_eq(pl_kv_blocks_needed_now(kv), 2, "retagged by nobody: still A's");
    int32_t ids[BS] = {200, 201, 202, 203}, out[1];
    cr_assert_eq(pl_kv_blocks_lookup(kv, ids, BS, 1, out, NULL), 1);
    cr_assert_eq(pl_kv_blocks_needed_now(kv), 1, "B's block runs: not cached-free");
    pl_kv_blocks_release_tagged(kv, out[0], 3);
    cr_assert_eq(pl_kv_blocks_needed_now(kv), 1, "C (need 2) released it: C's now");
    pl_kv_blocks_hint(kv, 3, 0);
    cr_assert_eq(pl_kv_blocks_needed_now(kv), 3, "C's two and A's");
    pl_kv_blocks_hint(kv, 3, PL_KV_NEED_DONE);
    cr_assert_eq(pl_kv_blocks_needed_now(kv), 1, "C finished");
    int32_t got[4];
    for (int i = 0; i < 4; i++)
        got[i] = pl_kv_blocks_alloc(kv);
    cr_assert_eq(pl_kv_blocks_needed_now(kv), 0, "all evicted");
    for (int i = 0; i < 4; i++)
        pl_kv_blocks_release(kv, got[i]);
    cr_assert(pl_kv_blocks_check_idle(kv, why, sizeof why), "%s", why);
    pl_kv_blocks_free(kv);
}

Test(kv_retain, off_is_plain_lru)
{
    pl_kv_blocks *kv = four(false);
    int32_t a = pl_kv_blocks_alloc(kv);
    cr_assert_not(still_cached(kv, 100), "LRU: A first whatever the hints");
    cr_assert(still_cached(kv, 200));
    pl_kv_blocks_release(kv, a);
    pl_kv_blocks_free(kv);
}

Test(kv_retain, finished_conversation_releases_at_once)
{
    pl_kv_blocks *kv = pl_kv_blocks_new(6, BS, true);
    pl_kv_blocks_set_next_need(kv, true);
    pl_kv_blocks_hint(kv, 7, 1);
    pl_kv_blocks_hint(kv, 8, 1);
    cached_block(kv, 7, 100);
    cached_block(kv, 7, 200);
    cached_block(kv, 8, 300);
    /* A block of key 7 still in use by a sequence is not touched. */
    int32_t ids[BS] = {500, 501, 502, 503};
    int32_t used = pl_kv_blocks_alloc(kv);
    pl_kv_blocks_commit(kv, used, PL_KV_HASH_ROOT, ids);
    pl_kv_stats st;
    pl_kv_blocks_stats(kv, &st);
    cr_assert_eq(st.cached_free, 3);
    cr_assert_eq(pl_kv_blocks_hint(kv, 7, PL_KV_NEED_DONE), 2);
    pl_kv_blocks_stats(kv, &st);
    cr_assert_eq(st.done_released, 2);
    cr_assert_eq(st.cached_free, 3, "kept while nothing needs the room");
    /* Key 8 needs its block again later (need 9): still, the finished
     * conversation's blocks go first. 2 free blocks, then 2 evictions. */
    pl_kv_blocks_hint(kv, 8, 9);
    int32_t g[4];
    for (int i = 0; i < 4; i++)
        g[i] = pl_kv_blocks_alloc(kv);
    pl_kv_blocks_stats(kv, &st);
    cr_assert_eq(st.evictions, 2);
    cr_assert(still_cached(kv, 300), "key 8's block outlives the finished ones");
    cr_assert_not(still_cached(kv, 100));
    cr_assert_not(still_cached(kv, 200));
    for (int i = 0; i < 4; i++)
        pl_kv_blocks_release(kv, g[i]);
    int32_t out[1];
    cr_assert_eq(pl_kv_blocks_lookup(kv, ids, BS, 1, out, NULL), 1, "in-use block kept");
    pl_kv_blocks_release(kv, out[0]);
    pl_kv_blocks_release(kv, used);
    cr_assert_eq(pl_kv_blocks_hint(kv, 7, PL_KV_NEED_DONE), 0, "unknown key: nothing");
    cr_assert_eq(pl_kv_blocks_hint(kv, 0, PL_KV_NEED_DONE), 0, "key 0 is ignored");
    /* A key never hinted does not tag (no slot held for it). */
    cached_block(kv, 99, 600);
    cr_assert_eq(pl_kv_blocks_hint(kv, 99, PL_KV_NEED_DONE), 0);
    cr_assert(still_cached(kv, 600));
    char why[128];
    cr_assert(pl_kv_blocks_check_idle(kv, why, sizeof why), "%s", why);
    pl_kv_blocks_free(kv);
}

/* Keys come and go (a 200-question job and more): the key table reuses
 * slots and tombstones without losing a live key's hint. */
Test(kv_retain, key_table_churn)
{
    pl_kv_blocks *kv = pl_kv_blocks_new(64, BS, true);
    pl_kv_blocks_set_next_need(kv, true);
    for (int round = 0; round < 2000; round++) {
        uint64_t key = 1000 + (uint64_t)round;
        pl_kv_blocks_hint(kv, key, 3);
        if (round >= 8)
            cr_assert_eq(pl_kv_blocks_hint(kv, key - 8, PL_KV_NEED_DONE), 0);
    }
    /* Eight live keys; the one hinted furthest is evicted first. */
    for (int i = 0; i < 8; i++)
        pl_kv_blocks_hint(kv, 1000 + 1992 + (uint64_t)i, i == 5 ? 9 : 1);
    for (int i = 0; i < 8; i++)
        cached_block(kv, 1000 + 1992 + (uint64_t)i, 100 * (i + 1));
    for (int i = 0; i < 56; i++)
        cr_assert_geq(pl_kv_blocks_alloc(kv), 0);
    cr_assert_geq(pl_kv_blocks_alloc(kv), 0);
    cr_assert_not(still_cached(kv, 600), "key #5 (need 9) evicted first");
    for (int i = 0; i < 8; i++)
        if (i != 5)
            cr_assert(still_cached(kv, 100 * (i + 1)), "key #%d kept", i);
    pl_kv_blocks_free(kv);
}

/* Partial-block reuse: the longest leading match among the blocks that
 * continue the same chain, never one committed in the current tick. */
Test(kv_partial, longest_match_after_the_tick)
{
    pl_kv_blocks *kv = pl_kv_blocks_new(8, BS, true);
    pl_kv_blocks_set_tick(kv, 1);
    int32_t x[BS] = {1, 2, 3, 4}, y[BS] = {1, 2, 7, 8}, other[BS] = {1, 2, 3, 4};
    int32_t bx = pl_kv_blocks_alloc(kv), by = pl_kv_blocks_alloc(kv), bo = pl_kv_blocks_alloc(kv);
    uint64_t parent = 12345;
    pl_kv_blocks_commit(kv, bx, parent, x);
    pl_kv_blocks_commit(kv, by, parent, y);
    pl_kv_blocks_commit(kv, bo, parent + 1, other);      /* another chain */
    int k = -1;
    int32_t want[3] = {1, 2, 3};
    cr_assert_eq(pl_kv_blocks_lookup_partial(kv, parent, want, 3, &k), -1,
                 "committed this tick: its step may not have written it yet");
    cr_assert_eq(k, 0);
    pl_kv_blocks_set_tick(kv, 2);
    cr_assert_eq(pl_kv_blocks_lookup_partial(kv, parent, want, 3, &k), bx);
    cr_assert_eq(k, 3);
    int32_t want2[3] = {1, 2, 7};
    cr_assert_eq(pl_kv_blocks_lookup_partial(kv, parent, want2, 3, &k), by);
    cr_assert_eq(k, 3);
    int32_t want3[4] = {1, 2, 3, 4};
    cr_assert_eq(pl_kv_blocks_lookup_partial(kv, parent, want3, 9, &k), bx);
    cr_assert_eq(k, BS - 1, "at most block_size - 1: a full match is a full hit");
    int32_t miss[2] = {9, 9};
    cr_assert_eq(pl_kv_blocks_lookup_partial(kv, parent, miss, 2, &k), -1);
    cr_assert_eq(pl_kv_blocks_lookup_partial(kv, parent + 2, want, 3, &k), -1, "no such chain");
    /* An evicted block leaves the parent index too. */
    pl_kv_blocks_release(kv, bx);
    pl_kv_blocks_release(kv, by);
    pl_kv_blocks_release(kv, bo);
    int32_t got[8];
    for (int i = 0; i < 8; i++)
        got[i] = pl_kv_blocks_alloc(kv);
    cr_assert_eq(pl_kv_blocks_lookup_partial(kv, parent, want, 3, &k), -1);
    pl_kv_stats st;
    pl_kv_blocks_stats(kv, &st);
    cr_assert_eq(st.partial_hits, 3);
    cr_assert_eq(st.partial_tokens, 9);
    for (int i = 0; i < 8; i++)
        pl_kv_blocks_release(kv, got[i]);
    char why[128];
    cr_assert(pl_kv_blocks_check_idle(kv, why, sizeof why), "%s", why);
    pl_kv_blocks_free(kv);
}

/* A finished sequence's partial last block: served to partial lookups up
 * to its n kept ids (never beyond, whatever the rest of the block holds),
 * from the next tick on; never a full-block hit; cached-free once
 * released; evicted like any cached block. */
Test(kv_partial, finished_tail_kept_for_partial_reuse)
{
    pl_kv_blocks *kv = pl_kv_blocks_new(4, BS, true);
    pl_kv_blocks_set_tick(kv, 1);
    uint64_t parent = 777;
    int32_t tail[BS] = {5, 6, 7, 99};   /* only 3 computed: 99 is not kept */
    int32_t b = pl_kv_blocks_alloc(kv);
    cr_assert(pl_kv_blocks_commit_tail(kv, b, parent, tail, 3));
    int32_t b2 = pl_kv_blocks_alloc(kv);
    cr_assert_not(pl_kv_blocks_commit_tail(kv, b2, parent, tail, 2), "already served");
    cr_assert_not(pl_kv_blocks_commit_tail(kv, b2, parent, tail, BS), "a full block commits");
    cr_assert_not(pl_kv_blocks_commit_tail(kv, b2, parent, tail, 0));
    pl_kv_blocks_release(kv, b2);
    pl_kv_blocks_release(kv, b);
    cr_assert_eq(pl_kv_blocks_num_available(kv), 4);
    int k = -1;
    int32_t want[BS] = {5, 6, 7, 99};
    cr_assert_eq(pl_kv_blocks_lookup_partial(kv, parent, want, 3, &k), -1, "same tick");
    pl_kv_blocks_set_tick(kv, 2);
    cr_assert_eq(pl_kv_blocks_lookup_partial(kv, parent, want, 3, &k), b);
    cr_assert_eq(k, 3, "the kept ids, not the 4th");
    int32_t want2[2] = {5, 8};
    cr_assert_eq(pl_kv_blocks_lookup_partial(kv, parent, want2, 2, &k), b);
    cr_assert_eq(k, 1);
    int32_t out[1];
    cr_assert_eq(pl_kv_blocks_lookup(kv, want, BS, 1, out, NULL), 0, "no full hit");
    char why[128];
    cr_assert(pl_kv_blocks_check_idle(kv, why, sizeof why), "%s", why);
    int32_t got[4];
    for (int i = 0; i < 4; i++)
        got[i] = pl_kv_blocks_alloc(kv);
    cr_assert_eq(pl_kv_blocks_lookup_partial(kv, parent, want, 3, &k), -1, "evicted");
    pl_kv_stats st;
    pl_kv_blocks_stats(kv, &st);
    cr_assert_eq(st.tails, 1);
    cr_assert_eq(st.evictions, 1);
    for (int i = 0; i < 4; i++)
        pl_kv_blocks_release(kv, got[i]);
    cr_assert(pl_kv_blocks_check_idle(kv, why, sizeof why), "%s", why);
    pl_kv_blocks_free(kv);
}
