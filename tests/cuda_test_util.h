/* cuda_test_util.h - helpers for the CUDA tests: skip without a GPU,
 * device buffers from host arrays, deterministic random data, and the
 * normalised error used as the pass criterion. */
#ifndef PL_CUDA_TEST_UTIL_H
#define PL_CUDA_TEST_UTIL_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/cuda/common.cuh"
#include "src/options.h"

/** Skip the calling test unless a CUDA device is usable. */
#define SKIP_WITHOUT_GPU() do {                                   \
        char why_[256];                                           \
        if (!pl_cuda_available(why_, sizeof why_))                \
            cr_skip_test("no GPU: %s", why_);                     \
    } while (0)

/** Assert a CUDA call succeeded, printing the runtime's message. */
#define CU(call) do { cudaError_t e_ = (call);                    \
        cr_assert_eq(e_, cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_)); } while (0)
/** Assert a checked entry point returned 0. */
#define OK(call) do { int rc_ = (call);                           \
        cr_assert_eq(rc_, 0, "%s: %s", #call, pl_cuda_last_error()); } while (0)

/** The CUDA runner's options as `parley serve` would get them with no
 *  flags (defaults, then PARLEY_CUDA_* and other environment aliases, so
 *  scripts/device/run.sh can rerun a test with another kernel), with the
 *  given memory share and graphs. */
static inline pl_cuda_opts tu_cuda_opts(double gpu_memory_utilization, bool graphs)
{
    pl_opts o;
    char err[256];
    cr_assert_eq(pl_opts_init(&o, err, sizeof err), 0, "%s", err);
    pl_cuda_opts c = o.engine.cuda;
    pl_opts_free(&o);
    c.gpu_memory_utilization = gpu_memory_utilization;
    c.graphs = graphs;
    return c;
}

static uint64_t tu_rng = 88172645463325252ull;

static inline void tu_seed(uint64_t s) { tu_rng = s ? s : 1; }

static inline float tu_uniform(void)  /* [-1, 1) */
{
    tu_rng ^= tu_rng << 13;
    tu_rng ^= tu_rng >> 7;
    tu_rng ^= tu_rng << 17;
    return (float)((tu_rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

static inline void tu_fill(float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = tu_uniform() * scale;
}

/** Round every element through bf16, as the GPU stores it. */
static inline void tu_round_bf16(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = pl_bf16_to_fp32(pl_fp32_to_bf16(x[i]));
}

static inline void *tu_dev(const void *host, size_t bytes)
{
    void *d = NULL;
    CU(cudaMalloc(&d, bytes ? bytes : 1));
    if (host)
        CU(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    else
        CU(cudaMemset(d, 0, bytes ? bytes : 1));
    return d;
}

static inline pl_bf16 *tu_dev_bf16(const float *x, size_t n)
{
    pl_bf16 *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = pl_fp32_to_bf16(x[i]);
    pl_bf16 *d = tu_dev(h, n * sizeof *h);
    free(h);
    return d;
}

static inline void tu_get(void *host, const void *dev, size_t bytes)
{
    CU(cudaDeviceSynchronize());
    CU(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
}

static inline void tu_get_bf16(float *x, const pl_bf16 *dev, size_t n)
{
    pl_bf16 *h = malloc(n * sizeof *h);
    tu_get(h, dev, n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        x[i] = pl_bf16_to_fp32(h[i]);
    free(h);
}

/** max |a - b| / max(max |b|, 1e-6): the normalised error the tests bound. */
static inline double tu_nerr(const float *a, const float *b, size_t n)
{
    double md = 0, mb = 1e-6;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > md || isnan(d))
            md = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > mb)
            mb = fabs(b[i]);
    }
    return md / mb;
}

#endif
