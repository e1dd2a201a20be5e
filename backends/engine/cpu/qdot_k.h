/* qdot_k.h - Q5_0, Q5_1, Q4_K, Q5_K and Q6_K weight rows dotted with q8
 * activations (qdot_k.c); pl_op_qdot / pl_op_qmatmul_rows dispatch here.
 */
#ifndef PL_CPU_QDOT_K_H
#define PL_CPU_QDOT_K_H

#include <stddef.h>
#include <stdint.h>

#include "backends/engine/cpu/ops.h"

/** True for the types below. */
int pl_qdot_k_supported(pl_ggml_type t);
/** Bytes per block of those types (0 for others). */
size_t pl_qdot_k_block_bytes(pl_ggml_type t);
/** Scalar reference; n is a multiple of the type's block (32 or 256). */
float pl_qdot_k_ref(pl_ggml_type t, const void *w, const pl_q8_act *a, int n);
/** AVX2 when the CPU has it, else the reference. */
float pl_qdot_k(pl_ggml_type t, const void *w, const pl_q8_act *a, int n);

/** y[o] = pl_qdot_k(t, row o of w, a, n) for o in [o0, o1), rows row_bytes
 *  apart: the decode loop, its kernel chosen once per call. */
void pl_qdot_k_row1(pl_ggml_type t, const uint8_t *w, size_t row_bytes, const pl_q8_act *a,
                    int n, float *y, int o0, int o1);

/** One weight row against nr <= 4 activation rows (a_stride blocks apart):
 *  out[r * out_stride] = pl_qdot_k(t, w, a + r * a_stride, n), bit for bit. */
void pl_qdot_k_rows(pl_ggml_type t, const void *w, const pl_q8_act *a, size_t a_stride, int n,
                    int nr, float *out, size_t out_stride);

#endif
