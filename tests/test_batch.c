/* test_batch.c - the continuous-batching scheduler: token budget, chunked
 * prefill, placeholders, preemption under a tiny KV cache, priority order,
 * no starvation, pause and abort, shared-prefix deferral. The "device" here samples a token that
 * depends only on the sequence id and position. */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "schedulers/batch.h"
#include "schedulers/dispatch.h"

#define BS 4

typedef struct harness {
    pl_kv_blocks *kv;
    pl_batch *b;
    pl_batch_config cfg;
    pl_batch_step st[2];
    int n_preempted;
} harness;

static void h_init_cfg(harness *h, int num_blocks, pl_batch_config cfg)
{
    h->cfg = cfg;
    h->n_preempted = 0;
    h->kv = pl_kv_blocks_new(num_blocks, BS, true);
    h->b = pl_batch_new(&h->cfg, h->kv);
    cr_assert_not_null(h->b);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pl_batch_step_init(&h->st[i], &h->cfg, BS), 0);
}

static void h_init(harness *h, int num_blocks, int max_seqs, int budget,
                   int max_len)
{
    h_init_cfg(h, num_blocks, (pl_batch_config){max_seqs, budget, max_len});
}

static void h_free(harness *h)
{
    for (int i = 0; i < 2; i++)
        pl_batch_step_free(&h->st[i]);
    pl_batch_free(h->b);
    pl_kv_blocks_free(h->kv);
}

static int32_t sample_for(uint64_t id, int pos)
{
    return (int32_t)((id * 31 + (uint64_t)pos * 7) % 97) + 1;
}

static pl_batch_seq *add(harness *h, uint64_t id, int n_prompt, int max_new,
                         int prio)
{
    int32_t *p = malloc((size_t)n_prompt * sizeof *p);
    for (int i = 0; i < n_prompt; i++)
        p[i] = (int32_t)(id * 1000 + (uint64_t)i % 50);
    pl_batch_seq *s = pl_batch_add(h->b, id, p, n_prompt, max_new, prio, NULL, NULL);
    free(p);
    cr_assert_not_null(s);
    return s;
}

/* Process a step's outputs: append the sampled ids, finish sequences that
 * reached max_new (recorded in done[]), retire. */
static void h_process(harness *h, pl_batch_step *st, int *done, int n_done_cap)
{
    pl_step_input *in = &st->in;
    for (int k = 0; k < in->n_seqs; k++) {
        pl_batch_seq *s = st->seqs[k];
        if (!in->seq_sample[k])
            continue;
        int pos = in->seq_ctx_len[k];
        if (!pl_batch_append(h->b, s, sample_for(s->id, pos)))
            continue;
        if (pl_batch_seq_generated(s) >= s->max_new) {
            cr_assert_lt((int)s->id, n_done_cap);
            for (int j = 0; j < s->max_new; j++)
                cr_assert_eq(s->tokens[s->n_prompt + j],
                             sample_for(s->id, s->n_prompt + j),
                             "seq %d token %d", (int)s->id, j);
            done[s->id]++;
            pl_batch_finish(h->b, s);
        }
    }
    pl_batch_step_retire(h->b, st);
}

/* Run to completion, synchronously or with two steps in flight. */
static int h_run(harness *h, bool async, int *done, int n_done_cap)
{
    int steps = 0, inflight = 0;
    pl_batch_step *q[2] = {NULL, NULL};
    while (pl_batch_has_seqs(h->b) || inflight) {
        cr_assert_lt(steps, 10000, "no progress");
        if (inflight < (async ? 2 : 1) && pl_batch_has_seqs(h->b)) {
            pl_batch_step *st = &h->st[steps % 2];
            steps++;
            int rows = pl_batch_schedule(h->b, st);
            h->n_preempted += st->n_preempted;
            if (rows > 0) {
                cr_assert_leq(st->in.n_rows, h->cfg.max_num_batched_tokens);
                cr_assert_leq(st->in.n_seqs, h->cfg.max_num_seqs);
                q[inflight++] = st;
                continue;
            }
            pl_batch_step_retire(h->b, st);
        }
        cr_assert_gt(inflight, 0, "nothing scheduled and nothing in flight");
        h_process(h, q[0], done, n_done_cap);
        q[0] = q[1];
        inflight--;
    }
    return steps;
}

static void assert_idle(harness *h)
{
    char why[128] = "";
    cr_assert(pl_kv_blocks_check_idle(h->kv, why, sizeof why), "%s", why);
}

Test(batch, chunked_prefill_respects_budget)
{
    harness h;
    h_init(&h, 64, 4, 16, 256);
    add(&h, 1, 100, 3, 0);
    int expect[] = {16, 16, 16, 16, 16, 16, 4};
    for (int i = 0; i < 7; i++) {
        pl_batch_step *st = &h.st[0];
        cr_assert_eq(pl_batch_schedule(h.b, st), expect[i]);
        cr_assert_eq(st->in.positions[0], 16 * i, "contiguous chunks");
        cr_assert_eq(st->in.seq_sample[0], i == 6, "sample only at the end");
        cr_assert_eq(st->in.seq_ctx_len[0], 16 * i + expect[i]);
        int done[2] = {0};
        h_process(&h, st, done, 2);
    }
    cr_assert_eq(h.b ? pl_batch_num_running(h.b) : 0, 1);
    int done[2] = {0};
    h_run(&h, false, done, 2);
    cr_assert_eq(done[1], 1);
    assert_idle(&h);
    h_free(&h);
}

Test(batch, decodes_first_then_prefill_within_budget)
{
    harness h;
    h_init(&h, 256, 8, 8, 256);
    for (int i = 1; i <= 4; i++)
        add(&h, (uint64_t)i, 2, 20, 0);
    pl_batch_step *st = &h.st[0];
    cr_assert_eq(pl_batch_schedule(h.b, st), 8);      /* 4 prompts of 2 */
    int done[16] = {0};
    h_process(&h, st, done, 16);
    add(&h, 5, 40, 5, 0);                              /* a long prompt */
    cr_assert_eq(pl_batch_schedule(h.b, st), 8);
    for (int k = 0; k < 4; k++)
        cr_assert_eq(st->in.seq_n_rows[k], 1, "decode rows come first");
    cr_assert_eq(st->seqs[4]->id, 5);
    cr_assert_eq(st->in.seq_n_rows[4], 4, "prefill gets what is left");
    cr_assert_eq(st->n_decode_rows, 4);
    cr_assert_eq(st->n_prefill_rows, 4);
    h_process(&h, st, done, 16);
    h_run(&h, false, done, 16);
    for (int i = 1; i <= 5; i++)
        cr_assert_eq(done[i], 1);
    assert_idle(&h);
    h_free(&h);
}

Test(batch, async_placeholders)
{
    harness h;
    h_init(&h, 64, 4, 64, 256);
    pl_batch_seq *s = add(&h, 1, 5, 4, 0);
    cr_assert_eq(pl_batch_schedule(h.b, &h.st[0]), 5);
    cr_assert_eq(s->num_placeholders, 1);
    /* Step 2 before step 1's id is known: one placeholder row. */
    cr_assert_eq(pl_batch_schedule(h.b, &h.st[1]), 1);
    cr_assert_eq(h.st[1].in.tokens[0], PL_TOKEN_PLACEHOLDER);
    cr_assert_eq(h.st[1].in.positions[0], 5);
    cr_assert_eq(h.st[1].in.seq_slot[0], h.st[0].in.seq_slot[0]);
    cr_assert_eq(s->num_placeholders, 2);
    /* With both in flight nothing more runs. */
    int done[2] = {0};
    h_process(&h, &h.st[0], done, 2);
    cr_assert_eq(s->n_tokens, 6);
    cr_assert_eq(s->num_placeholders, 1);
    cr_assert_eq(pl_batch_schedule(h.b, &h.st[0]), 1);
    cr_assert_eq(h.st[0].in.positions[0], 6);
    h_process(&h, &h.st[1], done, 2);
    h_process(&h, &h.st[0], done, 2);
    cr_assert_eq(pl_batch_seq_generated(s), 3);
    /* The 4th token is the last: no 5th is scheduled after it. */
    cr_assert_eq(pl_batch_schedule(h.b, &h.st[0]), 1);
    cr_assert_eq(pl_batch_schedule(h.b, &h.st[1]), 0);
    pl_batch_step_retire(h.b, &h.st[1]);
    h_process(&h, &h.st[0], done, 2);
    cr_assert_eq(done[1], 1);
    assert_idle(&h);
    h_free(&h);
}

Test(batch, finished_seq_discards_extra_token)
{
    harness h;
    h_init(&h, 64, 4, 64, 256);
    pl_batch_seq *s = add(&h, 1, 3, 10, 0);
    pl_batch_schedule(h.b, &h.st[0]);
    pl_batch_schedule(h.b, &h.st[1]);            /* extra token in flight */
    cr_assert(pl_batch_append(h.b, s, 42));
    pl_batch_finish(h.b, s);                     /* e.g. EOS */
    pl_batch_step_retire(h.b, &h.st[0]);
    assert_idle(&h);                             /* blocks freed at once */
    cr_assert_not(pl_batch_append(h.b, s, 43), "extra token discarded");
    pl_batch_step_retire(h.b, &h.st[1]);         /* frees s */
    cr_assert_not(pl_batch_has_seqs(h.b));
    h_free(&h);
}

static void preemption_run(bool async)
{
    harness h;
    /* 12 blocks of 4 = 48 positions; 6 sequences of up to 8+24 = 32. */
    h_init(&h, 12, 6, 32, 64);
    for (int i = 1; i <= 6; i++)
        add(&h, (uint64_t)i, 8, 24, i % 2);
    int done[8] = {0};
    h_run(&h, async, done, 8);
    cr_assert_gt(h.n_preempted, 0, "the tiny cache forced preemption");
    for (int i = 1; i <= 6; i++)
        cr_assert_eq(done[i], 1, "seq %d finished once", i);
    pl_kv_stats st;
    pl_kv_blocks_stats(h.kv, &st);
    cr_assert_gt(st.hits, 0, "recompute reuses committed blocks");
    assert_idle(&h);
    h_free(&h);
}

Test(batch, preemption_tiny_cache_sync)
{
    preemption_run(false);
}

Test(batch, preemption_tiny_cache_async)
{
    preemption_run(true);
}

Test(batch, preemption_picks_lowest_priority_youngest)
{
    harness h;
    h_init(&h, 6, 4, 64, 64);
    pl_batch_seq *a = add(&h, 1, 8, 10, 0);   /* 2 blocks each */
    pl_batch_seq *b2 = add(&h, 2, 8, 10, 1);
    pl_batch_seq *c = add(&h, 3, 8, 10, 1);
    int done[4] = {0};
    pl_batch_schedule(h.b, &h.st[0]);
    h_process(&h, &h.st[0], done, 4);
    cr_assert_eq(pl_batch_num_running(h.b), 3);
    /* Next decode needs a 3rd block for each; none free: c (prio 1,
     * youngest) goes first. */
    pl_batch_schedule(h.b, &h.st[0]);
    cr_assert_eq(c->state, PL_SEQ_WAITING);
    cr_assert_eq(c->n_preempted, 1);
    cr_assert_eq(a->state, PL_SEQ_RUNNING);
    cr_assert_eq(b2->state, PL_SEQ_RUNNING);
    cr_assert_eq(c->n_blocks, 0);
    h_process(&h, &h.st[0], done, 4);
    h_run(&h, false, done, 4);
    for (int i = 1; i <= 3; i++)
        cr_assert_eq(done[i], 1);
    assert_idle(&h);
    h_free(&h);
}

Test(batch, priority_order_of_admission)
{
    harness h;
    h_init(&h, 64, 1, 64, 64);
    int prio[5] = {3, 1, 2, 1, 0};
    for (int i = 0; i < 5; i++)
        add(&h, (uint64_t)(i + 1), 4, 1, prio[i]);
    uint64_t order[5];
    int done[8] = {0};
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(pl_batch_schedule(h.b, &h.st[0]), 4);
        order[i] = h.st[0].seqs[0]->id;
        h_process(&h, &h.st[0], done, 8);
    }
    uint64_t expect[5] = {5, 2, 4, 3, 1};
    for (int i = 0; i < 5; i++)
        cr_assert_eq(order[i], expect[i], "position %d", i);
    assert_idle(&h);
    h_free(&h);
}

Test(batch, waiting_head_not_overtaken)
{
    harness h;
    h_init(&h, 8, 4, 64, 64);
    add(&h, 1, 16, 14, 0);                 /* holds 4 blocks, then 5 */
    int done[4] = {0};
    pl_batch_schedule(h.b, &h.st[0]);
    h_process(&h, &h.st[0], done, 4);
    pl_batch_seq *big = add(&h, 2, 20, 2, 0);   /* needs 5 blocks */
    pl_batch_seq *small = add(&h, 3, 2, 2, 0);  /* would fit in 1 */
    pl_batch_schedule(h.b, &h.st[0]);
    cr_assert_eq(big->state, PL_SEQ_WAITING);
    cr_assert_eq(small->state, PL_SEQ_WAITING, "younger did not overtake");
    h_process(&h, &h.st[0], done, 4);
    h_run(&h, false, done, 4);
    for (int i = 1; i <= 3; i++)
        cr_assert_eq(done[i], 1);
    assert_idle(&h);
    h_free(&h);
}

Test(batch, preempted_goes_back_before_younger)
{
    harness h;
    h_init(&h, 5, 4, 64, 64);
    pl_batch_seq *a = add(&h, 1, 8, 12, 0);
    pl_batch_seq *b2 = add(&h, 2, 7, 12, 0);
    int done[4] = {0};
    pl_batch_schedule(h.b, &h.st[0]);
    h_process(&h, &h.st[0], done, 4);
    pl_batch_seq *c = add(&h, 3, 3, 2, 0);
    /* a needs a 3rd block at position 8: b2 (younger) is preempted. */
    int guard = 0;
    while (b2->n_preempted == 0 && guard++ < 20) {
        pl_batch_schedule(h.b, &h.st[0]);
        h_process(&h, &h.st[0], done, 4);
    }
    cr_assert_eq(b2->n_preempted, 1);
    cr_assert_eq(a->state, PL_SEQ_RUNNING);
    /* In the waiting queue b2 (arrival 2) is ahead of c (arrival 3). */
    cr_assert_eq(b2->state, PL_SEQ_WAITING);
    guard = 0;
    while (b2->state != PL_SEQ_RUNNING && guard++ < 40) {
        cr_assert_neq(c->state, PL_SEQ_RUNNING, "c overtook preempted b2");
        pl_batch_schedule(h.b, &h.st[0]);
        h_process(&h, &h.st[0], done, 4);
    }
    h_run(&h, false, done, 4);
    for (int i = 1; i <= 3; i++)
        cr_assert_eq(done[i], 1);
    assert_idle(&h);
    h_free(&h);
}

Test(batch, paused_keeps_blocks_and_abort_frees)
{
    harness h;
    h_init(&h, 32, 4, 64, 64);
    pl_batch_seq *a = add(&h, 1, 6, 20, 0);
    pl_batch_seq *b2 = add(&h, 2, 6, 20, 0);
    int done[4] = {0};
    pl_batch_schedule(h.b, &h.st[0]);
    h_process(&h, &h.st[0], done, 4);
    pl_batch_set_paused(h.b, a, true);
    int held = a->n_blocks;
    cr_assert_gt(held, 0);
    for (int i = 0; i < 3; i++) {
        pl_batch_schedule(h.b, &h.st[0]);
        cr_assert_eq(h.st[0].in.n_seqs, 1);
        cr_assert_eq(h.st[0].seqs[0], b2, "paused sequence skipped");
        h_process(&h, &h.st[0], done, 4);
    }
    cr_assert_eq(a->n_blocks, held);
    cr_assert_eq(pl_batch_seq_generated(a), 1);
    pl_batch_set_paused(h.b, a, false);
    pl_batch_schedule(h.b, &h.st[0]);
    cr_assert_eq(h.st[0].in.n_seqs, 2);
    /* Abort a while its step is in flight: its blocks are free at once. */
    pl_kv_stats before, after;
    pl_kv_blocks_stats(h.kv, &before);
    pl_batch_finish(h.b, a);
    pl_kv_blocks_stats(h.kv, &after);
    cr_assert_lt(after.used, before.used);
    cr_assert_null(pl_batch_find(h.b, 1));
    h_process(&h, &h.st[0], done, 4);
    h_run(&h, false, done, 4);
    cr_assert_eq(done[1], 0);
    cr_assert_eq(done[2], 1);
    assert_idle(&h);
    h_free(&h);
}

Test(batch, prefix_reuse_on_admission)
{
    harness h;
    h_init(&h, 64, 4, 64, 128);
    add(&h, 1, 20, 2, 0);
    int done[4] = {0};
    h_run(&h, false, done, 4);
    /* Same prompt (ids depend on id, so build it by hand). */
    int32_t p[20];
    for (int i = 0; i < 20; i++)
        p[i] = (int32_t)(1000 + i % 50);
    pl_batch_seq *s = pl_batch_add(h.b, 2, p, 20, 2, 0, NULL, NULL);
    pl_batch_schedule(h.b, &h.st[0]);
    cr_assert_eq(s->n_cached, 16, "4 full blocks of 20 tokens reused");
    cr_assert_eq(h.st[0].in.n_rows, 4);
    cr_assert_eq(h.st[0].in.positions[0], 16);
    pl_batch_step_retire(h.b, &h.st[0]);
    pl_batch_finish(h.b, s);
    assert_idle(&h);
    h_free(&h);
}

/* A sequence whose reply no later one reuses (reply_private) sends the
 * blocks from its last prompt position on to the front of eviction when it
 * finishes: they go before any other cached block, its prompt's blocks
 * before them stay. */
Test(batch, private_reply_blocks_evicted_first)
{
    harness h;
    h_init(&h, 16, 4, 64, 64);
    pl_batch_seq *a = add(&h, 1, 8, 6, 0);
    a->reply_private = true;
    add(&h, 2, 8, 6, 0);
    int done[4] = {0};
    h_run(&h, false, done, 4);
    pl_kv_stats st;
    pl_kv_blocks_stats(h.kv, &st);
    cr_assert_eq(st.done_released, 2, "a's blocks 1 and 2 (block 3 is partial)");
    int n_free = pl_kv_blocks_num_available(h.kv) - st.cached_free;
    int32_t got[16];
    for (int i = 0; i < n_free + 2; i++)
        got[i] = pl_kv_blocks_alloc(h.kv);
    int32_t pa[8], pb[8], out[2];
    for (int i = 0; i < 8; i++) {
        pa[i] = 1000 + i;
        pb[i] = 2000 + i;
    }
    int hit = pl_kv_blocks_lookup(h.kv, pa, 8, 2, out, NULL);
    cr_assert_eq(hit, 1, "a's first prompt block stays, its second held the prompt's end");
    for (int i = 0; i < hit; i++)
        pl_kv_blocks_release(h.kv, out[i]);
    hit = pl_kv_blocks_lookup(h.kv, pb, 8, 2, out, NULL);
    cr_assert_eq(hit, 2, "b's blocks stay");
    for (int i = 0; i < hit; i++)
        pl_kv_blocks_release(h.kv, out[i]);
    for (int i = 0; i < n_free + 2; i++)
        pl_kv_blocks_release(h.kv, got[i]);
    assert_idle(&h);
    h_free(&h);
}

/* A prompt of n ids: the first `shared` from a common run (500 + i), the
 * rest the sequence's own. Shares `with_prev` more ids with `prev`. */
static pl_batch_seq *add_shared(harness *h, uint64_t id, int n, int shared,
                                const pl_batch_seq *prev, int with_prev, int prio)
{
    int32_t p[64];
    cr_assert_leq(n, 64);
    for (int i = 0; i < n; i++)
        p[i] = i < shared ? 500 + i : (int32_t)(id * 1000) + i;
    for (int i = shared; prev && i < shared + with_prev; i++)
        p[i] = prev->tokens[i];
    pl_batch_seq *s = pl_batch_add(h->b, id, p, n, 2, prio, NULL, NULL);
    cr_assert_not_null(s);
    return s;
}

static bool in_step(const pl_batch_step *st, const pl_batch_seq *s)
{
    for (int k = 0; k < st->in.n_seqs; k++)
        if (st->seqs[k] == s)
            return true;
    return false;
}

static void step_sync(harness *h, int *done)
{
    pl_batch_schedule(h->b, &h->st[0]);
    h_process(h, &h->st[0], done, 8);
}

/* Three prompts sharing 18 ids (4 full blocks of 4 and 2 ids of the
 * fifth) submitted together: with deferral the 2nd and 3rd wait one step
 * for the 1st's fifth block and reuse its first 2 ids (18 cached); without
 * it all three start at once and compute those ids three times. */
static void three_together(int defer_steps, int want_cached)
{
    harness h;
    h_init_cfg(&h, 64, (pl_batch_config){4, 64, 128, true, defer_steps});
    pl_batch_seq *s[3];
    for (int i = 0; i < 3; i++)
        s[i] = add_shared(&h, (uint64_t)i + 1, 24, 18, NULL, 0, 0);
    int done[8] = {0};
    pl_batch_schedule(h.b, &h.st[0]);
    cr_assert_eq(h.st[0].in.n_seqs, defer_steps ? 1 : 3);
    cr_assert_eq(h.st[0].n_deferred, defer_steps ? 2 : 0);
    cr_assert_eq(s[0]->n_cached, 0);
    h_process(&h, &h.st[0], done, 8);
    pl_batch_schedule(h.b, &h.st[0]);   /* read before they finish */
    for (int i = 1; i < 3; i++)
        cr_assert_eq(s[i]->n_cached, want_cached, "seq %d: %d cached", i + 1, s[i]->n_cached);
    h_process(&h, &h.st[0], done, 8);
    h_run(&h, false, done, 8);
    for (int i = 1; i <= 3; i++)
        cr_assert_eq(done[i], 1);
    assert_idle(&h);
    h_free(&h);
}

Test(batch, shared_prefix_deferral_reuses_same_step_blocks)
{
    three_together(2, 18);
    three_together(0, 16);
}

/* The deferral is bounded: s (priority 1) shares 18 ids with a and 22
 * with d (priority 0, queued after step 1, so admitted before s in step 2).
 * With defer_steps 1 s waits for a only and starts in step 2 beside d (20
 * cached: d's fifth block, committed in that step, is read at once; ids
 * 20 and 21 computed again); with 2 it also waits for d (22 cached). */
static void bounded(int defer_steps, int want_cached, uint64_t want_step)
{
    harness h;
    h_init_cfg(&h, 64, (pl_batch_config){4, 64, 128, true, defer_steps});
    add_shared(&h, 1, 24, 18, NULL, 0, 0);
    pl_batch_seq *s = add_shared(&h, 2, 24, 18, NULL, 0, 1);
    int done[8] = {0};
    step_sync(&h, done);
    cr_assert_eq(s->n_deferred, 1);
    add_shared(&h, 3, 28, 18, s, 4, 0);
    uint64_t started = 0;
    for (uint64_t no = 2; no <= 4 && !started; no++) {
        pl_batch_schedule(h.b, &h.st[0]);
        if (in_step(&h.st[0], s))
            started = no;
        h_process(&h, &h.st[0], done, 8);
    }
    cr_assert_eq(started, want_step, "s started in step %d", (int)started);
    cr_assert_eq(s->n_cached, want_cached, "defer %d: %d cached", defer_steps, s->n_cached);
    cr_assert_eq(s->n_deferred, 0, "reset at admission");
    h_run(&h, false, done, 8);
    assert_idle(&h);
    h_free(&h);
}

Test(batch, shared_prefix_deferral_is_bounded)
{
    bounded(1, 20, 2);
    bounded(2, 22, 3);
}

/* What the queued sequences may still take (the engine's KV view for
 * admission): a waiting sequence its whole prompt + reply budget, a
 * running one what it lacks of it, one that outgrew the budget a token
 * past what it generated. BS 4: prompt 10 + budget 6 = 4 blocks. */
Test(batch, kv_account_counts_what_sequences_may_still_take)
{
    harness h;
    h_init(&h, 64, 4, 64, 256);
    add(&h, 1, 10, 100, 0);
    pl_batch_kv_acct a;
    pl_batch_kv_account(h.b, 6, &a);
    cr_assert_eq(a.reserved, 4, "waiting: (10 + min(100, 6)) / 4");
    cr_assert_eq(a.running, 0);
    pl_batch_kv_account(h.b, 0, &a);
    cr_assert_eq(a.reserved, (10 + 100 + 3) / 4, "no estimate: max_tokens");
    add(&h, 2, 10, 2, 0);
    pl_batch_kv_account(h.b, 6, &a);
    cr_assert_eq(a.reserved, 4 + 3, "a small max_tokens is its budget: (10 + 2) / 4");
    pl_batch_step *st = &h.st[0];
    cr_assert_eq(pl_batch_schedule(h.b, st), 20);
    int done[3] = {0};
    h_process(&h, st, done, 3);
    pl_batch_kv_account(h.b, 6, &a);
    cr_assert_eq(a.running, 2);
    cr_assert_eq(a.generated, 2);
    cr_assert_eq(a.reserved, 1 + 0, "running: 3 blocks held of 4, and 3 of 3");
    for (int i = 0; i < 8; i++) {         /* seq 1 outgrows its 6-token budget */
        st = &h.st[i % 2];
        pl_batch_schedule(h.b, st);
        h_process(&h, st, done, 3);
    }
    pl_batch_kv_account(h.b, 6, &a);
    cr_assert_eq(a.running, 1);
    cr_assert_eq(a.generated, 9);
    cr_assert_eq(a.reserved, 0, "19 tokens held in 5 blocks; one more fits them (%d)",
                 a.reserved);
    st = &h.st[0];
    pl_batch_schedule(h.b, st);
    h_process(&h, st, done, 3);
    pl_batch_kv_account(h.b, 6, &a);
    cr_assert_eq(a.reserved, 1, "20 tokens: the next one needs a sixth block");
    h_free(&h);
}

/* A waiting sequence counts only what it lacks beyond the cached prefix
 * it will share without taking free blocks (issue 41): a running
 * sequence's blocks, or the cached-free ones kept for a conversation
 * needed now; not cached-free blocks nobody keeps (taking those takes
 * from the free ones). BS 4: 24-token prompts sharing 20 ids (5 blocks),
 * max_tokens 2: (24 + 2) / 4 = 7 blocks each. */
Test(batch, kv_account_subtracts_the_shared_cached_prefix)
{
    harness h;
    h_init(&h, 64, 4, 64, 128);
    pl_batch_kv_acct a;
    pl_batch_seq *s1 = add_shared(&h, 1, 24, 20, NULL, 0, 0);
    s1->conv_key = 7;
    pl_kv_blocks_hint(h.kv, 7, 0);      /* its conversation runs */
    int done[4] = {0};
    step_sync(&h, done);                /* s1 prefilled: 6 blocks, 5 full */
    add_shared(&h, 2, 24, 20, NULL, 0, 0)->conv_key = 7;   /* another agent's */
    pl_batch_kv_account(h.b, 0, &a);
    cr_assert_eq(a.running, 1);
    cr_assert_eq(a.reserved, 1 + 2, "s1 lacks 1; s2 7 less the 5 it shares with s1 (%d)",
                 a.reserved);
    h_run(&h, false, done, 4);          /* both finish: cached-free, tagged 7 */
    add_shared(&h, 3, 24, 20, NULL, 0, 0);
    pl_batch_kv_account(h.b, 0, &a);
    cr_assert_eq(a.reserved, 2, "kept for conversation 7: 7 - 5 (%d)", a.reserved);
    pl_kv_blocks_hint(h.kv, 7, 3);      /* needed later: not kept */
    pl_batch_kv_account(h.b, 0, &a);
    cr_assert_eq(a.reserved, 7, "evictable, not kept: the whole need (%d)", a.reserved);
    h_run(&h, false, done, 4);
    pl_kv_blocks_hint(h.kv, 7, PL_KV_NEED_DONE);
    assert_idle(&h);
    h_free(&h);
}

/* A burst of long prompts under chunked prefill, with a cache that holds
 * two of them: each is admitted when its whole prompt fits beside what
 * the running sequences' known ids still need, not on its first chunk, so
 * nothing is preempted and no partial prefill is thrown away (every
 * prompt row is computed once), in no more steps. */
Test(batch, chunked_burst_admitted_as_the_cache_holds_it)
{
    harness h;
    h_init(&h, 10, 8, 12, 64);    /* 16-token prompts + 3: 5 blocks each, 2 fit */
    for (int i = 1; i <= 6; i++)
        add(&h, (uint64_t)i, 16, 3, 0);
    int done[8] = {0}, rows = 0, steps = 0, peak = 0;
    while (pl_batch_has_seqs(h.b)) {
        cr_assert_lt(steps++, 1000, "no progress");
        pl_batch_schedule(h.b, &h.st[0]);
        h.n_preempted += h.st[0].n_preempted;
        rows += h.st[0].in.n_rows;
        if (pl_batch_num_running(h.b) > peak)
            peak = pl_batch_num_running(h.b);
        h_process(&h, &h.st[0], done, 8);
    }
    for (int i = 1; i <= 6; i++)
        cr_assert_eq(done[i], 1);
    cr_assert_eq(h.n_preempted, 0, "no preemption");
    cr_assert_eq(rows, 6 * (16 + 2), "each row computed once (16 prompt rows and 2 decode "
                 "rows a sequence; its last token is not fed): %d", rows);
    cr_assert_eq(peak, 2, "two at a time: the cache holds two");
    assert_idle(&h);
    h_free(&h);
}
