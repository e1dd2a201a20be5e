/* engine_embed.h - an encoder model (model/encoder.h), or a decoder asked
 * to embed (--pooling: its final hidden states, before the output head,
 * pooled), served as a backend that embeds (backend.h's embed and
 * embed_info; generation is refused):
 * its own worker thread tokenises each request's texts, truncates or
 * refuses long ones, and runs the CPU forward pass (cpu/encode.h) over
 * the texts of every request waiting, in steps of at most a token budget;
 * results come back to the main loop through an eventfd. */
#ifndef PL_ENGINE_EMBED_H
#define PL_ENGINE_EMBED_H

#include <stddef.h>

#include "backends/backend.h"
#include "backends/engine/engine_hf.h"
#include "backends/engine_config.h"
#include "backends/formats/gguf.h"

struct event_base;
struct pl_model;
struct pl_tokenizer;

/** What the encoder backend takes over (every pointer owned from the call
 *  on, freed on failure too). */
typedef struct pl_engine_embed_files {
    pl_gguf *gguf;               /**< a GGUF file, or NULL */
    struct pl_model *model;      /**< a decoder loaded for the CPU, served by
                                      pooling its final hidden states; NULL:
                                      an encoder, loaded from meta */
    pl_engine_hf hf;             /**< a checkpoint folder (hf.files), or empty */
    const pl_gguf *meta;         /**< the model's GGUF: gguf or hf.files' */
    struct pl_tokenizer *tok;    /**< the checkpoint's tokenizer, or NULL (the GGUF's) */
    const char *dir;             /**< the checkpoint folder (sentence-transformers'
                                      files), or NULL */
} pl_engine_embed_files;

/** Load the encoder and start its thread, serving it as name. cfg:
 *  threads (cpu.threads), pooling, max_model_len (0: sentence-transformers'
 *  max_seq_length, else the model's positions; more than its positions is
 *  refused), max_num_batched_tokens (the step's budget). NULL with err. */
pl_backend *pl_engine_embed_open(struct event_base *base, const char *name,
                                 pl_engine_embed_files *f, const pl_engine_config *cfg,
                                 char *err, size_t errlen);

#endif
