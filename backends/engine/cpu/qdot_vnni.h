/* qdot_vnni.h - VNNI versions of the single-row dot kernels (qdot_vnni.c),
 * bit-identical to the AVX2 ones. pl_op_qdot dispatches here when the CPU
 * has them.
 */
#ifndef PL_CPU_QDOT_VNNI_H
#define PL_CPU_QDOT_VNNI_H

#include "backends/engine/cpu/ops.h"

typedef enum pl_vnni_level {
    PL_VNNI_NONE = 0,
    PL_VNNI_AVX,                 /**< AVX-VNNI (VEX-encoded VPDPBUSD) */
    PL_VNNI_AVX512,              /**< AVX-512 VNNI + VL + BW on 256-bit registers */
} pl_vnni_level;

/** The best level this CPU runs (needs the AVX2 path's AVX2+FMA+F16C too). */
pl_vnni_level pl_qdot_vnni_level(void);

/** Whether pl_qdot_vnni has a kernel for type t (Q5_0, Q5_1, Q4_K, Q6_K),
 *  whatever the CPU. */
int pl_qdot_vnni_supported(pl_ggml_type t);

/** *out = the dot of weight row w (type t, n elements) with a, through
 *  level lv's kernel; returns 0 (nothing written) when lv is NONE or t has
 *  no VNNI kernel. The caller must only pass a level the CPU has. */
int pl_qdot_vnni(pl_vnni_level lv, pl_ggml_type t, const void *w, const pl_q8_act *a, int n,
                 float *out);

/** One weight row of type t (n elements) against nr <= 4 activation rows
 *  (a_stride blocks apart): out[r * out_stride], each row bit-identical to
 *  the single-row kernel (batch invariance). Q5_0, Q5_1, Q4_K and Q6_K;
 *  returns 0 (nothing written) for other types or lv NONE. */
int pl_qdot_vnni_rows(pl_vnni_level lv, pl_ggml_type t, const void *w, const pl_q8_act *a,
                      size_t a_stride, int n, int nr, float *out, size_t out_stride);
/** pl_qdot_vnni_rows' code with VPDPBUSD emulated by AVX2 (for tests). */
int pl_qdot_vnni_rows_emulated(pl_ggml_type t, const void *w, const pl_q8_act *a,
                               size_t a_stride, int n, int nr, float *out, size_t out_stride);

/** For tests on CPUs without VNNI: the VNNI kernels' code with VPDPBUSD
 *  emulated by AVX2 instructions; 0 without AVX2 or for other types. */
int pl_qdot_vnni_emulated(pl_ggml_type t, const void *w, const pl_q8_act *a, int n, float *out);

#endif
