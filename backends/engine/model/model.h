/* model.h - a decoder-only transformer loaded from GGUF for the runners:
 * hyperparameters from metadata, weights borrowed from the mapping, and f32
 * copies for the batched (BLAS) path.
 *
 * Each family is one file in backends/engine/families/ (family.h): llama
 * (Llama 2/3, SmolLM2, TinyLlama, Mistral, with a sliding window when the
 * file declares one), qwen2 (q/k/v biases), qwen3 (per-head q/k RMSNorm),
 * gemma2 (GeGLU, post-norms, scaled embeddings, soft-capping, alternate
 * sliding layers), gemma3 (gemma2's blocks, q/k norms, 5 local layers
 * per global one with their own RoPE base), and the mixtures of experts:
 * llama files with experts (Mixtral), qwen3moe (qwen3 attention) and
 * gpt-oss (q/k/v/o biases, attention sinks, even layers sliding, YaRN,
 * biased router and experts, clamped SwiGLU), and the Gated DeltaNet
 * hybrids qwen35 (pl_layer.recurrent below; gated attention) and
 * qwen35moe (its layers with experts and a gated shared expert), and gemma4
 * (sliding and global layers of their own head sizes, shared-KV layers,
 * per-layer embeddings: pl_arch.kind_geometry, per_layer_embd; and the
 * 26B-A4B's experts beside a dense FFN). Its pl_arch row, below, says
 * which tensors the family needs, which are optional, and its per-layer
 * properties; every number comes from the file's metadata (model_meta.c),
 * and a key parley does not implement is refused at load, naming the key.
 *
 * Weights are (rows = output features, cols = input features), ne[0] = cols
 * contiguous, as GGUF stores them. One layer's forward pass, for the runners:
 *
 *   h  = rmsnorm(x, attn_norm)
 *   q, k, v = h @ wq^T (+ bq), h @ wk^T (+ bk), h @ wv^T (+ bv)
 *   q, k = rmsnorm per head (attn_q_norm, attn_k_norm)     when present
 *   q, k = rope(q, k; layer's rope_inv_freq, rope_neox)
 *   a  = softmax(softcap(attn_scale * q.k) over positions (pos - n_swa, pos]) v
 *   o  = a @ wo^T;  o = rmsnorm(o, attn_post_norm)          when present
 *   x += o
 *   h  = rmsnorm(x, ffn_norm)
 *   f  = act(h @ w_gate^T) * (h @ w_up^T) @ w_down^T        act: SiLU | GELU-tanh
 *   f  = rmsnorm(f, ffn_post_norm)                          when present
 *   x += f
 *
 * with x = token_embd[id] * embd_scale at the start and
 * logits = softcap(rmsnorm(x, output_norm) @ output^T; final_softcap).
 *
 * With attention sinks (gpt-oss) each head's softmax denominator has one
 * more term, exp(sink[head]); o gets a bias bo when present. A layer with
 * experts (n_expert > 0) replaces f by
 *
 *   r  = h @ gate_inp^T (+ gate_inp_b)                      (n_expert) logits
 *   PL_MOE_SOFTMAX:      p = softmax(r); E = top n_expert_used of p;
 *                        w_e = p_e / sum_E p (when moe_norm_w) else p_e
 *   PL_MOE_TOPK_SOFTMAX: E = top n_expert_used of r; w = softmax(r_E)
 *   f  = sum over e in E (in order of rank) of
 *        w_e (act(h @ gate_e^T + bg_e) * (h @ up_e^T + bu_e) @ down_e^T + bd_e)
 *
 * and with a shared expert (pl_arch.shexp: qwen35moe) adds to it
 *
 *   f += sigmoid(h . gate_inp_shexp) (silu(h @ gate_shexp^T) * (h @ up_shexp^T)) @ down_shexp^T
 *
 * A layer with experts beside a dense FFN (Gemma 4 26B-A4B: the layer has
 * pre_ffw_norm_2; pl_model.moe_beside) runs both from the residual x:
 *
 *   f1 = rmsnorm(dense FFN(rmsnorm(x, ffn_norm)), post_ffw_norm_1)
 *   r  = gate_inp @ (rmsnorm(x) * gate_inp_s / sqrt(n_embd))   (unweighted norm)
 *   E, w as PL_MOE_SOFTMAX's; w_e *= down_exps_s[e]
 *   f2 = rmsnorm(sum over E of w_e experts_e(rmsnorm(x, pre_ffw_norm_2)), post_ffw_norm_2)
 *   f  = f1 + f2   (then post_ffw_norm and the residual add as above)
 *
 * Gate and up experts may come as one tensor, blk.N.ffn_gate_up_exps.weight
 * (ne = {n_embd, 2 n_ff_exp, n_expert}: each expert's gate rows, then its up
 * rows), as llama.cpp's converter writes Gemma 4's.
 *
 * act PL_FFN_SWIGLU_OAI is gpt-oss's: g = min(g, 7), u = clamp(u, -7, 7),
 * g / (1 + exp(-1.702 g)) * (u + 1).
 */
#ifndef PL_MODEL_H
#define PL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/formats/gguf.h"

struct pl_model;
struct pl_family;

/** The feed-forward's gate activation: act(gate) * up. */
typedef enum pl_ffn_act {
    PL_FFN_SILU = 0,             /**< SwiGLU: g / (1 + exp(-g)) */
    PL_FFN_GELU_TANH,            /**< GeGLU: 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) */
    PL_FFN_SWIGLU_OAI,           /**< gpt-oss's clamped SwiGLU (see above) */
    /** An encoder's ungated FFN (bert): gelu(h @ up^T + b) @ down^T + b,
     *  gelu(x) = 0.5 x (1 + erf(x / sqrt 2)); encoder.h */
    PL_FFN_GELU_ERF,
} pl_ffn_act;

#define PL_OAI_SWIGLU_ALPHA 1.702f /**< gpt-oss's reference implementation */
#define PL_OAI_SWIGLU_LIMIT 7.0f

/** Whether an architecture's layers have experts. */
typedef enum pl_moe_kind {
    PL_MOE_NONE = 0,             /**< never: the expert keys are refused */
    PL_MOE_OPTIONAL,             /**< when expert_count > 0 (llama: Mixtral) */
    PL_MOE_ALWAYS,               /**< every layer */
} pl_moe_kind;

/** How the router's logits become expert weights (model.h's formula). */
typedef enum pl_moe_gating {
    PL_MOE_SOFTMAX = 0,          /**< softmax, top-k, renormalised (optional) */
    PL_MOE_TOPK_SOFTMAX,         /**< top-k of the logits, softmax over them */
} pl_moe_gating;

/** Most experts a layer may have, and most chosen per token. */
#define PL_MOE_MAX_EXPERTS 512
#define PL_MOE_MAX_USED 32

/** The per-layer tensors an architecture may have (bits of pl_arch's
 *  `need` and `optional`); names and shapes are in model.c's slot table. */
typedef enum pl_tensor_slot {
    PL_T_ATTN_NORM = 0,          /**< blk.N.attn_norm.weight (n_embd) */
    PL_T_WQ,                     /**< blk.N.attn_q.weight */
    PL_T_WK,                     /**< blk.N.attn_k.weight */
    PL_T_WV,                     /**< blk.N.attn_v.weight */
    PL_T_WO,                     /**< blk.N.attn_output.weight */
    PL_T_BQ,                     /**< blk.N.attn_q.bias */
    PL_T_BK,                     /**< blk.N.attn_k.bias */
    PL_T_BV,                     /**< blk.N.attn_v.bias */
    PL_T_Q_NORM,                 /**< blk.N.attn_q_norm.weight (head_dim) */
    PL_T_K_NORM,                 /**< blk.N.attn_k_norm.weight (head_dim) */
    PL_T_ATTN_POST_NORM,         /**< blk.N.post_attention_norm.weight (n_embd) */
    PL_T_FFN_NORM,               /**< blk.N.ffn_norm.weight (n_embd) */
    PL_T_GATE,                   /**< blk.N.ffn_gate.weight */
    PL_T_UP,                     /**< blk.N.ffn_up.weight */
    PL_T_DOWN,                   /**< blk.N.ffn_down.weight */
    PL_T_FFN_POST_NORM,          /**< blk.N.post_ffw_norm.weight (n_embd) */
    PL_T_BO,                     /**< blk.N.attn_output.bias (n_embd) */
    PL_T_SINKS,                  /**< blk.N.attn_sinks.weight (n_head) */
    PL_T_GATE_INP,               /**< blk.N.ffn_gate_inp.weight (n_expert, n_embd) */
    PL_T_GATE_INP_B,             /**< blk.N.ffn_gate_inp.bias (n_expert) */
    PL_T_GATE_EXPS,              /**< blk.N.ffn_gate_exps.weight (n_expert, n_ff_exp, n_embd) */
    PL_T_UP_EXPS,                /**< blk.N.ffn_up_exps.weight (n_expert, n_ff_exp, n_embd) */
    PL_T_DOWN_EXPS,              /**< blk.N.ffn_down_exps.weight (n_expert, n_embd, n_ff_exp) */
    PL_T_GATE_EXPS_B,            /**< blk.N.ffn_gate_exps.bias (n_expert, n_ff_exp) */
    PL_T_UP_EXPS_B,              /**< blk.N.ffn_up_exps.bias (n_expert, n_ff_exp) */
    PL_T_DOWN_EXPS_B,            /**< blk.N.ffn_down_exps.bias (n_expert, n_embd) */
    /* Gated DeltaNet (recurrent layers: pl_layer.recurrent) */
    PL_T_SSM_QKV,                /**< blk.N.attn_qkv.weight (ssm_conv_dim, n_embd) */
    PL_T_SSM_Z,                  /**< blk.N.attn_gate.weight (ssm_d_inner, n_embd) */
    PL_T_SSM_BETA,               /**< blk.N.ssm_beta.weight (ssm_n_v, n_embd) */
    PL_T_SSM_ALPHA,              /**< blk.N.ssm_alpha.weight (ssm_n_v, n_embd) */
    PL_T_SSM_CONV,               /**< blk.N.ssm_conv1d.weight (ssm_conv_dim, conv_kernel) */
    PL_T_SSM_DT,                 /**< blk.N.ssm_dt.bias (ssm_n_v) */
    PL_T_SSM_A,                  /**< blk.N.ssm_a (ssm_n_v): -exp(A_log) */
    PL_T_SSM_NORM,               /**< blk.N.ssm_norm.weight (ssm_d_state) */
    PL_T_SSM_OUT,                /**< blk.N.ssm_out.weight (n_embd, ssm_d_inner) */
    /* The shared expert beside the routed ones (pl_arch.shexp) */
    PL_T_GATE_INP_SHEXP,         /**< blk.N.ffn_gate_inp_shexp.weight (n_embd) its gate */
    PL_T_GATE_SHEXP,             /**< blk.N.ffn_gate_shexp.weight (n_ff_shexp, n_embd) */
    PL_T_UP_SHEXP,               /**< blk.N.ffn_up_shexp.weight (n_ff_shexp, n_embd) */
    PL_T_DOWN_SHEXP,             /**< blk.N.ffn_down_shexp.weight (n_embd, n_ff_shexp) */
    /* Gemma 4 */
    PL_T_OUT_SCALE,              /**< blk.N.layer_output_scale.weight (1) */
    PL_T_PLE_GATE,               /**< blk.N.inp_gate.weight (n_ple, n_embd) */
    PL_T_PLE_PROJ,               /**< blk.N.proj.weight (n_embd, n_ple) */
    PL_T_PLE_NORM,               /**< blk.N.post_norm.weight (n_embd) */
    /* Gemma 4 26B-A4B: experts beside the dense FFN */
    PL_T_GATE_INP_S,             /**< blk.N.ffn_gate_inp.scale (n_embd) the router's */
    PL_T_DOWN_EXPS_S,            /**< blk.N.ffn_down_exps.scale (n_expert) */
    PL_T_FFN_PRE_NORM_2,         /**< blk.N.pre_ffw_norm_2.weight (n_embd) experts' input */
    PL_T_FFN_POST_NORM_1,        /**< blk.N.post_ffw_norm_1.weight (n_embd) dense output's */
    PL_T_FFN_POST_NORM_2,        /**< blk.N.post_ffw_norm_2.weight (n_embd) experts' output's */
    PL_T_COUNT,
} pl_tensor_slot;

#define PL_T_BIT(s) (1ull << (s))

/** What the model loader follows for a family (its pl_family's `model`,
 *  backends/engine/families/): how its general.architecture reads its file. */
typedef struct pl_arch {
    /** An encoder (bert): it embeds, it does not generate; its file is
     *  read by pl_encoder_load (encoder.h), and pl_model_load refuses it.
     *  need, optional and the rest below are then unused. */
    bool encoder;
    uint64_t need;               /**< PL_T_BIT()s every layer must have */
    uint64_t optional;           /**< PL_T_BIT()s a layer may have */
    bool rope_neox;              /**< rotate (x[i], x[i + n_rot/2]), else adjacent pairs */
    pl_ffn_act act;
    bool embd_scale;             /**< x = embedding * sqrt(n_embd) (gemma) */
    bool output_tied;            /**< the output head is always token_embd
                                      (gemma2: an output.weight is refused) */
    bool norm_eps_required;      /**< layer_norm_rms_epsilon must be present */
    bool attn_softcap;           /**< reads attn_logit_softcapping (default
                                      attn_softcap_default) */
    bool final_softcap;          /**< reads final_logit_softcapping (default
                                      final_softcap_default) */
    float attn_softcap_default, final_softcap_default;
    /** Sliding layers by default (llama.cpp's set_swa_pattern): 0, none
     *  (attention.sliding_window is refused); 1, every layer when the file
     *  gives attention.sliding_window (Mistral); p > 1, layer il slides iff
     *  il % p < p - 1. attention.sliding_window_pattern overrides it. */
    int swa_period;
    int swa_window_default;      /**< window when the key is absent; 0: the
                                      key is required (swa_period > 1) */
    float swa_rope_base;         /**< sliding layers' RoPE base, unscaled
                                      (gemma3: 10000); 0: the global one */
    /** Query scale: 1/sqrt(head_dim), except for files with this many
     *  layers (gemma 27B), where llama.cpp uses 1/sqrt(n_embd / n_head)
     *  (query_pre_attn_scalar, which the converter does not write); 0: none. */
    int wide_query_scale_layers;
    pl_moe_kind moe;             /**< experts: never, when the file has them, always */
    pl_moe_gating gating;
    bool moe_norm_w;             /**< PL_MOE_SOFTMAX's renormalisation unless
                                      expert_weights_norm says otherwise */
    /** With experts, the tensor bits that replace the dense FFN's
     *  (GATE, UP, DOWN) in `need`. */
    uint64_t moe_need;
    /** The FFN norm's tensor when not blk.N.ffn_norm.weight (gpt-oss:
     *  "post_attention_norm"); NULL: ffn_norm. */
    const char *ffn_norm_name;
    /** Reads rope_freqs.weight (llama3's per-frequency factors) when the
     *  file has it; else the tensor is refused as unused. */
    bool rope_freqs_tensor;
    /** With experts, expert_feed_forward_length when the file omits it;
     *  NULL: the key is required. */
    int (*expert_ff_default)(const struct pl_model *m);
    /** Gated DeltaNet hybrids (qwen35): reads the ssm.* keys and which
     *  layers are recurrent (attention.recurrent_layers, else every layer
     *  but each full_attention_interval-th); those layers need
     *  need_recurrent instead of `need`'s attention tensors (the FFN bits
     *  of `need` stay). */
    bool recurrent;
    uint64_t need_recurrent;
    /** Attention layers' query projection is (2 n_head head_dim, n_embd):
     *  per head, the query then a gate; the attention output is multiplied
     *  by sigmoid(gate) before attn_output (qwen35). */
    bool attn_out_gate;
    /** Reads rope.dimension_sections (multimodal RoPE): with text positions
     *  only every section rotates by the same position, so the rotation is
     *  the plain one; the sections must cover n_rot / 2. */
    bool rope_sections;
    /** Multi-token-prediction layers (nextn_predict_layers) are skipped at
     *  load: the last that many blocks of block_count are not run and their
     *  tensors not read. */
    bool mtp_ignored;
    /** Every expert layer also has a shared expert and its sigmoid gate
     *  (PL_T_*_SHEXP, in moe_need): reads expert_shared_feed_forward_length
     *  (default feed_forward_length, which is then optional); the key is
     *  refused for the other families. */
    bool shexp;
    /** Gemma 4's attention: sliding and global layers with their own head
     *  sizes, rotated dims and K/V head counts (attention.key_length_swa,
     *  value_length_swa, rope.dimension_count_swa, head_count_kv per
     *  layer); the last attention.shared_kv_layers layers read the K/V of
     *  the last earlier layer of their kind and take no cache; K = V where
     *  a layer has no attn_v; V gets an unweighted RMSNorm; q.k is not
     *  scaled; rope_freqs.weight's factors apply to the global layers
     *  only; each layer's output is multiplied by layer_output_scale. */
    bool kind_geometry;
    /** Every nope_period-th layer ((l + 1) % nope_period == 0) rotates no
     *  dims (SmolLM3's NoPE layers: llama.cpp's n_no_rope_layer_step 4,
     *  which no GGUF key states); 0: every layer has RoPE. */
    int nope_period;
    /** Ministral 3 (mistral3): reads rope.scaling.yarn_log_multiplier (YaRN's
     *  magnitude then get_mscale(f, 1) / get_mscale(f, mul), llama.cpp's
     *  mscale 1 assumed) and attention.temperature_scale s: queries are
     *  multiplied by 1 + s ln(1 + floor(pos / rope.scaling.
     *  original_context_length)) after RoPE (Llama 4's temperature). */
    bool ministral_rope;
    /** Per-layer embeddings (embedding_length_per_layer_input > 0):
     *  per_layer_token_embd, per_layer_model_proj, per_layer_proj_norm and
     *  each layer's inp_gate, proj and post_norm (model.h's formula). */
    bool per_layer_embd;
} pl_arch;

/** One weight matrix. */
typedef struct pl_weight {
    pl_ggml_type type;
    int rows, cols;
    size_t row_bytes;
    const void *q;               /**< (rows, cols) of type, borrowed from the GGUF */
    float *f32;                  /**< (rows, cols) dequantised, owned; NULL when
                                      not kept (see pl_model_opts) */
} pl_weight;

/** The experts of one matrix of a layer: n matrices of the same shape,
 *  stored one after the other (a GGUF 3-D tensor, ne = [cols, rows, n]). */
typedef struct pl_experts {
    pl_weight w;                 /**< expert 0 (q, f32) and the common shape */
    int n;
    size_t stride;               /**< bytes from one expert's packed matrix to
                                      the next (rows * row_bytes) */
} pl_experts;

/** Expert e of x as one matrix (borrowed pointers). */
static inline pl_weight pl_experts_at(const pl_experts *x, int e)
{
    pl_weight w = x->w;
    w.q = (const char *)x->w.q + (size_t)e * x->stride;
    if (w.f32)
        w.f32 += (size_t)e * w.rows * w.cols;
    return w;
}

typedef struct pl_layer {
    float *attn_norm;            /**< (n_embd) */
    pl_weight wq;                /**< (n_head*head_dim, n_embd) */
    pl_weight wk, wv;            /**< (n_head_kv*head_dim, n_embd) */
    float *bq;                   /**< (n_head*head_dim) qwen2 bias, else NULL */
    float *bk, *bv;              /**< (n_head_kv*head_dim) qwen2 biases, else NULL */
    pl_weight wo;                /**< (n_embd, n_head*head_dim) */
    float *attn_q_norm;          /**< (head_dim) RMSNorm weight of each query
                                      head before RoPE (qwen3, gemma3), else NULL */
    float *attn_k_norm;          /**< (head_dim) the same for each key head */
    float *attn_post_norm;       /**< (n_embd) RMSNorm of the attention output
                                      before the residual add (gemma), else NULL */
    float *ffn_norm;             /**< (n_embd) */
    pl_weight w_gate, w_up;      /**< (n_ff, n_embd): this layer's n_ff */
    pl_weight w_down;            /**< (n_embd, n_ff) */
    int n_ff;                    /**< this layer's FFN width (pl_layer_ff): a
                                      per-layer feed_forward_length (Gemma 4
                                      E2B's double-wide shared layers) */
    float *ffn_post_norm;        /**< (n_embd) RMSNorm of the feed-forward
                                      output before the residual add (gemma) */
    int n_swa;                   /**< sliding window: a row at position p
                                      attends to (p - n_swa, p]; 0: to all */
    bool no_kv;                  /**< takes no paged K/V (a recurrent layer,
                                      or one reading another layer's K/V):
                                      in no cache group (schedulers/kv_layout.h) */
    const float *rope_inv_freq;  /**< (n_rot/2) this layer's frequencies: the
                                      model's rope_inv_freq or
                                      rope_inv_freq_swa (borrowed) */
    float *bo;                   /**< (n_embd) attention output bias (gpt-oss) */
    float *attn_sinks;           /**< (n_head) one logit per head added to the
                                      softmax's denominator (gpt-oss), or NULL */
    /* Experts (n_expert > 0; then w_gate, w_up, w_down are absent). */
    pl_weight gate_inp;          /**< (n_expert, n_embd) router, f32 kept */
    float *gate_inp_b;           /**< (n_expert) router bias, or NULL */
    pl_experts gate_exps, up_exps; /**< n_expert x (n_ff_exp, n_embd) */
    pl_experts down_exps;        /**< n_expert x (n_embd, n_ff_exp) */
    float *gate_exps_b, *up_exps_b; /**< (n_expert, n_ff_exp) biases, or NULL */
    float *down_exps_b;          /**< (n_expert, n_embd) */
    /* The shared expert (pl_arch.shexp), else empty. */
    float *gate_inp_shexp;       /**< (n_embd) its gate's weights */
    pl_weight gate_shexp, up_shexp; /**< (n_ff_shexp, n_embd) */
    pl_weight down_shexp;        /**< (n_embd, n_ff_shexp) */
    /* Experts beside the dense FFN (pl_model.moe_beside), else NULL. */
    float *gate_inp_s;           /**< (n_embd) the router input's scale */
    float *down_exps_s;          /**< (n_expert) each expert's output scale */
    float *ffn_pre_norm_2;       /**< (n_embd) the experts' input norm */
    float *ffn_post_norm_1, *ffn_post_norm_2; /**< (n_embd) the two outputs' norms */
    /** A Gated DeltaNet layer (pl_model's ssm_* sizes): no q/k/v/o and no
     *  paged K/V; a fixed-size state per sequence instead (the conv's last
     *  conv_kernel - 1 inputs, the (n_v, d_state, d_state) delta-rule
     *  state). Per row, with heads of d = ssm_d_state:
     *
     *    c = silu(causal depthwise conv(h @ ssm_qkv^T; ssm_conv))  (conv_dim)
     *    q, k, v = c[0, n_k d), c[n_k d, 2 n_k d), c[2 n_k d, ...)
     *    per value head h (key head h % n_k):
     *      q = l2norm(q) / sqrt(d), k = l2norm(k)
     *      g = exp(ssm_a[h] * softplus(h @ ssm_alpha[h] + ssm_dt[h]))
     *      b = sigmoid(h @ ssm_beta[h])
     *      S = g S;  S += k (b (v - S^T k))^T;  o = S^T q
     *      o = rmsnorm(o, ssm_norm) * silu(h @ ssm_z[h]^T)
     *    x += concat(o) @ ssm_out^T */
    bool recurrent;
    pl_weight ssm_qkv;           /**< (ssm_conv_dim, n_embd) */
    pl_weight ssm_z;             /**< (ssm_d_inner, n_embd) */
    pl_weight ssm_beta, ssm_alpha; /**< (ssm_n_v, n_embd) */
    float *ssm_conv;             /**< (ssm_conv_dim, ssm_conv_kernel) */
    float *ssm_dt;               /**< (ssm_n_v) */
    float *ssm_a;                /**< (ssm_n_v) */
    float *ssm_norm;             /**< (ssm_d_state) */
    pl_weight ssm_out;           /**< (n_embd, ssm_d_inner) */
    /* This layer's attention geometry (the model's, but for
     * kind_geometry: its kind's). */
    int head_dim, n_head_kv, n_rot;
    int kv_src;                  /**< the layer whose K/V it attends to: itself,
                                      or (shared) an earlier one */
    float *out_scale;            /**< (1) the layer's output scale, or NULL */
    /* Per-layer embeddings (n_ple > 0). */
    pl_weight ple_gate;          /**< (n_ple, n_embd), f32 kept */
    pl_weight ple_proj;          /**< (n_embd, n_ple), f32 kept */
    float *ple_norm;             /**< (n_embd) */
} pl_layer;

typedef struct pl_model {
    const struct pl_family *family; /**< its family (families/family.h) */
    const pl_arch *info;         /**< the family's loader rules (&family->model) */
    char arch_name[32];          /**< general.architecture, for messages */
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab;
    int n_ctx_train;             /**< context length from metadata */
    int n_rot;                   /**< rotated dims per head */
    bool rope_neox;
    float rope_base, rms_eps;
    float *rope_inv_freq;        /**< (n_rot/2) global layers, scaling applied */
    float rope_base_swa;         /**< sliding layers' base (= rope_base unless
                                      the architecture has its own) */
    float *rope_inv_freq_swa;    /**< (n_rot/2) sliding layers' table, or NULL
                                      when they use rope_inv_freq */
    float rope_mscale;           /**< rotated dims of q and k are multiplied by
                                      it (YaRN's 1 + 0.1 ln(factor), times
                                      rope.scaling.attn_factor); 0 or 1: none */
    float attn_scale;            /**< multiplies q.k before soft-capping */
    float attn_temp_scale;       /**< the queries' temperature by position
                                      (pl_arch.ministral_rope); 0: none */
    int attn_temp_floor;         /**< its positions per step */
    float attn_softcap;          /**< scores become c * tanh(s / c); 0: none */
    float final_softcap;         /**< logits likewise; 0: none */
    float embd_scale;            /**< embedding rows are multiplied by it (1, or
                                      sqrt(n_embd) for gemma) */
    pl_ffn_act ffn_act;
    int n_swa;                   /**< the sliding window of local layers; 0: no
                                      layer slides */
    int n_swa_layers;            /**< how many layers slide */
    int n_expert;                /**< experts per layer; 0: a dense model */
    int n_expert_used;           /**< experts each token takes (top-k) */
    int n_ff_exp;                /**< an expert's feed-forward width */
    int n_ff_shexp;              /**< the shared expert's width; 0: none */
    pl_moe_gating moe_gating;
    bool moe_norm_w;             /**< PL_MOE_SOFTMAX renormalises the top-k */
    bool moe_beside;             /**< the expert layers keep their dense FFN
                                      beside the experts (model.h's formula) */
    int32_t bos_id, eos_id;      /**< -1 when absent */
    pl_weight tok_embd;          /**< (n_vocab, n_embd) */
    pl_weight output;            /**< (n_vocab, n_embd); equals tok_embd when tied */
    bool tied;
    float *output_norm;          /**< (n_embd) */
    pl_layer *layers;            /**< (n_layer) */
    bool attn_out_gate;          /**< pl_arch's attn_out_gate */
    /* Gated DeltaNet layers (pl_layer.recurrent), 0 without. */
    int n_recurrent;             /**< how many layers are recurrent */
    int ssm_conv_kernel;         /**< ssm.conv_kernel */
    int ssm_d_state;             /**< ssm.state_size: a key and value head's width */
    int ssm_n_k;                 /**< ssm.group_count: key heads */
    int ssm_n_v;                 /**< ssm.time_step_rank: value heads (a
                                      multiple of ssm_n_k; value head h reads
                                      key head h % ssm_n_k, llama.cpp's order) */
    int ssm_d_inner;             /**< ssm.inner_size = ssm_n_v * ssm_d_state */
    int ssm_conv_dim;            /**< 2 ssm_n_k ssm_d_state + ssm_d_inner */
    int n_layer_mtp;             /**< multi-token-prediction blocks skipped */
    /* kind_geometry (Gemma 4) */
    int head_dim_swa, n_rot_swa; /**< sliding layers' (= head_dim, n_rot else) */
    int q_dim, kv_dim;           /**< the widest layer's n_head * head_dim and
                                      n_head_kv * head_dim: a K/V cache slot
                                      holds kv_dim per position */
    int n_shared_kv;             /**< the last layers reading earlier K/V */
    bool v_norm;                 /**< V gets an unweighted RMSNorm */
    /* Per-layer embeddings (Gemma 4 E2B/E4B), n_ple = 0 without: per token,
     *   p = rmsnorm_per_layer(per_layer_model_proj @ x0 / sqrt(n_embd),
     *                         per_layer_proj_norm)
     *   e_l = (p_l + per_layer_token_embd[id]_l * sqrt(n_ple)) / sqrt(2)
     * (x0 the scaled embedding), and at the end of layer l
     *   x += rmsnorm(proj_l @ (gelu(inp_gate_l @ x) * e_l), post_norm_l) */
    int n_ple;
    pl_weight ple_tok;           /**< (n_vocab, n_layer n_ple), packed: rows
                                      read per token from the mapping */
    pl_weight ple_model_proj;    /**< (n_layer n_ple, n_embd), f32 kept */
    float *ple_proj_norm;        /**< (n_ple) */
} pl_model;

/** Layer y's FFN width: its own, or (layers built without one) the
 *  model's, which is the widest layer's. */
static inline int pl_layer_ff(const pl_model *m, const pl_layer *y)
{
    return y->n_ff > 0 ? y->n_ff : m->n_ff;
}

/** Whether a runner reads tensors of type t packed (no f32 copy needed). */
typedef int (*pl_keep_packed_fn)(pl_ggml_type t);

/** Every type packed: for runners that convert weights themselves (the CUDA
 *  runner dequantises to bf16 on upload, weights_host.c). */
int pl_keep_packed_all(pl_ggml_type t);

typedef struct pl_model_opts {
    bool keep_f32;               /**< dequantise matrices to f32 for the GEMM path */
    /** When !keep_f32: nonzero for the types the runner's kernels read
     *  packed, which then get no f32 copy. NULL: every type gets one. */
    pl_keep_packed_fn keep_packed;
    /** The same for expert matrices; NULL: keep_packed. */
    pl_keep_packed_fn keep_packed_experts;
} pl_model_opts;

/** Load from an opened GGUF (borrowed: must outlive the model). opts may be
 *  NULL (keep_f32 = true). Returns NULL with one line in err naming the
 *  metadata key or tensor at fault: an unknown architecture, a missing or
 *  mistyped key, a feature parley does not implement, a missing, misshaped
 *  or unused tensor, an unsupported tensor type. */
pl_model *pl_model_load(const pl_gguf *g, const pl_model_opts *opts,
                        char *err, size_t errlen);
void pl_model_free(pl_model *m);

/** Whether any layer of m needs more than the llama/qwen2 blocks: a sliding
 *  window, soft-capping, q/k norms, post-norms, GeGLU, scaled embeddings or
 *  a query scale other than 1/sqrt(head_dim). For runners that do not run
 *  those yet. */
bool pl_model_has_extensions(const pl_model *m);

/** Whether m has experts or another layer of gpt-oss: attention sinks, an
 *  attention output bias, YaRN's scaled RoPE, the clamped SwiGLU. For
 *  runners that do not run those yet. */
bool pl_model_has_moe(const pl_model *m);

/** Compute rope inverse frequencies: base^(-2i/n_rot), then llama3-style,
 *  linear or YaRN scaling (type "llama3"/"linear"/"yarn"/"none"), then
 *  divided by factors[i] when factors is non-NULL. out has n_rot/2 entries.
 *  YaRN (llama.cpp's rope_yarn, beta_fast 32, beta_slow 1): frequency i
 *  blends f / factor and f by a ramp over i between the correction dims of
 *  the two betas at orig_ctx, rounded out to whole dimensions ("yarn_exact":
 *  not rounded, transformers' truncate false, gpt-oss); its magnitude
 *  factor is pl_model's rope_mscale, applied apart. */
void pl_model_rope_freqs(float *out, int n_rot, float base, const char *scaling,
                         float factor, float low_ff, float high_ff, int orig_ctx,
                         const float *factors);

#endif
