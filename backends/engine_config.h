/* engine_config.h - what an in-process engine is told: its options, as
 * views of parley's option table.
 *
 * src/options.c declares every option once; its pl_opts embeds a
 * pl_engine_config, so the table writes these fields directly and the
 * engine, its scheduler and its runners read the same memory, each part
 * the view it needs (pl_engine_options, pl_cpu_opts, pl_cuda_opts).
 * Nothing here includes more than the C library, so any layer may
 * include it.
 */
#ifndef PL_ENGINE_CONFIG_H
#define PL_ENGINE_CONFIG_H

#include <stdbool.h>

/** --capacity's values (pl_engine_options.capacity_rule). */
enum { PL_CAPACITY_KV = 0, PL_CAPACITY_WORST_CASE = 1 };

/** The engine core: scheduler and KV geometry (engine.h). */
typedef struct pl_engine_options {
    int block_size;              /**< tokens per KV block; 0 = the runner's
                                      (must equal it otherwise) */
    int num_blocks;              /**< KV blocks used; 0 = all the runner's */
    int max_num_seqs;            /**< running sequences; 0 = runner max_seqs */
    int max_num_batched_tokens;  /**< rows per step; 0 = runner max_rows */
    bool async;                  /**< async step pipeline (default true) */
    bool prefix_caching;         /**< default true */
    /** Full blocks only: no partial-block prefix reuse (batch.h; it is on
     *  with prefix caching when the runner can copy blocks). */
    bool no_partial_prefix;
    /** Hybrids (recurrent layers): a recurrent-state checkpoint every
     *  this many KV blocks of a prompt (0: only where retention hints
     *  point), --prefix-checkpoint-blocks. */
    int ckpt_every;
    /** How capacity is decided (--capacity): PL_CAPACITY_KV, admission
     *  counts the blocks each request needs (ops->kv, engine_kv.c) and
     *  capacity() is max_num_seqs; PL_CAPACITY_WORST_CASE, capacity() is
     *  seed 000's min(max_num_seqs, KV tokens / capacity_len) and kv()
     *  reports nothing. */
    int capacity_rule;
    /** Tokens each sequence is counted as under PL_CAPACITY_WORST_CASE
     *  (KV tokens / this); 0 = the context length. Not an option:
     *  engine_open sets it where it chose the context (engine_open.h). */
    int capacity_len;
    /** Threads that compile new constraints and tokenise large prompts
     *  off the event loop (engine_prep.c); 0: all of it inline, on the
     *  event loop (the old way, for comparison). */
    int prepare_threads;
    /** The whitespace constrained JSON may hold: a pl_json_ws (backend.h;
     *  0 flexible, 1 compact), --structured-whitespace. */
    int json_ws;
} pl_engine_options;

/** The CPU runner (cpu_runner.h). */
typedef struct pl_cpu_opts {
    int threads;                 /**< pool threads; <= 0: all cores */
    bool kv_f16;                 /**< K/V cache in IEEE halves (else floats) */
    bool batch_invariant;        /**< quantised kernels at every row count */
    bool kv_groups;              /**< cache groups (schedulers/kv_layout.h):
                                      sliding layers keep their window only;
                                      false: one full group of all layers */
    bool amx;                    /**< AMX-INT8 tiles in block order (qdot_amx.h) */
    char *weight_type;           /**< what a Hugging Face checkpoint's weight
                                      matrices are quantised to at load ("q8_0",
                                      ...; NULL or "": q8_0), read by engine_open;
                                      a GGUF keeps its types, CUDA takes bf16 */
} pl_cpu_opts;

/** Decode attention kernels of the CUDA runner. */
typedef enum pl_cuda_decode_attn {
    PL_CUDA_DECODE_SPLIT = 0,    /**< split-KV, a warp per key (default where
                                      the shape has a kernel, else rows) */
    PL_CUDA_DECODE_ROWS,         /**< one block per row */
    PL_CUDA_DECODE_SPLIT16,      /**< split-KV, 16 lanes per key */
    PL_CUDA_DECODE_MMA,          /**< split-KV on tensor cores */
} pl_cuda_decode_attn;

/** Prefill attention kernels of the CUDA runner. */
typedef enum pl_cuda_prefill_attn {
    PL_CUDA_PREFILL_TILED = 0,   /**< 32 x 32 tiles (default) */
    PL_CUDA_PREFILL_MMA,         /**< tensor cores, where the head size has one */
} pl_cuda_prefill_attn;

/** Element type of the CUDA runner's KV cache (vLLM's --kv-cache-dtype). */
typedef enum pl_cuda_kv_dtype {
    PL_CUDA_KV_AUTO = 0,         /**< the model's activations: bf16 */
    PL_CUDA_KV_BF16,
    PL_CUDA_KV_FP8,              /**< OCP FP8 E4M3 with a scale per KV head (1 unless
                                      given): twice the tokens per byte */
    PL_CUDA_KV_FP8_E4M3,         /**< the same, by its full name */
} pl_cuda_kv_dtype;

/** Fault injection (tests). */
typedef enum pl_cuda_inject {
    PL_CUDA_INJECT_NONE = 0,
    PL_CUDA_INJECT_CAPTURE,      /**< every CUDA graph capture fails */
} pl_cuda_inject;

/** The CUDA runner (cuda_runner.h). */
typedef struct pl_cuda_opts {
    double gpu_memory_utilization; /**< share of device memory for weights,
                                      activations and KV (0, 1]; <= 0: 0.9 */
    bool graphs;                 /**< capture decode-only steps in CUDA graphs */
    int decode_attn;             /**< pl_cuda_decode_attn */
    int prefill_attn;            /**< pl_cuda_prefill_attn */
    bool profile;                /**< device time per phase (only with graphs
                                      off; each step then waits for itself) */
    int inject;                  /**< pl_cuda_inject */
    int load_threads;            /**< weight conversion threads at load;
                                      <= 0: the online CPUs (at most 32) */
    int kv_cache_dtype;          /**< pl_cuda_kv_dtype */
} pl_cuda_opts;

/** Everything an engine backend is opened with besides the model file,
 *  its served name and the device (engine_open.h). */
typedef struct pl_engine_config {
    char *chat_template;         /**< NULL or "": detected from the GGUF */
    bool chat_template_strict;   /**< unknown template: error, not ChatML */
    char *revision;              /**< a model given as ORG/NAME: its revision in
                                      the local Hugging Face cache (a ref or
                                      snapshot hash; NULL or "": refs/main) */
    char *pooling;               /**< an embedding model's pooling ("mean",
                                      "cls", "last"); NULL or "": its own */
    int kv_cache_mb;             /**< CPU KV cache size */
    int max_model_len;           /**< 0: chosen from the model's context and
                                      the K/V cache (engine_open.h) */
    pl_engine_options core;
    pl_cpu_opts cpu;
    pl_cuda_opts cuda;
} pl_engine_config;

#endif
