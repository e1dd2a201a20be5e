/* hf_model.h - a Hugging Face checkpoint folder (config.json and
 * safetensors weights) as the GGUF model the loader and runners read: the
 * metadata from config.json and every tensor under llama.cpp's name and
 * layout, converted to the type the runner wants (hf_arch.h, hf_weights.h).
 *
 * The tokenizer files are read by text/tokenizer_hf.c; this is the model.
 */
#ifndef PL_HF_MODEL_H
#define PL_HF_MODEL_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/formats/gguf.h"

typedef struct pl_hf_opts {
    /** The type of the weight matrices: the CPU runner's --cpu-weight-type
     *  (Q8_0 by default), BF16 for the CUDA runner. A matrix whose row
     *  length is not a whole number of that type's blocks falls back to
     *  Q8_0, then F16. Vectors (norms, biases) stay F32. Matrices already
     *  stored as this type (bf16 for bf16) are used in place, not copied. */
    pl_ggml_type weight_type;
    /** Each matrix in its own precision instead: F16, BF16 and F32 as
     *  stored (in place), FP8 dequantised to BF16 (the CPU has no FP8
     *  kernels; BF16 holds an e4m3 value exactly, its scaled product
     *  nearly). weight_type is then unused. */
    bool own_precision;
    int threads;                 /**< conversion threads; 0 = the cores */
} pl_hf_opts;

typedef struct pl_hf_model pl_hf_model;

/** What loading did, for the log and the benchmark. */
typedef struct pl_hf_load_stats {
    int n_tensors;               /**< tensors in the checkpoint */
    int n_converted;             /**< converted (the rest used in place) */
    int n_fallback;              /**< matrices not in weight_type (block size) */
    double mib_read;             /**< safetensors bytes mapped */
    double mib_written;          /**< converted bytes held */
    double seconds;              /**< open to ready */
    bool fp8;                    /**< FP8 weights (dequantised with their scales) */
} pl_hf_load_stats;

/**
 * Open dir (which holds config.json). Refuses, naming the file and the
 * tensor or key: an architecture not in the table, a config.json value
 * out of range or unsupported, a missing tensor, a tensor the architecture
 * does not have, a shape that disagrees with config.json, an unsupported
 * dtype or quantization_config, a non-finite weight. Returns NULL with the
 * message in err; the caller frees with pl_hf_model_free.
 */
pl_hf_model *pl_hf_model_open(const char *dir, const pl_hf_opts *o, char *err, size_t errlen);

/** The model as a GGUF (borrowed; lives as long as m). */
const pl_gguf *pl_hf_model_gguf(const pl_hf_model *m);
const pl_hf_load_stats *pl_hf_model_stats(const pl_hf_model *m);
/** config.json's vocab_size (the embedding's rows). */
int pl_hf_model_n_vocab(const pl_hf_model *m);
/** NULL is a no-op. */
void pl_hf_model_free(pl_hf_model *m);

#endif
