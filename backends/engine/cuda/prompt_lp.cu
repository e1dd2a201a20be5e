/* prompt_lp.cu - prompt logprobs: one block per row, the sampler's
 * log-softmax and top-N (logprobs.cuh). */
#include "backends/engine/cuda/logprobs.cuh"
#include "backends/engine/cuda/prompt_lp.cuh"

static __global__ void row_logprobs_kernel(const float *logits, int n_vocab,
                                           const int32_t *next, const int32_t *top, float *lp,
                                           int32_t *top_ids, float *top_lp)
{
    __shared__ float sv[32];
    __shared__ int si[32];
    int k = blockIdx.x, tk = top[k];
    pl_logprobs(logits + (size_t)k * n_vocab, n_vocab, next[k],
                tk < 0 ? 0 : tk > PL_CUDA_TOPN ? PL_CUDA_TOPN : tk, lp + k,
                top_ids + (size_t)k * PL_CUDA_TOPN, top_lp + (size_t)k * PL_CUDA_TOPN, sv, si);
}

extern "C" int pl_cuda_row_logprobs(const float *logits, int n, int n_vocab,
                                    const int32_t *next, const int32_t *top, float *lp,
                                    int32_t *top_ids, float *top_lp, cudaStream_t st)
{
    PL_CUDA_ARG(logits && next && top && lp && top_ids && top_lp && n >= 0 && n_vocab > 0);
    if (n == 0)
        return 0;
    row_logprobs_kernel<<<n, SAMPLE_THREADS, 0, st>>>(logits, n_vocab, next, top, lp, top_ids,
                                                      top_lp);
    PL_CUDA_LAUNCHED();
    return 0;
}
