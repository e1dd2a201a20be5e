/* ple.cu - Gemma 4's per-layer embedding and layer-end kernels (ple.cuh):
 * a block per (row, layer) or per row, sums of squares in fp32 by block
 * reduction, as the CPU runner's pl_op_rmsnorm computes them. */
#include "backends/engine/cuda/ple.cuh"

#define PLE_THREADS 256

static __global__ void ple_inputs_kernel(float *e, const float *tok, const float *norm,
                                         float ps, float ts, float eps, int n_layer, int np)
{
    __shared__ float sh[32];
    int r = blockIdx.x / n_layer, l = blockIdx.x % n_layer;
    size_t off = ((size_t)r * n_layer + l) * np;
    float *el = e + off;
    const float *tl = tok + off;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < np; i += blockDim.x) {
        float v = el[i] * ps;
        el[i] = v;
        ss += v * v;
    }
    float inv = rsqrtf(pl_block_sum(ss, sh) / (float)np + eps);
    for (int i = threadIdx.x; i < np; i += blockDim.x)
        el[i] = (el[i] * inv * norm[i] + tl[i] * ts) * 0.70710678118654752f;
}

static __global__ void ple_gate_kernel(const float *g, const float *e, int l, int n_layer,
                                       __nv_bfloat16 *out, int np, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / np, c = i % np;
        float v = g[i];
        float gl = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
        out[i] = __float2bfloat16(gl * e[(r * n_layer + l) * np + c]);
    }
}

static __global__ void rmsnorm2_sum_kernel(float *t, const float *t2, const float *w1,
                                           const float *w2, int n, float eps)
{
    __shared__ float sh[32];
    float *a = t + (size_t)blockIdx.x * n;
    const float *b = t2 + (size_t)blockIdx.x * n;
    float sa = 0.0f, sb = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        sa += a[i] * a[i];
        sb += b[i] * b[i];
    }
    float ia = rsqrtf(pl_block_sum(sa, sh) / (float)n + eps);
    float ib = rsqrtf(pl_block_sum(sb, sh) / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        a[i] = a[i] * ia * w1[i] + b[i] * ib * w2[i];
}

static __global__ void scale_rows_kernel(float *x, const float *scale, size_t n)
{
    float s = *scale;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

extern "C" int pl_cuda_ple_inputs(float *e, const float *tok, const float *norm,
                                  float proj_scale, float tok_scale, float eps, int n_rows,
                                  int n_layer, int n_ple, cudaStream_t st)
{
    PL_CUDA_ARG(e && tok && norm && n_rows >= 0 && n_layer > 0 && n_ple > 0 &&
                n_ple <= 1024 && eps >= 0.0f);
    if (n_rows == 0)
        return 0;
    ple_inputs_kernel<<<n_rows * n_layer, PLE_THREADS, 0, st>>>(e, tok, norm, proj_scale,
                                                               tok_scale, eps, n_layer, n_ple);
    PL_CUDA_LAUNCHED();
    return 0;
}

extern "C" int pl_cuda_ple_gate(const float *g, const float *e, int l, int n_layer,
                                pl_bf16 *out, int n_rows, int n_ple, cudaStream_t st)
{
    PL_CUDA_ARG(g && e && out && l >= 0 && l < n_layer && n_rows >= 0 && n_ple > 0);
    size_t n = (size_t)n_rows * n_ple;
    if (n == 0)
        return 0;
    ple_gate_kernel<<<pl_cuda_stride_blocks(n, PLE_THREADS), PLE_THREADS, 0, st>>>(
        g, e, l, n_layer, (__nv_bfloat16 *)out, n_ple, n);
    PL_CUDA_LAUNCHED();
    return 0;
}

extern "C" int pl_cuda_rmsnorm2_sum(float *t, const float *t2, const float *w1,
                                    const float *w2, int n_rows, int n, float eps,
                                    cudaStream_t st)
{
    PL_CUDA_ARG(t && t2 && w1 && w2 && n_rows >= 0 && n > 0 && eps >= 0.0f);
    if (n_rows == 0)
        return 0;
    rmsnorm2_sum_kernel<<<n_rows, PLE_THREADS, 0, st>>>(t, t2, w1, w2, n, eps);
    PL_CUDA_LAUNCHED();
    return 0;
}

extern "C" int pl_cuda_scale_rows(float *x, const float *scale, int n_rows, int n,
                                  cudaStream_t st)
{
    PL_CUDA_ARG(x && scale && n_rows >= 0 && n > 0);
    size_t total = (size_t)n_rows * n;
    if (total == 0)
        return 0;
    scale_rows_kernel<<<pl_cuda_stride_blocks(total, PLE_THREADS), PLE_THREADS, 0, st>>>(
        x, scale, total);
    PL_CUDA_LAUNCHED();
    return 0;
}
