/* cuda_attn_fix.h - the attention kernels' test fixture and its float64
 * reference (cuda_attn_fix.c): a step of query rows over a paged cache
 * (a cached prefix written straight into the device pool, this step's
 * keys through pl_cuda_kv_write), in bf16 or fp8, with unmapped blocks,
 * sliding windows, soft-capping, large logits and attention sinks.
 *
 * The reference computes in double precision from the values the cache
 * holds (bf16-rounded, or e4m3-decoded times the scale) and from q as the
 * kernel rounds it: fp32 for the CUDA-core kernels, bf16 (fp16 for an fp8
 * cache) of q * scale * log2(e) for the tensor-core ones, so large logits
 * are compared on the same scores and only the kernel's own arithmetic
 * (probabilities rounded to 16 bits, fp32 sums) remains in the error. */
#ifndef PL_TEST_CUDA_ATTN_FIX_H
#define PL_TEST_CUDA_ATTN_FIX_H

#include "tests/cuda_test_util.h"

#include "backends/engine/cuda/attn_common.cuh"

#define AF_MAX_SEQS 4

typedef struct attn_case {
    int n_head, n_kv, hd;
    int n_seqs;
    int ctx[AF_MAX_SEQS];        /* tokens in KV per sequence after the step */
    int new_rows[AF_MAX_SEQS];   /* rows of this step per sequence (the last ones) */
    int bs;                      /* block size (0: 16) */
    int window;                  /* sliding window (0: none) */
    float softcap;               /* 0: none */
    int holes;                   /* > 0: every holes-th page of a sequence is unmapped */
    float qmag;                  /* q's magnitude (0: 1); large: large logits */
    pl_kv_dtype dtype;
    float kscale, vscale;        /* fp8 dequantisation scales (0: 1) */
    float sink;                  /* != 0: attention sinks, head h's af_sink(sink, h) */
} attn_case;

typedef struct attn_fix {
    attn_case c;
    int bs, mb, n_blocks, n_rows, qkv_dim;
    int32_t *bt, *pos, *row_seq, *first, *nrows;
    float *qkv;                  /* (n_rows, qkv_dim) this step's rows */
    float *kpool, *vpool;        /* (n_blocks, bs, n_kv, hd): the values the cache holds */
    unsigned char *kraw, *vraw;  /* the cache's bytes as kv_write must leave them */
    size_t pool_elems;
    pl_attn_opts o;
    /* device */
    void *dk, *dv;
    float *dqkv, *dks, *dvs, *dsinks;
    int32_t *dbt, *dpos, *drs, *dfirst, *dnrows;
} attn_fix;

/** How the kernel under test rounds q (the reference does the same). */
typedef enum af_qround { AF_Q_F32, AF_Q_BF16, AF_Q_F16 } af_qround;

/** Head h's sink logit for a case's sink: both signs, a spread of sizes. */
float af_sink(float sink, int h);
void af_init(attn_fix *f, attn_case c);
void af_free(attn_fix *f);
pl_kv_geom af_geom(const attn_fix *f);
pl_kv_layer af_layer(const attn_fix *f);
/** The step for the kernels, writing into out (device). */
pl_attn_step af_step(const attn_fix *f, pl_bf16 *out);
/** pl_cuda_kv_write of the step's rows, then the device pools checked to
 *  be the expected bytes exactly. */
void af_write_and_check(attn_fix *f);
/** Reference output (n_rows, n_head * hd) of every row. */
void af_reference(const attn_fix *f, af_qround qr, float *out);
/** A device output buffer of every row, poisoned (bf16 NaN 0xffff). */
pl_bf16 *af_poisoned_out(const attn_fix *f);
/** The output: rows with on[r] within tol of the reference (normalised
 *  error), the other rows still poisoned; on NULL: every row. */
void af_check(const attn_fix *f, const pl_bf16 *dout, const float *ref, const bool *on,
              double tol, const char *what);

#endif
