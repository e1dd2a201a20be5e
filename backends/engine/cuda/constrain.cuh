/* constrain.cuh - constrained decoding on the GPU: the automaton's state of
 * each constrained sequence is advanced on the device by the id its
 * placeholder row stood for (step N+1 never waits for step N's id on the
 * host), then the state's mask row is applied to the penalised logits
 * before sampling (greedy or drawn; logprobs stay those of the raw logits,
 * as the CPU sampler). The same logic as the CPU runner + sampler
 * (cpu_runner.c sample_all, sampler.c apply_mask), from fsm_flat.h. */
#ifndef PL_CUDA_CONSTRAIN_CUH
#define PL_CUDA_CONSTRAIN_CUH

#include "backends/engine/cuda/sample.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * For each sequence s with p[s].sample and p[s].fsm.mask: state =
 * p[s].fsm_state, advanced by tokens[p[s].fsm_ph_row1 - 1] when fsm_ph_row1 >
 * 0 (pl_fsm_step_state); a state out of range masks nothing (the engine
 * ends the request at its next token). Otherwise every token id < min(n_vocab,
 * p[s].vocab.n_vocab) that the state refuses gets pen = -inf; when the
 * state allows none, pen[eos_id] = 0 so that end of generation is sampled
 * (the CPU sampler returns eos_id then). state_out (n_seqs, may be NULL)
 * receives the state used, -1 for sequences without a constraint (tests).
 */
int pl_cuda_constrain(float *pen, const pl_cuda_samp *p, const int32_t *tokens,
                      int32_t *state_out, int n_seqs, int n_vocab, int32_t eos_id,
                      cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
