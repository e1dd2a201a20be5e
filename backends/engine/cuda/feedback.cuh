/* feedback.cuh - on-device token feedback: placeholder rows take the id
 * sampled for their sequence slot in the previous step. */
#ifndef PL_CUDA_FEEDBACK_CUH
#define PL_CUDA_FEEDBACK_CUH

#include "backends/engine/cuda/common.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * For each row r with tokens[r] == placeholder (PL_TOKEN_PLACEHOLDER):
 * tokens[r] = slot_tok[seq_slot[row_seq[r]]] (device arrays). Rows whose
 * slot is out of [0, max_slots) are left as they are.
 */
int pl_cuda_feedback(int32_t *tokens, const int32_t *row_seq, const int32_t *seq_slot,
                     const int32_t *slot_tok, int max_slots, int n_rows,
                     int32_t placeholder, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
