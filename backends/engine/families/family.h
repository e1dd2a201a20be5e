/* family.h - a model family, one unit (issue 46): one pl_family row, in its
 * own file here (llama.c, qwen2.c, qwen3.c, qwen3moe.c, qwen35.c, qwen35moe.c,
 * gemma2.c, gemma3.c, gemma4.c, gpt_oss.c, smollm3.c, mistral3.c, bert.c), is
 * the only place a family is described:
 *
 *   - its GGUF general.architecture name, and the Hugging Face
 *     `architectures` names it reads (with their config.json mapping and
 *     tensor maps, built from the shared pieces below);
 *   - its hyperparameter rules, tensor needs and layer pattern (which layers
 *     slide, which have experts): the pl_arch row the model loader follows
 *     (model.h);
 *   - its chat style for a file that carries no template (through it the
 *     tool-call and reasoning formats follow, backends/text);
 *   - which runners run it.
 *
 * The registry (registry.c) lists the families built in (meson generates
 * family_list.h from the family files named in meson.build) and those a
 * program registers at run time (a test's own family). Every list of names
 * in messages and --help comes from it. Nothing outside this folder and the
 * shared builders compares a family's name or switches on it
 * (scripts/check_families.sh).
 *
 * A new family is one new file defining `const pl_family pl_family_<name>`
 * plus its name in meson.build's family list; tests/family_testfam.c is one
 * registered from a test alone.
 */
#ifndef PL_FAMILY_H
#define PL_FAMILY_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/engine/model/hf_arch.h"
#include "backends/engine/model/model.h"
#include "backends/text/chat_template.h"

/** A family's own config.json keys, after the shared ones
 *  (pl_hf_arch_hparams): 0, or -1 with err naming the key. */
typedef int (*pl_hf_hparams_fn)(const pl_hf_arch *a, const pl_hf_json *c, pl_hf_shape *sh,
                                pl_gguf_synth *s, char *err, size_t n);

/** One config.json `architectures` name a family reads (hf_arch.h). */
struct pl_hf_arch {
    const char *hf_name;         /**< config.json architectures[0] */
    const char *gguf;            /**< general.architecture written (the family's name) */
    const pl_hf_tmap *layer;     /**< per-layer tensors, ending with hf == NULL */
    float norm_shift;            /**< added to RMSNorm weights (Gemma: 1) */
    bool default_tied;           /**< tie_word_embeddings when config.json omits it */
    bool always_bias;            /**< q/k/v biases whatever attention_bias says */
    double default_theta;        /**< rope_theta when config.json omits it */
    pl_hf_hparams_fn extra;      /**< the family's own keys, or NULL */
    /** A composite (vision + text) model: the text model's keys under
     *  text_config with these defaults (what transformers leaves out of a
     *  sub-config), its tensors under language_model. NULL: a text model. */
    const pl_hf_default *text_config;
    /** The global tensors when not a decoder's (embed_tokens, norm,
     *  lm_head; hf_arch.c), ending with hf == NULL; NULL: a decoder's. */
    const pl_hf_tmap *globals;
    /** Checkpoint tensors read and dropped (NULL-terminated; a name ending
     *  in '*' is a prefix), or NULL. */
    const char *const *skip;
    /** No dense feed-forward (every layer's is experts, qwen35moe):
     *  intermediate_size is optional, and feed_forward_length is written
     *  only when given (as llama.cpp's converter does). */
    bool no_dense_ff;
};

/** The style of a family's official template, for a file that carries
 *  none (Gemma 3 270M's GGUF has no tokenizer.chat_template). */
typedef struct pl_family_chat {
    pl_chat_tmpl tmpl;
    unsigned flags;              /**< PL_CHAT_F_* added to tmpl's canonical style */
} pl_family_chat;

/** Runners (bits of pl_family's runners). */
enum {
    PL_FAMILY_RUNS_CPU = 1u << 0,
    /** The CUDA runner: besides, it refuses a model whose layers
     *  pl_model_has_moe names (llama files with experts). */
    PL_FAMILY_RUNS_CUDA = 1u << 1,
};

typedef struct pl_family {
    const char *name;            /**< general.architecture (GGUF) */
    const char *note;            /**< said after the name in lists, or NULL */
    pl_arch model;               /**< what the model loader follows (model.h) */
    const pl_hf_arch *hf;        /**< the HF architectures it reads (n_hf), or NULL */
    int n_hf;
    const pl_family_chat *chat;  /**< for files without a template; NULL: none */
    unsigned runners;            /**< PL_FAMILY_RUNS_* */
} pl_family;

/** The built-in families, pl_family_<file name> (family_list.h: generated
 *  from meson.build's list). */
#define PL_FAMILY(n) extern const pl_family pl_family_##n;
#include "backends/engine/families/family_list.h"
#undef PL_FAMILY

/** The family of a general.architecture (len bytes, not NUL-terminated),
 *  or NULL. */
const pl_family *pl_family_find(const char *name, size_t len);

/** The HF architecture named name (config.json architectures[0]) among
 *  every family's, or NULL. */
const pl_hf_arch *pl_family_find_hf(const char *name);

/** The families' GGUF names ("llama (with or without experts), qwen2,
 *  ..."), or (hf) their HF architecture names, comma separated, for
 *  messages and --help. The string lives in a per-thread buffer until the
 *  thread's next call. */
const char *pl_family_names(bool hf);

/** Adds f (borrowed: must outlive every use) to the registry: for programs
 *  and tests with families of their own. Not thread-safe: call before any
 *  model is loaded. 0, or -1 when its name is taken or the registry full. */
int pl_family_register(const pl_family *f);

/** Sets s to the family's style for files without a template: 0, or -1 (s
 *  untouched) for a family without one. */
int pl_family_chat_style(const pl_family *f, pl_chat_style *s);

/** Whether f's row says runner (PL_FAMILY_RUNS_*) runs it. */
bool pl_family_runs(const pl_family *f, unsigned runner);

/* ---- shared builders of the family files ----------------------------- */

/** pl_arch tensor bits every family combines. */
#define PL_FAM_B(s) PL_T_BIT(PL_T_##s)
#define PL_FAM_DENSE                                                                 \
    (PL_FAM_B(ATTN_NORM) | PL_FAM_B(WQ) | PL_FAM_B(WK) | PL_FAM_B(WV) | PL_FAM_B(WO) | \
     PL_FAM_B(FFN_NORM) | PL_FAM_B(GATE) | PL_FAM_B(UP) | PL_FAM_B(DOWN))
#define PL_FAM_QKV_BIAS (PL_FAM_B(BQ) | PL_FAM_B(BK) | PL_FAM_B(BV))
#define PL_FAM_QK_NORM (PL_FAM_B(Q_NORM) | PL_FAM_B(K_NORM))
#define PL_FAM_POST_NORMS (PL_FAM_B(ATTN_POST_NORM) | PL_FAM_B(FFN_POST_NORM))
/** The expert block that replaces GATE, UP and DOWN in a layer with experts. */
#define PL_FAM_EXPERTS \
    (PL_FAM_B(GATE_INP) | PL_FAM_B(GATE_EXPS) | PL_FAM_B(UP_EXPS) | PL_FAM_B(DOWN_EXPS))
/** The shared expert and its gate beside the experts (pl_arch.shexp). */
#define PL_FAM_SHEXP                                                                 \
    (PL_FAM_B(GATE_INP_SHEXP) | PL_FAM_B(GATE_SHEXP) | PL_FAM_B(UP_SHEXP) |          \
     PL_FAM_B(DOWN_SHEXP))
/** The Gated DeltaNet block that replaces attention in a recurrent layer. */
#define PL_FAM_SSM                                                                   \
    (PL_FAM_B(SSM_QKV) | PL_FAM_B(SSM_Z) | PL_FAM_B(SSM_BETA) | PL_FAM_B(SSM_ALPHA) | \
     PL_FAM_B(SSM_CONV) | PL_FAM_B(SSM_DT) | PL_FAM_B(SSM_A) | PL_FAM_B(SSM_NORM) |   \
     PL_FAM_B(SSM_OUT))
#define PL_FAM_EXPERT_BIASES                                                         \
    (PL_FAM_B(GATE_INP_B) | PL_FAM_B(GATE_EXPS_B) | PL_FAM_B(UP_EXPS_B) |            \
     PL_FAM_B(DOWN_EXPS_B))

/** Rows of a pl_hf_tmap per-layer table (HF name -> GGUF name, shape). */
#define PL_HF_L_ "model.layers.%d."
#define PL_HF_B_ "blk.%d."
/** Attention: norm, q/k/v/o and the optional q/k/v biases; P: permute q and
 *  k rows from rotate-half to adjacent pairs (llama's rope). */
#define PL_HF_ATTN(P)                                                                \
    {PL_HF_L_ "input_layernorm.weight", PL_HF_B_ "attn_norm.weight", PL_HF_DIM_HIDDEN, 0, \
     PL_HF_T_NORM},                                                                  \
    {PL_HF_L_ "self_attn.q_proj.weight", PL_HF_B_ "attn_q.weight", PL_HF_DIM_Q,      \
     PL_HF_DIM_HIDDEN, (P) ? PL_HF_T_PERMUTE_Q : 0},                                 \
    {PL_HF_L_ "self_attn.k_proj.weight", PL_HF_B_ "attn_k.weight", PL_HF_DIM_KV,     \
     PL_HF_DIM_HIDDEN, (P) ? PL_HF_T_PERMUTE_K : 0},                                 \
    {PL_HF_L_ "self_attn.v_proj.weight", PL_HF_B_ "attn_v.weight", PL_HF_DIM_KV,     \
     PL_HF_DIM_HIDDEN, 0},                                                           \
    {PL_HF_L_ "self_attn.o_proj.weight", PL_HF_B_ "attn_output.weight", PL_HF_DIM_HIDDEN, \
     PL_HF_DIM_Q, 0},                                                                \
    {PL_HF_L_ "self_attn.q_proj.bias", PL_HF_B_ "attn_q.bias", PL_HF_DIM_Q, 0,       \
     PL_HF_T_BIAS | ((P) ? PL_HF_T_PERMUTE_Q : 0)},                                  \
    {PL_HF_L_ "self_attn.k_proj.bias", PL_HF_B_ "attn_k.bias", PL_HF_DIM_KV, 0,      \
     PL_HF_T_BIAS | ((P) ? PL_HF_T_PERMUTE_K : 0)},                                  \
    {PL_HF_L_ "self_attn.v_proj.bias", PL_HF_B_ "attn_v.bias", PL_HF_DIM_KV, 0, PL_HF_T_BIAS}
/** The gated MLP. */
#define PL_HF_MLP                                                                    \
    {PL_HF_L_ "mlp.gate_proj.weight", PL_HF_B_ "ffn_gate.weight", PL_HF_DIM_FF,      \
     PL_HF_DIM_HIDDEN, 0},                                                           \
    {PL_HF_L_ "mlp.up_proj.weight", PL_HF_B_ "ffn_up.weight", PL_HF_DIM_FF,          \
     PL_HF_DIM_HIDDEN, 0},                                                           \
    {PL_HF_L_ "mlp.down_proj.weight", PL_HF_B_ "ffn_down.weight", PL_HF_DIM_HIDDEN,  \
     PL_HF_DIM_FF, 0}
/** Per-head q/k RMSNorms. */
#define PL_HF_QK_NORM                                                                \
    {PL_HF_L_ "self_attn.q_norm.weight", PL_HF_B_ "attn_q_norm.weight", PL_HF_DIM_HEAD, 0, \
     PL_HF_T_NORM},                                                                  \
    {PL_HF_L_ "self_attn.k_norm.weight", PL_HF_B_ "attn_k_norm.weight", PL_HF_DIM_HEAD, 0, \
     PL_HF_T_NORM}
/** One norm between attention and MLP (the FFN's input norm). */
#define PL_HF_PLAIN_NORM                                                             \
    {PL_HF_L_ "post_attention_layernorm.weight", PL_HF_B_ "ffn_norm.weight",         \
     PL_HF_DIM_HIDDEN, 0, PL_HF_T_NORM}
/** Gemma's sandwich: post-attention, pre- and post-feed-forward norms. */
#define PL_HF_SANDWICH_NORMS                                                         \
    {PL_HF_L_ "post_attention_layernorm.weight", PL_HF_B_ "post_attention_norm.weight", \
     PL_HF_DIM_HIDDEN, 0, PL_HF_T_NORM},                                             \
    {PL_HF_L_ "pre_feedforward_layernorm.weight", PL_HF_B_ "ffn_norm.weight",        \
     PL_HF_DIM_HIDDEN, 0, PL_HF_T_NORM},                                             \
    {PL_HF_L_ "post_feedforward_layernorm.weight", PL_HF_B_ "post_ffw_norm.weight",  \
     PL_HF_DIM_HIDDEN, 0, PL_HF_T_NORM}
/** The router and one tensor per expert (Qwen3-MoE, Mixtral). */
#define PL_HF_EXPERTS                                                                \
    {PL_HF_L_ "mlp.gate.weight", PL_HF_B_ "ffn_gate_inp.weight", PL_HF_DIM_EXPERTS,  \
     PL_HF_DIM_HIDDEN, PL_HF_T_F32},                                                 \
    {PL_HF_L_ "mlp.experts.%d.gate_proj.weight", PL_HF_B_ "ffn_gate_exps.weight",    \
     PL_HF_DIM_FF_EXP, PL_HF_DIM_HIDDEN, PL_HF_T_EXPERTS},                           \
    {PL_HF_L_ "mlp.experts.%d.up_proj.weight", PL_HF_B_ "ffn_up_exps.weight",        \
     PL_HF_DIM_FF_EXP, PL_HF_DIM_HIDDEN, PL_HF_T_EXPERTS},                           \
    {PL_HF_L_ "mlp.experts.%d.down_proj.weight", PL_HF_B_ "ffn_down_exps.weight",    \
     PL_HF_DIM_HIDDEN, PL_HF_DIM_FF_EXP, PL_HF_T_EXPERTS}
/** Qwen3.5's layers but the feed-forward (qwen35, qwen35moe): the norms,
 *  the gated attention of the full layers, the Gated DeltaNet of the
 *  recurrent ones (value heads to llama.cpp's tiled order). */
#define PL_HF_QWEN35_BLOCKS                                                          \
    {PL_HF_L_ "input_layernorm.weight", PL_HF_B_ "attn_norm.weight", PL_HF_DIM_HIDDEN, 0, \
     PL_HF_T_NORM},                                                                  \
    {PL_HF_L_ "self_attn.q_proj.weight", PL_HF_B_ "attn_q.weight", PL_HF_DIM_Q_GATE,  \
     PL_HF_DIM_HIDDEN, PL_HF_T_ATTN_ONLY},                                           \
    {PL_HF_L_ "self_attn.k_proj.weight", PL_HF_B_ "attn_k.weight", PL_HF_DIM_KV,      \
     PL_HF_DIM_HIDDEN, PL_HF_T_ATTN_ONLY},                                           \
    {PL_HF_L_ "self_attn.v_proj.weight", PL_HF_B_ "attn_v.weight", PL_HF_DIM_KV,      \
     PL_HF_DIM_HIDDEN, PL_HF_T_ATTN_ONLY},                                           \
    {PL_HF_L_ "self_attn.o_proj.weight", PL_HF_B_ "attn_output.weight", PL_HF_DIM_HIDDEN, \
     PL_HF_DIM_Q, PL_HF_T_ATTN_ONLY},                                                \
    {PL_HF_L_ "self_attn.q_norm.weight", PL_HF_B_ "attn_q_norm.weight", PL_HF_DIM_HEAD, 0, \
     PL_HF_T_NORM | PL_HF_T_ATTN_ONLY},                                              \
    {PL_HF_L_ "self_attn.k_norm.weight", PL_HF_B_ "attn_k_norm.weight", PL_HF_DIM_HEAD, 0, \
     PL_HF_T_NORM | PL_HF_T_ATTN_ONLY},                                              \
    {PL_HF_L_ "linear_attn.in_proj_qkv.weight", PL_HF_B_ "attn_qkv.weight",          \
     PL_HF_DIM_SSM_CONV, PL_HF_DIM_HIDDEN, PL_HF_T_RECURRENT | PL_HF_T_VHEADS},      \
    {PL_HF_L_ "linear_attn.in_proj_z.weight", PL_HF_B_ "attn_gate.weight",           \
     PL_HF_DIM_SSM_INNER, PL_HF_DIM_HIDDEN, PL_HF_T_RECURRENT | PL_HF_T_VHEADS},     \
    {PL_HF_L_ "linear_attn.in_proj_b.weight", PL_HF_B_ "ssm_beta.weight",            \
     PL_HF_DIM_SSM_V, PL_HF_DIM_HIDDEN, PL_HF_T_RECURRENT | PL_HF_T_VHEADS},         \
    {PL_HF_L_ "linear_attn.in_proj_a.weight", PL_HF_B_ "ssm_alpha.weight",           \
     PL_HF_DIM_SSM_V, PL_HF_DIM_HIDDEN, PL_HF_T_RECURRENT | PL_HF_T_VHEADS},         \
    {PL_HF_L_ "linear_attn.conv1d.weight", PL_HF_B_ "ssm_conv1d.weight",             \
     PL_HF_DIM_SSM_CONV, PL_HF_DIM_SSM_KERNEL,                                       \
     PL_HF_T_RECURRENT | PL_HF_T_VHEADS | PL_HF_T_SQUEEZE | PL_HF_T_F32},            \
    {PL_HF_L_ "linear_attn.dt_bias", PL_HF_B_ "ssm_dt.bias", PL_HF_DIM_SSM_V, 0,      \
     PL_HF_T_RECURRENT | PL_HF_T_VHEADS},                                            \
    {PL_HF_L_ "linear_attn.A_log", PL_HF_B_ "ssm_a", PL_HF_DIM_SSM_V, 0,              \
     PL_HF_T_RECURRENT | PL_HF_T_VHEADS | PL_HF_T_NEG_EXP},                          \
    /* the gated norm scales by w itself: no + 1 */                                  \
    {PL_HF_L_ "linear_attn.norm.weight", PL_HF_B_ "ssm_norm.weight", PL_HF_DIM_SSM_HEAD, \
     0, PL_HF_T_RECURRENT},                                                          \
    {PL_HF_L_ "linear_attn.out_proj.weight", PL_HF_B_ "ssm_out.weight", PL_HF_DIM_HIDDEN, \
     PL_HF_DIM_SSM_INNER, PL_HF_T_RECURRENT | PL_HF_T_VHEADS | PL_HF_T_VHEADS_COLS}, \
    {PL_HF_L_ "post_attention_layernorm.weight", PL_HF_B_ "post_attention_norm.weight", \
     PL_HF_DIM_HIDDEN, 0, PL_HF_T_NORM}
/** The shared expert and its gate (a [1, hidden_size] Linear: read as a
 *  vector). */
#define PL_HF_SHEXP                                                                  \
    {PL_HF_L_ "mlp.shared_expert_gate.weight", PL_HF_B_ "ffn_gate_inp_shexp.weight",  \
     PL_HF_DIM_HIDDEN, 0, PL_HF_T_COLUMN},                                           \
    {PL_HF_L_ "mlp.shared_expert.gate_proj.weight", PL_HF_B_ "ffn_gate_shexp.weight", \
     PL_HF_DIM_FF_SHEXP, PL_HF_DIM_HIDDEN, 0},                                       \
    {PL_HF_L_ "mlp.shared_expert.up_proj.weight", PL_HF_B_ "ffn_up_shexp.weight",     \
     PL_HF_DIM_FF_SHEXP, PL_HF_DIM_HIDDEN, 0},                                       \
    {PL_HF_L_ "mlp.shared_expert.down_proj.weight", PL_HF_B_ "ffn_down_shexp.weight", \
     PL_HF_DIM_HIDDEN, PL_HF_DIM_FF_SHEXP, 0}
#define PL_HF_END {NULL, NULL, 0, 0, 0}

/** config.json readers for the families' own keys (family_hf.c): an
 *  integer in [lo, hi] (absent: dflt, or an error when req), a number in
 *  [lo, hi] (absent: dflt); 0 or -1 with err naming the key. */
int pl_family_hf_int(const pl_hf_json *c, const char *key, bool req, long long lo,
                     long long hi, int dflt, int *out, char *err, size_t n);
int pl_family_hf_num(const pl_hf_json *c, const char *key, double lo, double hi,
                     double dflt, double *out, char *err, size_t n);
/** Writes "<a's GGUF name>.<key>" into s: 0, or -1 with "out of memory". */
int pl_family_hf_put_u32(pl_gguf_synth *s, const pl_hf_arch *a, const char *key, int v,
                         char *err, size_t n);
int pl_family_hf_put_f32(pl_gguf_synth *s, const pl_hf_arch *a, const char *key, double v,
                         char *err, size_t n);
/** Qwen's use_sliding_window (off in the released models) is refused. */
int pl_family_hf_no_window(const pl_hf_arch *a, const pl_hf_json *c, pl_hf_shape *sh,
                           pl_gguf_synth *s, char *err, size_t n);
/** A mixture of experts' shared keys: num_experts or num_local_experts,
 *  num_experts_per_tok and an expert's width (width_key) into sh->n_expert,
 *  sh->n_ff_exp and <arch>.expert_count, expert_used_count and
 *  expert_feed_forward_length. */
int pl_family_hf_experts(const pl_hf_arch *a, const pl_hf_json *c, const char *width_key,
                         pl_hf_shape *sh, pl_gguf_synth *s, char *err, size_t n);
/** Qwen3.5's config.json keys beside the shared ones (qwen35.c): the
 *  Gated DeltaNet sizes, the layer kinds, the rope sections, the
 *  multi-token-prediction keys (its blocks are skipped). */
int pl_family_hf_qwen35(const pl_hf_arch *a, const pl_hf_json *c, pl_hf_shape *sh,
                        pl_gguf_synth *s, char *err, size_t n);
/** What a Qwen3.5 checkpoint reads and drops (qwen35.c): the
 *  multi-token-prediction block, a composite's vision tower. */
extern const char *const pl_family_hf_qwen35_skip[];
/** transformers' Qwen3.5 text-config defaults for what a composite
 *  checkpoint's text_config may leave out (qwen35.c). */
extern const pl_hf_default pl_family_hf_qwen35_text[];
/** Gemma 2 and 3: the checkpoint's query_pre_attn_scalar must be the query
 *  scale the GGUF model assumes (model.h's wide_query_scale_layers: wide
 *  when the model has that many layers). */
int pl_family_hf_query_scale(const pl_hf_json *c, const pl_hf_shape *sh, int wide, char *err,
                             size_t n);

#endif
