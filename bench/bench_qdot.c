/* bench_qdot.c - micro-benchmark of the quantised matmul kernels
 * (pl_op_qmatmul_rows, one thread) on the shapes of Gemma 3 270M Q4_K_M
 * and SmolLM2-135M: decode (one activation row: GEMV) and prefill (many
 * rows: GEMM), with random blocks (finite scales).
 *
 * usage: bench_qdot [REPS [FILTER]]
 * Prints one line per case: the median and best ns per weight row and
 * per activation row, and the weight bytes read per second (decode).
 * PARLEY_CPU_ISA=avx2|avxvnni caps the kernel path, as for the server.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/engine/cpu/ops.h"
#include "backends/formats/gguf.h"
#include "src/base/half.h"

typedef struct bench_case {
    const char *name;
    pl_ggml_type t;
    int n_in, n_out, n_rows;
    int n_mats;                  /* > 1: that many matrices, one after the other (a
                                    mixture's experts, from memory); per-row figures
                                    are per row of one matrix */
} bench_case;

static const bench_case cases[] = {
    {"gemma.output q8_0 decode", PL_GGML_TYPE_Q8_0, 640, 262144, 1},
    {"gemma.ffn_up q5_0 decode", PL_GGML_TYPE_Q5_0, 640, 2048, 1},
    {"gemma.ffn_down q6_k decode", PL_GGML_TYPE_Q6_K, 2048, 640, 1},
    {"gemma.attn_out q4_k decode", PL_GGML_TYPE_Q4_K, 1024, 640, 1},
    {"q4_k 2048x2048 decode", PL_GGML_TYPE_Q4_K, 2048, 2048, 1},
    {"q4_k 8192x16384 decode (75 MB)", PL_GGML_TYPE_Q4_K, 8192, 16384, 1},
    {"q5_k 2048x2048 decode", PL_GGML_TYPE_Q5_K, 2048, 2048, 1},
    {"q6_k 2048x2048 decode", PL_GGML_TYPE_Q6_K, 2048, 2048, 1},
    {"smol.ffn_up q4_1 decode", PL_GGML_TYPE_Q4_1, 576, 1536, 1},
    {"smol.output q8_0 decode", PL_GGML_TYPE_Q8_0, 576, 49152, 1},
    {"gemma.ffn_up q5_0 prefill64", PL_GGML_TYPE_Q5_0, 640, 2048, 64},
    {"gemma.ffn_down q6_k prefill64", PL_GGML_TYPE_Q6_K, 2048, 640, 64},
    {"gemma.attn_out q4_k prefill64", PL_GGML_TYPE_Q4_K, 1024, 640, 64},
    {"q5_k 2048x2048 prefill64", PL_GGML_TYPE_Q5_K, 2048, 2048, 64},
    {"smol.ffn_up q4_1 prefill64", PL_GGML_TYPE_Q4_1, 576, 1536, 64},
    {"smol.ffn_up q8_0 prefill64", PL_GGML_TYPE_Q8_0, 576, 1536, 64},
    {"smol.ffn_down q8_0 prefill64", PL_GGML_TYPE_Q8_0, 1536, 576, 64},
    {"smol.ffn_up q8_0 rows4", PL_GGML_TYPE_Q8_0, 576, 1536, 4},
    {"smol.ffn_up q4_1 rows4", PL_GGML_TYPE_Q4_1, 576, 1536, 4},
    {"smol.ffn_up q4_1 rows2", PL_GGML_TYPE_Q4_1, 576, 1536, 2},
    {"gemma.ffn_down q6_k rows8", PL_GGML_TYPE_Q6_K, 2048, 640, 8},
    {"gemma.attn_out q4_k rows8", PL_GGML_TYPE_Q4_K, 1024, 640, 8},
    {"gemma.ffn_down q6_k rows32", PL_GGML_TYPE_Q6_K, 2048, 640, 32},
    {"gemma.attn_out q4_k rows32", PL_GGML_TYPE_Q4_K, 1024, 640, 32},
    {"moe.up q4_k 1024x512 decode x256 (75 MB)", PL_GGML_TYPE_Q4_K, 1024, 512, 1, 256},
    {"moe.up q4_k 1024x512 decode", PL_GGML_TYPE_Q4_K, 1024, 512, 1},
    {"moe.down q6_k 512x1024 decode x128 (55 MB)", PL_GGML_TYPE_Q6_K, 512, 1024, 1, 128},
};

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static uint32_t rng = 12345;

static uint32_t next_u32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

static void put_half(uint8_t *p, float v)
{
    uint16_t h = pl_fp32_to_fp16(v);
    memcpy(p, &h, 2);
}

/* Random bytes with the block's fp16 scales set to small finite values. */
static void fill_weights(pl_ggml_type t, uint8_t *w, size_t n_blocks, size_t bb)
{
    for (size_t i = 0; i < n_blocks * bb; i++)
        w[i] = (uint8_t)next_u32();
    for (size_t b = 0; b < n_blocks; b++) {
        uint8_t *blk = w + b * bb;
        float s = 1e-3f + (float)(next_u32() % 1000) * 1e-5f;
        if (t == PL_GGML_TYPE_Q6_K)
            put_half(blk + 208, s);
        else
            put_half(blk, s);
        if (t == PL_GGML_TYPE_Q4_1 || t == PL_GGML_TYPE_Q5_1 || t == PL_GGML_TYPE_Q4_K ||
            t == PL_GGML_TYPE_Q5_K)
            put_half(blk + 2, s * 0.5f);
    }
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void run_case(const bench_case *c, int reps)
{
    size_t be = 0, bb = 0;
    pl_ggml_type_block(c->t, &be, &bb);
    size_t row_bytes = (size_t)c->n_in / be * bb, n_blk = (size_t)c->n_in / PL_QK;
    int n_mats = c->n_mats > 1 ? c->n_mats : 1;
    size_t mat_bytes = row_bytes * (size_t)c->n_out;
    uint8_t *w = malloc(mat_bytes * (size_t)n_mats);
    fill_weights(c->t, w, (size_t)n_mats * c->n_out * (c->n_in / be), bb);
    float *xf = malloc(sizeof(float) * (size_t)c->n_in);
    pl_q8_act *x = malloc(sizeof(pl_q8_act) * n_blk * (size_t)c->n_rows);
    for (int r = 0; r < c->n_rows; r++) {
        for (int i = 0; i < c->n_in; i++)
            xf[i] = (float)((int)(next_u32() % 2001) - 1000) * 1e-3f;
        pl_op_quantize_row_q8(xf, x + (size_t)r * n_blk, c->n_in);
    }
    float *y = malloc(sizeof(float) * (size_t)c->n_out * (size_t)c->n_rows);
    double *t = malloc(sizeof(double) * (size_t)reps);
    /* Large matrices: fewer repetitions, the same statistic. */
    double bytes = (double)mat_bytes * n_mats;
    int n = bytes * c->n_rows > 64e6 ? (reps + 3) / 4 : reps;
    for (int i = -1; i < n; i++) {
        double t0 = now_ns();
        for (int k = 0; k < n_mats; k++)
            pl_op_qmatmul_rows(c->t, w + (size_t)k * mat_bytes, row_bytes, x, (int)n_blk,
                               c->n_rows, y, c->n_out, 0, c->n_out);
        if (i >= 0)
            t[i] = now_ns() - t0;
    }
    qsort(t, (size_t)n, sizeof(double), cmp_d);
    double med = t[n / 2], best = t[0], per = (double)c->n_out * c->n_rows * n_mats;
    printf("%-32s %-14s ns/row_med=%8.2f ns/row_best=%8.2f GB/s_med=%6.2f ms_med=%8.3f\n",
           c->name, pl_op_kernel_path(), med / per, best / per, bytes / med, med / 1e6);
    free(w);
    free(xf);
    free(x);
    free(y);
    free(t);
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 41;
    const char *filter = argc > 2 ? argv[2] : NULL;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!filter || strstr(cases[i].name, filter))
            run_case(&cases[i], reps < 1 ? 1 : reps);
    return 0;
}
