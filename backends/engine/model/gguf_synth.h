/* gguf_synth.h - a pl_gguf built in memory, key by key and tensor by
 * tensor, for models read from other formats (Hugging Face checkpoints):
 * the model loader and the runners then read it as they read a GGUF file,
 * under the names and layouts llama.cpp's converter writes.
 *
 * Scalars and strings only (no arrays). Keys and names are copied; tensor
 * data is borrowed (the caller keeps it alive as long as the pl_gguf).
 */
#ifndef PL_GGUF_SYNTH_H
#define PL_GGUF_SYNTH_H

#include <stdint.h>

#include "backends/formats/gguf.h"

typedef struct pl_gguf_synth pl_gguf_synth;

/** A new, empty builder; NULL when out of memory. */
pl_gguf_synth *pl_gguf_synth_new(void);
/** Each returns 0, or -1 when out of memory. A key set twice keeps its
 *  last value. */
int pl_gguf_synth_u32(pl_gguf_synth *s, const char *key, uint32_t v);
int pl_gguf_synth_f32(pl_gguf_synth *s, const char *key, float v);
int pl_gguf_synth_bool(pl_gguf_synth *s, const char *key, int v);
int pl_gguf_synth_str(pl_gguf_synth *s, const char *key, const char *v);
/** An array of n int32 values (copied). */
int pl_gguf_synth_arr_i32(pl_gguf_synth *s, const char *key, const int32_t *v, size_t n);
/** A copy of n bytes at p that lives as long as s (a computed tensor's
 *  data), or NULL when out of memory. */
void *pl_gguf_synth_keep(pl_gguf_synth *s, const void *p, size_t n);
/** A tensor of type t with dims ne[0..n_dims) (ne[0] contiguous) at data
 *  (borrowed), nbytes long. */
int pl_gguf_synth_tensor(pl_gguf_synth *s, const char *name, pl_ggml_type t, int n_dims,
                         const uint64_t *ne, const void *data, uint64_t nbytes);
/** The pl_gguf view (valid until the next call that adds to s). */
const pl_gguf *pl_gguf_synth_view(const pl_gguf_synth *s);
/** NULL is a no-op. Does not free tensor data. */
void pl_gguf_synth_free(pl_gguf_synth *s);

#endif
