/* softcap.cu - soft-capping kernel for the logits before sampling. */
#include "backends/engine/cuda/softcap.cuh"

static __global__ void softcap_kernel(float *x, size_t n, float cap)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] = cap * tanhf(x[i] / cap);
}

extern "C" int pl_cuda_softcap(float *x, size_t n, float cap, cudaStream_t st)
{
    PL_CUDA_ARG(x && cap > 0.0f && cap < 1e30f);
    if (n == 0)
        return 0;
    softcap_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(x, n, cap);
    PL_CUDA_LAUNCHED();
    return 0;
}
