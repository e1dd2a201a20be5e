/* test_kv_blocks.c - the paged KV block manager: allocation, ref counts,
 * prefix hits, LRU eviction, and a seeded random property test. */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "schedulers/kv_blocks.h"

#define BS 4

static void fill(int32_t *ids, int n, int32_t base)
{
    for (int i = 0; i < n; i++)
        ids[i] = base + i;
}

/* Commit the n full blocks of a sequence's tokens. */
static void commit_all(pl_kv_blocks *kv, const int32_t *blocks, int n,
                       const int32_t *tokens)
{
    uint64_t h = PL_KV_HASH_ROOT;
    for (int i = 0; i < n; i++)
        h = pl_kv_blocks_commit(kv, blocks[i], h, tokens + i * BS);
}

Test(kv_blocks, alloc_until_empty_and_release)
{
    pl_kv_blocks *kv = pl_kv_blocks_new(8, BS, true);
    cr_assert_not_null(kv);
    int32_t ids[8];
    for (int i = 0; i < 8; i++) {
        ids[i] = pl_kv_blocks_alloc(kv);
        cr_assert_geq(ids[i], 0);
        for (int j = 0; j < i; j++)
            cr_assert_neq(ids[i], ids[j], "block handed out twice");
    }
    cr_assert_eq(pl_kv_blocks_alloc(kv), -1);
    cr_assert_eq(pl_kv_blocks_num_available(kv), 0);
    char why[128];
    cr_assert_not(pl_kv_blocks_check_idle(kv, why, sizeof why));
    for (int i = 0; i < 8; i++)
        pl_kv_blocks_release(kv, ids[i]);
    cr_assert_eq(pl_kv_blocks_num_available(kv), 8);
    cr_assert(pl_kv_blocks_check_idle(kv, why, sizeof why), "%s", why);
    pl_kv_blocks_free(kv);
}

Test(kv_blocks, ref_counts)
{
    pl_kv_blocks *kv = pl_kv_blocks_new(4, BS, true);
    int32_t a = pl_kv_blocks_alloc(kv);
    pl_kv_blocks_ref(kv, a);
    cr_assert_eq(pl_kv_blocks_refcount(kv, a), 2);
    pl_kv_blocks_release(kv, a);
    cr_assert_eq(pl_kv_blocks_refcount(kv, a), 1);
    cr_assert_eq(pl_kv_blocks_num_available(kv), 3);
    pl_kv_blocks_release(kv, a);
    cr_assert_eq(pl_kv_blocks_num_available(kv), 4);
    cr_assert(pl_kv_blocks_check_idle(kv, NULL, 0));
    pl_kv_blocks_free(kv);
}

Test(kv_blocks, shared_prefix_hits)
{
    pl_kv_blocks *kv = pl_kv_blocks_new(16, BS, true);
    int32_t t1[12], t2[12], b1[3], b2[3];
    fill(t1, 12, 100);
    memcpy(t2, t1, sizeof t2);
    t2[9] = 7;                              /* differs inside block 2 */
    for (int i = 0; i < 3; i++)
        b1[i] = pl_kv_blocks_alloc(kv);
    commit_all(kv, b1, 3, t1);

    uint64_t last;
    int hit = pl_kv_blocks_lookup(kv, t2, 12, 3, b2, &last);
    cr_assert_eq(hit, 2, "two full blocks shared, got %d", hit);
    cr_assert_eq(b2[0], b1[0]);
    cr_assert_eq(b2[1], b1[1]);
    cr_assert_eq(pl_kv_blocks_refcount(kv, b1[0]), 2);
    uint64_t h = pl_kv_blocks_hash(PL_KV_HASH_ROOT, t1, BS);
    cr_assert_eq(last, pl_kv_blocks_hash(h, t1 + BS, BS), "chained hash");

    /* A different first block hits nothing even if later blocks match. */
    int32_t t3[12], b3[3];
    memcpy(t3, t1, sizeof t3);
    t3[0] = 1;
    cr_assert_eq(pl_kv_blocks_lookup(kv, t3, 12, 3, b3, NULL), 0);

    /* A partial last block is never matched. */
    cr_assert_eq(pl_kv_blocks_lookup(kv, t1, 11, 3, b3, NULL), 2);
    for (int i = 0; i < 2; i++)
        pl_kv_blocks_release(kv, b3[i]);

    pl_kv_blocks_count(kv, 12, hit * BS);
    pl_kv_stats st;
    pl_kv_blocks_stats(kv, &st);
    cr_assert_eq(st.queries, 12);
    cr_assert_eq(st.hits, 8);
    cr_assert_eq(st.cached, 3);
    for (int i = 0; i < 3; i++)
        pl_kv_blocks_release(kv, b1[i]);
    for (int i = 0; i < 2; i++)
        pl_kv_blocks_release(kv, b2[i]);
    pl_kv_blocks_stats(kv, &st);
    cr_assert_eq(st.cached_free, 3);
    cr_assert(pl_kv_blocks_check_idle(kv, NULL, 0));

    /* Freed cached blocks are still found, and leave the LRU on a hit. */
    cr_assert_eq(pl_kv_blocks_lookup(kv, t1, 12, 3, b2, NULL), 3);
    pl_kv_blocks_stats(kv, &st);
    cr_assert_eq(st.cached_free, 0);
    cr_assert_eq(st.used, 3);
    for (int i = 0; i < 3; i++)
        pl_kv_blocks_release(kv, b2[i]);
    pl_kv_blocks_free(kv);
}

Test(kv_blocks, duplicate_commit_keeps_one)
{
    pl_kv_blocks *kv = pl_kv_blocks_new(4, BS, true);
    int32_t t[BS];
    fill(t, BS, 5);
    int32_t a = pl_kv_blocks_alloc(kv), b = pl_kv_blocks_alloc(kv);
    uint64_t ha = pl_kv_blocks_commit(kv, a, PL_KV_HASH_ROOT, t);
    uint64_t hb = pl_kv_blocks_commit(kv, b, PL_KV_HASH_ROOT, t);
    cr_assert_eq(ha, hb);
    pl_kv_stats st;
    pl_kv_blocks_stats(kv, &st);
    cr_assert_eq(st.cached, 1);
    pl_kv_blocks_release(kv, a);
    pl_kv_blocks_release(kv, b);
    pl_kv_blocks_stats(kv, &st);
    cr_assert_eq(st.cached_free, 1);
    cr_assert_eq(st.free, 3);
    cr_assert(pl_kv_blocks_check_idle(kv, NULL, 0));
    pl_kv_blocks_free(kv);
}

Test(kv_blocks, lru_eviction_order)
{
    pl_kv_blocks *kv = pl_kv_blocks_new(3, BS, true);
    int32_t t[3][BS], b[3];
    for (int i = 0; i < 3; i++) {
        fill(t[i], BS, 10 * (i + 1));
        b[i] = pl_kv_blocks_alloc(kv);
        pl_kv_blocks_commit(kv, b[i], PL_KV_HASH_ROOT, t[i]);
    }
    /* Release in the order 1, 0, 2: block 1 is the least recent. */
    pl_kv_blocks_release(kv, b[1]);
    pl_kv_blocks_release(kv, b[0]);
    pl_kv_blocks_release(kv, b[2]);
    int32_t e = pl_kv_blocks_alloc(kv);
    cr_assert_eq(e, b[1], "LRU block evicted first");
    int32_t out[1];
    cr_assert_eq(pl_kv_blocks_lookup(kv, t[1], BS, 1, out, NULL), 0,
                 "evicted block lost its hash");
    cr_assert_eq(pl_kv_blocks_lookup(kv, t[0], BS, 1, out, NULL), 1);
    pl_kv_blocks_release(kv, out[0]);          /* 0 becomes most recent */
    cr_assert_eq(pl_kv_blocks_alloc(kv), b[2]);
    cr_assert_eq(pl_kv_blocks_alloc(kv), b[0]);
    cr_assert_eq(pl_kv_blocks_alloc(kv), -1);
    pl_kv_stats st;
    pl_kv_blocks_stats(kv, &st);
    cr_assert_eq(st.evictions, 3);
    pl_kv_blocks_free(kv);
}

Test(kv_blocks, no_caching_mode)
{
    pl_kv_blocks *kv = pl_kv_blocks_new(2, BS, false);
    int32_t t[BS], out[1];
    fill(t, BS, 1);
    int32_t a = pl_kv_blocks_alloc(kv);
    pl_kv_blocks_commit(kv, a, PL_KV_HASH_ROOT, t);
    cr_assert_eq(pl_kv_blocks_lookup(kv, t, BS, 1, out, NULL), 0);
    pl_kv_blocks_release(kv, a);
    pl_kv_stats st;
    pl_kv_blocks_stats(kv, &st);
    cr_assert_eq(st.free, 2);
    pl_kv_blocks_free(kv);
}

/* Random sequences over a small alphabet of prefixes: allocate, share,
 * commit and release; no block leaks and ref counts match our model. */
#define NSEQ 12
#define MAXB 6
Test(kv_blocks, random_property_no_leak)
{
    unsigned seed = 12345;
    pl_kv_blocks *kv = pl_kv_blocks_new(40, BS, true);
    int32_t blocks[NSEQ][MAXB], toks[NSEQ][MAXB * BS];
    int nb[NSEQ] = {0};
    int *model = calloc(40, sizeof *model);
    for (int iter = 0; iter < 20000; iter++) {
        int s = rand_r(&seed) % NSEQ;
        if (nb[s] > 0 && rand_r(&seed) % 3 == 0) {
            for (int i = 0; i < nb[s]; i++) {
                model[blocks[s][i]]--;
                pl_kv_blocks_release(kv, blocks[s][i]);
            }
            nb[s] = 0;
            continue;
        }
        if (nb[s] > 0)
            continue;
        int want = 1 + rand_r(&seed) % MAXB;
        for (int i = 0; i < want * BS; i++)
            toks[s][i] = (int32_t)(rand_r(&seed) % 2 ? i : rand_r(&seed) % 3);
        int hit = pl_kv_blocks_lookup(kv, toks[s], want * BS, want, blocks[s], NULL);
        for (int i = 0; i < hit; i++)
            model[blocks[s][i]]++;
        nb[s] = hit;
        for (int i = hit; i < want; i++) {
            int32_t id = pl_kv_blocks_alloc(kv);
            if (id < 0)
                break;
            cr_assert_eq(model[id], 0, "allocated a block in use");
            model[id]++;
            blocks[s][nb[s]++] = id;
        }
        commit_all(kv, blocks[s], nb[s], toks[s]);
        for (int i = 0; i < 40; i++)
            cr_assert_eq(pl_kv_blocks_refcount(kv, i), model[i]);
    }
    for (int s = 0; s < NSEQ; s++)
        for (int i = 0; i < nb[s]; i++)
            pl_kv_blocks_release(kv, blocks[s][i]);
    char why[128] = "";
    cr_assert(pl_kv_blocks_check_idle(kv, why, sizeof why), "%s", why);
    pl_kv_stats st;
    pl_kv_blocks_stats(kv, &st);
    cr_assert_eq(st.free + st.cached_free, 40);
    cr_assert_gt(st.evictions, 0);
    free(model);
    pl_kv_blocks_free(kv);
}
