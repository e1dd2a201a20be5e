/* ops_ssm_simd.h - the chunked gated delta rule's AVX2 and AVX-512 forms
 * (ops_ssm_simd.c), chosen by ops_ssm.c's pl_op_gdn_chunk from the CPU's
 * features (PARLEY_CPU_ISA caps them). Same arguments and results as
 * pl_op_gdn_chunk_ref within float tolerance; dv and dk multiples of 16
 * (AVX-512) or 8 (AVX2); scratch: pl_op_gdn_chunk_simd_scratch floats.
 * x86 only.
 */
#ifndef PL_CPU_OPS_SSM_SIMD_H
#define PL_CPU_OPS_SSM_SIMD_H

#include <stddef.h>

size_t pl_op_gdn_chunk_simd_scratch(int T, int dk, int dv);
void pl_op_gdn_chunk_avx512(float *S, const float *q, size_t ld_qk, const float *k,
                            const float *v, size_t ld_v, const float *log_g, const float *beta,
                            float *o, size_t ld_o, int T, int dk, int dv, float *scratch);
void pl_op_gdn_chunk_avx2(float *S, const float *q, size_t ld_qk, const float *k,
                          const float *v, size_t ld_v, const float *log_g, const float *beta,
                          float *o, size_t ld_o, int T, int dk, int dv, float *scratch);

#endif
