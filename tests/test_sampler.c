/* test_sampler.c - backends/engine/sampler.c: greedy tie-break, seeded
 * determinism, top_k / top_p / min_p filtering, penalties, logit_bias,
 * ignore_eos and raw logprobs. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "backends/engine/sampler.h"

static pl_seq_sampling greedy(void)
{
    return (pl_seq_sampling){.temperature = 0, .top_p = 1, .repetition_penalty = 1,
                             .top_logprobs = -1};
}

static pl_seq_sampling random_s(uint64_t seed)
{
    return (pl_seq_sampling){.temperature = 1, .top_p = 1, .repetition_penalty = 1,
                             .top_logprobs = -1, .seed = seed};
}

static int32_t sample(pl_sampler *s, const float *l, pl_seq_sampling *p, const int32_t *h,
                      int nh, int32_t eos)
{
    pl_sample out;
    return pl_sampler_sample(s, l, p, h, nh, eos, &out);
}

/* Which ids get drawn over n steps (counts into seen[]). */
static void draw_many(pl_sampler *s, const float *l, pl_seq_sampling *p, int n, int *seen)
{
    for (int i = 0; i < n; i++) {
        p->step = (uint64_t)i;
        seen[sample(s, l, p, NULL, 0, -1)]++;
    }
}

Test(sampler, greedy_lowest_id_on_tie)
{
    pl_sampler *s = pl_sampler_new(8);
    float l[8] = {0, 1, 2, 5, 1, 5, 0, -1};
    pl_seq_sampling p = greedy();
    cr_assert_eq(sample(s, l, &p, NULL, 0, -1), 3);
    pl_sampler_free(s);
}

Test(sampler, seeded_determinism)
{
    pl_sampler *s = pl_sampler_new(64);
    float l[64];
    for (int i = 0; i < 64; i++)
        l[i] = 0.1f * (float)(i % 7);
    pl_seq_sampling a = random_s(42), b = random_s(42), c = random_s(43);
    int same = 0, diff_seed = 0, distinct[64] = {0};
    for (int step = 0; step < 200; step++) {
        a.step = b.step = c.step = (uint64_t)step;
        int32_t x = sample(s, l, &a, NULL, 0, -1), y = sample(s, l, &b, NULL, 0, -1);
        same += x == y;
        diff_seed += x != sample(s, l, &c, NULL, 0, -1);
        distinct[x] = 1;
    }
    int nd = 0;
    for (int i = 0; i < 64; i++)
        nd += distinct[i];
    cr_assert_eq(same, 200);
    cr_assert_gt(diff_seed, 100, "another seed should differ most of the time");
    cr_assert_gt(nd, 40, "draws should spread over the vocabulary (%d ids)", nd);
    pl_sampler_free(s);
}

Test(sampler, uniform_draws_are_uniform)
{
    int bins[10] = {0};
    for (uint64_t i = 0; i < 10000; i++) {
        double u = pl_sampler_uniform(7, i);
        cr_assert(u >= 0.0 && u < 1.0);
        bins[(int)(u * 10)]++;
    }
    for (int i = 0; i < 10; i++)
        cr_expect(bins[i] > 850 && bins[i] < 1150, "bin %d: %d", i, bins[i]);
}

Test(sampler, top_k_keeps_k_best)
{
    pl_sampler *s = pl_sampler_new(16);
    float l[16];
    for (int i = 0; i < 16; i++)
        l[i] = (float)((i * 5) % 16) * 0.05f;  /* best: i with (5i % 16) = 15, 14 */
    pl_seq_sampling p = random_s(1);
    p.top_k = 2;
    int seen[16] = {0};
    draw_many(s, l, &p, 300, seen);
    for (int i = 0; i < 16; i++) {
        int r = (i * 5) % 16;
        if (r >= 14)
            cr_expect_gt(seen[i], 0, "id %d should be drawn", i);
        else
            cr_expect_eq(seen[i], 0, "id %d is outside top_k", i);
    }
    pl_sampler_free(s);
}

Test(sampler, top_p_and_min_p)
{
    pl_sampler *s = pl_sampler_new(4);
    float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    pl_seq_sampling p = random_s(3);
    int seen[4] = {0};
    p.top_p = 0.7f;              /* 0.5 + 0.3 >= 0.7 */
    draw_many(s, l, &p, 400, seen);
    cr_expect(seen[0] > 0 && seen[1] > 0 && seen[2] == 0 && seen[3] == 0);
    memset(seen, 0, sizeof(seen));
    p.top_p = 0.9f;              /* needs three */
    draw_many(s, l, &p, 400, seen);
    cr_expect(seen[2] > 0 && seen[3] == 0);
    memset(seen, 0, sizeof(seen));
    p.top_p = 1;
    p.min_p = 0.5f;              /* keep p >= 0.25 */
    draw_many(s, l, &p, 400, seen);
    cr_expect(seen[0] > 0 && seen[1] > 0 && seen[2] == 0 && seen[3] == 0);
    double frac = seen[0] / 400.0;  /* 0.5 / 0.8 after renormalising */
    cr_expect(fabs(frac - 0.625) < 0.08, "frac %.3f", frac);
    pl_sampler_free(s);
}

Test(sampler, repetition_penalty)
{
    pl_sampler *s = pl_sampler_new(3);
    pl_seq_sampling p = greedy();
    p.repetition_penalty = 2;
    int32_t h[1] = {0};
    float pos[3] = {2.0f, 1.5f, -1.0f};     /* 2 / 2 = 1 < 1.5 */
    cr_assert_eq(sample(s, pos, &p, h, 1, -1), 1);
    float neg[3] = {-1.0f, -1.5f, -3.0f};   /* -1 * 2 = -2 < -1.5 */
    cr_assert_eq(sample(s, neg, &p, h, 1, -1), 1);
    pl_sampler_free(s);
}

Test(sampler, presence_and_frequency_penalties)
{
    pl_sampler *s = pl_sampler_new(2);
    float l[2] = {1.0f, 0.8f};
    int32_t h[3] = {0, 0, 0};
    pl_seq_sampling p = greedy();
    p.presence_penalty = 0.5f;
    cr_assert_eq(sample(s, l, &p, h, 1, -1), 1);
    p.presence_penalty = 0.1f;   /* 0.9 > 0.8, however often it occurred */
    cr_assert_eq(sample(s, l, &p, h, 3, -1), 0);
    p.presence_penalty = 0;
    p.frequency_penalty = 0.1f;  /* once: 0.9; three times: 0.7 */
    cr_assert_eq(sample(s, l, &p, h, 1, -1), 0);
    cr_assert_eq(sample(s, l, &p, h, 3, -1), 1);
    cr_assert_eq(sample(s, l, &p, h, 3, -1), 1, "counts reset between calls");
    pl_sampler_free(s);
}

Test(sampler, logit_bias_and_ignore_eos)
{
    pl_sampler *s = pl_sampler_new(8);
    float l[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    pl_logit_bias b[2] = {{2, 100.0f}, {-5, 100.0f}};
    pl_seq_sampling p = greedy();
    p.logit_bias = b;
    p.n_logit_bias = 2;          /* out-of-range tokens are ignored */
    cr_assert_eq(sample(s, l, &p, NULL, 0, -1), 2);
    b[0] = (pl_logit_bias){7, -100.0f};
    cr_assert_eq(sample(s, l, &p, NULL, 0, -1), 6);
    p.n_logit_bias = 0;
    cr_assert_eq(sample(s, l, &p, NULL, 0, 7), 7, "eos allowed by default");
    p.ignore_eos = true;
    cr_assert_eq(sample(s, l, &p, NULL, 0, 7), 6);
    pl_sampler_free(s);
}

Test(sampler, logprobs_are_raw_and_normalised)
{
    pl_sampler *s = pl_sampler_new(5);
    float l[5] = {1.0f, 3.0f, 0.5f, 2.0f, -1.0f};
    pl_seq_sampling p = random_s(9);
    p.temperature = 0.3f;
    p.repetition_penalty = 1.5f;
    p.top_logprobs = 5;
    int32_t h[1] = {1};
    pl_sample out;
    pl_sampler_sample(s, l, &p, h, 1, -1, &out);
    double z = 0;
    for (int i = 0; i < 5; i++)
        z += exp(l[i]);
    cr_assert_eq(out.n_top, 5);
    double sum = 0;
    for (int i = 0; i < 5; i++) {
        sum += exp(out.top_logprobs[i]);
        cr_expect_float_eq(out.top_logprobs[i], l[out.top_ids[i]] - log(z), 1e-5);
        if (i > 0)
            cr_expect_geq(out.top_logprobs[i - 1], out.top_logprobs[i]);
    }
    cr_expect_float_eq(sum, 1.0, 1e-5);
    cr_expect_eq(out.top_ids[0], 1);
    cr_expect_float_eq(out.logprob, l[out.id] - log(z), 1e-5);
    p.top_logprobs = -1;
    pl_sampler_sample(s, l, &p, h, 1, -1, &out);
    cr_expect_eq(out.n_top, 0);
    pl_sampler_free(s);
}

/* A vocabulary the size of Gemma's (and not a multiple of the 8 or 16
 * lanes the row passes take): greedy finds the lowest id of a tie that
 * lies in different lanes and past the last full vector, and the raw
 * logprobs agree with a double-precision log-softmax. */
Test(sampler, large_vocabulary_argmax_and_logprobs_match_a_double_softmax)
{
    enum { V = 262147 };
    float *l = malloc(sizeof(float) * V);
    cr_assert_not_null(l);
    uint32_t x = 7;
    for (int i = 0; i < V; i++) {
        x = x * 1664525u + 1013904223u;
        l[i] = (float)(x >> 8) / (float)(1u << 24) * 20.0f - 10.0f;
    }
    pl_sampler *s = pl_sampler_new(V);
    pl_seq_sampling p = greedy();
    l[V - 2] = 30.0f;            /* in the tail past the last 16 */
    cr_assert_eq(sample(s, l, &p, NULL, 0, -1), V - 2);
    l[100003] = 30.0f;           /* a tie in another lane, lower id */
    l[99997] = 30.0f;
    cr_assert_eq(sample(s, l, &p, NULL, 0, -1), 99997);
    double mx = 30.0, z = 0.0;
    for (int i = 0; i < V; i++)
        z += exp((double)l[i] - mx);
    double lse = mx + log(z);
    pl_sample out;
    p.top_logprobs = 3;
    pl_sampler_sample(s, l, &p, NULL, 0, -1, &out);
    cr_assert_eq(out.id, 99997);
    cr_expect_float_eq(out.logprob, 30.0 - lse, 1e-5);
    cr_assert_eq(out.n_top, 3);
    cr_expect_eq(out.top_ids[0], 99997);
    cr_expect_eq(out.top_ids[1], 100003);
    cr_expect_eq(out.top_ids[2], V - 2);
    pl_sampler_raw_logprobs(l, V, 5, 0, &out);
    cr_expect_float_eq(out.logprob, (double)l[5] - lse, 1e-5);
    p.top_logprobs = -1;         /* none asked for: no pass, no alternatives */
    pl_sampler_sample(s, l, &p, NULL, 0, -1, &out);
    cr_expect_eq(out.id, 99997);
    cr_expect_eq(out.n_top, 0);
    pl_sampler_free(s);
    free(l);
}

/* The temperature path on a large vocabulary (draws walk chunk sums, top_k
 * skips groups of 8, top_p gathers above a floor): eight live ids with
 * known probabilities spread over the row, the rest 40 nats below, so
 * the frequencies of 2,000 draws are checked against the exact ones (5
 * standard deviations), and each filter keeps exactly its ids. */
Test(sampler, large_vocabulary_draws_follow_the_filtered_distribution)
{
    enum { V = 65539, N = 2000 };
    static const double pr[8] = {.4, .2, .15, .1, .08, .04, .02, .01};
    static const int ids[8] = {50001, 7, 39999, 65538, 4096, 4095, 12345, 60000};
    float *l = malloc(sizeof(float) * V);
    int *seen = calloc(V, sizeof(int));
    cr_assert(l && seen);
    for (int i = 0; i < V; i++)
        l[i] = -45.0f;
    for (int k = 0; k < 8; k++)
        l[ids[k]] = (float)log(pr[k]);
    pl_sampler *s = pl_sampler_new(V);
    pl_seq_sampling p = random_s(11);
    struct { int top_k; float top_p, min_p; int keep; } cases[] = {
        {0, 1.0f, 0.0f, 8},      /* the plain draw over the whole row */
        {3, 1.0f, 0.0f, 3},      /* top_k */
        {0, 0.7f, 0.0f, 3},      /* top_p: .4 + .2 + .15 >= .7 */
        {5, 0.5f, 0.0f, 2},      /* top_k, then top_p */
        {0, 1.0f, 0.15f, 5},     /* min_p: p >= .06 */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        p.top_k = cases[c].top_k;
        p.top_p = cases[c].top_p;
        p.min_p = cases[c].min_p;
        for (int k = 0; k < 8; k++)
            seen[ids[k]] = 0;
        draw_many(s, l, &p, N, seen);
        double z = 0;
        for (int k = 0; k < cases[c].keep; k++)
            z += pr[k];
        int total = 0;
        for (int k = 0; k < 8; k++) {
            total += seen[ids[k]];
            if (k >= cases[c].keep) {
                cr_expect_eq(seen[ids[k]], 0, "case %zu: id %d is filtered out", c, ids[k]);
                continue;
            }
            double q = pr[k] / z, sd = sqrt(N * q * (1 - q));
            cr_expect(fabs(seen[ids[k]] - N * q) <= 5 * sd + 1, "case %zu: id %d drawn %d, "
                      "expected %.0f", c, ids[k], seen[ids[k]], N * q);
        }
        cr_expect_eq(total, N, "case %zu: only the live ids are drawn", c);
    }
    /* ties under top_k: the lowest ids of the equal best */
    for (int i = 0; i < V; i++)
        l[i] = (i % 1000 == 3) ? 1.0f : -45.0f;
    p.top_k = 2;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    memset(seen, 0, sizeof(int) * V);
    draw_many(s, l, &p, 400, seen);
    cr_expect(seen[3] > 0 && seen[1003] > 0 && seen[3] + seen[1003] == 400,
              "top_k 2 of equal ids keeps 3 and 1003: %d %d", seen[3], seen[1003]);
    pl_sampler_free(s);
    free(seen);
    free(l);
}
