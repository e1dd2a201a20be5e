/* common.cuh - shared declarations of the CUDA runner: the error-check
 * macro carrying __FILE__/__LINE__, bf16 as seen from C, and availability.
 *
 * Every header under backends/engine/cuda/ is plain C so that the runner
 * (C) and the kernel tests (C) include the same declarations the .cu files
 * define. Entry points return 0 on success and -1 on error; the message is
 * kept per thread and read with pl_cuda_last_error().
 */
#ifndef PL_CUDA_COMMON_CUH
#define PL_CUDA_COMMON_CUH

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

/* Host bf16 <-> float for weight upload and the tests: pl_fp32_to_bf16,
 * pl_bf16_to_fp32 (the one copy, shared with the CPU side). */
#include "src/base/half.h"

#ifdef __cplusplus
extern "C" {
#endif

/** bf16 as raw bits on the host side (upper 16 bits of an IEEE float). */
typedef uint16_t pl_bf16;

/** Record err (when not cudaSuccess) with its place; returns 0 or -1. */
int pl_cuda_check_(cudaError_t err, const char *file, int line);
/** Record a non-CUDA failure (bad argument) with its place; returns -1. */
int pl_cuda_fail_(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/** The last recorded failure of this thread ("" when none). */
const char *pl_cuda_last_error(void);

/** Check a CUDA call; on failure record it and `goto fail`. */
#define PL_CUDA_TRY(call) \
    do { if (pl_cuda_check_((call), __FILE__, __LINE__)) goto fail; } while (0)
/** Check a CUDA call; on failure record it and return -1. */
#define PL_CUDA_CHECK(call) \
    do { if (pl_cuda_check_((call), __FILE__, __LINE__)) return -1; } while (0)
/** Validate an argument; on failure record it and return -1. */
#define PL_CUDA_ARG(cond) \
    do { if (!(cond)) return pl_cuda_fail_(__FILE__, __LINE__, "bad argument: %s", #cond); } while (0)

/**
 * Is a usable CUDA device present? Returns 1, or 0 with the reason in why
 * (no driver, no device, driver too old). Never aborts: the runtime is
 * linked statically and finds the driver at run time.
 */
int pl_cuda_available(char *why, size_t n);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
#include <cuda_bf16.h>
/** Blocks of `threads` for a grid-stride loop over n items (at most 65535:
 *  the loop takes the rest). */
static inline unsigned pl_cuda_stride_blocks(size_t n, int threads)
{
    size_t b = (n + (size_t)threads - 1) / (size_t)threads;
    return (unsigned)(b < 65535 ? b : 65535);
}

/** Launch-time check: the last kernel launch error, recorded with its place. */
#define PL_CUDA_LAUNCHED() PL_CUDA_CHECK(cudaGetLastError())

static __device__ __forceinline__ float pl_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float pl_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/** Sum over a block of up to 1024 threads; every thread gets the result.
 *  sh must hold 32 floats. */
static __device__ __forceinline__ float pl_block_sum(float v, float *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = pl_warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    int nw = (blockDim.x + 31) >> 5;
    v = lane < nw ? sh[lane] : 0.0f;
    return pl_warp_sum(v);
}
#endif

#endif
