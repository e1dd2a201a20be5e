/* hdot.h - F16 and BF16 weight matrices times f32 activations: the CPU
 * runner's kernels for checkpoints kept in their own precision.
 *
 * Each output is one dot product of a weight row (widened exactly to f32)
 * with an activation row, summed in one fixed order (16 lanes: two
 * 8-lane FMA accumulators, then the lanes pairwise, then the tail), so a
 * value does not depend on how many rows are computed together (batch
 * invariance) nor on the path: the scalar reference gives the AVX2
 * kernel's bits.
 */
#ifndef PL_CPU_HDOT_H
#define PL_CPU_HDOT_H

#include <stddef.h>

#include "backends/formats/gguf.h"

/** True for the types these kernels read (F16, BF16). */
int pl_op_hdot_supported(pl_ggml_type t);

/** Dot product of one weight row of type t (n elements) with x: the value
 *  pl_op_hmatmul_rows gives. Scalar reference. */
float pl_op_hdot_ref(pl_ggml_type t, const void *w, const float *x, int n);

/**
 * y[r * ldy + o] = w row o . x row r for o in [o0, o1) and r in
 * [0, n_rows): w is rows of row_bytes bytes of type t (F16 or BF16), x
 * n_rows rows of n floats. AVX2+F16C when the CPU has it, else the
 * reference; the same bits either way.
 */
void pl_op_hmatmul_rows(pl_ggml_type t, const void *w, size_t row_bytes, const float *x, int n,
                        int n_rows, float *y, int ldy, int o0, int o1);

#endif
