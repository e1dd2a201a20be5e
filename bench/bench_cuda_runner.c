/* bench_cuda_runner.c - throughput of a runner (cuda or cpu) on a GGUF:
 * batched prefill of N prompts of P random tokens, then G greedy decode
 * steps of all N sequences through the async pipeline (two steps in
 * flight, placeholder rows). Prints one JSON line with prefill and decode
 * tokens/s, wall and device milliseconds.
 *
 * usage: bench_cuda_runner MODEL.gguf [--runner cuda|cpu] [--seqs N]
 *        [--prompt P] [--gen G] [--no-graphs] [--max-rows R] [--rows-attn] [--sync]
 * --rows-attn: the one-block-per-row decode attention kernel instead of the
 * split-KV, GQA-grouped one (the default; --split-kv is accepted);
 * --split16: the split-KV kernel with 16 lanes per key; --decode-mma and
 * --prefill-mma: the tensor-core decode and prefill attention kernels;
 * --kv-fp8: the fp8 (e4m3) KV cache (--kv-cache-dtype fp8).
 * --sync: each decode step is waited for before the next is launched (the
 * engine's --no-async-scheduling), for the idle gap beside the async one.
 * decode_idle_gap_ms: decode wall time minus device time, per step.
 * The PARLEY_CUDA_* environment aliases of parley's options apply as in
 * `parley serve` (src/options.c). --cuda-profile (PARLEY_CUDA_PROFILE=1)
 * with --no-graphs adds prefill_phases_ms and
 * decode_phases_ms: device time per phase of the forward pass (each step
 * then waits for itself, so the throughput figures of that run are lower).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/engine/cpu/cpu_runner.h"
#include "backends/engine/cpu/ops.h"
#include "backends/engine/cuda/common.cuh"
#include "backends/engine/cuda/cuda_runner.h"
#include "backends/formats/gguf.h"
#include "backends/engine/model/model.h"
#include "src/options.h"

typedef struct bench_opts {
    const char *model, *runner;
    int seqs, prompt, gen, max_rows;
    bool sync;
    pl_cuda_opts cuda;           /* parley's defaults and environment */
} bench_opts;

typedef struct batch {
    int32_t *tokens, *positions, *row_seq, *slot, *first, *nrows, *ctx;
    bool *sample;
    pl_seq_sampling *smp;
    pl_step_input in;
} batch;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void batch_init(batch *b, int rows, int seqs)
{
    b->tokens = calloc((size_t)rows * 3 + (size_t)seqs * 4, sizeof(int32_t));
    b->positions = b->tokens + rows;
    b->row_seq = b->positions + rows;
    b->slot = b->row_seq + rows;
    b->first = b->slot + seqs;
    b->nrows = b->first + seqs;
    b->ctx = b->nrows + seqs;
    b->sample = calloc((size_t)seqs, sizeof(bool));
    b->smp = calloc((size_t)seqs, sizeof(pl_seq_sampling));
}

/* Sequences [s0, s0+n) each with rows at positions [p0, p0+len). */
static const pl_step_input *fill(batch *b, int s0, int n, int p0, int len, int32_t *bt,
                                 int mb, unsigned *seed, int n_vocab)
{
    int r = 0;
    for (int i = 0; i < n; i++) {
        b->first[i] = r;
        for (int p = 0; p < len; p++, r++) {
            b->tokens[r] = len == 1 && p0 > 0 ? PL_TOKEN_PLACEHOLDER
                                              : (int32_t)(rand_r(seed) % (unsigned)n_vocab);
            b->positions[r] = p0 + p;
            b->row_seq[r] = i;
        }
        b->nrows[i] = len;
        b->ctx[i] = p0 + len;
        b->slot[i] = s0 + i;
        b->sample[i] = true;
        b->smp[i] = (pl_seq_sampling){.temperature = 0, .top_p = 1, .repetition_penalty = 1,
                                      .top_logprobs = -1, .step = (uint64_t)p0};
    }
    b->in = (pl_step_input){.n_rows = r, .tokens = b->tokens, .positions = b->positions,
                            .row_seq = b->row_seq, .n_seqs = n, .seq_slot = b->slot,
                            .seq_first_row = b->first, .seq_n_rows = b->nrows,
                            .seq_ctx_len = b->ctx, .seq_sample = b->sample,
                            .block_table = bt + (size_t)s0 * mb, .max_blocks_per_seq = mb,
                            .sampling = b->smp};
    return &b->in;
}

static int parse(bench_opts *o, int argc, char **argv)
{
    pl_opts po;
    char err[256];
    if (pl_opts_init(&po, err, sizeof err) < 0) {
        fprintf(stderr, "bench: %s\n", err);
        return -1;
    }
    *o = (bench_opts){.runner = "cuda", .seqs = 64, .prompt = 512, .gen = 128,
                      .max_rows = 2048, .cuda = po.engine.cuda};
    pl_opts_free(&po);
    o->cuda.gpu_memory_utilization = 0.9;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-graphs")) o->cuda.graphs = false;
        else if (!strcmp(a, "--sync")) o->sync = true;
        else if (!strcmp(a, "--cuda-profile")) o->cuda.profile = true;
        else if (!strcmp(a, "--split-kv")) o->cuda.decode_attn = PL_CUDA_DECODE_SPLIT;
        else if (!strcmp(a, "--rows-attn")) o->cuda.decode_attn = PL_CUDA_DECODE_ROWS;
        else if (!strcmp(a, "--split16")) o->cuda.decode_attn = PL_CUDA_DECODE_SPLIT16;
        else if (!strcmp(a, "--decode-mma")) o->cuda.decode_attn = PL_CUDA_DECODE_MMA;
        else if (!strcmp(a, "--prefill-mma")) o->cuda.prefill_attn = PL_CUDA_PREFILL_MMA;
        else if (!strcmp(a, "--kv-fp8")) o->cuda.kv_cache_dtype = PL_CUDA_KV_FP8;
        else if (!strcmp(a, "--runner") && v) o->runner = argv[++i];
        else if (!strcmp(a, "--seqs") && v) o->seqs = atoi(argv[++i]);
        else if (!strcmp(a, "--prompt") && v) o->prompt = atoi(argv[++i]);
        else if (!strcmp(a, "--gen") && v) o->gen = atoi(argv[++i]);
        else if (!strcmp(a, "--max-rows") && v) o->max_rows = atoi(argv[++i]);
        else if (a[0] != '-' && !o->model) o->model = a;
        else return -1;
    }
    return o->model && o->seqs > 0 && o->prompt > 0 && o->gen > 0 ? 0 : -1;
}

/* PARLEY_CUDA_PROFILE=1 with --no-graphs: the device ms per phase since the
 * last call, as a JSON object into buf (empty when not recorded). */
static void phases_json(pl_runner *r, bool cuda, char *buf, size_t n)
{
    const char *const *names;
    double ms[32];
    int k = cuda ? pl_cuda_runner_profile(r, &names, ms, 32, true) : 0;
    size_t w = 0;
    buf[0] = 0;
    for (int i = 0; i < k && w < n; i++)
        w += (size_t)snprintf(buf + w, n - w, "%s\"%s\":%.2f", i ? "," : "{", names[i], ms[i]);
    if (k > 0 && w < n)
        snprintf(buf + w, n - w, "}");
}

static int run_step(pl_runner *r, const pl_step_input *in, double *dev_ms)
{
    const pl_step_output *out;
    int t = r->ops->launch(r, in);
    if (t < 0 || r->ops->wait(r, t, &out) != 0)
        return -1;
    *dev_ms += out->exec_ms;
    return 0;
}

int main(int argc, char **argv)
{
    bench_opts o;
    char err[512];
    if (parse(&o, argc, argv) != 0) {
        fprintf(stderr, "usage: %s MODEL.gguf [--runner cuda|cpu] [--seqs N] [--prompt P] "
                "[--gen G] [--no-graphs] [--cuda-profile] [--max-rows R]"
                 " [--rows-attn|--split16|--decode-mma] [--prefill-mma] [--kv-fp8] [--sync]\n",
                argv[0]);
        return 2;
    }
    if (!strcmp(o.runner, "cuda") && !pl_cuda_available(err, sizeof err)) {
        fprintf(stderr, "bench: %s\n", err);
        return 2;
    }
    pl_gguf *g = pl_gguf_open(o.model, err, sizeof err);
    bool cpu = strcmp(o.runner, "cpu") == 0;
    pl_model_opts mo = {.keep_f32 = cpu,
                        .keep_packed = cpu ? pl_op_qdot_supported : pl_keep_packed_all};
    pl_model *m = g ? pl_model_load(g, &mo, err, sizeof err) : NULL;
    if (!m) {
        fprintf(stderr, "bench: %s\n", err);
        return 1;
    }
    int bs = 16, len = o.prompt + o.gen + 1, mb = (len + bs - 1) / bs;
    int per_step = o.max_rows / o.prompt > 0 ? o.max_rows / o.prompt : 1;
    if (per_step > o.seqs) per_step = o.seqs;
    int rows = per_step * o.prompt > o.seqs ? per_step * o.prompt : o.seqs;
    pl_runner_info want = {.block_size = bs, .num_blocks = o.seqs * mb, .max_seqs = o.seqs,
                           .max_rows = rows, .max_model_len = mb * bs};
    double t_load = now_ms();
    pl_runner *r = !strcmp(o.runner, "cuda")
        ? pl_cuda_runner_new(m, &want, &o.cuda, err, sizeof err)
        : pl_cpu_runner_new(m, &want, 0, err, sizeof err);
    if (!r) {
        fprintf(stderr, "bench: %s\n", err);
        return 1;
    }
    t_load = now_ms() - t_load;
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)o.seqs * mb);
    for (int i = 0; i < o.seqs * mb; i++)
        bt[i] = i;
    batch b[2];
    batch_init(&b[0], rows, o.seqs);
    batch_init(&b[1], rows, o.seqs);
    unsigned seed = 1;
    double pf_dev = 0, dec_dev = 0, t0 = now_ms();
    for (int s0 = 0; s0 < o.seqs; s0 += per_step) {
        int n = o.seqs - s0 < per_step ? o.seqs - s0 : per_step;
        if (run_step(r, fill(&b[0], s0, n, 0, o.prompt, bt, mb, &seed, m->n_vocab), &pf_dev))
            goto fail;
    }
    double t_pf = now_ms() - t0;
    char pf_phases[1024], dec_phases[1024];
    phases_json(r, !cpu, pf_phases, sizeof pf_phases);
    int ticket[2];
    const pl_step_output *out;
    t0 = now_ms();
    for (int k = 0; o.sync && k < o.gen; k++)
        if (run_step(r, fill(&b[k % 2], 0, o.seqs, o.prompt + k, 1, bt, mb, &seed, m->n_vocab),
                     &dec_dev))
            goto fail;
    for (int k = 0; !o.sync && k <= o.gen; k++) {
        if (k < o.gen) {
            ticket[k % 2] = r->ops->launch(r, fill(&b[k % 2], 0, o.seqs, o.prompt + k, 1, bt,
                                                   mb, &seed, m->n_vocab));
            if (ticket[k % 2] < 0)
                goto fail;
        }
        if (k > 0) {
            if (r->ops->wait(r, ticket[(k - 1) % 2], &out) != 0)
                goto fail;
            dec_dev += out->exec_ms;
        }
    }
    double t_dec = now_ms() - t0;
    phases_json(r, !cpu, dec_phases, sizeof dec_phases);
    static const char *const attn_name[] = {"split", "rows", "split16", "mma"};
    int da = o.cuda.decode_attn >= 0 && o.cuda.decode_attn < 4 ? o.cuda.decode_attn : 0;
    bool fp8 = o.cuda.kv_cache_dtype == PL_CUDA_KV_FP8
               || o.cuda.kv_cache_dtype == PL_CUDA_KV_FP8_E4M3;
    printf("{\"runner\":\"%s\",\"model\":\"%s\",\"graphs\":%s,\"sync\":%s,\"seqs\":%d,\"prompt\":%d,"
           "\"gen\":%d,\"split_kv\":%s,\"decode_attn\":\"%s\",\"prefill_mma\":%s,"
           "\"kv_cache_dtype\":\"%s\",\"kv_blocks\":%d,"
           "\"load_ms\":%.1f,\"prefill_ms\":%.1f,"
           "\"prefill_dev_ms\":%.1f,\"prefill_tok_s\":%.1f,\"decode_ms\":%.1f,"
           "\"decode_dev_ms\":%.1f,\"decode_tok_s\":%.1f,\"decode_step_ms\":%.3f,"
           "\"decode_idle_gap_ms\":%.3f%s%s%s%s}\n",
           o.runner, o.model, o.cuda.graphs ? "true" : "false", o.sync ? "true" : "false", o.seqs,
           o.prompt, o.gen,
           da == PL_CUDA_DECODE_ROWS ? "false" : "true", attn_name[da],
           o.cuda.prefill_attn == PL_CUDA_PREFILL_MMA ? "true" : "false", fp8 ? "fp8" : "bf16",
           r->info.num_blocks, t_load,
           t_pf, pf_dev, o.seqs * (double)o.prompt / t_pf * 1e3,
           t_dec, dec_dev, o.seqs * (double)o.gen / t_dec * 1e3, t_dec / o.gen,
           (t_dec - dec_dev) / o.gen, *pf_phases ? ",\"prefill_phases_ms\":" : "",
           pf_phases, *dec_phases ? ",\"decode_phases_ms\":" : "", dec_phases);
    r->ops->free(r);
    pl_model_free(m);
    pl_gguf_free(g);
    return 0;
fail:
    fprintf(stderr, "bench: step failed: %s\n", !strcmp(o.runner, "cuda")
            ? pl_cuda_last_error() : "cpu runner");
    return 1;
}
