/* qdot_avx512.h - Q5_0 and Q5_1 dot kernels on 512-bit registers (AVX-512
 * F/BW/VL + VNNI), bit-identical to the AVX2 ones (qdot_k.c).
 * pl_op_qmatmul_rows dispatches here when the CPU has them.
 */
#ifndef PL_CPU_QDOT_AVX512_H
#define PL_CPU_QDOT_AVX512_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/engine/cpu/ops.h"

/** True when this CPU runs the kernels below (the one cpuid probe). */
bool pl_qdot512_available(void);

/** True when weight type t has a kernel here. */
bool pl_qdot512_supported(pl_ggml_type t);

/** y[o] for weight rows [o0, o1) (row stride row_bytes, nb blocks each)
 *  against one activation row x: the decode kernels. The caller checks
 *  pl_qdot512_available() and pl_qdot512_supported(t). */
void pl_qdot512_row1(pl_ggml_type t, const uint8_t *w, size_t row_bytes, const pl_q8_act *x,
                     int nb, float *y, int o0, int o1);

/** One weight row w against nr <= 4 activation rows (a_stride blocks apart):
 *  out[r * out_stride]; each row's sum is the single-row kernel's, bit for
 *  bit, so a request's result does not depend on its batch. */
void pl_qdot512_rows(pl_ggml_type t, const uint8_t *w, const pl_q8_act *a, size_t a_stride,
                     int nb, int nr, float *out, size_t out_stride);

#endif
