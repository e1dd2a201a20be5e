/* test_cpu_forward.c - the CPU runner against llama-cpp-python fixtures
 * (tests/fixtures/gen_forward_fixtures.py) on the default model:
 *  - 10 chat prompts decoded greedily together in one batch, through the
 *    runner's launch/wait pipeline with placeholder tokens: the tokens must
 *    match, or diverge only where the reference's top-2 logits are a near tie;
 *  - a 2k-token text teacher-forced: top-1 agreement >= 99%.
 * Skips when the model or the fixture file is absent.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/engine/cpu/cpu_runner.h"
#include "backends/engine/cpu/forward.h"
#include "backends/engine/families/family.h"
#include "backends/formats/gguf.h"
#include "backends/engine/model/model.h"
#include "tests/helpers/forced.h"
#include "tests/helpers/model_path.h"

#define NEAR_TIE 0.50f           /* reference top-2 gap allowed at a divergence */
#define MAX_DLOGIT 1.6f          /* |ours - llama.cpp| at its top-5 ids: measured 1.33 on
                                    the SIMD paths, 1.52 on the scalar one (2026-12-02,
                                    Xeon EMR, gcc 12.2; 1.26 when the bound was set) */
#define EXACT_TOL 0.01f          /* |f32 path - float64 reference| (measured 7e-5) */
#define Q8_TOL 2.0f              /* |q8 path - float64 reference| (measured 1.50) */
#define BS 16

static pl_gguf *g_gguf;
static pl_model *g_model;
static json_t *g_fix;

static void setup(void)
{
    const char *path = pl_test_model_path();
    const char *src = getenv("PARLEY_SRC");
    char fpath[1024];
    snprintf(fpath, sizeof(fpath), "%s/tests/fixtures/forward_fixtures.json", src ? src : ".");
    if (access(path, R_OK) != 0 || access(fpath, R_OK) != 0)
        return;
    char err[256];
    g_gguf = pl_gguf_open(path, err, sizeof(err));
    cr_assert(g_gguf, "%s", err);
    g_model = pl_model_load(g_gguf, NULL, err, sizeof(err));
    cr_assert(g_model, "%s", err);
    json_error_t je;
    g_fix = json_load_file(fpath, 0, &je);
    cr_assert(g_fix, "%s", je.text);
}

static void teardown(void)
{
    json_decref(g_fix);
    pl_model_free(g_model);
    pl_gguf_free(g_gguf);
}

TestSuite(cpu_forward, .init = setup, .fini = teardown, .timeout = 600);

static int jint(json_t *a, size_t i) { return (int)json_integer_value(json_array_get(a, i)); }
static float jnum(json_t *a, size_t i) { return (float)json_number_value(json_array_get(a, i)); }

/* max |ours - ref| over the reference's top-n (id, logit) pairs. */
static float top_delta(const float *logits, json_t *ids, json_t *vals)
{
    float d = 0.0f;
    for (size_t i = 0; i < json_array_size(ids); i++)
        d = fmaxf(d, fabsf(logits[jint(ids, i)] - jnum(vals, i)));
    return d;
}

typedef struct chat_state {
    int n;                       /* sequences */
    json_t *seqs;
    int32_t *tokens, *positions, *row_seq, *slot, *first, *nrows, *ctx, *bt;
    bool *sample;
    pl_seq_sampling *smp;
    int mb;                      /* blocks per sequence */
    int *refeed;                 /* per sequence: the step that re-feeds the
                                    reference token after a divergence; 0: none */
} chat_state;

/* Fill step input: step 0 = all prompts; later = one placeholder row each
 * (the runner fills in its own last token) until a sequence diverges from
 * the reference. From then on it is teacher-forced: its rows carry the
 * reference's tokens, and the step right after the divergence is known
 * (refeed) re-feeds the reference token whose position the runner's own
 * token had taken in the KV cache. */
static void fill_step(chat_state *c, pl_step_input *in, int step)
{
    int r = 0;
    for (int s = 0; s < c->n; s++) {
        json_t *seq = json_array_get(c->seqs, s);
        json_t *p = json_object_get(seq, "prompt"), *gen = json_object_get(seq, "gen");
        int np = (int)json_array_size(p);
        c->first[s] = r;
        if (step == 0) {
            for (int i = 0; i < np; i++, r++) {
                c->tokens[r] = jint(p, i);
                c->positions[r] = i;
                c->row_seq[r] = s;
            }
        } else if (!c->refeed[s]) {
            c->tokens[r] = PL_TOKEN_PLACEHOLDER;
            c->positions[r] = np + step - 1;
            c->row_seq[r++] = s;
        } else {
            for (int k = step == c->refeed[s] ? step - 2 : step - 1; k < step; k++, r++) {
                c->tokens[r] = jint(gen, (size_t)k);
                c->positions[r] = np + k;
                c->row_seq[r] = s;
            }
        }
        c->nrows[s] = r - c->first[s];
        c->ctx[s] = c->positions[r - 1] + 1;
        c->sample[s] = true;
        c->slot[s] = s;
        c->smp[s] = (pl_seq_sampling){.temperature = 0, .top_p = 1, .top_logprobs = 5,
                                      .repetition_penalty = 1, .step = (uint64_t)step};
    }
    *in = (pl_step_input){.n_rows = r, .tokens = c->tokens, .positions = c->positions,
                          .row_seq = c->row_seq, .n_seqs = c->n, .seq_slot = c->slot,
                          .seq_first_row = c->first, .seq_n_rows = c->nrows,
                          .seq_ctx_len = c->ctx, .seq_sample = c->sample,
                          .block_table = c->bt, .max_blocks_per_seq = c->mb,
                          .sampling = c->smp};
}

/* A runner for the fixture's chats (c->n sequences, their prompts' rows
 * in *rows, 512 positions each in blocks of BS) on n_threads (0: all). */
static pl_runner *chat_runner(chat_state *c, int n_threads, int *rows)
{
    c->seqs = json_object_get(g_fix, "chat");
    c->n = (int)json_array_size(c->seqs);
    *rows = 0;
    for (int s = 0; s < c->n; s++)
        *rows += (int)json_array_size(json_object_get(json_array_get(c->seqs, s), "prompt"));
    c->mb = 512 / BS;
    pl_runner_info want = {.block_size = BS, .num_blocks = c->n * c->mb, .max_seqs = c->n,
                           .max_rows = *rows, .max_model_len = 512};
    char err[256];
    pl_runner *run = pl_cpu_runner_new(g_model, &want, n_threads, err, sizeof(err));
    cr_assert(run, "%s", err);
    return run;
}

Test(cpu_forward, chat_greedy_batched)
{
    if (!g_model) {
        PL_TEST_MODEL_OR_SKIP();
        cr_skip_test("fixture absent");
    }
    chat_state c = {0};
    int rows;
    pl_runner *run = chat_runner(&c, 0, &rows);
    int n_gen = (int)json_array_size(json_object_get(json_array_get(c.seqs, 0), "gen"));
    run->keep_logits = true;
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)c.n * c.mb);
    for (int i = 0; i < c.n * c.mb; i++)
        bt[i] = i;               /* sequence s owns blocks [s*mb, (s+1)*mb) */
    c.bt = bt;
    /* Two complete input buffers, alternating; step s+1 launches before s
     * is waited for, so neither is touched while the runner reads it. */
    int32_t *ib[2];
    bool *sb[2];
    pl_seq_sampling *pb[2];
    for (int i = 0; i < 2; i++) {
        ib[i] = calloc((size_t)rows * 3 + (size_t)c.n * 4, sizeof(int32_t));
        sb[i] = calloc((size_t)c.n, sizeof(bool));
        pb[i] = calloc((size_t)c.n, sizeof(pl_seq_sampling));
    }
    pl_step_input in[2];
    int tickets[2], refeed[16] = {0}, skip[16], matched = 0, total = 0, ties = 0;
    cr_assert_leq(c.n, 16);
    for (int s = 0; s < 16; s++)
        skip[s] = -1;
    c.refeed = refeed;
    float max_d = 0.0f;
    for (int step = 0; step <= n_gen; step++) {
        if (step < n_gen) {
            c.tokens = ib[step % 2];
            c.positions = c.tokens + rows;
            c.row_seq = c.positions + rows;
            c.slot = c.row_seq + rows;
            c.first = c.slot + c.n;
            c.nrows = c.first + c.n;
            c.ctx = c.nrows + c.n;
            c.sample = sb[step % 2];
            c.smp = pb[step % 2];
            fill_step(&c, &in[step % 2], step);
            tickets[step % 2] = run->ops->launch(run, &in[step % 2]);
            cr_assert_geq(tickets[step % 2], 0);
        }
        if (step == 0)
            continue;
        int done = step - 1;
        const pl_step_output *out;
        cr_assert_eq(run->ops->wait(run, tickets[done % 2], &out), 0);
        for (int s = 0; s < c.n; s++) {
            json_t *seq = json_array_get(c.seqs, s);
            json_t *ti = json_array_get(json_object_get(seq, "top_ids"), done);
            json_t *tl = json_array_get(json_object_get(seq, "top_logits"), done);
            int ref = jint(json_object_get(seq, "gen"), done);
            if (done == skip[s])
                continue;            /* computed from the runner's diverged token */
            total++;
            float d = top_delta(out->logits + (size_t)s * g_model->n_vocab, ti, tl);
            max_d = fmaxf(max_d, d);
            if (out->sampled[s] == ref) {
                matched++;
                continue;
            }
            float gap = jnum(tl, 0) - jnum(tl, 1);
            printf("seq %d step %d: got %d, ref %d (ref top-2 gap %.3f)\n", s, done,
                   out->sampled[s], ref, gap);
            cr_expect_leq(gap, NEAR_TIE, "seq %d diverged at step %d without a near tie", s, done);
            ties++;
            if (!refeed[s]) {
                /* Step done+1 is in flight on the runner's own token: skip
                 * it, and teacher-force the sequence from step done+2. */
                skip[s] = done + 1;
                refeed[s] = done + 2;
            }
        }
    }
    int n_skipped = 0;
    for (int s = 0; s < c.n; s++)
        n_skipped += skip[s] >= 0 && skip[s] < n_gen;
    printf("chat greedy: %d/%d tokens matched (%d near-tie divergences, %d positions "
           "skipped), max |dlogit| %.4f\n", matched, total, ties, n_skipped, max_d);
    cr_expect_eq(total, c.n * n_gen - n_skipped, "every position compared but one per "
                 "diverged sequence");
    /* Every mismatch was a near tie (checked above); they stay rare. */
    cr_expect_geq(matched * 10, total * 9, "%d of %d matched", matched, total);
    cr_expect_leq(max_d, MAX_DLOGIT);
    run->ops->free(run);
    free(bt);
    for (int i = 0; i < 2; i++) {
        free(ib[i]);
        free(sb[i]);
        free(pb[i]);
    }
}

/* Teacher-forced logits of a fixture section ("forced" or "exact"),
 * compared row by row with the reference's top-5; kv_f16: K/V cache in
 * halves (the engine's default), else floats. */
static pl_forced_stats run_forced(json_t *sec, int gemm_min_rows, int chunk, int kv_f16)
{
    return pl_test_run_forced(g_model, sec, BS, gemm_min_rows, chunk,
                              (int)sysconf(_SC_NPROCESSORS_ONLN), kv_f16, NEAR_TIE);
}

/* llama.cpp quantises activations to 8 bits (and keeps K/V in f16), which
 * moves logits by up to ~1 on this model: exact top-1 agreement is ~96%, and
 * every disagreement seen is at a reference top-2 gap < 0.36. The test
 * counts our top-1 as agreeing when it is the reference's top-2 and the
 * reference's own top-2 gap is below NEAR_TIE. */
Test(cpu_forward, teacher_forced_vs_llama_cpp)
{
    if (!g_model) {
        PL_TEST_MODEL_OR_SKIP();
        cr_skip_test("fixture absent");
    }
    for (int f16 = 0; f16 < 2; f16++) {  /* K/V in floats (the default), then halves */
        pl_forced_stats st = run_forced(json_object_get(g_fix, "forced"), 16, 256, f16);
        double raw = (double)st.agree / st.n, tie = (double)st.agree_or_tie / st.n;
        printf("teacher-forced vs llama.cpp (K/V %s): %d tokens, top-1 agreement %.2f%% "
               "(%.2f%% counting near ties < %.2f), max |dlogit| %.4f\n", f16 ? "f16" : "f32",
               st.n, 100.0 * raw, 100.0 * tie, NEAR_TIE, st.max_d);
        cr_expect_geq(tie, 0.99);
        cr_expect_geq(raw, 0.95);
        cr_expect_leq(st.max_d, MAX_DLOGIT);
    }
}

/* Against a float64 numpy forward on gguf-dequantised weights: the f32 GEMM
 * path with an f32 K/V cache must match tightly; the quantised (q8
 * activation) path, with f32 or f16 K/V, within the noise of 8-bit
 * activations. */
Test(cpu_forward, teacher_forced_vs_exact)
{
    if (!g_model) {
        PL_TEST_MODEL_OR_SKIP();
        cr_skip_test("fixture absent");
    }
    json_t *ex = json_object_get(g_fix, "exact");
    if (!ex)
        cr_skip_test("fixture has no exact section");
    pl_forced_stats f32 = run_forced(ex, 1, 64, 0);
    printf("vs exact: f32 path top-1 %d/%d max |dlogit| %.5f\n", f32.agree, f32.n, f32.max_d);
    cr_expect_eq(f32.agree, f32.n);
    cr_expect_leq(f32.max_d, EXACT_TOL);
    for (int f16 = 0; f16 < 2; f16++) {
        pl_forced_stats q8 = run_forced(ex, 1 << 30, 64, f16);
        printf("vs exact: q8 path (K/V %s) top-1 %d/%d (%d counting near ties) max |dlogit| "
               "%.4f\n", f16 ? "f16" : "f32", q8.agree, q8.n, q8.agree_or_tie, q8.max_d);
        cr_expect_geq(q8.agree_or_tie, q8.n - q8.n / 50);
        cr_expect_leq(q8.max_d, Q8_TOL);
    }
}

/* A tiny random qwen2 (q/k/v biases, NeoX rope, grouped-query attention),
 * written by the gguf package's GGUFWriter, against llama.cpp's logits
 * (tests/fixtures/gen_tiny_qwen2.py). f32 weights and an f32 KV cache on
 * both sides: only summation order differs. Every logit of every position
 * is compared, on the f32 GEMM path and the row-by-row path. */
#define QWEN2_TOL 2e-3f

static float qwen2_max_delta(pl_model *m, json_t *seq, int gemm_min_rows)
{
    json_t *ids = json_object_get(seq, "ids"), *ref = json_object_get(seq, "logits");
    int n = (int)json_array_size(ids), mb = (n + BS - 1) / BS, nv = m->n_vocab;
    char err[256];
    pl_pool *pool = pl_pool_new(2);
    pl_fwd_opts o = {.max_rows = n, .max_out = n, .max_ctx = mb * BS, .num_blocks = mb,
                     .block_size = BS, .gemm_min_rows = gemm_min_rows};
    pl_cpu_fwd *f = pl_cpu_fwd_new(m, pool, &o, err, sizeof(err));
    cr_assert(f, "%s", err);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n * 4), *pos = tok + n, *rs = pos + n;
    int32_t *outr = rs + n, *bt = malloc(sizeof(int32_t) * (size_t)mb);
    float *logits = malloc(sizeof(float) * (size_t)n * nv);
    for (int i = 0; i < mb; i++)
        bt[i] = i;
    for (int i = 0; i < n; i++) {
        tok[i] = jint(ids, (size_t)i);
        pos[i] = i;
        rs[i] = 0;
        outr[i] = i;
    }
    pl_fwd_batch b = {.n_rows = n, .tokens = tok, .positions = pos, .row_seq = rs,
                      .block_table = bt, .max_blocks_per_seq = mb, .n_out = n, .out_rows = outr};
    cr_assert_eq(pl_cpu_forward(f, &b, logits), 0);
    float d = 0.0f;
    for (int i = 0; i < n; i++) {
        json_t *row = json_array_get(ref, (size_t)i);
        cr_assert_eq((int)json_array_size(row), nv);
        for (int v = 0; v < nv; v++)
            d = fmaxf(d, fabsf(logits[(size_t)i * nv + v] - jnum(row, (size_t)v)));
    }
    free(tok);
    free(bt);
    free(logits);
    pl_cpu_fwd_free(f);
    pl_pool_free(pool);
    return d;
}

Test(cpu_forward, tiny_qwen2_matches_llama_cpp)
{
    const char *src = getenv("PARLEY_SRC");
    char gpath[1024], jpath[1024], err[256];
    snprintf(gpath, sizeof gpath, "%s/tests/fixtures/tiny_qwen2.gguf", src ? src : ".");
    snprintf(jpath, sizeof jpath, "%s/tests/fixtures/tiny_qwen2_logits.json", src ? src : ".");
    pl_gguf *g = pl_gguf_open(gpath, err, sizeof err);
    cr_assert_not_null(g, "%s", err);
    pl_model *m = pl_model_load(g, NULL, err, sizeof err);
    cr_assert_not_null(m, "%s", err);
    cr_assert_eq(m->family, &pl_family_qwen2);
    cr_assert(m->rope_neox, "qwen2 rotates NeoX-style");
    json_error_t je;
    json_t *fx = json_load_file(jpath, 0, &je);
    cr_assert_not_null(fx, "%s", je.text);
    cr_assert_eq(json_integer_value(json_object_get(fx, "n_vocab")), m->n_vocab);
    json_t *seqs = json_object_get(fx, "sequences");
    cr_assert_gt(json_array_size(seqs), 0);
    for (size_t s = 0; s < json_array_size(seqs); s++) {
        float f32 = qwen2_max_delta(m, json_array_get(seqs, s), 1);
        float rowwise = qwen2_max_delta(m, json_array_get(seqs, s), 1 << 30);
        printf("tiny qwen2 seq %zu: max |dlogit| f32 GEMM %.6f, row-wise %.6f\n", s, f32,
               rowwise);
        cr_expect_leq(f32, QWEN2_TOL, "seq %zu, f32 GEMM path", s);
        cr_expect_leq(rowwise, QWEN2_TOL, "seq %zu, row-wise path", s);
    }
    json_decref(fx);
    pl_model_free(m);
    pl_gguf_free(g);
}

/* The fixture's chats for n_gen steps with seeded temperature sampling,
 * top_p, top_k and a repetition penalty (so the placeholder's id joins
 * the history), on a runner of n_threads: the sampled ids and logprobs. */
static void sample_chats(int n_threads, int n_gen, int32_t *ids, float *lps)
{
    chat_state c = {0};
    int rows;
    pl_runner *run = chat_runner(&c, n_threads, &rows);
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)c.n * c.mb);
    int32_t *ib = calloc((size_t)rows * 3 + (size_t)c.n * 4, sizeof(int32_t));
    int refeed[16] = {0};
    cr_assert(bt && ib && c.n <= 16);
    for (int i = 0; i < c.n * c.mb; i++)
        bt[i] = i;
    bool sb[16];
    pl_seq_sampling pb[16];
    c.bt = bt, c.refeed = refeed, c.sample = sb, c.smp = pb;
    c.tokens = ib, c.positions = ib + rows, c.row_seq = ib + 2 * rows;
    c.slot = ib + 3 * rows, c.first = c.slot + c.n, c.nrows = c.first + c.n;
    c.ctx = c.nrows + c.n;
    for (int step = 0; step < n_gen; step++) {
        pl_step_input in;
        fill_step(&c, &in, step);
        for (int s = 0; s < c.n; s++) {
            pb[s].temperature = 0.9f;
            pb[s].top_p = s % 2 ? 0.9f : 1.0f;
            pb[s].top_k = s % 3 == 0 ? 40 : 0;
            pb[s].repetition_penalty = 1.3f;
            pb[s].seed = 1000 + (uint64_t)s;
            pb[s].top_logprobs = 1;
        }
        int t = run->ops->launch(run, &in);
        cr_assert_geq(t, 0);
        const pl_step_output *out;
        cr_assert_eq(run->ops->wait(run, t, &out), 0);
        for (int s = 0; s < c.n; s++) {
            ids[step * c.n + s] = out->sampled[s];
            lps[step * c.n + s] = out->logprob[s];
        }
    }
    run->ops->free(run);
    free(bt);
    free(ib);
}

/* Sampling is shared out among the pool's threads when a step samples
 * several sequences; who samples a sequence must not change its draw. */
Test(cpu_forward, seeded_sampling_same_on_one_and_two_threads)
{
    if (!g_model) {
        PL_TEST_MODEL_OR_SKIP();
        cr_skip_test("fixture absent");
    }
    enum { N_GEN = 6, MAX = 16 * N_GEN };
    int32_t id1[MAX], id2[MAX];
    float lp1[MAX], lp2[MAX];
    int n = (int)json_array_size(json_object_get(g_fix, "chat"));
    sample_chats(1, N_GEN, id1, lp1);
    sample_chats(2, N_GEN, id2, lp2);
    int distinct = 0;
    for (int i = 0; i < n * N_GEN; i++) {
        cr_assert_eq(id1[i], id2[i], "step %d seq %d: %d vs %d", i / n, i % n, id1[i], id2[i]);
        cr_assert_eq(memcmp(&lp1[i], &lp2[i], sizeof(float)), 0, "logprob %d", i);
        distinct += i >= n && id1[i] != id1[i - n];
    }
    cr_expect_gt(distinct, 0, "the draws move from step to step");
}
