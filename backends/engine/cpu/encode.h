/* encode.h - the CPU forward pass of an encoder (model/encoder.h): several
 * whole texts in one call, each attending to itself only, every matrix
 * product over all their rows at once (BLAS, split over the pool's
 * threads), then pooled to one vector per text. No K/V cache: an encoder
 * reads each text once. */
#ifndef PL_ENCODE_H
#define PL_ENCODE_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/engine/cpu/pool.h"
#include "backends/engine/model/encoder.h"

/**
 * Embed n texts: text i is ids[i] (lens[i] ids, 1 to m->n_pos, each in
 * [0, m->n_vocab): the caller checks), all of token type 0, at positions
 * 0.. . Its rows are pooled by pooling (MEAN, CLS or LAST) and, when
 * normalize, scaled to unit L2 norm, into out + i * m->n_embd. pool may be
 * NULL (the calling thread alone). Returns 0, or -1 out of memory.
 */
int pl_encode_batch(const pl_encoder *m, pl_pool *pool, const int32_t *const *ids,
                    const int *lens, int n, pl_pooling pooling, bool normalize, float *out);

#endif
