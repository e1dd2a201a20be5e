/* qdot_k_repack.h - the many-row GEMM of Q4_K, Q5_K and Q6_K weights
 * (qdot_k_repack.c): 8 weight rows repacked side by side once per call and
 * dotted with every activation row, each output bit-identical to the
 * lane-wise single-row kernel (qdot_k.h) on every ISA path.
 * pl_op_qmatmul_rows dispatches here for prefill, and for decode (one
 * activation row) to the 8-row GEMV.
 */
#ifndef PL_CPU_QDOT_K_REPACK_H
#define PL_CPU_QDOT_K_REPACK_H

#include <stddef.h>
#include <stdint.h>

#include "backends/engine/cpu/ops.h"
#include "backends/engine/cpu/qdot_vnni.h"

/** True for the types below: Q4_K, Q5_K, Q6_K. */
int pl_qdot_k_gemm_supported(pl_ggml_type t);

/** y[r * ldy + o] = pl_qdot_k(t, row o of w, x row r, n_blk * 32) for
 *  activation rows [0, n_rows) (n_blk blocks apart) and weight rows
 *  [o0, o0 + 8k), the largest such run inside [o0, o1), through level lv's
 *  int8 dot (the caller passes only a level the CPU has). Returns 8k, the
 *  rows written; 0 without AVX2, for other types or rows too wide (the
 *  caller takes the lane-wise kernels for what is left). */
int pl_qdot_k_gemm(pl_vnni_level lv, pl_ggml_type t, const uint8_t *w, size_t row_bytes,
                   const pl_q8_act *x, int n_blk, int n_rows, float *y, int ldy, int o0, int o1);

/** The one-activation-row case (decode): y[o] = pl_qdot_k(t, row o of w,
 *  x, n_blk * 32) for o in [o0, o0 + 8k), the largest such run inside
 *  [o0, o1), 8 weight rows at a time straight from w (no repacking).
 *  Returns 8k; 0 without AVX2 or for other types. */
int pl_qdot_k_gemv(pl_vnni_level lv, pl_ggml_type t, const uint8_t *w, size_t row_bytes,
                   const pl_q8_act *x, int n_blk, float *y, int o0, int o1);

#endif
