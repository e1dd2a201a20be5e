/* test_cuda_runner.c - the CUDA runner against the CPU runner on the
 * default model: logits after a batched prefill, then 64 teacher-forced
 * greedy decode steps (both runners fed the CPU's tokens) with >= 98%
 * agreement; and the CUDA runner's own pipeline (two steps in flight,
 * placeholder rows, CUDA graphs) giving the same tokens as a plain
 * sequential loop; and the phase profiler (PARLEY_CUDA_PROFILE). Skipped
 * without a GPU or without the model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/cuda_test_util.h"

#include "backends/engine/cpu/cpu_runner.h"
#include "backends/engine/cuda/cuda_runner.h"
#include "backends/formats/gguf.h"
#include "backends/engine/model/model.h"
#include "backends/text/tokenizer.h"
#include "tests/helpers/model_path.h"

#define NS 4                     /* sequences */
#define PMAX 48                  /* longest prompt */
#define NGEN 64                  /* decode steps */
#define BS 16
#define MAXLEN 256
#define MB (MAXLEN / BS)
#define MAX_DLOGIT 1.0f          /* |cuda - cpu| at the CPU's top-5 ids (bf16 vs Q4_1 paths) */

static pl_gguf *g_gguf;
static pl_model *g_model;
static int32_t g_prompt[NS][PMAX];
static int g_plen[NS];
static int32_t g_bt[NS * MB];

/* Real chat prompts, so greedy continuations are mostly far from ties. */
static const char *const g_text[NS] = {
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    "What is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nName three prime numbers.<|im_end|>\n<|im_start|>assistant\n",
    "The quick brown fox jumps over the lazy dog. Once upon a time, in a land far away,",
};

static void tokenize_prompts(void)
{
    char err[256];
    pl_tokenizer *tk = pl_tokenizer_from_gguf(g_gguf, err, sizeof err);
    cr_assert(tk, "%s", err);
    for (int s = 0; s < NS; s++) {
        int32_t *ids = NULL;
        int n = 0;
        cr_assert_eq(pl_tokenizer_encode(tk, g_text[s], strlen(g_text[s]), false, true, &ids,
                                         &n), 0);
        g_plen[s] = n < PMAX ? n : PMAX;
        memcpy(g_prompt[s], ids, sizeof(int32_t) * g_plen[s]);
        free(ids);
    }
    pl_tokenizer_free(tk);
    cr_assert_gt(g_plen[0], BS, "prompt 0 must fill a whole KV block");
}

static void setup(void)
{
    char why[256], err[256];
    if (!pl_cuda_available(why, sizeof why))
        return;
    const char *path = pl_test_model_path();
    if (access(path, R_OK) != 0)
        return;
    g_gguf = pl_gguf_open(path, err, sizeof err);
    cr_assert(g_gguf, "%s", err);
    g_model = pl_model_load(g_gguf, NULL, err, sizeof err);
    cr_assert(g_model, "%s", err);
    tokenize_prompts();
    for (int i = 0; i < NS * MB; i++)
        g_bt[i] = i;
}

static void teardown(void)
{
    pl_model_free(g_model);
    pl_gguf_free(g_gguf);
}

TestSuite(cuda_runner, .init = setup, .fini = teardown, .timeout = 900);

#define SKIP_WITHOUT_MODEL() do {                                          \
        SKIP_WITHOUT_GPU();                                                \
        if (!g_model) cr_skip_test("model absent (set PARLEY_MODEL)");     \
    } while (0)

/** One step's input storage (two are alternated). */
typedef struct tstep {
    int32_t tokens[NS * PMAX], positions[NS * PMAX], row_seq[NS * PMAX];
    int32_t slot[NS], first[NS], nrows[NS], ctx[NS];
    bool sample[NS];
    pl_seq_sampling smp[NS];
    pl_step_input in;
} tstep;

/* step 0: all prompts; step k: one row per sequence at its next position,
 * with token next[s], or a placeholder when next is NULL. */
static const pl_step_input *build(tstep *t, int step, const int32_t *next)
{
    int r = 0;
    for (int s = 0; s < NS; s++) {
        t->first[s] = r;
        if (step == 0) {
            for (int i = 0; i < g_plen[s]; i++, r++) {
                t->tokens[r] = g_prompt[s][i];
                t->positions[r] = i;
                t->row_seq[r] = s;
            }
        } else {
            t->tokens[r] = next ? next[s] : PL_TOKEN_PLACEHOLDER;
            t->positions[r] = g_plen[s] + step - 1;
            t->row_seq[r++] = s;
        }
        t->nrows[s] = r - t->first[s];
        t->ctx[s] = t->positions[r - 1] + 1;
        t->sample[s] = true;
        t->slot[s] = s;
        t->smp[s] = (pl_seq_sampling){.temperature = 0, .top_p = 1, .repetition_penalty = 1,
                                      .top_logprobs = 5, .step = (uint64_t)step};
    }
    t->in = (pl_step_input){.n_rows = r, .tokens = t->tokens, .positions = t->positions,
                            .row_seq = t->row_seq, .n_seqs = NS, .seq_slot = t->slot,
                            .seq_first_row = t->first, .seq_n_rows = t->nrows,
                            .seq_ctx_len = t->ctx, .seq_sample = t->sample,
                            .block_table = g_bt, .max_blocks_per_seq = MB,
                            .sampling = t->smp};
    return &t->in;
}

static pl_runner_info want(void)
{
    return (pl_runner_info){.block_size = BS, .num_blocks = NS * MB, .max_seqs = NS,
                            .max_rows = NS * PMAX, .max_model_len = MAXLEN};
}

static pl_runner *cuda_new_opts(const pl_cuda_opts *o)
{
    char err[256];
    pl_runner_info w = want();
    pl_runner *r = pl_cuda_runner_new(g_model, &w, o, err, sizeof err);
    cr_assert(r, "%s", err);
    cr_assert_geq(r->info.num_blocks, NS * MB);
    return r;
}

static pl_runner *cuda_new(bool graphs)
{
    pl_cuda_opts o = tu_cuda_opts(0.5, graphs);
    return cuda_new_opts(&o);
}

static const pl_step_output *step_sync(pl_runner *r, const pl_step_input *in)
{
    const pl_step_output *out;
    int t = r->ops->launch(r, in);
    cr_assert_geq(t, 0, "launch: %s", pl_cuda_last_error());
    cr_assert_eq(r->ops->wait(r, t, &out), 0, "wait: %s", pl_cuda_last_error());
    return out;
}

/* max |a - b| at the 5 best ids of b. */
static float top5_delta(const float *a, const float *b, int n)
{
    int top[5] = {-1, -1, -1, -1, -1};
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 5; k++)
            if (top[k] < 0 || b[i] > b[top[k]]) {
                memmove(top + k + 1, top + k, sizeof(int) * (4 - k));
                top[k] = i;
                break;
            }
    float d = 0;
    for (int k = 0; k < 5; k++)
        d = fmaxf(d, fabsf(a[top[k]] - b[top[k]]));
    return d;
}

/* Prompt logprobs (completions echo + logprobs, lm-eval): every prompt row
 * but each prompt's last scores its next id, as the engine asks; the CUDA
 * runner's figures against the CPU runner's, in chunks of max_seqs rows
 * (here 4 of ~150). */
Test(cuda_runner, prompt_logprobs_match_cpu_runner)
{
    SKIP_WITHOUT_MODEL();
    char err[256];
    pl_runner_info w = want();
    pl_runner *cpu = pl_cpu_runner_new(g_model, &w, 0, err, sizeof err);
    cr_assert(cpu, "%s", err);
    cr_assert(cpu->can_prompt_logprobs);
    pl_runner *gpu = cuda_new(false);
    cr_assert(gpu->can_prompt_logprobs);
    static tstep ta, tb;
    static int32_t next[NS * PMAX];
    pl_step_input *in[2] = {(pl_step_input *)build(&ta, 0, NULL),
                            (pl_step_input *)build(&tb, 0, NULL)};
    int n = 0;
    for (int r = 0; r < in[0]->n_rows; r++) {
        int s = ta.row_seq[r], p = ta.positions[r];
        next[r] = p + 1 < g_plen[s] ? g_prompt[s][p + 1] : -1;
        n += next[r] >= 0;
    }
    for (int k = 0; k < 2; k++) {
        in[k]->row_next = next;
        in[k]->n_row_next = n;
    }
    const pl_step_output *oc = step_sync(cpu, in[0]);
    static float lp_cpu[NS * PMAX];
    static int32_t top_cpu[NS * PMAX];
    for (int r = 0; r < in[0]->n_rows; r++) {
        lp_cpu[r] = oc->row_lp[r];
        top_cpu[r] = oc->row_top_ids[(size_t)r * PL_MAX_TOP_LOGPROBS];
    }
    const pl_step_output *og = step_sync(gpu, in[1]);
    float max_d = 0;
    int top_agree = 0;
    for (int r = 0; r < in[1]->n_rows; r++) {
        if (next[r] < 0)
            continue;
        cr_assert(isfinite(og->row_lp[r]) && og->row_lp[r] <= 0.0f, "row %d: %g", r,
                  og->row_lp[r]);
        max_d = fmaxf(max_d, fabsf(og->row_lp[r] - lp_cpu[r]));
        top_agree += og->row_top_ids[(size_t)r * PL_MAX_TOP_LOGPROBS] == top_cpu[r];
        for (int j = 1; j < 5; j++)
            cr_assert_geq(og->row_top_lp[(size_t)r * PL_MAX_TOP_LOGPROBS + j - 1],
                          og->row_top_lp[(size_t)r * PL_MAX_TOP_LOGPROBS + j]);
        cr_assert_eq(og->row_top_ids[(size_t)r * PL_MAX_TOP_LOGPROBS + 5], -1,
                     "only top_logprobs (5) alternatives");
    }
    printf("cuda vs cpu prompt logprobs: %d rows, max |dlogprob| %.4f, top-1 agree %d\n", n,
           max_d, top_agree);
    cr_expect_leq(max_d, MAX_DLOGIT);
    cr_expect_geq(top_agree * 100, n * 90, "top-1 agreement %d/%d < 90%%", top_agree, n);
    cpu->ops->free(cpu);
    gpu->ops->free(gpu);
}

Test(cuda_runner, matches_cpu_runner_teacher_forced)
{
    SKIP_WITHOUT_MODEL();
    char err[256];
    pl_runner_info w = want();
    pl_runner *cpu = pl_cpu_runner_new(g_model, &w, 0, err, sizeof err);
    cr_assert(cpu, "%s", err);
    pl_runner *gpu = cuda_new(true);
    cpu->keep_logits = gpu->keep_logits = true;
    int nv = g_model->n_vocab, agree = 0, total = 0;
    float max_d = 0;
    int32_t next[NS];
    static tstep ta, tb;
    for (int step = 0; step <= NGEN; step++) {
        const pl_step_output *oc = step_sync(cpu, build(&ta, step, step ? next : NULL));
        const pl_step_output *og = step_sync(gpu, build(&tb, step, step ? next : NULL));
        cr_assert_eq(og->n_seqs, NS);
        cr_assert_gt(og->exec_ms, 0.0);
        for (int s = 0; s < NS; s++) {
            float d = top5_delta(og->logits + (size_t)s * nv, oc->logits + (size_t)s * nv, nv);
            max_d = fmaxf(max_d, d);
            if (step == 0)
                cr_expect_leq(d, MAX_DLOGIT, "prefill logits of seq %d differ by %.3f", s, d);
            agree += og->sampled[s] == oc->sampled[s];
            total++;
            next[s] = oc->sampled[s];  /* both follow the CPU's tokens */
        }
    }
    printf("cuda vs cpu: %d/%d greedy tokens agree, max |dlogit| at top-5 %.4f\n", agree,
           total, max_d);
    cr_expect_geq(agree * 100, total * 98, "greedy agreement %d/%d < 98%%", agree, total);
    cr_expect_leq(max_d, MAX_DLOGIT);
    cpu->ops->free(cpu);
    gpu->ops->free(gpu);
}

/* Greedy tokens of a plain loop: launch, wait, feed the id back. */
static void run_plain(int32_t toks[NGEN + 1][NS])
{
    pl_runner *r = cuda_new(false);
    static tstep t;
    for (int step = 0; step <= NGEN; step++) {
        const pl_step_output *o = step_sync(r, build(&t, step, step ? toks[step - 1] : NULL));
        memcpy(toks[step], o->sampled, sizeof(int32_t) * NS);
    }
    r->ops->free(r);
}

/* The async pipeline: step k+1 (placeholders) launches before k is waited. */
static void run_pipelined(int32_t toks[NGEN + 1][NS])
{
    pl_runner *r = cuda_new(true);
    static tstep t[2];
    int ticket[2];
    for (int step = 0; step <= NGEN + 1; step++) {
        if (step <= NGEN) {
            ticket[step % 2] = r->ops->launch(r, build(&t[step % 2], step, NULL));
            cr_assert_geq(ticket[step % 2], 0, "%s", pl_cuda_last_error());
        }
        if (step == 0)
            continue;
        const pl_step_output *o;
        int done = step - 1;
        cr_assert_eq(r->ops->wait(r, ticket[done % 2], &o), 0, "%s", pl_cuda_last_error());
        memcpy(toks[done], o->sampled, sizeof(int32_t) * NS);
    }
    r->ops->free(r);
}

Test(cuda_runner, pipelined_graphs_equal_plain_loop)
{
    SKIP_WITHOUT_MODEL();
    static int32_t a[NGEN + 1][NS], b[NGEN + 1][NS];
    run_plain(a);
    run_pipelined(b);
    for (int step = 0; step <= NGEN; step++)
        for (int s = 0; s < NS; s++)
            cr_assert_eq(b[step][s], a[step][s], "step %d seq %d: pipelined %d plain %d",
                         step, s, b[step][s], a[step][s]);
}

Test(cuda_runner, copy_block_gives_a_cached_prefix)
{
    SKIP_WITHOUT_MODEL();
    pl_runner *r = cuda_new(true);
    cr_assert_eq(r->info.n_vocab, g_model->n_vocab);
    cr_assert_eq(r->info.block_size, BS);
    cr_assert_str_eq(r->ops->name, "cuda");
    r->keep_logits = true;
    int nv = g_model->n_vocab;
    static tstep t;
    const pl_step_output *o = step_sync(r, build(&t, 0, NULL));
    float *full = malloc(sizeof(float) * nv);
    memcpy(full, o->logits, sizeof(float) * nv);  /* seq 0 after its whole prompt */
    int32_t want_id = o->sampled[0];
    /* Seq 1's first block becomes a copy of seq 0's (16 tokens); a step then
     * prefills only the rest of seq 0's prompt over that prefix. */
    r->ops->copy_block(r, g_bt[0], g_bt[MB]);
    int n = g_plen[0] - BS;
    for (int i = 0; i < n; i++) {
        t.tokens[i] = g_prompt[0][BS + i];
        t.positions[i] = BS + i;
        t.row_seq[i] = 0;
    }
    t.first[0] = 0;
    t.nrows[0] = n;
    t.ctx[0] = g_plen[0];
    t.slot[0] = 1;
    t.in.n_rows = n;
    t.in.n_seqs = 1;
    t.in.block_table = g_bt + MB;
    o = step_sync(r, &t.in);
    cr_assert_eq(o->sampled[0], want_id);
    float d = 0;
    for (int i = 0; i < nv; i++)
        d = fmaxf(d, fabsf(o->logits[i] - full[i]));
    /* Same device and data; only GEMM shapes (cuBLAS may pick other kernels)
     * differ, which can flip bf16 roundings of activations: a quarter of the
     * CPU/GPU bound. */
    cr_assert_leq(d, MAX_DLOGIT / 4, "cached-prefix logits differ by %.4f", d);
    free(full);
    r->ops->free(r);
}

/* --cuda-profile (PARLEY_CUDA_PROFILE=1) with graphs off: every step adds
 * device time to its phases, and the tokens are those of the plain loop
 * (profiling only waits, it does not change the work). Without it: no
 * sums. */
Test(cuda_runner, phase_profile_sums_device_time)
{
    SKIP_WITHOUT_MODEL();
    const char *const *names;
    double ms[32];
    pl_cuda_opts co = tu_cuda_opts(0.5, false);
    co.profile = false;
    pl_runner *r = cuda_new_opts(&co);
    cr_assert_eq(pl_cuda_runner_profile(r, &names, ms, 32, false), 0);
    r->ops->free(r);

    static int32_t a[NGEN + 1][NS];
    run_plain(a);
    co.profile = true;
    r = cuda_new_opts(&co);
    static tstep t;
    int32_t prev[NS];
    double prefill_attn = 0, decode_attn = 0, total = 0;
    for (int step = 0; step <= 4; step++) {
        const pl_step_output *o = step_sync(r, build(&t, step, step ? prev : NULL));
        memcpy(prev, o->sampled, sizeof prev);
        for (int s = 0; s < NS; s++)
            cr_assert_eq(prev[s], a[step][s], "step %d seq %d", step, s);
        int k = pl_cuda_runner_profile(r, &names, ms, 32, true);
        cr_assert_gt(k, 8);
        double sum = 0;
        for (int i = 0; i < k; i++) {
            cr_assert_geq(ms[i], 0.0, "%s", names[i]);
            sum += ms[i];
            if (!strcmp(names[i], "attn_prefill")) prefill_attn = ms[i];
            if (!strcmp(names[i], "attn_decode")) decode_attn = ms[i];
            if (!strcmp(names[i], "gemm_qkv"))
                cr_assert_gt(ms[i], 0.0, "step %d: no QKV GEMM time", step);
        }
        cr_assert_gt(sum, 0.0);
        total += sum;
        if (step == 0)  /* the prompts: prefill attention only */
            cr_assert(prefill_attn > 0 && decode_attn == 0, "%f %f", prefill_attn, decode_attn);
        else
            cr_assert(decode_attn > 0 && prefill_attn == 0, "%f %f", prefill_attn, decode_attn);
    }
    cr_log_info("profile: %.3f ms over 5 steps", total);
    r->ops->free(r);
}
