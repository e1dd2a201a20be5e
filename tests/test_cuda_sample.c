/* test_cuda_sample.c - GPU penalties, sampling, logprobs and token
 * feedback. Greedy picks, logit bias, penalties, ignore_eos and logprobs
 * are checked against the CPU sampler (sampler.h) on random logits;
 * stochastic sampling against its definition (candidate sets of top-k /
 * top-p / min-p, frequencies of a known distribution, host Philox). */
#include "tests/cuda_test_util.h"

#include "backends/engine/cuda/feedback.cuh"
#include "backends/engine/cuda/philox.cuh"
#include "backends/engine/cuda/sample.cuh"
#include "backends/engine/runner.h"
#include "backends/engine/sampler.h"

typedef struct samp_dev {
    float *logits, *pen;
    pl_cuda_samp *p;
    int32_t *bias_tok, *hist;
    float *bias_val;
    pl_cuda_samp_out out;
} samp_dev;

static void dev_init(samp_dev *d, const float *logits, const pl_cuda_samp *p, int S, int V,
                     const int32_t *bt, const float *bv, int nb, const int32_t *hist, int nh)
{
    d->logits = tu_dev(logits, sizeof(float) * S * V);
    d->pen = tu_dev(NULL, sizeof(float) * S * V);
    d->p = tu_dev(p, sizeof(pl_cuda_samp) * S);
    d->bias_tok = tu_dev(bt, sizeof(int32_t) * (nb ? nb : 1));
    d->bias_val = tu_dev(bv, sizeof(float) * (nb ? nb : 1));
    d->hist = tu_dev(hist, sizeof(int32_t) * (nh ? nh : 1));
    d->out.sampled = tu_dev(NULL, sizeof(int32_t) * S);
    d->out.logprob = tu_dev(NULL, sizeof(float) * S);
    d->out.top_ids = tu_dev(NULL, sizeof(int32_t) * S * PL_CUDA_TOPN);
    d->out.top_lp = tu_dev(NULL, sizeof(float) * S * PL_CUDA_TOPN);
    d->out.max_slots = S;
    d->out.slot_tok = tu_dev(NULL, sizeof(int32_t) * S);
}

static void dev_free(samp_dev *d)
{
    void *b[] = {d->logits, d->pen, d->p, d->bias_tok, d->bias_val, d->hist, d->out.sampled,
                 d->out.logprob, d->out.top_ids, d->out.top_lp, d->out.slot_tok};
    for (int i = 0; i < 11; i++)
        cudaFree(b[i]);
}

static void dev_run(samp_dev *d, int S, int V, int32_t eos)
{
    OK(pl_cuda_penalties(d->logits, d->pen, d->p, d->bias_tok, d->bias_val, d->hist, NULL, S,
                         V, eos, 0));
    OK(pl_cuda_sample(d->logits, d->pen, d->p, d->out, S, V, 0));
}

static pl_cuda_samp greedy_params(int top_logprobs)
{
    return (pl_cuda_samp){.temperature = 0, .top_p = 1, .repetition = 1,
                          .top_logprobs = top_logprobs, .sample = 1, .slot = -1};
}

Test(cuda_sample, greedy_penalties_and_logprobs_match_cpu_sampler)
{
    SKIP_WITHOUT_GPU();
    enum { S = 4, V = 5000 };
    tu_seed(3);
    float *lg = malloc(sizeof(float) * S * V);
    tu_fill(lg, (size_t)S * V, 8.0f);
    int32_t hist[] = {10, 11, 10, 4999, 10, 77};
    pl_logit_bias lb[] = {{123, 30.0f}, {9, -100.0f}};
    int32_t bt[] = {123, 9};
    float bv[] = {30.0f, -100.0f};
    pl_cuda_samp p[S];
    pl_seq_sampling cp[S];
    for (int s = 0; s < S; s++) {
        p[s] = greedy_params(5);
        cp[s] = (pl_seq_sampling){.temperature = 0, .top_p = 1, .repetition_penalty = 1,
                                  .top_logprobs = 5};
    }
    p[1].n_bias = 2; cp[1].logit_bias = lb; cp[1].n_logit_bias = 2;
    p[2].repetition = 1.3f; p[2].frequency = 0.5f; p[2].presence = 0.2f; p[2].n_hist = 6;
    cp[2].repetition_penalty = 1.3f; cp[2].frequency_penalty = 0.5f;
    cp[2].presence_penalty = 0.2f;
    /* seq 3: its argmax is the eos id and must not be chosen */
    int32_t eos = 0;
    for (int i = 1; i < V; i++)
        if (lg[3 * V + i] > lg[3 * V + eos])
            eos = i;
    p[3].ignore_eos = 1; cp[3].ignore_eos = true;
    samp_dev d;
    dev_init(&d, lg, p, S, V, bt, bv, 2, hist, 6);
    dev_run(&d, S, V, eos);
    int32_t got[S], tops[S * PL_CUDA_TOPN];
    float lp[S], tlp[S * PL_CUDA_TOPN];
    tu_get(got, d.out.sampled, sizeof got);
    tu_get(lp, d.out.logprob, sizeof lp);
    tu_get(tops, d.out.top_ids, sizeof tops);
    tu_get(tlp, d.out.top_lp, sizeof tlp);
    pl_sampler *cs = pl_sampler_new(V);
    for (int s = 0; s < S; s++) {
        pl_sample ref;
        pl_sampler_sample(cs, lg + (size_t)s * V, &cp[s], s == 2 ? hist : NULL, s == 2 ? 6 : 0,
                          eos, &ref);
        cr_assert_eq(got[s], ref.id, "seq %d: gpu %d cpu %d", s, got[s], ref.id);
        cr_assert_float_eq(lp[s], ref.logprob, 1e-4, "seq %d logprob", s);
        for (int k = 0; k < 5; k++) {
            cr_assert_eq(tops[s * PL_CUDA_TOPN + k], ref.top_ids[k], "seq %d top %d", s, k);
            cr_assert_float_eq(tlp[s * PL_CUDA_TOPN + k], ref.top_logprobs[k], 1e-4);
        }
        cr_assert_eq(tops[s * PL_CUDA_TOPN + 5], -1);
    }
    cr_assert_eq(got[1], 123, "a +30 bias wins");
    cr_assert_neq(got[3], eos);
    pl_sampler_free(cs);
    dev_free(&d);
    free(lg);
}

/* Logits of 8 ids with probabilities {.4,.2,.15,.1,.08,.04,.02,.01} at T=1. */
static void small_dist(float *row, double *prob)
{
    const double pr[8] = {.4, .2, .15, .1, .08, .04, .02, .01};
    for (int i = 0; i < 8; i++) {
        prob[i] = pr[i];
        row[i] = (float)log(pr[i]);
    }
}

Test(cuda_sample, stochastic_filters_and_frequencies)
{
    SKIP_WITHOUT_GPU();
    enum { S = 4000, V = 8 };
    double prob[V];
    float *lg = malloc(sizeof(float) * S * V);
    for (int s = 0; s < S; s++)
        small_dist(lg + s * V, prob);
    pl_cuda_samp *p = calloc(S, sizeof *p);
    for (int s = 0; s < S; s++) {
        p[s] = (pl_cuda_samp){.temperature = 1, .top_p = 1, .repetition = 1,
                              .top_logprobs = -1, .sample = 1, .slot = -1,
                              .seed_lo = 1234, .step_lo = (uint32_t)s};
        if (s % 4 == 1) p[s].top_k = 3;            /* ids 0..2 only */
        if (s % 4 == 2) p[s].top_p = 0.7f;         /* .4+.2+.15 >= .7: ids 0..2 */
        if (s % 4 == 3) p[s].min_p = 0.3f;         /* p >= .12: ids 0..2 */
    }
    samp_dev d;
    dev_init(&d, lg, p, S, V, NULL, NULL, 0, NULL, 0);
    dev_run(&d, S, V, -1);
    int32_t *got = malloc(sizeof(int32_t) * S);
    tu_get(got, d.out.sampled, sizeof(int32_t) * S);
    int count[V] = {0}, n0 = 0, host_agree = 0;
    for (int s = 0; s < S; s++) {
        cr_assert(got[s] >= 0 && got[s] < V);
        if (s % 4) {
            cr_assert_leq(got[s], 2, "seq %d (filter %d) drew id %d", s, s % 4, got[s]);
            continue;
        }
        count[got[s]]++;
        n0++;
        /* the same Philox draw and inverse CDF on the host */
        double u = pl_philox_uniform(1234, (uint64_t)s), acc = 0;
        int want = V - 1;
        for (int i = 0; i < V; i++)
            if ((acc += prob[i]) > u) { want = i; break; }
        host_agree += want == got[s];
    }
    for (int i = 0; i < V; i++)
        cr_assert_float_eq((double)count[i] / n0, prob[i], 0.035, "id %d: %d of %d", i,
                           count[i], n0);
    cr_assert_geq(host_agree, n0 * 99 / 100, "host Philox agrees on %d of %d", host_agree, n0);
    dev_free(&d);
    free(lg); free(p); free(got);
}

Test(cuda_sample, top_k_one_and_unsampled_sequences)
{
    SKIP_WITHOUT_GPU();
    enum { S = 3, V = 3000 };
    tu_seed(5);
    float *lg = malloc(sizeof(float) * S * V);
    tu_fill(lg, (size_t)S * V, 4.0f);
    pl_cuda_samp p[S];
    for (int s = 0; s < S; s++)
        p[s] = (pl_cuda_samp){.temperature = 0.8f, .top_k = 1, .top_p = 1, .repetition = 1,
                              .top_logprobs = -1, .sample = 1, .slot = s, .step_lo = 9};
    p[2].sample = 0;
    samp_dev d;
    dev_init(&d, lg, p, S, V, NULL, NULL, 0, NULL, 0);
    dev_run(&d, S, V, -1);
    int32_t got[S], slots[S];
    tu_get(got, d.out.sampled, sizeof got);
    tu_get(slots, d.out.slot_tok, sizeof slots);
    for (int s = 0; s < 2; s++) {
        int am = 0;
        for (int i = 1; i < V; i++)
            if (lg[s * V + i] > lg[s * V + am]) am = i;
        cr_assert_eq(got[s], am);
        cr_assert_eq(slots[s], am, "the sampled id is left in the sequence's slot");
    }
    cr_assert_eq(got[2], -1);
    dev_free(&d);
    free(lg);
}

Test(cuda_sample, feedback_fills_placeholders_from_slots)
{
    SKIP_WITHOUT_GPU();
    int32_t tokens[5] = {7, PL_TOKEN_PLACEHOLDER, 9, PL_TOKEN_PLACEHOLDER, PL_TOKEN_PLACEHOLDER};
    int32_t row_seq[5] = {0, 0, 1, 2, 3};
    int32_t seq_slot[4] = {5, 1, 0, -1};
    int32_t slot_tok[6] = {100, 101, 102, 103, 104, 105};
    int32_t *dt = tu_dev(tokens, sizeof tokens), *dr = tu_dev(row_seq, sizeof row_seq);
    int32_t *ds = tu_dev(seq_slot, sizeof seq_slot), *dst = tu_dev(slot_tok, sizeof slot_tok);
    OK(pl_cuda_feedback(dt, dr, ds, dst, 6, 5, PL_TOKEN_PLACEHOLDER, 0));
    int32_t got[5];
    tu_get(got, dt, sizeof got);
    int32_t want[5] = {7, 105, 9, 100, PL_TOKEN_PLACEHOLDER};
    for (int i = 0; i < 5; i++)
        cr_assert_eq(got[i], want[i], "row %d", i);
    cudaFree(dt); cudaFree(dr); cudaFree(ds); cudaFree(dst);
}

/* All-NaN logits: no token (PL_CUDA_NO_TOKEN), not -1 and no read at -1;
 * the feedback slot keeps its last good id; a normal row beside it is
 * unaffected. */
Test(cuda_sample, all_nan_logits_give_no_token_and_keep_feedback)
{
    SKIP_WITHOUT_GPU();
    enum { S = 2, V = 1000 };
    float *lg = malloc(sizeof(float) * S * V);
    tu_seed(11);
    tu_fill(lg, (size_t)S * V, 4.0f);
    for (int i = 0; i < V; i++)
        lg[i] = NAN;
    lg[V + 321] = 50.0f;
    pl_cuda_samp p[S] = {greedy_params(3), greedy_params(3)};
    p[0].slot = 0;
    p[1].slot = 1;
    samp_dev d;
    dev_init(&d, lg, p, S, V, NULL, NULL, 0, NULL, 0);
    int32_t slot0[S] = {77, 78};
    CU(cudaMemcpy(d.out.slot_tok, slot0, sizeof slot0, cudaMemcpyHostToDevice));
    dev_run(&d, S, V, -1);
    int32_t got[S], slots[S], tops[S * PL_CUDA_TOPN];
    tu_get(got, d.out.sampled, sizeof got);
    tu_get(slots, d.out.slot_tok, sizeof slots);
    tu_get(tops, d.out.top_ids, sizeof tops);
    cr_assert_eq(got[0], PL_CUDA_NO_TOKEN);
    cr_assert_eq(slots[0], 77, "the slot must keep its last good id, not %d", slots[0]);
    cr_assert_eq(tops[0], -1);
    cr_assert_eq(got[1], 321);
    cr_assert_eq(slots[1], 321);
    dev_free(&d);
    free(lg);
}

/* The placeholder row's id (resolved on the device, absent from the host's
 * history) is counted by the penalties: the same as a history with it. */
Test(cuda_sample, penalties_count_the_placeholder_rows_token)
{
    SKIP_WITHOUT_GPU();
    enum { S = 2, V = 800 };
    float *lg = malloc(sizeof(float) * S * V);
    tu_seed(12);
    tu_fill(lg, (size_t)S * V, 1.0f);
    memcpy(lg + V, lg, sizeof(float) * V);    /* two identical rows */
    int32_t top = 0;
    for (int i = 1; i < V; i++)
        top = lg[i] > lg[top] ? i : top;
    lg[top] = 5.0f;
    lg[V + top] = 5.0f;
    /* row 0: history {3} + the placeholder token (top) from tokens[];
     * row 1: history {3, top} given explicitly. */
    int32_t hist[] = {3, 3, top};
    pl_cuda_samp p[S] = {greedy_params(-1), greedy_params(-1)};
    for (int s = 0; s < S; s++) {
        p[s].repetition = 3.0f;
        p[s].frequency = 2.0f;
    }
    p[0].hist_off = 0; p[0].n_hist = 1; p[0].ph_row1 = 2;   /* tokens[1] */
    p[1].hist_off = 1; p[1].n_hist = 2;
    samp_dev d;
    dev_init(&d, lg, p, S, V, NULL, NULL, 0, hist, 3);
    int32_t toks[2] = {5, top};
    int32_t *dt = tu_dev(toks, sizeof toks);
    OK(pl_cuda_penalties(d.logits, d.pen, d.p, d.bias_tok, d.bias_val, d.hist, dt, S, V, -1, 0));
    OK(pl_cuda_sample(d.logits, d.pen, d.p, d.out, S, V, 0));
    int32_t got[S];
    float pen[S * V];
    tu_get(got, d.out.sampled, sizeof got);
    tu_get(pen, d.pen, sizeof pen);
    cr_assert_neq(got[1], top, "the penalty must move the pick off %d", top);
    cr_assert_eq(got[0], got[1], "placeholder history %d, explicit %d", got[0], got[1]);
    cr_assert_eq(memcmp(pen, pen + V, sizeof(float) * V), 0, "penalised rows differ");
    cudaFree(dt);
    dev_free(&d);
    free(lg);
}
