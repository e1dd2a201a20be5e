/* cuda_runner_internal.h - the CUDA runner's state, shared by the step
 * plumbing (cuda_runner.c), input packing (cuda_io.c) and the forward
 * pass (cuda_forward.c). Not for use outside backends/engine/cuda/. */
#ifndef PL_CUDA_RUNNER_INTERNAL_H
#define PL_CUDA_RUNNER_INTERNAL_H

#include "backends/engine/cuda/attn_decode.cuh"
#include "backends/engine/cuda/cuda_runner.h"
#include "backends/engine/cuda/gemm.h"
#include "backends/engine/cuda/kv_write.cuh"
#include "backends/engine/cuda/moe_plan.cuh"
#include "backends/engine/cuda/sample.cuh"
#include "backends/engine/cuda/weights.h"

#define CR_MAX_BUCKETS 16
#define CR_BIAS_PER_SEQ 300      /* OpenAI's logit_bias limit */
#define CR_HIST_PER_SEQ 4096     /* penalty history per sequence, at least ... */
#define CR_HIST_IDS (8 << 20)    /* ... or this many ids shared out, up to max_model_len */
#define CR_FSM_CACHE 8           /* constraints kept on the device */
#define CR_PROF_EVENTS 2048      /* phase marks per step (--cuda-profile) */

/* Phases of the forward pass timed by cuda_profile.c. */
enum { CR_PH_START = 0, CR_PH_EMBED = 0, CR_PH_NORM, CR_PH_QKV, CR_PH_ROPE, CR_PH_KV_WRITE,
       CR_PH_ATTN_DEC, CR_PH_ATTN_PF, CR_PH_O, CR_PH_GATE_UP, CR_PH_SWIGLU, CR_PH_DOWN,
       CR_PH_HEAD, CR_PH_SAMPLE, CR_PH_MOE_ROUTE, CR_PH_MOE_FFN, CR_PH_COUNT };

typedef struct cr_prof {
    cudaEvent_t ev[CR_PROF_EVENTS];
    int phase[CR_PROF_EVENTS];  /* what ran between mark i-1 and mark i */
    int n;
    double ms[CR_PH_COUNT];
} cr_prof;

/** A constraint's device tables (cuda_constrain.c). */
typedef struct cr_fsm {
    const struct pl_token_fsm *f; /* a reference; NULL: free slot */
    void *dev;
    pl_fsm_tables t;             /* device addresses */
    uint64_t used, pack;         /* LRU clock; the pack that last used it */
} cr_fsm;

/** One step's inputs; the same layout in pinned host staging and on the
 *  device (pointers into one allocation, see pl_cuda_io_map). */
typedef struct cr_io {
    int32_t *tokens, *positions, *row_seq;           /* (max_rows) */
    int32_t *seq_slot, *first_row, *n_rows, *last_row; /* (max_seqs) */
    int32_t *bt;                                     /* (max_seqs, mbps) */
    pl_cuda_samp *samp;                              /* (max_seqs) */
    int32_t *bias_tok;                               /* (bias_cap) */
    float *bias_val;                                 /* (bias_cap) */
    int32_t *hist;                                   /* (hist_cap) */
    int32_t *dec_rows;                               /* (max_rows) mixed steps */
    int32_t *pf_seqs;                                /* (max_seqs) mixed steps */
    /* prompt logprobs: the rows with a next id, the id, the top-N wanted */
    int32_t *lp_rows, *lp_next, *lp_top;             /* (max_rows) */
} cr_io;

/** Used sizes of a packed step (what to copy and launch). */
typedef struct cr_step {
    int n_rows, n_seqs;          /* after bucket padding */
    int real_seqs;               /* before padding */
    int max_seq_rows;
    int n_bias, n_hist;
    int bucket;                  /* graph bucket index, -1: eager */
    int n_dec, n_pf, pf_max_rows; /* mixed steps: decode rows, prefill seqs */
    int n_lp;                    /* rows with prompt logprobs */
} cr_step;

/** Prompt logprobs of a step, compact (entry k is row lp_rows[k]): the
 *  same layout on the device and in pinned memory. */
typedef struct cr_plp {
    float *lp;                   /* (max_rows) */
    int32_t *top_ids;            /* (max_rows, PL_CUDA_TOPN) */
    float *top_lp;               /* (max_rows, PL_CUDA_TOPN) */
} cr_plp;

/** Per in-flight step (ticket & 1). */
typedef struct cr_slot {
    void *h_in;                  /* pinned staging, layout cr_io */
    cr_io hio;
    cudaEvent_t in_done;         /* the H2D copies of h_in are finished */
    void *d_out, *h_out;         /* sampled/logprob/top block, device + pinned */
    float *h_logits;             /* pinned (max_seqs, n_vocab), keep_logits */
    void *d_plp, *h_plp;         /* prompt logprobs, device + pinned (cr_plp) */
    cr_plp dplp, hplp;
    int n_lp;                    /* entries of the step in flight */
    cudaEvent_t t0, t1, computed, out_ready;
    pl_step_output out;
    int ticket;
    int busy;
} cr_slot;

typedef struct cuda_runner {
    pl_runner base;
    const char *name;
    /* model geometry */
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_rot;
    int q_dim, kv_dim, qkv_dim;
    float rms_eps;
    int rope_neox;
    float rope_mscale;           /* YaRN's magnitude factor on q and k (1: none) */
    pl_cuda_weights w;
    pl_cuda_gemm *gemm;
    cudaStream_t cs, xs;         /* compute, copy-back */
    /* KV cache: layer l keys at kv + 2l*layer_bytes, values at +(2l+1) */
    unsigned char *kv;
    size_t layer_bytes, block_bytes;
    pl_kv_geom geom;             /* n_blocks includes the padding block; dtype */
    float *kv_scale;             /* fp8: (n_layer, 2, n_head_kv) K then V scales */
    pl_attn_opts attn;           /* scale and soft-capping of every layer */
    float final_softcap;         /* logits soft-capping (gemma2), 0: none */
    float embd_scale;            /* embedding rows times it (gemma: sqrt(n_embd)) */
    bool geglu;                  /* GELU-tanh gate (gemma), else SiLU */
    /* mixtures of experts (n_expert > 0): every layer's FFN is the experts' */
    int n_expert, n_expert_used, n_ff_exp;
    int moe_act;                 /* pl_cuda_moe_act's act: the model's pl_ffn_act */
    bool moe_topk_softmax, moe_norm_w; /* the gating (model.h's formula) */
    int mbps;                    /* max blocks per sequence on the device */
    /* capacities */
    int max_rows, max_seqs, bias_cap, hist_cap, hist_per_seq;
    bool hist_warned;            /* logged once: a history longer than hist_per_seq */
    size_t io_bytes;
    /* device buffers */
    void *d_in;
    cr_io dio;
    float *x, *y, *qkv, *gu, *logits, *pen;
    pl_bf16 *xb, *att, *act, *xl;
    /* expert buffers (n_expert > 0; pairs = max_rows * n_expert_used) */
    float *moe_xf;               /* (max_rows, n_embd) fp32 normed rows: the router's input */
    float *moe_logits;           /* (max_rows, n_expert) */
    int32_t *moe_sel;            /* (pairs) chosen experts, rank order */
    float *moe_wt;               /* (pairs) their weights */
    pl_cuda_moe_plan moe_plan;   /* max_tiles for max_rows; a step uses its own bound */
    pl_bf16 *moe_xp;             /* (pairs, n_embd) each place's input row */
    float *moe_g, *moe_u;        /* (pairs, n_ff_exp) gate and up outputs */
    pl_bf16 *moe_h;              /* (pairs, n_ff_exp) the activation */
    float *moe_y;                /* (pairs, n_embd) each place's expert output */
    void *d_out;                 /* fixed sampler output block */
    pl_cuda_samp_out sout;
    int32_t *slot_tok;           /* (max_seqs) feedback ids */
    size_t out_bytes;
    /* steps */
    cr_slot slot[PL_RUNNER_MAX_INFLIGHT];
    int next_ticket;
    /* graphs of decode-only steps */
    bool use_graphs;
    int n_buckets;
    int bucket_size[CR_MAX_BUCKETS];
    int bucket_warm[CR_MAX_BUCKETS];
    int bucket_eager[CR_MAX_BUCKETS];  /* capture failed: eager for good */
    bool inject_capture_failure;       /* --cuda-inject capture */
    bool split_kv;               /* unless --cuda-decode-attn rows */
    pl_split_kind split_kind;    /* --cuda-decode-attn split16|mma: the variants */
    bool prefill_mma;            /* --cuda-prefill-attn mma: tensor-core prefill */
    int load_threads;            /* --load-threads (0: the online CPUs) */
    int n_sm;
    int split_bpsm;              /* blocks per SM of the split kernel (occupancy) */
    float *split_ws;             /* split-KV decode workspace */
    pl_cuda_graph_stats graph_stats;
    /* constrained decoding: device tables, vocabulary (cuda_constrain.c) */
    cr_fsm fsm[CR_FSM_CACHE];
    uint64_t fsm_clock, fsm_pack;
    void *fsm_vocab_dev;
    const void *fsm_vocab_key;
    pl_fsm_vocab fsm_vocab;
    cudaGraphExec_t graph[CR_MAX_BUCKETS];
    cr_prof *prof;               /* PARLEY_CUDA_PROFILE=1, graphs off; else NULL */
} cuda_runner;

/** Map the cr_io arrays onto base (host staging or device); returns bytes. */
size_t pl_cuda_io_map(cr_io *io, void *base, int max_rows, int max_seqs, int mbps,
                      int bias_cap, int hist_cap);
/** Pack in into the slot's staging, padding decode-only steps to a graph
 *  bucket. 0, or -1 when the step exceeds the runner's capacity. */
int pl_cuda_io_pack(cuda_runner *r, cr_slot *s, const pl_step_input *in, cr_step *st);
/** Enqueue the H2D copies of a packed step on the compute stream. */
int pl_cuda_io_upload(cuda_runner *r, cr_slot *s, const cr_step *st);

/** Constrained sequence s of in: its tables on the device (uploaded on
 *  first use) and its state into o. 0, or -1 (pl_cuda_last_error). */
int pl_cuda_fsm_attach(cuda_runner *r, const pl_step_input *in, int s, pl_cuda_samp *o);
/** Free every constraint's device tables and the vocabulary's. */
void pl_cuda_fsm_free(cuda_runner *r);

/** Phase timing (cuda_profile.c): set up when on (--cuda-profile with
 *  graphs off); mark after each phase; the step's end waits for it and
 *  sums the intervals. All are no-ops when r->prof is NULL. */
int pl_cuda_prof_init(cuda_runner *r, bool on);
void pl_cuda_prof_free(cuda_runner *r);
void pl_cuda_prof_mark(cuda_runner *r, int phase);
void pl_cuda_prof_step_end(cuda_runner *r);

/** Enqueue the forward pass and sampling of a packed step on r->cs. */
int pl_cuda_forward(cuda_runner *r, const cr_step *st);
/** After pl_cuda_forward (r->x holds every row's final hidden state):
 *  enqueue the prompt logprobs of the step's listed rows into out
 *  (device), in chunks of max_seqs rows through the logits buffer. */
int pl_cuda_prompt_logprobs(cuda_runner *r, const cr_step *st, cr_plp out);
/** One layer's cache (device pointers into r->kv and r->kv_scale). */
pl_kv_layer pl_cuda_kv_layer(const cuda_runner *r, int l);
/** Splits of the split-KV decode kernel for n_rows rows (even waves at
 *  the kernel's occupancy, pl_cuda_attn_split_plan). */
int pl_cuda_split_count(const cuda_runner *r, int n_rows);
/** Map cr_plp onto base for max_rows entries; returns bytes. */
size_t pl_cuda_plp_map(cr_plp *p, void *base, int max_rows);

#endif
