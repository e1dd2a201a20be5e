/* test_cuda_weights.c - the host half of the CUDA weight upload (no GPU
 * needed, so it runs everywhere the CUDA runner is built): rows to bf16 on
 * several threads equal, bit for bit, the C reference (pl_dequant_row of
 * each row, then pl_fp32_to_bf16) for Q8_0, Q4_1, BF16 and kept-f32
 * weights, whatever the thread count and row range; an unknown type is an
 * error. Prints the time of a 4096 x 4096 Q8_0 matrix on 1 and on
 * pl_cuda_weights_threads(0) threads. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/engine/cuda/weights.h"
#include "backends/engine/model/quant.h"

static uint32_t rng = 12345;

static uint32_t next_u32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

/* Random rows of type t; block scales are small finite halves. */
static void *random_rows(pl_ggml_type t, int rows, int cols, size_t *row_bytes)
{
    size_t blocks = (size_t)cols / 32;
    *row_bytes = t == PL_GGML_TYPE_Q8_0 ? blocks * 34 : t == PL_GGML_TYPE_Q4_1 ? blocks * 20
                                                                              : (size_t)cols * 2;
    uint8_t *q = malloc(*row_bytes * rows);
    for (size_t i = 0; i < *row_bytes * rows; i++)
        q[i] = (uint8_t)next_u32();
    for (int r = 0; t != PL_GGML_TYPE_BF16 && r < rows; r++) {
        int bb = t == PL_GGML_TYPE_Q8_0 ? 34 : 20;
        for (size_t b = 0; b < blocks; b++) {
            uint8_t *blk = q + r * *row_bytes + b * bb;
            blk[0] = (uint8_t)next_u32();
            blk[1] = 0x20 | (next_u32() & 0x3);   /* |d| ~ 2^-7 */
            if (t == PL_GGML_TYPE_Q4_1) {
                blk[2] = (uint8_t)next_u32();
                blk[3] = 0xa0;                     /* m ~ -2^-7 */
            }
        }
    }
    if (t == PL_GGML_TYPE_BF16)  /* finite bf16: clear the top exponent bits */
        for (size_t i = 1; i < *row_bytes * rows; i += 2)
            q[i] &= 0xbf;
    return q;
}

static void reference(const pl_weight *w, size_t r0, size_t n, pl_bf16 *out)
{
    float *tmp = malloc(sizeof(float) * w->cols);
    for (size_t r = 0; r < n; r++) {
        const float *src = w->f32 ? w->f32 + (r0 + r) * w->cols : tmp;
        if (!w->f32)
            cr_assert_eq(pl_dequant_row(w->type, (const uint8_t *)w->q + (r0 + r) * w->row_bytes,
                                        tmp, w->cols), 0);
        for (int c = 0; c < w->cols; c++)
            out[r * w->cols + c] = pl_fp32_to_bf16(src[c]);
    }
    free(tmp);
}

static void check(pl_weight *w)
{
    int threads[] = {1, 2, 3, 7, 32};
    size_t ranges[][2] = {{0, (size_t)w->rows}, {5, 17}, {(size_t)w->rows - 1, 1}};
    size_t total = (size_t)w->rows * w->cols;
    pl_bf16 *want = malloc(total * sizeof(pl_bf16)), *got = malloc(total * sizeof(pl_bf16));
    for (size_t k = 0; k < sizeof ranges / sizeof ranges[0]; k++) {
        size_t r0 = ranges[k][0], n = ranges[k][1];
        reference(w, r0, n, want);
        for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
            memset(got, 0xff, total * sizeof(pl_bf16));
            cr_assert_eq(pl_cuda_dequant_bf16(w, r0, n, got, threads[t]), 0);
            cr_assert_eq(memcmp(got, want, n * w->cols * sizeof(pl_bf16)), 0,
                         "type %d rows %zu+%zu threads %d differ from the C reference",
                         (int)w->type, r0, n, threads[t]);
        }
    }
    free(want);
    free(got);
}

Test(cuda_weights, threaded_dequant_equals_c_reference)
{
    pl_ggml_type types[] = {PL_GGML_TYPE_Q8_0, PL_GGML_TYPE_Q4_1, PL_GGML_TYPE_BF16};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        pl_weight w = {.type = types[i], .rows = 97, .cols = 256};
        w.q = random_rows(types[i], w.rows, w.cols, &w.row_bytes);
        check(&w);
        free((void *)w.q);
    }
    pl_weight f = {.type = PL_GGML_TYPE_F32, .rows = 40, .cols = 64};
    f.f32 = malloc(sizeof(float) * 40 * 64);
    for (int i = 0; i < 40 * 64; i++)
        f.f32[i] = (float)(int32_t)next_u32() / 3e9f;
    check(&f);
    free(f.f32);
}

Test(cuda_weights, unknown_type_is_an_error)
{
    uint8_t q[64] = {0};
    pl_weight w = {.type = (pl_ggml_type)999, .rows = 2, .cols = 32, .row_bytes = 32, .q = q};
    pl_bf16 out[64];
    cr_assert_eq(pl_cuda_dequant_bf16(&w, 0, 2, out, 2), -1);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

Test(cuda_weights, host_load_time_of_a_q8_matrix)
{
    pl_weight w = {.type = PL_GGML_TYPE_Q8_0, .rows = 4096, .cols = 4096};
    w.q = random_rows(w.type, w.rows, w.cols, &w.row_bytes);
    pl_bf16 *out = malloc(sizeof(pl_bf16) * 4096 * 4096);
    int nt = pl_cuda_weights_threads(0);
    double t0 = now_s();
    cr_assert_eq(pl_cuda_dequant_bf16(&w, 0, 4096, out, 1), 0);
    double t1 = now_s();
    cr_assert_eq(pl_cuda_dequant_bf16(&w, 0, 4096, out, nt), 0);
    double t2 = now_s();
    printf("dequant Q8_0 4096x4096 -> bf16: 1 thread %.1f ms, %d threads %.1f ms "
           "(%.2f GB/s of bf16)\n", (t1 - t0) * 1e3, nt, (t2 - t1) * 1e3,
           4096.0 * 4096 * 2 / (t2 - t1) / 1e9);
    free(out);
    free((void *)w.q);
}
