/* ops.h - the CPU runner's operations, one small C function each.
 *
 * These are the plain C references the CUDA kernels are tested against.
 * Activations are f32, row-major: a (n, dim) matrix is n rows of dim floats.
 * Weight matrices are (rows = output features, cols = input features), as in
 * GGUF (ne[0] = cols is contiguous).
 */
#ifndef PL_CPU_OPS_H
#define PL_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "backends/formats/gguf.h"

#define PL_QK 32                 /**< elements per quant block */

/** Activation block for the quantised dot kernels: q = round(x / d),
 *  s = d * sum(q) (needed by weight types with an offset, like Q4_1). */
typedef struct pl_q8_act {
    float d;
    float s;
    int8_t qs[PL_QK];
} pl_q8_act;

/** IEEE half to float through a 64K-entry table (built once from
 *  pl_fp16_to_fp32 in src/base/half.h, which also has float -> half). */
float pl_op_fp16_to_f32(uint16_t h);

/** The kernel path the dispatch picks on this CPU, from the one cpuid
 *  probe (src/base/cpu_features.h): "avx2+fma+f16c" or "scalar". Named in
 *  the startup log and in /status (engine "cpu_kernels"); with VNNI the
 *  single-row kernels use it: "avx512vnni+avx2+fma+f16c", "avxvnni+...". */
const char *pl_op_kernel_path(void);

/** True when the quantised dot kernels support weight type t. */
int pl_op_qdot_supported(pl_ggml_type t);
/** The dense matrix types the CPU runner reads packed (pl_model_opts'
 *  keep_packed): the quantised kernels' and F16/BF16 (hdot.h). */
int pl_op_keep_packed(pl_ggml_type t);
/** Dequantise n elements (a multiple of the type's block) of type t.
 *  F32, F16, BF16, Q4_0, Q4_1, Q8_0 here, other types through
 *  pl_dequant_row (quant.h); -1 when unsupported. */
int pl_op_dequant_row(pl_ggml_type t, const void *src, float *dst, int64_t n);

/** Quantise one row of n floats (n % 32 == 0) into n/32 activation blocks,
 *  each independent of the others. AVX2 when the CPU has it, bit-identical
 *  to the scalar reference for finite inputs. */
void pl_op_quantize_row_q8(const float *x, pl_q8_act *dst, int n);
/** The scalar reference of pl_op_quantize_row_q8. */
void pl_op_quantize_row_q8_ref(const float *x, pl_q8_act *dst, int n);
/** Dot product of one weight row of type t (n elements) with a quantised
 *  activation row: the value pl_op_qmatmul_rows gives. Q4_0, Q4_1 and Q8_0
 *  sum in block order (pl_op_qdot_ref's value, bit for bit); the other
 *  types through their AVX2/VNNI kernels when the CPU has them. */
float pl_op_qdot(pl_ggml_type t, const void *w, const pl_q8_act *a, int n);
/** The scalar reference of pl_op_qdot. */
float pl_op_qdot_ref(pl_ggml_type t, const void *w, const pl_q8_act *a, int n);
/** The AVX2 kernel of pl_op_qdot for the Q5 and K-quant types, whatever
 *  else the CPU has: their VNNI and 512-bit kernels are tested against it
 *  bit for bit. 0 (nothing written) without AVX2 or for another type (Q4_0,
 *  Q4_1 and Q8_0 equal pl_op_qdot_ref on every path). */
int pl_op_qdot_avx2(pl_ggml_type t, const void *w, const pl_q8_act *a, int n, float *out);

/** y[r, o] = sum_i w[o, i] * x[r, i] for weight rows [o0, o1) of a quantised
 *  weight (row stride row_bytes) and n_rows activation rows (n_blk blocks
 *  each). y has row stride ldy. */
void pl_op_qmatmul_rows(pl_ggml_type t, const void *w, size_t row_bytes,
                        const pl_q8_act *x, int n_blk, int n_rows,
                        float *y, int ldy, int o0, int o1);

/** out = x / rms(x) * w over n elements (w NULL: unweighted). out may alias x. */
void pl_op_rmsnorm(float *out, const float *x, const float *w, int n, float eps);

/** Rotate the first n_rot dims of each of n_heads heads (head_dim apart) at
 *  position pos. inv_freq has n_rot/2 entries (scaling already applied).
 *  neox = 0: adjacent pairs (x[2i], x[2i+1]) (llama GGUF, whose Q/K rows were
 *  permuted on conversion); neox = 1: pairs (x[i], x[i + n_rot/2]). */
void pl_op_rope(float *x, int n_heads, int head_dim, int n_rot, int pos,
                const float *inv_freq, int neox);

/** gate[i] = silu(gate[i]) * up[i]. */
void pl_op_swiglu(float *gate, const float *up, int n);

/** gate[i] = gelu(gate[i]) * up[i], GELU's tanh form (ggml_gelu, PyTorch's
 *  gelu(approximate="tanh")): 0.5 g (1 + tanh(sqrt(2/pi) g (1 + 0.044715 g^2))). */
void pl_op_geglu(float *gate, const float *up, int n);

/** gpt-oss's clamped SwiGLU: g = min(gate[i], limit), u = clamp(up[i],
 *  -limit, limit), gate[i] = g / (1 + exp(-alpha g)) * (u + 1). Plain C on
 *  every path (libm's expf): the same bits whatever the ISA. */
void pl_op_swiglu_oai(float *gate, const float *up, int n, float alpha, float limit);

/** x[i] = cap * tanh(x[i] / cap) (Gemma 2's soft-capping); cap > 0. */
void pl_op_softcap(float *x, int n, float cap);

/** In-place softmax over n values; returns log(sum exp(x - max)) + max. */
float pl_op_softmax(float *x, int n);
/** The same with one more logit, `sink`, in the denominator only (an
 *  attention sink): x[i] = exp(x[i]) / (exp(sink) + sum exp(x)). */
void pl_op_softmax_sink(float *x, int n, float sink);

/** dot product and y += a * x over n floats (AVX2 when available). */
float pl_op_dot_f32(const float *a, const float *b, int n);
void pl_op_axpy_f32(float *y, float a, const float *x, int n);

/**
 * Attention of one query row for the n_q query heads sharing one KV head
 * (GQA group), over cached positions [first, n_ctx) (first > 0: a sliding
 * window). A score is scale * q.k, soft-capped when softcap > 0.
 * k_rows(t)/v_rows(t) are found through the block table: token t lives in
 * block bt[t / bs], row t % bs, at kv_base + block * block_stride +
 * (t % bs) * row_stride elements, which are floats, or IEEE halves when
 * kv_f16 (head_dim <= PL_ATTN_MAX_F16_HEAD_DIM).
 * q: (n_q, hd); out: (n_q, hd); scratch: n_ctx floats per query head.
 */
typedef struct pl_attn_args {
    const void *k_base, *v_base; /**< this layer's pools, offset to the head */
    int kv_f16;                  /**< elements are halves (else floats) */
    const int32_t *block_table;
    int block_size;
    size_t block_stride;         /**< floats between blocks */
    size_t row_stride;           /**< floats between tokens of a block */
    int head_dim;
    float scale;
    int first;                   /**< first position attended (sliding
                                      window); 0: from the start */
    float softcap;               /**< scores become softcap * tanh(s /
                                      softcap) before the softmax; 0: none */
    const float *sinks;          /**< (n_q) each query head's sink logit in
                                      its softmax's denominator; NULL: none */
} pl_attn_args;

#define PL_ATTN_MAX_F16_HEAD_DIM 512

void pl_op_attention(const pl_attn_args *a, const float *q, int n_q, int n_ctx,
                     float *out, float *scratch);
/** pl_op_attention in parts, to split one query row's group over threads
 *  with every output value unchanged: the scaled (and soft-capped) scores
 *  of positions [t0, t1) into scores[h * stride + t]; then, after
 *  pl_op_softmax (pl_op_softmax_sink with sinks) of each head's scores
 *  [first, n_ctx), dims [d0, d1) of out
 *  (d0 a multiple of 8) from the probabilities p[h * stride + t],
 *  t in [first, n_ctx). */
void pl_op_attn_scores(const pl_attn_args *a, const float *q, int n_q, int t0, int t1,
                       float *scores, size_t stride);
void pl_op_attn_values(const pl_attn_args *a, const float *p, size_t stride, int n_q,
                       int n_ctx, int d0, int d1, float *out);
/** The scalar-dispatch reference of pl_op_attention. */
void pl_op_attention_ref(const pl_attn_args *a, const float *q, int n_q, int n_ctx,
                         float *out, float *scratch);

/** A mixture-of-experts router's choice for one token (model.h's formula):
 *  from its n_expert logits (biases added; overwritten), the k experts in
 *  rank order into sel (ties: the lower index first) and their weights into
 *  w. topk_softmax: softmax over the top k logits (gpt-oss); else softmax
 *  over all, the top k of it, renormalised to sum 1 when norm_w;
 *  n_expert <= 512, k <= n_expert. Plain C:
 *  the same bits on every ISA path (ops_moe.c). */
void pl_op_moe_route(float *logits, int n_expert, int k, int topk_softmax, int norm_w,
                     int32_t *sel, float *w);

/** The places of a step's (row, rank) pairs grouped by expert: sel holds
 *  n_pairs expert ids (row-major, k per row); counts/offsets (n_expert,
 *  n_expert + 1) each expert's pairs and first place; slot_of[i] the place
 *  of pair i and row_of[place] its row (i / k); within an expert, places
 *  follow the pairs' order (a stable counting sort). */
void pl_op_moe_group(const int32_t *sel, int n_pairs, int k, int n_expert, int32_t *counts,
                     int32_t *offsets, int32_t *slot_of, int32_t *row_of);

/** The gather of pl_op_moe_group's places: for places [s0, s1), row s of
 *  out = row row_of[s] of x (rows of row_bytes: f32, q8 or bf16 alike). */
void pl_op_moe_gather(const void *x, size_t row_bytes, const int32_t *row_of, int s0, int s1,
                      void *out);

/** One row's expert outputs combined: out[c] = sum over j < k, in rank
 *  order (w[0] y[slot[0]] first, then adding), of w[j] * y[slot[j]][c],
 *  for c < dim; y holds the places' rows of dim floats. */
void pl_op_moe_combine(const float *y, const int32_t *slot, const float *w, int k, int dim,
                       float *out);

/** dst[i] = src[i] as an IEEE half, rounded to nearest even (F16C when
 * the CPU has it; the same values either way). */
void pl_op_f32_to_f16_row(uint16_t *dst, const float *src, int n);

#endif
