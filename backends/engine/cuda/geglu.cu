/* geglu.cu - GeGLU kernel over the fused gate/up GEMM output. */
#include "backends/engine/cuda/geglu.cuh"

#define GELU_K0 0.7978845608028654f   /* sqrt(2 / pi) */
#define GELU_K1 0.044715f

static __global__ void geglu_kernel(const float *gu, __nv_bfloat16 *out, int ff, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    size_t r = i / ff, c = i % ff;
    float g = gu[r * 2 * ff + c], u = gu[r * 2 * ff + ff + c];
    float gelu = 0.5f * g * (1.0f + tanhf(GELU_K0 * g * (1.0f + GELU_K1 * g * g)));
    out[i] = __float2bfloat16(gelu * u);
}

extern "C" int pl_cuda_geglu(const float *gu, pl_bf16 *out, int n_rows, int ff,
                             cudaStream_t st)
{
    PL_CUDA_ARG(gu && out && n_rows >= 0 && ff > 0);
    size_t n = (size_t)n_rows * ff;
    if (n == 0)
        return 0;
    geglu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(gu, (__nv_bfloat16 *)out, ff, n);
    PL_CUDA_LAUNCHED();
    return 0;
}
