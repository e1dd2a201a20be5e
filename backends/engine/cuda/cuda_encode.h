/* cuda_encode.h - an encoder's forward pass on the GPU (model/encoder.h's
 * formula, the CPU's cpu/encode.h): weights uploaded once (matrices as
 * bf16 for cuBLAS, embeddings, biases and norms fp32), then batches of
 * whole texts stacked without padding: one GEMM per projection over all
 * their rows, the kernels of encode.cuh between them, one vector per text
 * read back. The engine does not route encoders here yet (engine_open.c:
 * they run on the CPU under --device cuda) until a device call has passed
 * test_cuda_encode. */
#ifndef PL_CUDA_ENCODE_H
#define PL_CUDA_ENCODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/engine/model/encoder.h"

typedef struct pl_cuda_encoder pl_cuda_encoder;

/**
 * Upload m for batches of up to max_rows rows in all (each text at most
 * m->n_pos and PL_CUDA_ENC_MAX_LEN rows). NULL with a message in err (no
 * device, out of device memory, a text limit the kernels do not take).
 */
pl_cuda_encoder *pl_cuda_encoder_new(const pl_encoder *m, int max_rows, char *err,
                                     size_t errlen);
void pl_cuda_encoder_free(pl_cuda_encoder *e);

/**
 * As pl_encode_batch: n texts ids[i] of lens[i] ids (1 to n_pos each, in
 * [0, n_vocab), at most max_rows in all), pooled (MEAN, CLS or LAST) and,
 * when normalize, of unit L2 norm, into out + i * n_embd (host memory).
 * Returns 0, or -1 (bad arguments, a CUDA failure: pl_cuda_last_error()).
 */
int pl_cuda_encode_batch(pl_cuda_encoder *e, const int32_t *const *ids, const int *lens,
                         int n, pl_pooling pooling, bool normalize, float *out);

#endif
