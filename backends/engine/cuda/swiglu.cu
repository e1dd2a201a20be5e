/* swiglu.cu - SwiGLU kernel over the fused gate/up GEMM output. */
#include "backends/engine/cuda/swiglu.cuh"

static __global__ void swiglu_kernel(const float *gu, __nv_bfloat16 *out, int ff,
                                     size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    size_t r = i / ff, c = i % ff;
    float g = gu[r * 2 * ff + c], u = gu[r * 2 * ff + ff + c];
    out[i] = __float2bfloat16(g / (1.0f + expf(-g)) * u);
}

extern "C" int pl_cuda_swiglu(const float *gu, pl_bf16 *out, int n_rows, int ff,
                              cudaStream_t st)
{
    PL_CUDA_ARG(gu && out && n_rows >= 0 && ff > 0);
    size_t n = (size_t)n_rows * ff;
    if (n == 0)
        return 0;
    swiglu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(gu, (__nv_bfloat16 *)out,
                                                              ff, n);
    PL_CUDA_LAUNCHED();
    return 0;
}
