/* add.cu - residual add kernel (vectorised by 4 when aligned). */
#include "backends/engine/cuda/add.cuh"

static __global__ void add4_kernel(float4 *x, const float4 *y, size_t n4)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 a = x[i], b = y[i];
        a.x += b.x; a.y += b.y; a.z += b.z; a.w += b.w;
        x[i] = a;
    }
}

static __global__ void add_kernel(float *x, const float *y, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] += y[i];
}

extern "C" int pl_cuda_add(float *x, const float *y, size_t n, cudaStream_t st)
{
    PL_CUDA_ARG(x && y);
    if (n == 0)
        return 0;
    int aligned = ((uintptr_t)x % 16 == 0) && ((uintptr_t)y % 16 == 0) && n % 4 == 0;
    if (aligned) {
        size_t n4 = n / 4;
        add4_kernel<<<(unsigned)((n4 + 255) / 256), 256, 0, st>>>((float4 *)x,
                                                              (const float4 *)y, n4);
    } else {
        add_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(x, y, n);
    }
    PL_CUDA_LAUNCHED();
    return 0;
}

static __global__ void add_bias_kernel(float *y, const float *b, int n_cols, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] += b[i % n_cols];
}

extern "C" int pl_cuda_add_bias(float *y, const float *b, int n_rows, int n_cols,
                                cudaStream_t st)
{
    PL_CUDA_ARG(y && b && n_rows >= 0 && n_cols > 0);
    size_t n = (size_t)n_rows * n_cols;
    if (n == 0)
        return 0;
    add_bias_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(y, b, n_cols, n);
    PL_CUDA_LAUNCHED();
    return 0;
}
