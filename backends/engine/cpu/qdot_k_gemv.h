/* qdot_k_gemv.h - the decode GEMV of Q4_K and Q5_K weights
 * (qdot_k_gemv.c): four weight rows at a time against one activation row,
 * each output bit-identical to the single-row kernel (qdot_k.h) on every
 * ISA path. pl_op_qmatmul_rows dispatches here for one activation row.
 */
#ifndef PL_CPU_QDOT_K_GEMV_H
#define PL_CPU_QDOT_K_GEMV_H

#include <stddef.h>
#include <stdint.h>

#include "backends/engine/cpu/ops.h"
#include "backends/engine/cpu/qdot_vnni.h"

/** True for the types below: Q4_K, Q5_K. */
int pl_qdot_k_gemv_supported(pl_ggml_type t);

/** y[o] = pl_qdot_k(t, row o of w, a, n_blk * 32) for weight rows
 *  [o0, o0 + 4k), the largest such run inside [o0, o1), through level
 *  lv's int8 dot (NONE: AVX2's; the caller passes only a level the CPU
 *  has). Returns 4k, the rows written; 0 without AVX2, for other types or
 *  rows too wide (the caller's single-row kernels take what is left). */
int pl_qdot_k_gemv(pl_vnni_level lv, pl_ggml_type t, const uint8_t *w, size_t row_bytes,
                   const pl_q8_act *a, int n_blk, float *y, int o0, int o1);

#endif
