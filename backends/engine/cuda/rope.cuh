/* rope.cuh - rotary position embedding on the q and k heads of a row. */
#ifndef PL_CUDA_ROPE_CUH
#define PL_CUDA_ROPE_CUH

#include "backends/engine/cuda/common.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/** Pairing of the rotated dimensions. */
typedef enum pl_rope_mode {
    PL_ROPE_MODE_NORM = 0,  /**< llama.cpp "normal": pairs (2i, 2i+1) */
    PL_ROPE_MODE_NEOX = 2,  /**< GPT-NeoX: pairs (i, i + n_rot/2) */
} pl_rope_mode;

/**
 * Rotate in place the first n_heads heads of each row of qk.
 * qk: (n_rows, row_stride) fp32, heads of head_dim contiguous from the row
 * start (q heads then k heads); positions: (n_rows) device.
 * Dimension pair i (i < n_rot/2) turns by pos * inv_freq[i]; inv_freq
 * (device, n_rot/2) has any scaling applied (pl_model.rope_inv_freq);
 * then the rotated dimensions are multiplied by mscale (YaRN's magnitude
 * factor, pl_model.rope_mscale; 1: none). Dimensions >= n_rot are left as
 * they are.
 */
int pl_cuda_rope(float *qk, const int32_t *positions, int n_rows, int row_stride,
                 int n_heads, int head_dim, int n_rot, const float *inv_freq, float mscale,
                 pl_rope_mode mode, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
