/* test_kv_ckpt.c - the recurrent-state checkpoint bookkeeping
 * (schedulers/kv_ckpt.h) and the batch scheduler over it (a hybrid's
 * prefix cache, batch.h's pl_batch_config.ckpt):
 *  - a checkpoint serves lookups from the step after its save on; one per
 *    prefix hash; eviction in next-need order (a finished conversation's
 *    first, then the furthest need, then least recently used);
 *  - saves at every ckpt_every blocks a step's prompt rows reach, in the
 *    step that computes them (mid-chunk positions included);
 *  - a prefix hit restores at the longest checkpointed prefix (the load in
 *    the step's input), falls back to an earlier checkpoint when the hit's
 *    end has none, and to position 0 when none is left (evicted);
 *  - every prompt checkpoints at its last block boundary; hinted
 *    conversations also where two of its queued prompts part. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "schedulers/batch.h"
#include "schedulers/kv_ckpt.h"

#define BS 4

Test(kv_ckpt, find_after_the_saving_step)
{
    pl_kv_ckpt *ck = pl_kv_ckpt_new(2, 100);
    cr_assert_not_null(ck);
    int a = pl_kv_ckpt_take(ck, 0xa, 7, 5);
    cr_assert_geq(a, 0);
    cr_assert_eq(pl_kv_ckpt_find(ck, 0xa, 5), -1, "served in the step that writes it");
    cr_assert_eq(pl_kv_ckpt_find(ck, 0xa, 6), a);
    cr_assert(pl_kv_ckpt_has(ck, 0xa));
    cr_assert_eq(pl_kv_ckpt_take(ck, 0xa, 7, 6), -1, "two for one prefix");
    cr_assert_eq(pl_kv_ckpt_find(ck, 0xb, 9), -1);
    pl_kv_ckpt_drop(ck, a);
    cr_assert_eq(pl_kv_ckpt_find(ck, 0xa, 9), -1);
    pl_kv_ckpt_stats st;
    pl_kv_ckpt_stats_get(ck, &st);
    cr_assert_eq(st.slots, 2);
    cr_assert_eq(st.used, 0);
    cr_assert_eq(st.saves, 0);
    cr_assert_eq(st.slot_bytes, 100);
    cr_assert_null(pl_kv_ckpt_new(0, 100));
    pl_kv_ckpt_free(ck);
}

/* Periodic (spare) checkpoints never evict the kept ones (a prompt's end,
 * a hinted share point) of a conversation still going; the kept ones
 * evict spare ones first. */
Test(kv_ckpt, spare_checkpoints_keep_out_of_the_kept_ones)
{
    pl_kv_ckpt *ck = pl_kv_ckpt_new(2, 8);
    int a = pl_kv_ckpt_take(ck, 1, 11, 1);
    int b = pl_kv_ckpt_take_spare(ck, 2, 11, 1);
    cr_assert(a >= 0 && b >= 0 && a != b, "free slots go to either");
    cr_assert_eq(pl_kv_ckpt_take_spare(ck, 3, 11, 2), b, "a spare one evicts a spare one");
    cr_assert_eq(pl_kv_ckpt_take(ck, 4, 11, 3), b, "a kept one evicts the spare one first");
    cr_assert_eq(pl_kv_ckpt_take_spare(ck, 5, 11, 4), -1, "no spare slot: nothing taken");
    cr_assert_eq(pl_kv_ckpt_find(ck, 1, 9), a);
    cr_assert_eq(pl_kv_ckpt_find(ck, 4, 9), b);
    pl_kv_ckpt_hint(ck, 11, PL_KV_NEED_DONE);
    cr_assert_geq(pl_kv_ckpt_take_spare(ck, 5, 12, 5), 0, "a finished conversation's go");
    pl_kv_ckpt_stats st;
    pl_kv_ckpt_stats_get(ck, &st);
    cr_assert_eq(st.saves, 5);
    cr_assert_eq(st.evictions, 3);
    pl_kv_ckpt_free(ck);
}

Test(kv_ckpt, eviction_by_next_need)
{
    pl_kv_ckpt *ck = pl_kv_ckpt_new(3, 8);
    int a = pl_kv_ckpt_take(ck, 1, 11, 1), b = pl_kv_ckpt_take(ck, 2, 12, 1);
    int c = pl_kv_ckpt_take(ck, 3, 13, 1);
    pl_kv_ckpt_hint(ck, 11, 0);
    pl_kv_ckpt_hint(ck, 12, 5);
    pl_kv_ckpt_hint(ck, 13, 2);
    cr_assert_eq(pl_kv_ckpt_take(ck, 4, 14, 2), b, "the furthest need goes first");
    cr_assert_eq(pl_kv_ckpt_find(ck, 2, 9), -1);
    pl_kv_ckpt_hint(ck, 11, PL_KV_NEED_DONE);
    cr_assert_eq(pl_kv_ckpt_take(ck, 5, 15, 2), a, "a finished conversation's first");
    /* Equal needs (c: 2; the new ones hinted 2 too): the least recently
     * used, c, unless a hit used it since. */
    pl_kv_ckpt_hint(ck, 14, 2);
    pl_kv_ckpt_hint(ck, 15, 2);
    pl_kv_ckpt_use(ck, c);
    int v = pl_kv_ckpt_take(ck, 6, 16, 3);
    cr_assert_neq(v, c, "the one just used was evicted");
    pl_kv_ckpt_stats st;
    pl_kv_ckpt_stats_get(ck, &st);
    cr_assert_eq(st.used, 3);
    cr_assert_eq(st.evictions, 3);
    cr_assert_eq(st.restores, 1);
    pl_kv_ckpt_free(ck);
}

/* ---- the scheduler over checkpoints ---- */

typedef struct harness {
    pl_kv_blocks *kv;
    pl_kv_ckpt *ck;
    pl_batch *b;
    pl_batch_config cfg;
    pl_batch_step st;
} harness;

static void h_init(harness *h, int n_ckpts, int every)
{
    h->kv = pl_kv_blocks_new(64, BS, true);
    h->ck = pl_kv_ckpt_new(n_ckpts, 64);
    h->cfg = (pl_batch_config){.max_num_seqs = 4, .max_num_batched_tokens = 64,
                               .max_model_len = 128, .partial_prefix = true,
                               .ckpt = h->ck, .ckpt_every = every};
    h->b = pl_batch_new(&h->cfg, h->kv);
    cr_assert_not_null(h->b);
    cr_assert_eq(pl_batch_step_init(&h->st, &h->cfg, BS), 0);
}

static void h_free(harness *h)
{
    pl_batch_step_free(&h->st);
    pl_batch_free(h->b);
    pl_kv_ckpt_free(h->ck);
    pl_kv_blocks_free(h->kv);
}

/* Schedule one step, then retire it (sampled ids appended); its
 * sequences stay counted in g_n_seqs. */
static int g_n_seqs;

static pl_step_input *h_step(harness *h)
{
    cr_assert_gt(pl_batch_schedule(h->b, &h->st), 0);
    pl_step_input *in = &h->st.in;
    g_n_seqs = in->n_seqs;
    for (int k = 0; k < in->n_seqs; k++)
        if (in->seq_sample[k])
            pl_batch_append(h->b, h->st.seqs[k], 1);
    pl_batch_step_retire(h->b, &h->st);
    return in;
}

static pl_batch_seq *h_add(harness *h, uint64_t id, const int32_t *p, int n, uint64_t key)
{
    pl_batch_seq *s = pl_batch_add(h->b, id, p, n, 4, 0, NULL, NULL);
    cr_assert_not_null(s);
    s->conv_key = key;
    return s;
}

static void prompt(int32_t *p, int n, int from, int salt)
{
    for (int i = 0; i < n; i++)
        p[i] = 10 + i + (i >= from ? salt : 0);
}

Test(kv_ckpt, batch_saves_restores_and_falls_back)
{
    harness h;
    h_init(&h, 8, 2);              /* a checkpoint every 2 blocks: 8, 16, ... */
    int32_t p[40], q[40];
    prompt(p, 22, 0, 0);
    pl_batch_seq *a = h_add(&h, 1, p, 22, 0);
    pl_step_input *in = h_step(&h);
    cr_assert_eq(in->n_ck_load, 0);
    cr_assert_eq(in->n_ck_save, 3, "saves at 8 and 16, and 20 (the prompt's end), in the "
                 "22-row step");
    cr_assert_eq(in->ck_save_pos[0], 8);
    cr_assert_eq(in->ck_save_pos[1], 16);
    cr_assert_eq(in->ck_save_pos[2], 20);
    cr_assert_eq(in->ck_save_slot[0], a->slot);
    int ck20 = in->ck_save_id[2];
    pl_batch_finish(h.b, a);
    /* The same prompt: the hit (5 full blocks, 20 positions) resumes at 20,
     * the longest checkpointed prefix: its end's. */
    pl_batch_seq *b = h_add(&h, 2, p, 22, 0);
    in = h_step(&h);
    cr_assert_eq(in->n_ck_load, 1);
    cr_assert_eq(in->ck_load_pos[0], 20);
    cr_assert_eq(in->ck_load_id[0], ck20);
    cr_assert_eq(in->ck_load_slot[0], b->slot);
    cr_assert_eq(in->positions[0], 20, "recomputes from the checkpoint");
    cr_assert_eq(b->n_cached, 20);
    pl_batch_finish(h.b, b);
    /* Parts at 14: blocks 0..2 hit, the hit ends at 12 (no checkpoint),
     * it falls back to 8. */
    prompt(q, 30, 14, 100);
    pl_batch_seq *c = h_add(&h, 3, q, 30, 0);
    in = h_step(&h);
    cr_assert_eq(in->n_ck_load, 1);
    cr_assert_eq(in->ck_load_pos[0], 8);
    cr_assert_eq(in->positions[0], 8);
    cr_assert_eq(in->n_ck_save, 3, "its own at 16, 24 and 28, its end (8 has one)");
    pl_batch_finish(h.b, c);
    h_free(&h);
}

Test(kv_ckpt, batch_without_checkpoint_recomputes_from_zero)
{
    harness h;
    h_init(&h, 1, 2);              /* one slot: each save evicts the last */
    int32_t p[40];
    prompt(p, 22, 0, 0);
    pl_batch_seq *a = h_add(&h, 1, p, 22, 0);
    pl_step_input *in = h_step(&h);
    cr_assert_eq(in->n_ck_save, 3, "8 and 16 (every 2 blocks), 20 (the prompt's end)");
    cr_assert_eq(in->ck_save_pos[2], 20);
    cr_assert_eq(in->ck_save_id[0], in->ck_save_id[1]);
    cr_assert_eq(in->ck_save_id[1], in->ck_save_id[2]);
    pl_batch_finish(h.b, a);
    pl_kv_ckpt_stats st;
    pl_kv_ckpt_stats_get(h.ck, &st);
    cr_assert_eq(st.evictions, 2);
    /* Only 20 kept: a prompt parting at 14 has blocks to 12 cached but no
     * checkpoint at or before it: from 0, every block recomputed. */
    int32_t q[40];
    prompt(q, 22, 14, 100);
    pl_batch_seq *c = h_add(&h, 3, q, 22, 0);
    in = h_step(&h);
    cr_assert_eq(in->n_ck_load, 0);
    cr_assert_eq(in->positions[0], 0);
    cr_assert_eq(c->n_cached, 0);
    pl_batch_finish(h.b, c);
    h_free(&h);
}

Test(kv_ckpt, hinted_prompt_end_and_shared_prefix)
{
    harness h;
    h_init(&h, 8, 0);              /* hints only */
    pl_kv_blocks_hint(h.kv, 77, 0);
    int32_t p[40], q[40];
    prompt(p, 30, 18, 0);
    prompt(q, 27, 18, 100);        /* parts from p at 18: shared to 16 */
    pl_batch_seq *a = h_add(&h, 1, p, 30, 77);
    pl_batch_seq *b = h_add(&h, 2, q, 27, 77);
    pl_step_input *in = h_step(&h);
    cr_assert_eq(g_n_seqs, 2);
    int want_a[] = {16, 28}, want_b[] = {24}, na = 0, nb = 0;
    for (int i = 0; i < in->n_ck_save; i++) {
        int pos = in->ck_save_pos[i];
        if (in->ck_save_slot[i] == a->slot)
            cr_assert_eq(pos, want_a[na++]);
        else
            cr_assert_eq(pos, want_b[nb++]);
    }
    /* One checkpoint per prefix: b's at 16 is a's (same hash). */
    cr_assert_eq(na, 2);
    cr_assert_eq(nb, 1, "b saved %d", nb);
    cr_assert_eq(in->ck_save_pos[in->n_ck_save - 1], 24);
    pl_batch_finish(h.b, a);
    pl_batch_finish(h.b, b);
    /* Unhinted: the prompt's end only (a chat's next turn resumes there),
     * not where it parts from a queued prompt of its conversation. */
    int32_t r[40], t[40];
    prompt(r, 30, 18, 500);
    prompt(t, 27, 18, 600);
    h_add(&h, 3, r, 30, 99);
    h_add(&h, 4, t, 27, 99);
    in = h_step(&h);
    cr_assert_eq(in->n_ck_save, 2, "28 and 24, the prompts' ends");
    for (int i = 0; i < in->n_ck_save; i++)
        cr_assert(in->ck_save_pos[i] == 28 || in->ck_save_pos[i] == 24, "at %d",
                  in->ck_save_pos[i]);
    h_free(&h);
}

/* Random takes, drops and hints against a plain list of what each slot
 * holds: find answers from the index as a scan of the slots would. */
Test(kv_ckpt, index_matches_the_slots)
{
    enum { SLOTS = 5, HASHES = 40, OPS = 4000 };
    pl_kv_ckpt *ck = pl_kv_ckpt_new(SLOTS, 1);
    uint64_t held[SLOTS];
    bool used[SLOTS] = {false};
    unsigned r = 12345;
    for (int op = 0; op < OPS; op++) {
        r = r * 1103515245u + 12345u;
        uint64_t h = 1 + (r >> 8) % HASHES;
        int what = (r >> 20) % 4;
        if (what < 2) {
            int s = pl_kv_ckpt_take(ck, h, h % 3 + 1, (uint64_t)op);
            bool had = false;
            for (int i = 0; i < SLOTS; i++)
                had |= used[i] && held[i] == h;
            cr_assert_eq(s < 0, had, "op %d: take of a held hash %d", op, s);
            if (s >= 0) {
                used[s] = true;
                held[s] = h;
            }
        } else if (what == 2) {
            int s = pl_kv_ckpt_find(ck, h, UINT64_MAX);
            if (s >= 0) {
                pl_kv_ckpt_drop(ck, s);
                used[s] = false;
            }
        } else {
            pl_kv_ckpt_hint(ck, h % 3 + 1, (int)(r >> 4) % 4 - 1);
        }
        for (uint64_t q = 1; q <= HASHES; q++) {
            int want = -1;
            for (int i = 0; i < SLOTS; i++)
                if (used[i] && held[i] == q)
                    want = i;
            cr_assert_eq(pl_kv_ckpt_find(ck, q, UINT64_MAX), want, "op %d hash %d", op, (int)q);
        }
    }
    pl_kv_ckpt_free(ck);
}

/* Admission counts of a waiting hybrid prompt only the cached blocks up
 * to its last checkpoint as shared (the rest it recomputes). */
Test(kv_ckpt, admission_counts_the_checkpointed_prefix)
{
    int reserved[2];
    for (int with = 0; with < 2; with++) {
        harness h;
        h_init(&h, 8, 2);
        if (!with) {                 /* the same scheduler without checkpoints */
            pl_batch_free(h.b);
            h.cfg.ckpt = NULL;
            h.b = pl_batch_new(&h.cfg, h.kv);
        }
        int32_t p[40], q[40];
        prompt(p, 30, 0, 0);
        prompt(q, 30, 22, 100);
        h_add(&h, 1, p, 30, 0);
        h_step(&h);                  /* runs on: its 8 blocks in use, checkpoints at 8, 16,
                                        24 and 28 (its end) */
        h_add(&h, 2, q, 30, 0);      /* waits: 5 full blocks cached (it parts at 22), the
                                        last checkpoint among them at 16 */
        pl_batch_kv_acct a;
        pl_batch_kv_account(h.b, 4, &a);
        reserved[with] = a.reserved;
        h_free(&h);
    }
    cr_assert_eq(reserved[1], reserved[0] + 1, "with %d, without %d", reserved[1], reserved[0]);
}
