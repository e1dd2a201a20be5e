/* qdot_amx.h - matmuls of Q4_0, Q4_1 and Q8_0 weights in block order, with
 * AMX tiles from 16 activation rows (qdot_amx.c).
 *
 * Every output is pl_op_qdot_ref's sum bit for bit, as on every other path
 * of these types (qdot_block_order.h): per 32-element block the integer
 * dot, then acc += d_w * d_a * isum (+ m_w * s_a), block after block. The
 * tiles sum a whole block in one int32, so the AMX mode changes no output:
 *  - from 16 rows, 16 at a time, the integer dots run on the tiles
 *    (TDPBSSD: 16 activation rows x 16 weight rows x one block), and an
 *    AVX-512 epilogue scales and adds them in block order;
 *  - fewer rows, and those past the last 16, take the default kernels
 *    (pl_op_qmatmul_rows), which sum the same way.
 * PL_AMX_EMULATED runs the same kernel on a C model of the tiles (with the
 * shape checks the CPU makes), so CPUs without AMX test it too.
 */
#ifndef PL_CPU_QDOT_AMX_H
#define PL_CPU_QDOT_AMX_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/engine/cpu/ops.h"

typedef enum pl_amx_mode {
    PL_AMX_OFF = 0,              /**< the default kernels only */
    PL_AMX_TILES,                /**< the CPU's tiles (cpu_features amx_int8) */
    PL_AMX_EMULATED,             /**< the tile kernel on a C model of the tiles */
} pl_amx_mode;

/** True for the weight types below: Q4_0, Q4_1 and Q8_0. */
bool pl_amx_supported(pl_ggml_type t);

/** y[r, o] for weight rows [o0, o1) (row stride row_bytes) and n_rows
 *  activation rows of n_blk blocks (y row stride ldy), each equal to
 *  pl_op_qdot_ref bit for bit. mode PL_AMX_TILES needs the CPU's AMX-INT8
 *  (pl_cpu_features()->amx_int8); PL_AMX_OFF takes pl_op_qmatmul_rows for
 *  every row. t must be supported. */
void pl_amx_qmatmul(pl_amx_mode mode, pl_ggml_type t, const void *w, size_t row_bytes,
                    const pl_q8_act *x, int n_blk, int n_rows, float *y, int ldy, int o0,
                    int o1);

/** The tile kernel with its AVX-512 epilogue (avx512 = 1, on a CPU with
 *  AVX-512 F/BW/VL) or the scalar one (0), for tests: n_rows must be a
 *  multiple of 16. */
void pl_amx_qmatmul_tiles(pl_amx_mode mode, int avx512, pl_ggml_type t, const void *w,
                          size_t row_bytes, const pl_q8_act *x, int n_blk, int n_rows,
                          float *y, int ldy, int o0, int o1);

/** Runs the tile kernel on the CPU's tiles and on the C model, over a fixed
 *  pseudo-random problem of each type. 0 when they agree bit for bit; -1
 *  with a message when they differ or the CPU has no AMX-INT8 (the tiles
 *  must then not be used). */
int pl_amx_self_check(char *err, size_t errlen);

#endif
