/* cuda_runner.h - the CUDA implementation of the runner interface
 * (runner.h): weights in bf16 on one GPU, a paged bf16 KV cache sized from
 * free memory, cuBLAS GEMMs, sampling and token feedback on the device,
 * CUDA graphs for decode-only steps. */
#ifndef PL_CUDA_RUNNER_H
#define PL_CUDA_RUNNER_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/engine_config.h"
#include "backends/engine/model/model.h"
#include "backends/engine/runner.h"

/**
 * Is a usable CUDA device present? 1, or 0 with the reason in why. Safe to
 * call on any machine (the CUDA runtime is linked statically and finds the
 * driver at run time). Builds without CUDA return 0 ("built without CUDA").
 */
int pl_cuda_available(char *why, size_t n);

/**
 * New CUDA runner on device 0 for a loaded model (borrowed; only read during
 * this call: weights are copied to the GPU, so the model may be freed
 * after). want: as pl_cpu_runner_new (max_seqs and max_rows > 0;
 * block_size 0: 16; max_model_len 0: the model's context, capped by what
 * the KV cache holds). num_blocks 0: as many as
 * o->gpu_memory_utilization of the device memory leaves after weights and
 * activations; > 0: at most that many. The result's info gives the
 * geometry chosen. o (borrowed, read during this call): CUDA graphs for
 * decode-only steps bucketed by batch size, the attention kernels, the
 * phase profiler, fault injection, load threads (engine_config.h). NULL
 * with a message in err. Free with r->ops->free(r).
 */
pl_runner *pl_cuda_runner_new(const pl_model *m, const pl_runner_info *want,
                              const pl_cuda_opts *o, char *err, size_t errlen);

/** CUDA-graph bookkeeping of a CUDA runner (tests, logs). */
typedef struct pl_cuda_graph_stats {
    int attempts;                /**< captures tried */
    int captured;                /**< graphs instantiated */
    int failed;                  /**< buckets that fell back to eager for good */
} pl_cuda_graph_stats;

/** r must be a CUDA runner. Fault injection for tests: made with
 *  o->inject PL_CUDA_INJECT_CAPTURE, every graph capture fails. */
void pl_cuda_runner_graph_stats(const pl_runner *r, pl_cuda_graph_stats *out);

/**
 * Device milliseconds per phase of the forward pass (embedding, norms, each
 * GEMM, RoPE, KV write, decode and prefill attention, SwiGLU, LM head,
 * sampling), summed over the steps so far, for tuning. Recorded only when
 * the runner was made with o->profile and graphs off (--cuda-profile,
 * PARLEY_CUDA_PROFILE=1); each step then waits for itself. Sets *names to the phase names and
 * fills up to cap sums; returns how many (0 when not recording). reset:
 * start the sums again.
 */
int pl_cuda_runner_profile(pl_runner *r, const char *const **names, double *ms, int cap,
                           bool reset);

#endif
