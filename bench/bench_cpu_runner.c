/* bench_cpu_runner.c - single-stream prefill and decode speed of parley's
 * CPU runner on a GGUF, driven by bench/bench_cpu.py.
 *
 * usage: bench_cpu_runner MODEL N_PROMPT N_DECODE N_THREADS [GEMM_MIN_ROWS [REPEAT]]
 * MODEL is a GGUF or a Hugging Face checkpoint folder (quantised at load to
 * $BENCH_WEIGHT_TYPE, default q8_0, as parley serve's --cpu-weight-type).
 * REPEAT runs the prefill step that many times (same positions) to time
 * small steps; the figures are per run.
 * Prints one line: prefill_tok_s=... decode_tok_s=... and the process CPU
 * seconds of each phase (steadier than wall time on a shared machine).
 * The prompt is token ids 1000.. (content does not matter for speed).
 */
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/engine/cpu/cpu_runner.h"
#include "backends/engine/cpu/ops.h"
#include "backends/engine/engine_hf.h"
#include "backends/formats/gguf.h"
#include "backends/engine/model/hf_cache.h"
#include "backends/engine/model/model.h"
#include "backends/text/tokenizer.h"

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }
static double cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s MODEL N_PROMPT N_DECODE N_THREADS [GEMM_MIN_ROWS]\n", argv[0]);
        return 2;
    }
    int np = atoi(argv[2]), nd = atoi(argv[3]), nt = atoi(argv[4]);
    char err[1024], path[4096];
    pl_gguf *g = NULL;
    const pl_gguf *meta = NULL;
    pl_engine_hf hf = {0};
    struct pl_tokenizer *vocab = NULL;    /* read and unused */
    int kind = pl_hf_resolve(argv[1], NULL, path, sizeof path, err, sizeof err);
    const char *wt = getenv("BENCH_WEIGHT_TYPE");
    if (kind == PL_MODEL_KIND_HF &&
        pl_engine_hf_open(&hf, path, wt && *wt ? wt : "q8_0", nt, &vocab, err, sizeof err) == 0)
        meta = pl_hf_model_gguf(hf.files);
    else if (kind == PL_MODEL_KIND_GGUF && (g = pl_gguf_open(path, err, sizeof(err))))
        meta = g;
    /* As the engine loads it: f32 copies only for the f32 GEMM path. */
    pl_model_opts mo = {.keep_f32 = argc > 5 && atoi(argv[5]) < 1000000,
                        .keep_packed = pl_op_keep_packed,
                        .keep_packed_experts = pl_op_qdot_supported};
    pl_model *m = meta ? pl_model_load(meta, &mo, err, sizeof(err)) : NULL;
    if (!m) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    /* The model's cache groups as the engine asks for them (sliding
     * windows apart): a block table each, each group its own blocks. */
    pl_kv_layout lo;
    int bs = 16, mb = (np + nd + bs) / bs;
    if (pl_runner_kv_layout(&lo, m, true) != 0) {
        fprintf(stderr, "no cache layout for the model\n");
        return 1;
    }
    int G = lo.n_groups > 0 ? lo.n_groups : 1;
    pl_runner_info want = {.block_size = bs, .num_blocks = G * mb, .max_seqs = 1,
                           .max_rows = np, .max_model_len = mb * bs};
    /* BENCH_KV_F16=1: the K/V cache in halves, parley serve's default (bench_cpu.py sets
     * it unless --kv-f32); else floats (parley serve --no-kv-cache-f16). */
    const char *kv16 = getenv("BENCH_KV_F16");
    pl_runner *r = pl_cpu_runner_new_kv(m, &want, nt, kv16 && atoi(kv16), err, sizeof(err));
    if (!r) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (argc > 5)
        pl_cpu_runner_set_gemm_min_rows(r, atoi(argv[5]));
    /* BENCH_AMX=tiles|emulated: parley serve --cpu-amx (same outputs);
     * emulated runs the C model of the tiles, whose time says nothing of
     * the tiles' speed. */
    const char *amx = getenv("BENCH_AMX");
    if (amx && *amx &&
        pl_cpu_runner_set_amx(r, !strcmp(amx, "tiles") ? PL_AMX_TILES : PL_AMX_EMULATED, err,
                              sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int rep = argc > 6 ? atoi(argv[6]) : 1;
    int32_t *tok = malloc(sizeof(int32_t) * np * 3), *pos = tok + np, *rs = pos + np;
    int32_t *bt = malloc(sizeof(int32_t) * G * mb), slot = 0, first = 0, nrows = np, ctx = np;
    for (int i = 0; i < G * mb; i++)
        bt[i] = i;               /* group g's table: blocks g * mb .. */
    for (int i = 0; i < np; i++) {
        tok[i] = 1000 + i;
        pos[i] = i;
        rs[i] = 0;
    }
    bool sample = true;
    pl_seq_sampling smp = {.temperature = 0, .top_p = 1, .repetition_penalty = 1,
                           .top_logprobs = -1};
    pl_step_input in = {.n_rows = np, .tokens = tok, .positions = pos, .row_seq = rs,
                        .n_seqs = 1, .seq_slot = &slot, .seq_first_row = &first,
                        .seq_n_rows = &nrows, .seq_ctx_len = &ctx, .seq_sample = &sample,
                        .block_table = bt, .max_blocks_per_seq = mb, .n_groups = G,
                        .sampling = &smp};
    const pl_step_output *out;
    double t0 = now_s(), c0 = cpu_s();
    for (int i = 0; i < rep; i++)
        if (r->ops->wait(r, r->ops->launch(r, &in), &out) != 0)
            return 1;
    double t1 = now_s(), c1 = cpu_s();
    pl_pool_counters k0, k1;
    pl_cpu_runner_pool_stats(r, &k0);
    in.n_rows = nrows = 1;
    for (int i = 0; i < nd; i++) {   /* plain loop: one step at a time */
        tok[0] = PL_TOKEN_PLACEHOLDER;
        pos[0] = np + i;
        ctx = np + i + 1;
        if (r->ops->wait(r, r->ops->launch(r, &in), &out) != 0)
            return 1;
    }
    double t2 = now_s(), c2 = cpu_s();
    pl_cpu_runner_pool_stats(r, &k1);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    /* Decode hand-offs: parallel runs per step; the ms per step the
     * runner's thread waited on workers (after its share, and at phase
     * barriers); and the time outside arithmetic summed over the threads
     * (pl_pool_stats): threads x wall time less the time spent working. */
    double ms = nd ? (t2 - t1) * 1e3 / nd : 0.0, d = nd ? nd : 1;
    double wait_ms = (double)(k1.wait_ns - k0.wait_ns) / 1e6 / d;
    double wbusy_ms = (double)(k1.worker_busy_ns - k0.worker_busy_ns) / 1e6 / d;
    printf("prefill_tok_s=%.1f decode_tok_s=%.1f prefill_cpu_s=%.3f decode_cpu_s=%.3f "
           "max_rss_mb=%.1f decode_runs_per_step=%.1f decode_wait_ms_per_step=%.3f "
           "decode_outside_ms_per_step=%.3f decode_ms_per_step=%.3f kernel_path=%s\n",
           np * rep / (t1 - t0), nd / (t2 - t1), (c1 - c0) / rep, c2 - c1, ru.ru_maxrss / 1024.0,
           (double)(k1.runs - k0.runs) / d, wait_ms, wait_ms + (nt - 1) * ms - wbusy_ms, ms,
           r->kernels);
    r->ops->free(r);
    pl_model_free(m);
    pl_gguf_free(g);
    pl_engine_hf_free(&hf);
    pl_tokenizer_free(vocab);
    free(tok);
    free(bt);
    return 0;
}
