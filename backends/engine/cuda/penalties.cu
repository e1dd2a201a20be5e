/* penalties.cu - logit bias, repetition/frequency/presence penalties and
 * eos masking, written to a copy of the logits (the raw ones stay for
 * logprobs). One block per sequence; order as the CPU sampler (sampler.h). */
#include <math.h>

#include "backends/engine/cuda/sample.cuh"

/* History id i: the packed ids, then the id the placeholder row stood for
 * (resolved on the device by the feedback kernel; the host did not know it). */
static __device__ __forceinline__ int hist_id(const int32_t *h, const pl_cuda_samp &p,
                                              const int32_t *tokens, int i)
{
    return i < p.n_hist ? h[i] : tokens[p.ph_row1 - 1];
}

static __device__ void apply_history(float *x, const pl_cuda_samp &p, const int32_t *hist,
                                     const int32_t *tokens, int n_vocab)
{
    const int32_t *h = hist + p.hist_off;
    int n = p.n_hist + (p.ph_row1 > 0 && tokens);
    /* The first occurrence of each id applies that id's penalty, so every
     * logit is written by one thread only. O(n^2 / threads). */
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        int t = hist_id(h, p, tokens, i), c = 1, first = 1;
        if (t < 0 || t >= n_vocab)
            continue;
        for (int j = 0; j < n; j++) {
            if (j == i || hist_id(h, p, tokens, j) != t)
                continue;
            if (j < i) { first = 0; break; }
            c++;
        }
        if (!first)
            continue;
        float v = x[t];
        if (p.repetition != 1.0f && p.repetition > 0.0f)
            v = v > 0.0f ? v / p.repetition : v * p.repetition;
        x[t] = v - p.frequency * (float)c - p.presence;
    }
}

static __global__ void penalties_kernel(const float *logits, float *pen,
                                        const pl_cuda_samp *ps,
                                        const int32_t *bias_tok, const float *bias_val,
                                        const int32_t *hist, const int32_t *tokens,
                                        int n_vocab, int32_t eos)
{
    const pl_cuda_samp p = ps[blockIdx.x];
    if (!p.sample)
        return;
    const float *raw = logits + (size_t)blockIdx.x * n_vocab;
    float *x = pen + (size_t)blockIdx.x * n_vocab;
    for (int i = threadIdx.x; i < n_vocab; i += blockDim.x)
        x[i] = raw[i];
    __syncthreads();
    if (threadIdx.x == 0) {  /* serial: bias entries may repeat an id */
        for (int i = 0; i < p.n_bias; i++) {
            int t = bias_tok[p.bias_off + i];
            if (t >= 0 && t < n_vocab)
                x[t] += bias_val[p.bias_off + i];
        }
    }
    __syncthreads();
    if (p.repetition != 1.0f || p.frequency != 0.0f || p.presence != 0.0f)
        apply_history(x, p, hist, tokens, n_vocab);
    __syncthreads();
    if (threadIdx.x == 0 && p.ignore_eos && eos >= 0 && eos < n_vocab)
        x[eos] = -INFINITY;
}
extern "C" int pl_cuda_penalties(const float *logits, float *pen, const pl_cuda_samp *p,
                                 const int32_t *bias_tok, const float *bias_val,
                                 const int32_t *hist, const int32_t *tokens, int n_seqs,
                                 int n_vocab, int32_t eos_id, cudaStream_t st)
{
    PL_CUDA_ARG(logits && pen && p && bias_tok && bias_val && hist && n_vocab > 0 && n_seqs >= 0);
    if (n_seqs == 0)
        return 0;
    penalties_kernel<<<n_seqs, 256, 0, st>>>(logits, pen, p, bias_tok, bias_val, hist,
                                             tokens, n_vocab, eos_id);
    PL_CUDA_LAUNCHED();
    return 0;
}
