/* forward.h - one forward pass of a pl_model over a batch of token rows on
 * the CPU, with the paged KV cache. Used by cpu_runner.c, and directly by
 * tests that need logits of every row (teacher forcing).
 */
#ifndef PL_CPU_FORWARD_H
#define PL_CPU_FORWARD_H

#include <stdint.h>

#include "backends/engine/cpu/ops.h"
#include "backends/engine/cpu/pool.h"
#include "backends/engine/model/model.h"
#include "schedulers/kv_layout.h"

typedef struct pl_cpu_fwd pl_cpu_fwd;

typedef struct pl_fwd_opts {
    int max_rows;                /**< most token rows per call */
    int max_out;                 /**< most rows with logits per call */
    int max_ctx;                 /**< longest sequence (KV positions) */
    int num_blocks, block_size;  /**< paged KV pool geometry */
    int gemm_min_rows;           /**< f32 GEMM (BLAS) from this many rows;
                                      fewer use the quantised kernels */
    int kv_f16;                  /**< K/V cache in IEEE halves (as llama.cpp
                                      by default): half the bytes attention
                                      reads per step; 0: floats */
    int attn_split_ctx;          /**< split one or two rows' attention over
                                      the threads from this context on (0:
                                      256; < 0: never); the values are the
                                      same either way */
    int amx;                     /**< pl_amx_mode: Q4_0, Q4_1 and Q8_0
                                      matmuls in block order, on AMX tiles
                                      from 16 rows (qdot_amx.h); 0: off */
    int max_slots;               /**< recurrent-state slots (models with
                                      Gated DeltaNet layers; 0: max_out) */
    int max_ckpts;               /**< recurrent-state checkpoints
                                      (pl_cpu_fwd_ckpt_load; 0: none) */
    int gdn_align;               /**< the delta rule's chunks never cross a
                                      multiple of this position (the KV
                                      block size: a state checkpointed at a
                                      block boundary then continues exactly
                                      as a cold run would; 0: 64) */
    /** Cache groups (schedulers/kv_layout.h; copied at pl_cpu_fwd_new):
     *  which block table each layer reads, which of a block's slots holds
     *  it. NULL: one full group of every layer. */
    const pl_kv_layout *kv_layout;
} pl_fwd_opts;

/** One call's batch. tokens are resolved ids (no placeholders). */
typedef struct pl_fwd_batch {
    int n_rows;
    const int32_t *tokens;       /**< (n_rows) */
    const int32_t *positions;    /**< (n_rows) */
    const int32_t *row_seq;      /**< (n_rows) sequence index of each row */
    const int32_t *block_table;  /**< (n_seqs, n_groups, max_blocks_per_seq):
                                      each cache group's table */
    int max_blocks_per_seq;
    int n_groups;                /**< the layout's groups; 0 means 1 */
    int n_out;
    const int32_t *out_rows;     /**< (n_out) rows whose logits are computed */
    /** (n_seqs) the recurrent-state slot of each sequence (models with
     *  recurrent layers), stable for a sequence's life; NULL: the sequence
     *  index. A sequence's rows are consecutive positions, in row order; a
     *  first row at position 0 starts from a zero state, one at p > 0
     *  continues its slot's state, which must be the state after p - 1. */
    const int32_t *seq_slot;
    /** Checkpoints to save while running (max_ckpts > 0): once slot
     *  ck_save_slot[i] has consumed ck_save_pos[i] positions (a multiple
     *  of gdn_align among its rows of this call), its state is copied
     *  into checkpoint ck_save_id[i]. */
    int n_ck_save;
    const int32_t *ck_save_slot, *ck_save_id, *ck_save_pos;
} pl_fwd_batch;

/** Allocates scratch and the KV pool (f32). The model and pool are
 *  borrowed. NULL with a message on failure. */
pl_cpu_fwd *pl_cpu_fwd_new(const pl_model *m, pl_pool *pool, const pl_fwd_opts *o,
                           char *err, size_t errlen);
void pl_cpu_fwd_free(pl_cpu_fwd *f);

/** Run the batch: writes K/V of every row into its block (recurrent
 *  layers: advances the sequences' state slots), then logits (n_out,
 *  n_vocab). Returns 0, or -1 on an invalid batch (token id, position or
 *  block id out of range; a recurrent slot out of range, shared, or not at
 *  the position before the sequence's first row) with nothing written to
 *  logits and no state changed. */
int pl_cpu_forward(pl_cpu_fwd *f, const pl_fwd_batch *b, float *logits);

/** Logits (n, n_vocab) of rows of the last pl_cpu_forward call (its final
 *  hidden states are kept until the next call): prompt logprobs for rows
 *  beyond the sampled ones. 1 <= n <= max_out. Returns 0, or -1 on a bad
 *  row or count. */
int pl_cpu_fwd_row_logits(pl_cpu_fwd *f, const int32_t *rows, int n, float *logits);

/** The final hidden states (n, n_embd) of rows of the last pl_cpu_forward
 *  call: the output norm of each row, what the output head would read
 *  (decoder models as embedders; a call with n_out 0 computes no logits).
 *  Returns 0, or -1 on a bad row. */
int pl_cpu_fwd_row_hidden(pl_cpu_fwd *f, const int32_t *rows, int n, float *out);

/** Bytes of one recurrent-state checkpoint of m (every recurrent layer's
 *  conv and delta-rule state); 0 without recurrent layers. */
size_t pl_cpu_fwd_ckpt_bytes(const pl_model *m);

/** Restore checkpoint ck into recurrent slot `slot`, which then stands at
 *  position pos (the position the checkpoint was saved at). Returns 0, or
 *  -1 when ck, slot or pos is out of range. */
int pl_cpu_fwd_ckpt_load(pl_cpu_fwd *f, int ck, int slot, int pos);

/** Copy block src's K/V (all the layers it holds) to block dst. */
void pl_cpu_fwd_copy_block(pl_cpu_fwd *f, int32_t src, int32_t dst);

/** Set the GEMM threshold (rows) at run time (benchmarks). */
void pl_cpu_fwd_set_gemm_min_rows(pl_cpu_fwd *f, int rows);

/** Set the AMX mode (pl_amx_mode) before the next call. */
void pl_cpu_fwd_set_amx(pl_cpu_fwd *f, int amx);

#endif
