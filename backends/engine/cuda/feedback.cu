/* feedback.cu - token feedback kernel: reads the previous step's sampled
 * ids, which the sampler left per slot on the same stream, so no host
 * round trip sits between two decode steps. */
#include "backends/engine/cuda/feedback.cuh"

static __global__ void feedback_kernel(int32_t *tokens, const int32_t *row_seq,
                                       const int32_t *seq_slot, const int32_t *slot_tok,
                                       int max_slots, int n_rows, int32_t ph)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n_rows || tokens[r] != ph)
        return;
    int slot = seq_slot[row_seq[r]];
    if (slot >= 0 && slot < max_slots)
        tokens[r] = slot_tok[slot];
}

extern "C" int pl_cuda_feedback(int32_t *tokens, const int32_t *row_seq,
                                const int32_t *seq_slot, const int32_t *slot_tok,
                                int max_slots, int n_rows, int32_t placeholder,
                                cudaStream_t st)
{
    PL_CUDA_ARG(tokens && row_seq && seq_slot && slot_tok && max_slots > 0 && n_rows >= 0);
    if (n_rows == 0)
        return 0;
    feedback_kernel<<<(n_rows + 127) / 128, 128, 0, st>>>(tokens, row_seq, seq_slot,
                                                          slot_tok, max_slots, n_rows,
                                                          placeholder);
    PL_CUDA_LAUNCHED();
    return 0;
}
