/* engine_open.h - open a GGUF model as an engine backend: the model, its
 * tokenizer and chat template, a runner (CPU, or CUDA when built and
 * asked for), and the engine thread. */
#ifndef PL_ENGINE_OPEN_H
#define PL_ENGINE_OPEN_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/backend.h"
#include "backends/engine_config.h"

struct event_base;

typedef struct pl_engine_open_opts {
    const char *model_path;      /**< GGUF file, checkpoint folder, or ORG/NAME in
                                      the local Hugging Face cache (hf_cache.h) */
    const char *served_name;     /**< NULL or "": derived from the file name */
    const char *device;          /**< "cpu" or "cuda" */
    bool cpu_fallback;           /**< "cuda" picked for the user (--backend
                                      auto): a model the CUDA runner does not
                                      run (its family, experts, ...) is
                                      served by the CPU runner instead, with
                                      a warning saying why */
    const pl_engine_config *cfg; /**< the options (borrowed, read during the
                                      call; the engine keeps copies of the
                                      views it needs) */
} pl_engine_open_opts;

/** Load and start. Returns NULL with a message in err (file, type or
 *  architecture problems are named). */
pl_backend *pl_engine_open(struct event_base *base, const pl_engine_open_opts *o,
                           char *err, size_t errlen);

/**
 * The CPU engine's context when none is asked for (max_model_len 0), as
 * vLLM sizes max_model_len: the model's own (model_ctx) where the K/V cache
 * (kv_blocks of block_size tokens) holds at least 4 sequences of it;
 * otherwise the longest context, in whole blocks, it holds 4 sequences of,
 * but never less than min(model_ctx, 2048), the former default (a cache
 * too small for one sequence of that is an error of the caller). Sets
 * *count_len to min(context, 2048): the tokens each sequence is counted as
 * in the capacity under --capacity worst-case (pl_engine_options.capacity_len),
 * so a longer default context does not shrink that capacity; and
 * why (n bytes) to the reason, for the log.
 */
int pl_engine_cpu_context(int model_ctx, int kv_blocks, int block_size, int *count_len,
                          char *why, size_t n);

/** The served name for a model file: "SmolLM2-135M-Instruct.Q4_1.gguf" ->
 *  "smollm2-135m-instruct" (lowercase, no extension, no quant tag). */
void pl_engine_model_name(const char *path, char *out, size_t n);

/**
 * Whether a GPU the CUDA runner can use is present: 1, or 0 with the reason
 * in why (n bytes). Safe on any machine; builds without CUDA say so.
 */
int pl_engine_gpu_available(char *why, size_t n);

#endif
