/* ops_ssm.h - the Gated DeltaNet operations of the CPU runner (model.h's
 * pl_layer.recurrent), one small C function each: the references the CUDA
 * kernels will be tested against. Element-wise over the vector dimension
 * (channels, a state row's value dims), so the AVX2 step gives the scalar
 * reference's bits: no horizontal sums, fused multiply-adds in both; the
 * AVX2 conv's sums are the scalar's bits, its SiLU within 2 ulp (a vector
 * e^x); the SIMD chunked form (ops_ssm_simd.h) is within float tolerance.
 */
#ifndef PL_CPU_OPS_SSM_H
#define PL_CPU_OPS_SSM_H

#include <stddef.h>

/** One row of the causal depthwise conv over n channels, then SiLU:
 *  out[c] = silu(sum_{j < K-1} w[j][c] hist[j][c] + w[K-1][c] x[c]) into
 *  x (in place), and hist shifts by one (hist[K-2] = the old x). w is
 *  (K, ldw) (the kernel transposed: tap-major), hist (K-1, ldh); K >= 2.
 *  AVX2 when the CPU has it. */
void pl_op_ssm_conv_row(const float *w, size_t ldw, float *hist, size_t ldh, float *x, int n,
                        int K);

/** The gated delta rule's recurrent step on one value head: S (dk, dv)
 *  row-major, q, k (dk) already normalised (q scaled), v (dv):
 *    S = g S;  u = beta (v - S^T k);  S += k u^T;  o = S^T q
 *  o (dv) is written; scratch holds dv floats. AVX2 when the CPU has it,
 *  bit-identical to the scalar reference. */
void pl_op_gdn_step(float *S, const float *q, const float *k, const float *v, float g,
                    float beta, float *o, int dk, int dv, float *scratch);
/** The scalar reference of pl_op_gdn_step. */
void pl_op_gdn_step_ref(float *S, const float *q, const float *k, const float *v, float g,
                        float beta, float *o, int dk, int dv, float *scratch);

/** The chunked (WY) form of the same rule over T rows of one head: the
 *  outputs (T, dv) the T steps give, within float tolerance, and S after
 *  the last. q, k (T rows ld_qk apart), v (T rows ld_v apart), o (T rows
 *  ld_o apart); log_g (T) the log decays (g = exp(log_g) <= 1), beta (T).
 *  With c the cumulative log decay and L = I + the strictly lower
 *  (beta_t k_t.k_s e^(c_t - c_s)):
 *    U = L^-1 (beta v) - L^-1 (beta e^c k) S,
 *    o_t = e^(c_t) q_t S + sum_{s <= t} (q_t.k_s) e^(c_t - c_s) U_s,
 *    S' = e^(c_T) S + sum_s e^(c_T - c_s) k_s U_s^T.
 *  scratch: pl_op_gdn_chunk_scratch(T, dk, dv) floats. */
void pl_op_gdn_chunk(float *S, const float *q, size_t ld_qk, const float *k, const float *v,
                     size_t ld_v, const float *log_g, const float *beta, float *o, size_t ld_o,
                     int T, int dk, int dv, float *scratch);
/** The scalar reference of pl_op_gdn_chunk (the algebra above, term by
 *  term); pl_op_gdn_chunk takes the AVX-512 or AVX2 form (ops_ssm_simd.h)
 *  when the CPU has it, within float tolerance of this. */
void pl_op_gdn_chunk_ref(float *S, const float *q, size_t ld_qk, const float *k,
                         const float *v, size_t ld_v, const float *log_g, const float *beta,
                         float *o, size_t ld_o, int T, int dk, int dv, float *scratch);
/** Floats of scratch either form needs. */
size_t pl_op_gdn_chunk_scratch(int T, int dk, int dv);

/** x / sqrt(sum x^2 + eps) * scale over n elements, in place. */
void pl_op_l2norm(float *x, int n, float eps, float scale);

/** out = rmsnorm(x, w) * silu(z) over n elements (the gated RMSNorm of a
 *  DeltaNet head's output). out may alias x. */
void pl_op_rmsnorm_gated(float *out, const float *x, const float *w, const float *z, int n,
                         float eps);

#endif
