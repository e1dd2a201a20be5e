/* forward_internal.h - what forward.c (the pass and its dense layers) and
 * forward_moe.c (the expert blocks) share: the forward state, the plan's
 * phases and its matmul jobs. Not for use outside backends/engine/cpu/.
 */
#ifndef PL_CPU_FORWARD_INTERNAL_H
#define PL_CPU_FORWARD_INTERNAL_H

#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/engine/cpu/forward.h"

struct pl_fwd_moe;
struct pl_fwd_gdn;

struct pl_cpu_fwd {
    const pl_model *m;
    pl_pool *pool;
    pl_fwd_opts o;
    int q_dim, kv_dim, max_in;
    int n_ff;                    /* the dense FFN's width (the shared expert's
                                    beside experts), 0 for experts alone */
    pl_kv_layout lo;             /* cache groups: a layer's table and slot */
    void *k_cache, *v_cache;     /* (num_blocks, lo.n_slots, n_head_kv,
                                    block_size, head_dim) of halves when
                                    o.kv_f16, else floats: a block holds its
                                    group's layers (one slot each); a head's
                                    rows of a block are contiguous, so
                                    attention streams them */
    size_t kv_esz;               /* 2 or 4 */
    float *x, *xn, *q, *k, *v, *att, *tmp; /* (max_rows, width) */
    float *gate, *up;            /* (max_rows, n_ff) */
    pl_q8_act *xq;               /* (max_rows, max_in / 32) */
    float *attn_scr;             /* (n_threads, group * max_ctx) */
    float *att_sc;               /* (ATT_SPLIT_ROWS, n_head, max_ctx) split
                                    attention's scores, then probabilities */
    float *xo;                   /* (max_out, n_embd) */
    struct pl_fwd_moe *moe;      /* the expert blocks' buffers, or NULL */
    struct pl_fwd_gdn *gdn;      /* the recurrent layers' states and buffers, or NULL */
    float *qg, *qgate;           /* (max_rows, 2 q_dim), (max_rows, q_dim): the
                                    gated query projection and its gate
                                    (attn_out_gate), else NULL */
    float *tmp2;                 /* (max_rows, n_embd) the experts' sum beside
                                    the dense FFN's or the shared expert's in
                                    tmp (moe_beside, n_ff_shexp), else NULL */
    float *ple, *ple_g;          /* (max_rows, n_layer n_ple), (max_rows,
                                    n_ple): per-layer embeddings' inputs and
                                    gate (n_ple > 0), else NULL */
    bool layer_end;              /* layers end with PH_LAYER_END (gemma4, qwen35moe) */
    const pl_fwd_batch *b;       /* the call in progress */
    const int32_t *out_rows;     /* rows of x whose logits the call computes */
    float *logits;               /* the call's logits (n_out, n_vocab) */
    struct phase *ph;            /* (n_layer * PH_PER_LAYER + PH_OUTSIDE) the call's plan */
    int n_ph;
    struct span *spans;          /* (max_spans) the plan's matmul slices */
    int n_spans, max_spans;
    int last_rows;               /* rows of the last pl_cpu_forward, whose
                                    final hidden states x still holds */
};

#define MM_MAX 4
#define MM_PER_LAYER 8           /* weights in a layer's matmuls, at most */
#define UNIT_BYTES (16 * 1024)   /* quantised weight bytes per unit, about */

/* The units of a slice not yet taken, [front, back) in one word: the
 * thread that took the slice claims units from the front, any other from
 * the back, each with one CAS. A cache line each: owners claim often. */
typedef struct span {
    _Alignas(64) _Atomic uint64_t fb;
} span;

/* Claims a unit of span sp, from its front (its owner) or its back (any
 * other thread); -1 when none is left. */
int pl_fwd_span_take_(span *sp, int from_back);

/* Up to MM_MAX matmuls sharing one input: y[i] = x @ w[i]^T, split into
 * slices of size[i] output features, and slices into units of unit[i]. */
typedef struct mm_job {
    int n, n_rows, cols, any_q, n_slices;
    int use_f32[MM_MAX], size[MM_MAX], chunks[MM_MAX], unit[MM_MAX];
    const float *x;
    const pl_weight *w[MM_MAX];
    float *y[MM_MAX];
    span *spans;                 /* (n_slices) */
} mm_job;

/* A step runs as one pool run: a list of phases, each a set of work items
 * that depend only on earlier phases (so a thread that takes an item of
 * phase k waits for every item before k). Row phases do per-row work and
 * then quantise that row of `next`'s input when its matmul needs q8. */
typedef enum ph_kind {
    PH_EMBED,          /* x[r] = embedding of token r */
    PH_ATTN_IN,        /* (layer > 0: x[r] += tmp[r]) xn[r] = rmsnorm(x[r]) */
    PH_QKV_FINISH,     /* biases, rope, K/V of row r into its cache slot */
    PH_ATTN,           /* attention of (row, kv head[, query heads]) */
    PH_ATT_SCORES,     /* split attention: scores of (row, kv head, positions) */
    PH_ATT_SOFTMAX,    /* split attention: softmax of (row, query head) */
    PH_ATT_VALUES,     /* split attention: (row, kv head, dims) of the outputs */
    PH_ROW_Q8,         /* only the quantisation of next's input */
    PH_FFN_IN,         /* x[r] += tmp[r] (+ bo); xn[r] = rmsnorm(x[r]);
                          with experts, row r's routing (forward_moe.c) */
    PH_SWIGLU,         /* gate[r] = silu(gate[r]) * up[r] */
    PH_FINAL_ADD,      /* x[r] += tmp[r] */
    PH_OUT_NORM,       /* xo[i] = rmsnorm(x[rows[i]]) */
    PH_SOFTCAP,        /* a SOFTCAP_CHUNK slice of a logits row, soft-capped */
    PH_ATTN_GATE,      /* att[r] *= sigmoid(gate[r]) (attn_out_gate) */
    PH_LAYER_END,      /* x[r] += tmp[r]; the per-layer embedding; x[r] *=
                          out_scale (layer_end) */
    PH_GDN_CONV,       /* (sequence, channel slice): conv + SiLU over its rows */
    PH_GDN_RULE,       /* (sequence, value head): the delta rule over its rows,
                          gated RMSNorm (forward_deltanet.c) */
    PH_MM,             /* one chunk of output features of mm */
    PH_MOE_GROUP,      /* one item: the rows of each chosen expert, in order */
    PH_MOE_GATHER,     /* the input of (row, rank) at its expert's place */
    PH_MOE_UP,         /* units (expert, features): act(gate) * up, q8 */
    PH_MOE_DOWN,       /* units (expert, features) of the down projection */
    PH_MOE_COMBINE,    /* tmp[r] (tmp2[r] beside a dense FFN) = sum over ranks
                          of weight * expert output */
} ph_kind;

typedef struct phase {
    ph_kind kind;
    int layer, n;                /* n work items */
    int split;                   /* items per (row, kv head): PH_ATTN's query
                                    head slices, PH_ATT_SCORES' position
                                    chunks, PH_ATT_VALUES' dim chunks */
    atomic_int taken;            /* items handed out so far */
    const mm_job *next;          /* row phases: the matmul fed by this row */
    mm_job mm;                   /* PH_MM */
} phase;

#define PH_PER_LAYER 19          /* the most a layer adds (one with experts
                                    beside its dense FFN) */
#define PH_OUTSIDE 5             /* embed, final add, out norm, logits, softcap */

/* Appends a phase of n items to the plan. */
phase *pl_fwd_ph_add_(pl_cpu_fwd *f, ph_kind kind, int layer, int n, const mm_job *next);

/* Adds the matmul phase y[i] = x @ w[i]^T (n <= MM_MAX weights of one
 * input width); returns its job, which a row phase before it names as
 * `next`. */
const mm_job *pl_fwd_ph_add_mm_(pl_cpu_fwd *f, const float *x, int n_rows, int n,
                                const pl_weight *const *w, float *const *y);

/* The recurrent layers (forward_deltanet.c). init: the state slots and
 * buffers (nothing without recurrent layers); 0 or -1 with err. check: the
 * batch's sequences against their slots (before anything runs), their
 * rows grouped; 0 or -1. commit: the slots' positions after the run. plan:
 * layer l's Gated DeltaNet block over n rows, after PH_ATTN_IN (whose
 * `next` it sets). item: one PH_GDN_* item. */
int pl_fwd_gdn_init_(pl_cpu_fwd *f, char *err, size_t len);
void pl_fwd_gdn_free_(pl_cpu_fwd *f);
int pl_fwd_gdn_check_(pl_cpu_fwd *f, const pl_fwd_batch *b);
void pl_fwd_gdn_commit_(pl_cpu_fwd *f, const pl_fwd_batch *b);
void pl_fwd_gdn_plan_(pl_cpu_fwd *f, phase *in, int l, int n);
void pl_fwd_gdn_item_(pl_cpu_fwd *f, const phase *ph, int it, int ith);

/* The expert blocks (forward_moe.c). init: the buffers for f's model and
 * options (nothing without experts); 0, or -1 with a message in err (out
 * of memory, experts of a type without a CPU kernel). */
int pl_fwd_moe_init_(pl_cpu_fwd *f, char *err, size_t len);
void pl_fwd_moe_free_(pl_cpu_fwd *f);
/* Row r of layer l after its FFN norm (xn): the router's choice, and the
 * row's q8 blocks when the experts read them; with experts beside the
 * dense FFN (moe_beside) the router and the experts read x's own norms. */
void pl_fwd_moe_route_(pl_cpu_fwd *f, int l, int r);
/* The phases of layer l's expert block over n rows, after PH_FFN_IN. */
void pl_fwd_moe_plan_(pl_cpu_fwd *f, int l, int n);
/* A thread's share of a PH_MOE_* phase; returns the items it finished
 * (which pl_pool_done counts). */
int pl_fwd_moe_phase_(pl_cpu_fwd *f, phase *ph, int ith);

/* The attention block (forward_attn.c). plan: layer l's phases over n
 * rows after its PH_ATTN_IN phase `in` (q/k/v, PH_QKV_FINISH, attention,
 * the output gate, attn_output into tmp); qkv_finish: row r's rope, norms
 * and cache stores; gate_row: att[r] *= sigmoid(qgate[r]); item: one
 * PH_ATTN or PH_ATT_* item. At most ATT_SPLIT_ROWS rows take the split
 * attention (its scores buffer is that many rows). */
#define ATT_SPLIT_ROWS 2
void pl_fwd_attn_plan_(pl_cpu_fwd *f, phase *in, int l, int n);
void pl_fwd_qkv_finish_(pl_cpu_fwd *f, int l, int r);
void pl_fwd_attn_gate_row_(pl_cpu_fwd *f, int r);
void pl_fwd_attn_item_(pl_cpu_fwd *f, const phase *ph, int it, int ith);

/* Row r's block table in cache group g. */
static inline const int32_t *pl_fwd_row_blocks_(const pl_fwd_batch *b, int r, int g)
{
    size_t n_groups = b->n_groups > 0 ? (size_t)b->n_groups : 1;
    return b->block_table + ((size_t)b->row_seq[r] * n_groups + (size_t)g) *
                            (size_t)b->max_blocks_per_seq;
}

/* Layer l's row widths: its queries' and its K/V's (the buffers' rows are
 * as wide as the layer's projections). */
static inline int q_dim_(const pl_cpu_fwd *f, int l)
{
    return f->m->n_head * f->m->layers[l].head_dim;
}

static inline int kv_dim_(const pl_cpu_fwd *f, int l)
{
    return f->m->layers[l].n_head_kv * f->m->layers[l].head_dim;
}

/* The queries' factor at pos (model.h's attn_temp_scale, Ministral 3). */
static inline float query_temperature(const pl_model *m, int pos)
{
    return 1 + m->attn_temp_scale * logf(floorf((float)pos / (float)m->attn_temp_floor) + 1);
}

/* Per-layer embeddings and layer ends (forward_ple.c): row r's inputs
 * from its scaled embedding x0 and token id (into f->ple); the end of
 * layer l on row r (PH_LAYER_END). */
void pl_fwd_ple_inputs_(pl_cpu_fwd *f, int r, const float *x0, int32_t id);
void pl_fwd_layer_end_(pl_cpu_fwd *f, int l, int r);

#endif
