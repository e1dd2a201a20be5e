/* qdot_block_order.h - Q4_0, Q4_1, Q5_0, Q8_0 and MXFP4 weight rows against one
 * q8 activation row in block order (qdot_block_order.c): each output is
 * pl_op_qdot_ref's sum bit for bit, the per-block integer dot then
 * acc += d_w * d_a * isum (+ m_w * s_a), block after block. The rows of
 * the AMX mode that the tiles do not take (qdot_amx.h).
 */
#ifndef PL_CPU_QDOT_BLOCK_ORDER_H
#define PL_CPU_QDOT_BLOCK_ORDER_H

#include <stddef.h>
#include <stdint.h>

#include "backends/engine/cpu/ops.h"

/** True for the types summed in block order: Q4_0, Q4_1, Q5_0, Q8_0 and
 *  MXFP4. */
static inline int pl_qdot_block_order_type(pl_ggml_type t)
{
    return t == PL_GGML_TYPE_Q4_0 || t == PL_GGML_TYPE_Q4_1 || t == PL_GGML_TYPE_Q5_0 ||
           t == PL_GGML_TYPE_Q8_0 || t == PL_GGML_TYPE_MXFP4;
}

/** y[o] = pl_op_qdot_ref(t, row o of w, a, n_blk * 32) for o in [o0, o1),
 *  rows row_bytes apart; t is Q4_0, Q4_1, Q5_0 or Q8_0. 8 weight rows at a time
 *  on AVX2, the rest (and CPUs without AVX2) through the reference. */
void pl_qdot_block_order_row1(pl_ggml_type t, const uint8_t *w, size_t row_bytes,
                              const pl_q8_act *a, int n_blk, float *y, int o0, int o1);

/** y[r, o] for activation rows [0, n_rows) (n_blk blocks each, y row
 *  stride ldy) and weight rows [o0, o1), each equal to pl_op_qdot_ref bit
 *  for bit: 8 weight rows at a time on AVX2, each block unpacked once for
 *  every activation row. */
void pl_qdot_block_order_rows(pl_ggml_type t, const uint8_t *w, size_t row_bytes,
                              const pl_q8_act *x, int n_blk, int n_rows, float *y, int ldy,
                              int o0, int o1);

/** The same, for tests: 0 (nothing written) without AVX2, so that a test
 *  can tell the kernel from the reference. */
int pl_qdot_block_order_row1_avx2(pl_ggml_type t, const uint8_t *w, size_t row_bytes,
                                  const pl_q8_act *a, int n_blk, float *y, int o0, int o1);

#endif
