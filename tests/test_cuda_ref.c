/* test_cuda_ref.c - the CUDA runner against the CPU runner's reference
 * figures, computed on a CPU machine and carried to the GPU one
 * (bench/runner_ref.c on the random "ref" model of
 * bench/make_random_gguf.py; .device/run.sh test sets PARLEY_REF_MODEL
 * and PARLEY_REF_FIXTURE). Teacher-forced on the CPU's greedy ids: raw
 * logits at the CPU's top-5 ids within REF_MAX_DLOGIT, >= 85% of the
 * greedy ids equal and every other one a near tie (sequence 2 has
 * penalties, sequence 1 a logit bias, so the device sampler's extras are
 * compared too). Once with CUDA graphs, once eager. Skipped
 * without a GPU or without the fixture. */
#include <stdio.h>
#include <unistd.h>

#include "tests/cuda_test_util.h"

#include "backends/engine/cuda/cuda_runner.h"
#include "backends/formats/gguf.h"
#include "backends/engine/model/model.h"
#include "tests/runner_ref.h"

/* bf16 weights on both sides; the GPU rounds activations to bf16 between
 * GEMMs, the CPU keeps f32 (random-model logits are O(1)). */
#define REF_MAX_DLOGIT 0.15f
/* The fp8 cache (e4m3: 3 mantissa bits, <= 6.25 % per element) is not yet
 * measured on a GPU: a sanity bound, and the figures printed beside the
 * bf16 cache's for the accuracy statement (docs/gpu-validation.md). */
#define REF_MAX_DLOGIT_FP8 1.0f

typedef struct ref_line {
    int32_t tok;
    int32_t id[REF_TOPK];
    float lg[REF_TOPK];
} ref_line;

static pl_gguf *g_gguf;
static pl_model *g_model;
static ref_line g_ref[REF_NGEN + 1][REF_NS];
static int32_t g_gen[REF_NGEN + 1][REF_NS];

static int read_fixture(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        int step, s, off = 0, used;
        if (line[0] == '#')
            continue;
        if (sscanf(line, "%d %d%n", &step, &s, &off) != 2 || step < 0 || step > REF_NGEN
            || s < 0 || s >= REF_NS)
            break;
        ref_line *L = &g_ref[step][s];
        char *p = line + off;
        if (sscanf(p, "%d%n", &L->tok, &used) != 1)
            break;
        p += used;
        int k = 0;
        for (; k < REF_TOPK && sscanf(p, " %d:%f%n", &L->id[k], &L->lg[k], &used) == 2; k++)
            p += used;
        if (k != REF_TOPK)
            break;
        g_gen[step][s] = L->tok;
        n++;
    }
    fclose(f);
    return n == (REF_NGEN + 1) * REF_NS ? 0 : -1;
}

static void setup(void)
{
    char why[256], err[256];
    const char *mp = getenv("PARLEY_REF_MODEL"), *fp = getenv("PARLEY_REF_FIXTURE");
    if (!pl_cuda_available(why, sizeof why) || !mp || !fp)
        return;
    cr_assert_eq(read_fixture(fp), 0, "%s: not a complete runner_ref fixture", fp);
    g_gguf = pl_gguf_open(mp, err, sizeof err);
    cr_assert(g_gguf, "%s", err);
    g_model = pl_model_load(g_gguf, NULL, err, sizeof err);
    cr_assert(g_model, "%s", err);
}

static void teardown(void)
{
    pl_model_free(g_model);
    pl_gguf_free(g_gguf);
}

TestSuite(cuda_ref, .init = setup, .fini = teardown, .timeout = 300);

#define SKIP_WITHOUT_REF() do {                                                     \
        SKIP_WITHOUT_GPU();                                                         \
        if (!g_model) cr_skip_test("PARLEY_REF_MODEL / PARLEY_REF_FIXTURE unset");  \
    } while (0)

/* Compare one step's output with the fixture; returns exact greedy
 * agreements. A differing id of a sequence without penalties or bias must
 * be a near tie: one of the CPU's top ids within 2 * REF_MAX_DLOGIT of its
 * best (bf16 activations may flip those, nothing else). */
static int compare(const pl_step_output *o, int step, float bound, float *max_d,
                   double *sum_d)
{
    int nv = g_model->n_vocab, agree = 0;
    for (int s = 0; s < REF_NS; s++) {
        const ref_line *L = &g_ref[step][s];
        for (int k = 0; k < REF_TOPK; k++) {
            float d = fabsf(o->logits[(size_t)s * nv + L->id[k]] - L->lg[k]);
            *max_d = fmaxf(*max_d, d);
            *sum_d += d;
            cr_expect_leq(d, bound, "step %d seq %d id %d: cuda %.4f cpu %.4f", step,
                          s, L->id[k], o->logits[(size_t)s * nv + L->id[k]], L->lg[k]);
        }
        if (o->sampled[s] == L->tok) {
            agree++;
            continue;
        }
        if (s == 1 || s == 2)  /* bias / penalties: counted, not excused */
            continue;
        int near = 0;
        for (int k = 1; k < REF_TOPK; k++)
            near |= L->id[k] == o->sampled[s] && L->lg[0] - L->lg[k] <= 2 * bound;
        cr_expect(near, "step %d seq %d: cuda picked %d, cpu %d (not a near tie)", step, s,
                  o->sampled[s], L->tok);
    }
    return agree;
}

static void run_dtype(bool graphs, int kv_dtype, float bound, int min_agree_pct)
{
    char err[256];
    pl_runner_info w = ref_want();
    pl_cuda_opts co = tu_cuda_opts(0.3, graphs);
    co.kv_cache_dtype = kv_dtype;
    pl_runner *r = pl_cuda_runner_new(g_model, &w, &co, err, sizeof err);
    cr_assert(r, "%s", err);
    r->keep_logits = true;
    static ref_step t;
    int agree = 0, total = 0;
    float max_d = 0;
    double sum_d = 0;
    for (int step = 0; step <= REF_NGEN; step++) {
        const pl_step_output *o;
        int tk = r->ops->launch(r, ref_build(&t, step, g_gen, g_model->n_vocab));
        cr_assert_geq(tk, 0, "launch: %s", pl_cuda_last_error());
        cr_assert_eq(r->ops->wait(r, tk, &o), 0, "wait: %s", pl_cuda_last_error());
        agree += compare(o, step, bound, &max_d, &sum_d);
        total += REF_NS;
    }
    printf("cuda (graphs %d, %s KV) vs cpu reference: %d/%d greedy ids agree, max |dlogit| "
           "%.4f, mean %.4f\n", graphs, kv_dtype == PL_CUDA_KV_FP8 ? "fp8" : "bf16", agree,
           total, max_d, sum_d / (total * REF_TOPK));
    cr_expect_geq(agree * 100, total * min_agree_pct, "greedy agreement %d/%d < %d%%", agree,
                  total, min_agree_pct);
    r->ops->free(r);
}

static void run(bool graphs)
{
    run_dtype(graphs, PL_CUDA_KV_AUTO, REF_MAX_DLOGIT, 85);
}

Test(cuda_ref, graphs_match_cpu_reference)
{
    SKIP_WITHOUT_REF();
    run(true);
}

Test(cuda_ref, eager_matches_cpu_reference)
{
    SKIP_WITHOUT_REF();
    run(false);
}

/* --kv-cache-dtype fp8: the same schedule; its distance from the CPU's
 * figures is printed beside the bf16 cache's (the accuracy statement). */
Test(cuda_ref, fp8_cache_near_cpu_reference)
{
    SKIP_WITHOUT_REF();
    run_dtype(true, PL_CUDA_KV_FP8, REF_MAX_DLOGIT_FP8, 70);
}

/* ---- the runner's fixes (issue 13), on the same random model ---- */

static pl_runner *new_runner_inject(bool graphs, int max_len, int num_blocks, int inject)
{
    char err[256];
    pl_runner_info w = ref_want();
    w.max_model_len = max_len;
    w.num_blocks = num_blocks;
    pl_cuda_opts co = tu_cuda_opts(0.3, graphs);
    co.inject = inject;
    pl_runner *r = pl_cuda_runner_new(g_model, &w, &co, err, sizeof err);
    cr_assert(r, "%s", err);
    return r;
}

static pl_runner *new_runner(bool graphs, int max_len, int num_blocks)
{
    return new_runner_inject(graphs, max_len, num_blocks, PL_CUDA_INJECT_NONE);
}

/* Greedy with strong penalties on every sequence; step k's history is
 * gen[0..known) of the sequence. Pipelined: step k is launched (with
 * placeholder rows and one id less in the history) before k-1 is waited. */
static void run_penalised(bool pipelined, int32_t gen[][REF_NS])
{
    pl_runner *r = new_runner(true, REF_MAXLEN, REF_NS * REF_MB);
    static ref_step t[2];
    static int32_t hist[REF_NS][REF_NGEN + 1];
    int ticket[2];
    int nv = g_model->n_vocab;
    for (int step = 0; step <= REF_NGEN + 1; step++) {
        if (step <= REF_NGEN) {
            ref_step *s = &t[step % 2];
            ref_build(s, step, gen, nv);
            int known = pipelined && step > 0 ? step - 1 : step;
            for (int q = 0; q < REF_NS; q++) {
                s->smp[q].repetition_penalty = 1.5f;
                s->smp[q].frequency_penalty = 1.0f;
                s->smp[q].presence_penalty = 0.5f;
                s->smp[q].n_logit_bias = 0;
                for (int k = 0; k < known; k++)
                    hist[q][k] = gen[k][q];
                s->hist[q] = hist[q];
                s->hist_len[q] = known;
                if (pipelined && step > 0)
                    s->tokens[q] = PL_TOKEN_PLACEHOLDER;
            }
            ticket[step % 2] = r->ops->launch(r, &s->in);
            cr_assert_geq(ticket[step % 2], 0, "%s", pl_cuda_last_error());
            if (pipelined && step == 0)
                continue;
        }
        int done = pipelined ? step - 1 : step;
        if (done < 0 || done > REF_NGEN)
            continue;
        const pl_step_output *o;
        cr_assert_eq(r->ops->wait(r, ticket[done % 2], &o), 0, "%s", pl_cuda_last_error());
        memcpy(gen[done], o->sampled, sizeof(int32_t) * REF_NS);
    }
    r->ops->free(r);
}

Test(cuda_ref, async_penalties_equal_sync)
{
    SKIP_WITHOUT_REF();
    static int32_t a[REF_NGEN + 1][REF_NS], b[REF_NGEN + 1][REF_NS];
    run_penalised(false, a);
    run_penalised(true, b);
    for (int k = 0; k <= REF_NGEN; k++)
        for (int s = 0; s < REF_NS; s++)
            cr_assert_eq(b[k][s], a[k][s], "step %d seq %d: async %d sync %d", k, s, b[k][s],
                         a[k][s]);
}

/* Teacher-forced greedy ids of one runner over the fixture's schedule. */
static void forced_ids(pl_runner *r, int32_t out[][REF_NS])
{
    static ref_step t;
    for (int step = 0; step <= REF_NGEN; step++) {
        const pl_step_output *o;
        int tk = r->ops->launch(r, ref_build(&t, step, g_gen, g_model->n_vocab));
        cr_assert_geq(tk, 0, "%s", pl_cuda_last_error());
        cr_assert_eq(r->ops->wait(r, tk, &o), 0, "%s", pl_cuda_last_error());
        memcpy(out[step], o->sampled, sizeof(int32_t) * REF_NS);
    }
}

Test(cuda_ref, failed_graph_capture_falls_back_to_eager_once)
{
    SKIP_WITHOUT_REF();
    static int32_t eager[REF_NGEN + 1][REF_NS], fallback[REF_NGEN + 1][REF_NS];
    pl_runner *r = new_runner(false, REF_MAXLEN, REF_NS * REF_MB);
    forced_ids(r, eager);
    r->ops->free(r);
    r = new_runner_inject(true, REF_MAXLEN, REF_NS * REF_MB, PL_CUDA_INJECT_CAPTURE);
    forced_ids(r, fallback);
    pl_cuda_graph_stats gs;
    pl_cuda_runner_graph_stats(r, &gs);
    r->ops->free(r);
    cr_assert_eq(gs.attempts, 1, "one capture tried, not one per step (%d)", gs.attempts);
    cr_assert_eq(gs.failed, 1);
    cr_assert_eq(gs.captured, 0);
    for (int k = 0; k <= REF_NGEN; k++)
        for (int s = 0; s < REF_NS; s++)
            cr_assert_eq(fallback[k][s], eager[k][s], "step %d seq %d", k, s);
    /* Without injection the bucket is captured once and replayed. */
    r = new_runner(true, REF_MAXLEN, REF_NS * REF_MB);
    forced_ids(r, fallback);
    pl_cuda_runner_graph_stats(r, &gs);
    r->ops->free(r);
    cr_assert_eq(gs.attempts, 1);
    cr_assert_eq(gs.captured, 1);
}

Test(cuda_ref, setup_is_synchronised)
{
    SKIP_WITHOUT_REF();
    pl_runner *r = new_runner(true, REF_MAXLEN, REF_NS * REF_MB);
    cr_assert_eq(cudaStreamQuery(cudaStreamLegacy), cudaSuccess,
                 "setup work still pending on the legacy stream");
    r->ops->free(r);
}

Test(cuda_ref, max_model_len_is_the_context_capped_by_the_cache)
{
    SKIP_WITHOUT_REF();
    pl_runner *r = new_runner(true, 0, 0);
    cr_assert_eq(r->info.max_model_len, g_model->n_ctx_train, "uncapped: the model's context");
    r->ops->free(r);
    r = new_runner(true, 0, 10);       /* 10 blocks of 16 */
    cr_assert_eq(r->info.num_blocks, 10);
    cr_assert_eq(r->info.max_model_len, 160);
    r->ops->free(r);
    r = new_runner(true, 100, 10);     /* asked for: kept */
    cr_assert_eq(r->info.max_model_len, 100);
    r->ops->free(r);
}

/* Sequence 0 with a history far longer than its share must not take
 * sequence 3's: sequence 3's penalised pick is the same as with sequence
 * 0 unpenalised, and differs from its unpenalised pick. */
Test(cuda_ref, penalty_history_is_per_sequence)
{
    SKIP_WITHOUT_REF();
    static int32_t big[4000], h3[8];
    static ref_step t;
    int nv = g_model->n_vocab, picks[3] = {0, 0, 0};
    for (int i = 0; i < 4000; i++)
        big[i] = i % nv;
    for (int v = 2; v >= 0; v--) {     /* 2: no penalties; 1: seq 0 none; 0: seq 0 long */
        pl_runner *r = new_runner(false, REF_MAXLEN, REF_NS * REF_MB);
        ref_build(&t, 0, g_gen, nv);
        for (int s = 0; s < REF_NS; s++)
            t.smp[s].n_logit_bias = 0;
        t.smp[0].frequency_penalty = 0.5f;
        t.hist[0] = big;
        t.hist_len[0] = v == 0 ? 4000 : 0;
        for (int i = 0; i < 8; i++)
            h3[i] = picks[2];            /* its own unpenalised pick, 8 times */
        t.smp[3].repetition_penalty = v == 2 ? 1.0f : 5.0f;
        t.smp[3].frequency_penalty = v == 2 ? 0.0f : 2.0f;
        t.hist[3] = h3;
        t.hist_len[3] = v == 2 ? 0 : 8;
        const pl_step_output *o;
        int tk = r->ops->launch(r, &t.in);
        cr_assert_geq(tk, 0, "%s", pl_cuda_last_error());
        cr_assert_eq(r->ops->wait(r, tk, &o), 0);
        picks[v] = o->sampled[3];
        r->ops->free(r);
    }
    cr_assert_neq(picks[1], picks[2], "the penalty must change sequence 3's pick");
    cr_assert_eq(picks[0], picks[1], "sequence 3 lost its history to sequence 0");
}
