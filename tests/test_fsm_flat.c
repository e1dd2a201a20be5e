/* test_fsm_flat.c - the host side of constrained decoding on the GPU: a
 * token FSM and its vocabulary packed into flat blobs (fsm_flat.c), read
 * through the walk the CUDA kernel runs (fsm_flat.h), agree with the CPU
 * constrain core (token_fsm.h) for every state and token of random
 * automata: mask bits, next(), the state after a placeholder's id, and the
 * masking rule (refused -> -inf, nothing allowed -> EOS) against the CPU
 * sampler. The kernel itself is tested on a GPU (test_cuda_constrain.c). */
#include <criterion/criterion.h>
#include <math.h>

#include "backends/constrain/fsm_flat.h"
#include "backends/engine/sampler.h"
#include "schedulers/batch_step.h"
#include "tests/fsm_ref.h"

Test(fsm_flat, packed_tables_agree_with_the_constrain_core)
{
    fr_vocab v;
    fr_vocab_init(&v, 700, 11);
    pl_fsm_blob vb;
    cr_assert_eq(pl_fsm_pack_vocab(v.trie, v.n, &vb), 0);
    pl_fsm_vocab pv = pl_fsm_vocab_at(&vb, vb.data, v.n);
    for (int t = 0; t < v.n; t++) {
        size_t len;
        const char *b = pl_vocab_trie_bytes(v.trie, t, &len);
        cr_assert_eq((size_t)(pv.off[t + 1] - pv.off[t]), len, "token %d", t);
        cr_assert(len == 0 || !memcmp(pv.bytes + pv.off[t], b, len));
        cr_assert_eq(pv.eog[t], t == FR_EOG);
    }
    int sizes[] = {1, 2, 7, 40, 300};
    for (int k = 0; k < 5; k++) {
        pl_token_fsm *f = fr_fsm(&v, sizes[k], k % 2 == 1);
        cr_assert_not_null(f);
        pl_fsm_blob tb;
        cr_assert_eq(pl_fsm_pack_tables(f, &tb), 0);
        cr_assert_eq(tb.off[0] % 256, 0);
        pl_fsm_tables pt = pl_fsm_tables_at(&tb, tb.data, f);
        cr_assert_eq(pt.n_states, f->n_states);
        cr_assert_eq(pt.words, (v.n + 31) / 32);
        for (int q = 0; q < f->n_states; q++) {
            for (int t = 0; t < v.n; t++) {
                cr_assert_eq(pl_fsm_allowed(&pt, q, t) != 0, pl_token_fsm_allowed(f, q, t),
                             "states %d, state %d token %d", f->n_states, q, t);
                int32_t nx = pl_token_fsm_next(f, q, t);
                cr_assert_eq(pl_fsm_walk(&pt, &pv, q, t), nx, "state %d token %d", q, t);
                cr_assert_eq(pl_fsm_step_state(&pt, &pv, q, t), nx);
            }
            cr_assert_eq(pl_fsm_step_state(&pt, &pv, q, -1), q, "no placeholder: host state");
        }
        cr_assert_eq(pl_fsm_walk(&pt, &pv, -1, 5), -1);
        cr_assert_eq(pl_fsm_walk(&pt, &pv, f->n_states, 5), -1);
        cr_assert_eq(pl_fsm_walk(&pt, &pv, 0, v.n), -1);
        pl_fsm_blob_free(&tb);
        pl_token_fsm_release(f);
    }
    pl_fsm_blob_free(&vb);
    fr_vocab_free(&v);
}

/* The kernel's rule on one row, host side (constrain.cu does the same per
 * block): state from the host state and the placeholder's id; refused ids
 * -inf; nothing allowed -> pen[eos] = 0. Greedy on the result must give the
 * CPU sampler's id (which advances the state the CPU runner's way). */
static void mask_row(float *x, const pl_fsm_tables *t, const pl_fsm_vocab *v, int32_t host,
                     int32_t ph, int n, int32_t eos)
{
    int32_t s = pl_fsm_step_state(t, v, host, ph);
    if (s < 0 || s >= t->n_states)
        return;
    int allowed = 0;
    for (int i = 0; i < n; i++) {
        if (pl_fsm_allowed(t, s, i))
            allowed++;
        else
            x[i] = -INFINITY;
    }
    if (!allowed)
        x[eos] = 0.0f;
}

Test(fsm_flat, masking_rule_matches_the_cpu_sampler)
{
    fr_vocab v;
    fr_vocab_init(&v, 500, 5);
    pl_fsm_blob vb, tb;
    cr_assert_eq(pl_fsm_pack_vocab(v.trie, v.n, &vb), 0);
    pl_token_fsm *f = fr_fsm(&v, 60, true);
    cr_assert_eq(pl_fsm_pack_tables(f, &tb), 0);
    pl_fsm_vocab pv = pl_fsm_vocab_at(&vb, vb.data, v.n);
    pl_fsm_tables pt = pl_fsm_tables_at(&tb, tb.data, f);
    pl_sampler *smp = pl_sampler_new(v.n);
    float *lg = malloc(sizeof(float) * (size_t)v.n), *x = malloc(sizeof(float) * (size_t)v.n);
    int eos_forced = 0;
    for (int it = 0; it < 400; it++) {
        for (int i = 0; i < v.n; i++)
            lg[i] = (float)(fr_rand() % 20000) / 1000.0f - 10.0f;
        int32_t host = (int32_t)(fr_rand() % f->n_states);
        int32_t ph = it % 3 ? (int32_t)(fr_rand() % v.n) : -1;
        memcpy(x, lg, sizeof(float) * (size_t)v.n);
        mask_row(x, &pt, &pv, host, ph, v.n, FR_EOG);
        int best = 0;
        for (int i = 1; i < v.n; i++)
            if (x[i] > x[best])
                best = i;
        pl_seq_sampling sp = {.temperature = 0, .top_p = 1, .repetition_penalty = 1,
                              .top_logprobs = -1, .fsm = f, .fsm_state = host};
        if (ph >= 0)             /* as cpu_runner.c's sample_all */
            sp.fsm_state = pl_token_fsm_next(f, host, ph);
        pl_sample out;
        int32_t id = pl_sampler_sample(smp, lg, &sp, NULL, 0, FR_EOG, &out);
        cr_assert_eq(best, id, "iteration %d: host state %d, placeholder %d", it, host, ph);
        int32_t s = sp.fsm_state;
        if (s >= 0 && s == f->n_states - 1)
            eos_forced++;
    }
    cr_assert_gt(eos_forced, 0, "the sink state (nothing allowed) was reached");
    free(lg);
    free(x);
    pl_sampler_free(smp);
    pl_fsm_blob_free(&tb);
    pl_fsm_blob_free(&vb);
    pl_token_fsm_release(f);
    fr_vocab_free(&v);
}
