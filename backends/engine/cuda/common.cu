/* common.cu - error recording for the check macros, device availability
 * (host bf16 conversion: src/base/half.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "backends/engine/cuda/common.cuh"

static __thread char last_err[512];

int pl_cuda_check_(cudaError_t err, const char *file, int line)
{
    if (err == cudaSuccess)
        return 0;
    snprintf(last_err, sizeof last_err, "%s:%d: CUDA error %s: %s", file, line,
             cudaGetErrorName(err), cudaGetErrorString(err));
    return -1;
}

int pl_cuda_fail_(const char *file, int line, const char *fmt, ...)
{
    int off = snprintf(last_err, sizeof last_err, "%s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    if (off > 0 && (size_t)off < sizeof last_err)
        vsnprintf(last_err + off, sizeof last_err - (size_t)off, fmt, ap);
    va_end(ap);
    return -1;
}

const char *pl_cuda_last_error(void)
{
    return last_err;
}

int pl_cuda_available(char *why, size_t n)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        if (why && n)
            snprintf(why, n, "no usable CUDA driver or device (%s: %s)",
                     cudaGetErrorName(err), cudaGetErrorString(err));
        cudaGetLastError(); /* clear the sticky-free error state */
        return 0;
    }
    if (count == 0) {
        if (why && n)
            snprintf(why, n, "no CUDA device found");
        return 0;
    }
    if (why && n)
        why[0] = '\0';
    return 1;
}
