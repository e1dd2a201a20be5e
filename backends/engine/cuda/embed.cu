/* embed.cu - embedding gather kernel and its checked entry point. */
#include "backends/engine/cuda/embed.cuh"

/* One block per row; threads stride over the row. */
static __global__ void embed_kernel(const __nv_bfloat16 *table, const int32_t *tokens,
                                    float *x, int dim, int n_vocab, float scale)
{
    int r = blockIdx.x;
    int id = tokens[r];
    float *dst = x + (size_t)r * dim;
    if (id < 0 || id >= n_vocab) {
        for (int i = threadIdx.x; i < dim; i += blockDim.x)
            dst[i] = 0.0f;
        return;
    }
    const __nv_bfloat16 *src = table + (size_t)id * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        dst[i] = __bfloat162float(src[i]) * scale;
}

extern "C" int pl_cuda_embed(const pl_bf16 *table, const int32_t *tokens, float *x,
                             int n_rows, int dim, int n_vocab, float scale, cudaStream_t st)
{
    PL_CUDA_ARG(table && tokens && x && dim > 0 && n_vocab > 0 && n_rows >= 0);
    PL_CUDA_ARG(scale > 0.0f && scale < 1e30f);
    if (n_rows == 0)
        return 0;
    embed_kernel<<<n_rows, 256, 0, st>>>((const __nv_bfloat16 *)table, tokens, x,
                                         dim, n_vocab, scale);
    PL_CUDA_LAUNCHED();
    return 0;
}
