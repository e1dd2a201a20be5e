/* cpu_runner.h - the CPU implementation of the runner interface (runner.h).
 *
 * launch() queues the step for the runner's own worker thread and returns at
 * once; wait() blocks until that step is done. The worker runs the forward
 * pass on a persistent pool of n_threads threads and samples on the CPU.
 */
#ifndef PL_CPU_RUNNER_H
#define PL_CPU_RUNNER_H

#include <stddef.h>

#include "backends/engine/cpu/pool.h"
#include "backends/engine/cpu/qdot_amx.h"
#include "backends/engine_config.h"
#include "backends/engine/model/model.h"
#include "backends/engine/runner.h"

/**
 * New CPU runner for a loaded model (borrowed; must outlive the runner).
 * want gives block_size, num_blocks (0: enough for max_seqs sequences of
 * max_model_len), max_seqs, max_rows and max_model_len (0: the model's
 * context length); n_vocab and eos_id come from the model. n_threads <= 0:
 * all cores. Free with r->ops->free(r). NULL with a message in err.
 */
pl_runner *pl_cpu_runner_new(const pl_model *m, const pl_runner_info *want, int n_threads,
                             char *err, size_t errlen);

/** pl_cpu_runner_new (whose K/V cache holds floats) with the K/V cache in
 *  IEEE halves when kv_f16. */
pl_runner *pl_cpu_runner_new_kv(const pl_model *m, const pl_runner_info *want, int n_threads,
                                int kv_f16, char *err, size_t errlen);

/**
 * The runner `parley serve` makes: pl_cpu_runner_new_kv with o's threads
 * and K/V halves, batch invariance (quantised kernels at every row count,
 * so a row's outputs never depend on the batch mix) and AMX tiles
 * (pl_cpu_runner_set_amx's errors) as o asks. o is read during the call.
 */
pl_runner *pl_cpu_runner_open(const pl_model *m, const pl_runner_info *want,
                              const pl_cpu_opts *o, char *err, size_t errlen);

/** --cpu-amx (mode PL_AMX_TILES): Q4_0, Q4_1 and Q8_0 matmuls in block
 *  order, on the CPU's AMX tiles from 16 rows (qdot_amx.h), set before the
 *  first step. 0, or -1 with a message when the CPU has no AMX-INT8 or its
 *  tiles fail the self-check. PL_AMX_EMULATED (tests, benchmarks) runs
 *  the model of the tiles; PL_AMX_OFF the default kernels. */
int pl_cpu_runner_set_amx(pl_runner *r, pl_amx_mode mode, char *err, size_t errlen);

/** Rows from which matmuls use the f32 GEMM path instead of the quantised
 *  kernels (default 20: measured crossover on AVX2, between 16 and 24
 *  rows). For benchmarks. */
void pl_cpu_runner_set_gemm_min_rows(pl_runner *r, int rows);

/** The pool's hand-off statistics (pl_pool_stats). Between steps. */
void pl_cpu_runner_pool_stats(pl_runner *r, pl_pool_counters *c);

#endif
