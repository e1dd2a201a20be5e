/* model_internal.h - what model.c (tensors), model_meta.c
 * (hyperparameters) and model_rope.c (RoPE) share. Not for use outside
 * backends/engine/model/. */
#ifndef PL_MODEL_INTERNAL_H
#define PL_MODEL_INTERNAL_H

#include <stddef.h>

#include "backends/engine/model/model.h"

/** Format a one-line error into err; returns -1. */
int pl_model_fail_(char *err, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** Architecture, sizes, norms, attention scale, soft-capping and the
 *  sliding layers (each layer's n_swa; m->layers must be allocated) from
 *  the metadata; refuses keys of features parley does not implement.
 *  0, or -1 with err naming the key. */
int pl_model_read_arch_(pl_model *m, const pl_gguf *g, char *err, size_t len);
int pl_model_read_hparams_(pl_model *m, const pl_gguf *g, char *err, size_t len);
int pl_model_read_swa_(pl_model *m, const pl_gguf *g, char *err, size_t len);
/** The Gated DeltaNet sizes (ssm.*) and which layers are recurrent, for a
 *  family with recurrent layers; nothing for the others. */
int pl_model_read_ssm_(pl_model *m, const pl_gguf *g, char *err, size_t len);
/** The RoPE tables (global and sliding) and each layer's pointer to its
 *  own (model_rope.c). factors: rope_freqs.weight's (n_rot/2) values or
 *  NULL. */
int pl_model_read_rope_(pl_model *m, const pl_gguf *g, const float *factors, char *err,
                        size_t len);

/** Each layer's head size, rotated dims, K/V heads and the layer whose
 *  K/V it reads (after the sliding layers are known), the model's widest
 *  q_dim and kv_dim, shared_kv_layers where the family reads it. */
int pl_model_read_geometry_(pl_model *m, const pl_gguf *g, char *err, size_t len);

/** model_meta.c's readers: "<arch>.<key>" into k; an integer in [lo, hi]
 *  (absent: def when def >= lo, else an error); a finite float > 0
 *  (absent: def, or an error when def is 0); a value type's name. Each
 *  error names the key. */
const char *pl_model_key_(char *k, size_t n, const pl_model *m, const char *key);
int pl_model_meta_int_(const pl_model *m, const pl_gguf *g, const char *key, long long lo,
                       long long hi, long long def, int *out, char *err, size_t len);
int pl_model_meta_float_(const pl_model *m, const pl_gguf *g, const char *key, float def,
                         float *out, char *err, size_t len);
const char *pl_model_type_name_(pl_gguf_type t);

#endif
