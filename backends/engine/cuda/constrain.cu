/* constrain.cu - the constraint mask kernel (constrain.cuh): one block per
 * sequence; thread 0 advances the state through the byte DFA (a token is a
 * handful of bytes), then the block walks the state's mask row. */
#include <math.h>

#include "backends/engine/cuda/constrain.cuh"

static __global__ void constrain_kernel(float *pen, const pl_cuda_samp *ps,
                                        const int32_t *tokens, int32_t *state_out,
                                        int n_vocab, int32_t eos)
{
    __shared__ int32_t state;
    __shared__ int allowed;
    const pl_cuda_samp *p = &ps[blockIdx.x];
    if (!p->sample || !p->fsm.mask) {
        if (state_out && threadIdx.x == 0)
            state_out[blockIdx.x] = -1;
        return;
    }
    if (threadIdx.x == 0) {
        int32_t ph = p->fsm_ph_row1 > 0 ? tokens[p->fsm_ph_row1 - 1] : -1;
        state = pl_fsm_step_state(&p->fsm, &p->vocab, p->fsm_state, ph);
        allowed = 0;
        if (state_out)
            state_out[blockIdx.x] = state;
    }
    __syncthreads();
    int32_t s = state;
    if (s < 0 || s >= p->fsm.n_states)
        return;                  /* as the CPU sampler: nothing masked */
    float *x = pen + (size_t)blockIdx.x * n_vocab;
    int n = n_vocab < p->vocab.n_vocab ? n_vocab : p->vocab.n_vocab, mine = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        if (pl_fsm_allowed(&p->fsm, s, i))
            mine++;
        else
            x[i] = -INFINITY;
    }
    if (mine)
        atomicAdd(&allowed, mine);
    __syncthreads();
    if (threadIdx.x == 0 && allowed == 0 && eos >= 0 && eos < n_vocab)
        x[eos] = 0.0f;           /* nothing allowed: end rather than break the grammar */
}

extern "C" int pl_cuda_constrain(float *pen, const pl_cuda_samp *p, const int32_t *tokens,
                                 int32_t *state_out, int n_seqs, int n_vocab, int32_t eos_id,
                                 cudaStream_t st)
{
    PL_CUDA_ARG(pen && p && tokens && n_seqs >= 0 && n_vocab > 0);
    if (n_seqs == 0)
        return 0;
    constrain_kernel<<<n_seqs, 256, 0, st>>>(pen, p, tokens, state_out, n_vocab, eos_id);
    PL_CUDA_LAUNCHED();
    return 0;
}
