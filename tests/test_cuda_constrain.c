/* test_cuda_constrain.c - the constraint kernel (constrain.cu) against the
 * CPU constrain core and sampler on random automata (fsm_ref.h): the state
 * advanced on the device by a placeholder row's id equals the core's
 * next(); each penalised row is masked exactly as the state's mask row
 * says (nothing allowed: EOS); greedy ids and logprobs after penalties ->
 * mask -> sample equal the CPU sampler's (which advances the state as the
 * CPU runner does); drawn ids are always allowed. Runs only on a GPU
 * (.device/run.sh test); the packing is tested on the CPU (test_fsm_flat). */
#include "tests/cuda_test_util.h"

#include "backends/constrain/fsm_flat.h"
#include "backends/engine/cuda/constrain.cuh"
#include "backends/engine/cuda/sample.cuh"
#include "backends/engine/sampler.h"
#include "schedulers/batch_step.h"
#include "tests/fsm_ref.h"

#define S 48
#define NV 700

Test(cuda_constrain, mask_state_and_samples_match_the_cpu_core)
{
    SKIP_WITHOUT_GPU();
    fr_vocab v;
    fr_vocab_init(&v, NV, 23);
    pl_token_fsm *f = fr_fsm(&v, 60, true);
    cr_assert_not_null(f);
    pl_fsm_blob vb, tb;
    cr_assert_eq(pl_fsm_pack_vocab(v.trie, NV, &vb), 0);
    cr_assert_eq(pl_fsm_pack_tables(f, &tb), 0);
    void *dv = tu_dev(vb.data, vb.bytes), *dt = tu_dev(tb.data, tb.bytes);
    pl_fsm_vocab pv = pl_fsm_vocab_at(&vb, dv, NV);
    pl_fsm_tables pt = pl_fsm_tables_at(&tb, dt, f);

    static float logits[S * NV], pen[S * NV];
    static pl_cuda_samp p[S];
    int32_t tokens[S], host_state[S], ph[S];
    tu_seed(77);
    for (int i = 0; i < S * NV; i++)
        logits[i] = 4.0f * tu_uniform();
    for (int s = 0; s < S; s++) {
        p[s] = (pl_cuda_samp){.temperature = s % 2 ? 0.8f : 0.0f, .top_p = 1, .repetition = 1,
                              .top_logprobs = 3, .sample = s != 6, .slot = -1,
                              .seed_lo = 1000u + (uint32_t)s};
        host_state[s] = s == 9 ? f->n_states - 1 : (int32_t)(fr_rand() % f->n_states);
        ph[s] = s % 3 ? (int32_t)(fr_rand() % NV) : -1;
        tokens[s] = ph[s] >= 0 ? ph[s] : 0;
        if (s != 5) {            /* 5: no constraint */
            p[s].fsm = pt;
            p[s].vocab = pv;
            p[s].fsm_state = host_state[s];
            p[s].fsm_ph_row1 = ph[s] >= 0 ? s + 1 : 0;
        }
    }
    float *d_lg = tu_dev(logits, sizeof logits), *d_pen = tu_dev(NULL, sizeof pen);
    pl_cuda_samp *d_p = tu_dev(p, sizeof p);
    int32_t *d_tok = tu_dev(tokens, sizeof tokens), *d_state = tu_dev(NULL, 4 * S);
    int32_t *dummy = tu_dev(NULL, 16);
    pl_cuda_samp_out out = {.sampled = tu_dev(NULL, 4 * S), .logprob = tu_dev(NULL, 4 * S),
                            .top_ids = tu_dev(NULL, 4 * S * PL_CUDA_TOPN),
                            .top_lp = tu_dev(NULL, 4 * S * PL_CUDA_TOPN),
                            .slot_tok = tu_dev(NULL, 4 * S), .max_slots = S};
    OK(pl_cuda_penalties(d_lg, d_pen, d_p, dummy, (const float *)dummy, dummy, d_tok, S, NV,
                         FR_EOG, 0));
    OK(pl_cuda_constrain(d_pen, d_p, d_tok, d_state, S, NV, FR_EOG, 0));
    OK(pl_cuda_sample(d_lg, d_pen, d_p, out, S, NV, 0));
    CU(cudaDeviceSynchronize());
    int32_t state[S], sampled[S];
    float lp[S];
    tu_get(pen, d_pen, sizeof pen);
    tu_get(state, d_state, sizeof state);
    tu_get(sampled, out.sampled, sizeof sampled);
    tu_get(lp, out.logprob, sizeof lp);

    pl_sampler *smp = pl_sampler_new(NV);
    int forced_eos = 0;
    for (int s = 0; s < S; s++) {
        if (s == 5 || s == 6) {
            cr_assert_eq(state[s], -1, "sequence %d has no constraint applied", s);
            continue;
        }
        int32_t want = ph[s] >= 0 ? pl_token_fsm_next(f, host_state[s], ph[s]) : host_state[s];
        cr_assert_eq(state[s], want, "sequence %d: device state", s);
        const float *x = pen + (size_t)s * NV, *l = logits + (size_t)s * NV;
        int allowed = 0;
        for (int t = 0; t < NV && want >= 0; t++) {
            if (pl_token_fsm_allowed(f, want, t)) {
                allowed++;
                cr_assert_eq(x[t], l[t], "sequence %d token %d allowed, untouched", s, t);
            } else if (t != FR_EOG) {
                cr_assert(isinf(x[t]) && x[t] < 0, "sequence %d token %d refused", s, t);
            }
        }
        if (want >= 0 && allowed == 0) {
            forced_eos++;
            cr_assert_eq(x[FR_EOG], 0.0f);
            cr_assert_eq(sampled[s], FR_EOG, "sequence %d: nothing allowed -> EOS", s);
        } else if (want >= 0) {
            cr_assert(pl_token_fsm_allowed(f, want, sampled[s]), "sequence %d sampled %d, "
                      "refused by state %d", s, sampled[s], want);
        }
        if (p[s].temperature == 0.0f) {
            pl_seq_sampling sp = {.temperature = 0, .top_p = 1, .repetition_penalty = 1,
                                  .top_logprobs = 3, .fsm = f, .fsm_state = want};
            pl_sample o;
            int32_t id = pl_sampler_sample(smp, l, &sp, NULL, 0, FR_EOG, &o);
            cr_assert_eq(sampled[s], id, "sequence %d: greedy id vs the CPU sampler", s);
            cr_assert_float_eq(lp[s], o.logprob, 1e-4, "sequence %d logprob", s);
        }
    }
    cr_assert_gt(forced_eos, 0, "sequence 9 sits in the sink state");
    pl_sampler_free(smp);
    void *b[] = {dv, dt, d_lg, d_pen, d_p, d_tok, d_state, dummy, out.sampled, out.logprob,
                 out.top_ids, out.top_lp, out.slot_tok};
    for (size_t i = 0; i < sizeof b / sizeof *b; i++)
        cudaFree(b[i]);
    pl_fsm_blob_free(&tb);
    pl_fsm_blob_free(&vb);
    pl_token_fsm_release(f);
    fr_vocab_free(&v);
}
