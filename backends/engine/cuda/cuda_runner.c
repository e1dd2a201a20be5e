/* cuda_runner.c - the CUDA runner's step plumbing: launch() packs the
 * input into a pinned buffer (double-buffered, each guarded by an event),
 * copies it up, runs the forward pass (a CUDA graph for decode-only
 * steps) and queues the copy of the sampled ids on a separate stream;
 * wait() blocks on that copy's event. Creation (sizing, allocation) is in
 * cuda_runner_new.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/cuda/cuda_runner_internal.h"
#include "src/base/log.h"

/* Capture the forward pass of a padded decode step into r->graph[b]. */
static int capture(cuda_runner *r, int b, const cr_step *st)
{
    cudaGraph_t g = NULL;
    r->graph_stats.attempts++;
    PL_CUDA_CHECK(cudaStreamBeginCapture(r->cs, cudaStreamCaptureModeThreadLocal));
    int rc = pl_cuda_forward(r, st);
    if (r->inject_capture_failure && rc == 0)  /* fault injection (tests) */
        rc = pl_cuda_fail_(__FILE__, __LINE__, "injected capture failure");
    cudaError_t e = cudaStreamEndCapture(r->cs, &g);
    if (rc != 0 || pl_cuda_check_(e, __FILE__, __LINE__)) {
        if (g)
            cudaGraphDestroy(g);
        return -1;
    }
    e = cudaGraphInstantiate(&r->graph[b], g, 0);
    cudaGraphDestroy(g);
    if (pl_cuda_check_(e, __FILE__, __LINE__)) {
        r->graph[b] = NULL;
        return -1;
    }
    r->graph_stats.captured++;
    return 0;
}

/* Eager the first time a bucket is seen (warm-up: cuBLAS picks its
 * kernels, modules load), captured the second time, replayed after. A
 * bucket whose capture fails runs eagerly for good (logged once): the
 * failed capture enqueued nothing, so this step runs eagerly too. */
static int run_forward(cuda_runner *r, const cr_step *st)
{
    int b = st->bucket;
    if (b < 0 || r->bucket_eager[b])
        return pl_cuda_forward(r, st);
    if (!r->graph[b] && r->bucket_warm[b]++ == 0)
        return pl_cuda_forward(r, st);
    if (!r->graph[b] && capture(r, b, st) != 0) {
        pl_warn("cuda: capturing the graph of %d-sequence decode steps failed (%s); "
                "they run eagerly from now on", r->bucket_size[b], pl_cuda_last_error());
        (void)cudaGetLastError();    /* clear a capture error; not sticky */
        r->bucket_eager[b] = 1;
        r->graph_stats.failed++;
        return pl_cuda_forward(r, st);
    }
    PL_CUDA_CHECK(cudaGraphLaunch(r->graph[b], r->cs));
    return 0;
}

/* Copy the sampler's outputs into the slot's block (compute stream, so the
 * next step may overwrite the fixed block), then to the host on the copy
 * stream once the compute stream got there. */
static int queue_outputs(cuda_runner *r, cr_slot *sl, const cr_step *st)
{
    PL_CUDA_CHECK(cudaMemcpyAsync(sl->d_out, r->d_out, r->out_bytes,
                                  cudaMemcpyDeviceToDevice, r->cs));
    if (r->base.keep_logits && !sl->h_logits)  /* tests only; allocated once */
        PL_CUDA_CHECK(cudaHostAlloc((void **)&sl->h_logits, (size_t)r->max_seqs
                                    * r->n_vocab * sizeof(float), cudaHostAllocDefault));
    if (r->base.keep_logits)  /* on the compute stream, before the next step */
        PL_CUDA_CHECK(cudaMemcpyAsync(sl->h_logits, r->logits, (size_t)st->real_seqs
                                      * r->n_vocab * sizeof(float),
                                      cudaMemcpyDeviceToHost, r->cs));
    /* Prompt logprobs reuse the logits buffer (after the copy above) and
     * write the slot's own block; never in a graph. */
    sl->n_lp = st->n_lp;
    if (st->n_lp > 0 && pl_cuda_prompt_logprobs(r, st, sl->dplp) != 0)
        return -1;
    PL_CUDA_CHECK(cudaEventRecord(sl->t1, r->cs));
    PL_CUDA_CHECK(cudaEventRecord(sl->computed, r->cs));
    PL_CUDA_CHECK(cudaStreamWaitEvent(r->xs, sl->computed, 0));
    PL_CUDA_CHECK(cudaMemcpyAsync(sl->h_out, sl->d_out, r->out_bytes,
                                  cudaMemcpyDeviceToHost, r->xs));
    if (st->n_lp > 0) {
        size_t n = (size_t)st->n_lp;
        PL_CUDA_CHECK(cudaMemcpyAsync(sl->hplp.lp, sl->dplp.lp, n * sizeof(float),
                                      cudaMemcpyDeviceToHost, r->xs));
        PL_CUDA_CHECK(cudaMemcpyAsync(sl->hplp.top_ids, sl->dplp.top_ids,
                                      n * PL_CUDA_TOPN * sizeof(int32_t),
                                      cudaMemcpyDeviceToHost, r->xs));
        PL_CUDA_CHECK(cudaMemcpyAsync(sl->hplp.top_lp, sl->dplp.top_lp,
                                      n * PL_CUDA_TOPN * sizeof(float),
                                      cudaMemcpyDeviceToHost, r->xs));
    }
    PL_CUDA_CHECK(cudaEventRecord(sl->out_ready, r->xs));
    return 0;
}

/* The compact prompt logprobs of a finished step into its output's rows
 * (the staging still holds the step's row list). */
static void scatter_plp(cr_slot *sl)
{
    for (int k = 0; k < sl->n_lp; k++) {
        int row = sl->hio.lp_rows[k];
        sl->out.row_lp[row] = sl->hplp.lp[k];
        memcpy(sl->out.row_top_ids + (size_t)row * PL_CUDA_TOPN,
               sl->hplp.top_ids + (size_t)k * PL_CUDA_TOPN, PL_CUDA_TOPN * sizeof(int32_t));
        memcpy(sl->out.row_top_lp + (size_t)row * PL_CUDA_TOPN,
               sl->hplp.top_lp + (size_t)k * PL_CUDA_TOPN, PL_CUDA_TOPN * sizeof(float));
    }
}

static int cuda_launch(pl_runner *base, const pl_step_input *in)
{
    cuda_runner *r = (cuda_runner *)base;
    int ticket = r->next_ticket;
    cr_slot *sl = &r->slot[ticket % PL_RUNNER_MAX_INFLIGHT];
    cr_step st;
    if (sl->busy) {
        pl_cuda_fail_(__FILE__, __LINE__, "more than %d steps in flight",
                      PL_RUNNER_MAX_INFLIGHT);
        return -1;
    }
    /* Never overwrite staging the GPU may still be copying from. */
    if (pl_cuda_check_(cudaEventSynchronize(sl->in_done), __FILE__, __LINE__)
        || pl_cuda_io_pack(r, sl, in, &st) != 0
        || pl_cuda_check_(cudaEventRecord(sl->t0, r->cs), __FILE__, __LINE__)
        || pl_cuda_io_upload(r, sl, &st) != 0
        || run_forward(r, &st) != 0
        || queue_outputs(r, sl, &st) != 0)
        return -1;
    sl->out.n_seqs = st.real_seqs;
    sl->ticket = ticket;
    sl->busy = 1;
    r->next_ticket++;
    return ticket;
}

static int cuda_wait(pl_runner *base, int ticket, const pl_step_output **out)
{
    cuda_runner *r = (cuda_runner *)base;
    cr_slot *sl = &r->slot[ticket % PL_RUNNER_MAX_INFLIGHT];
    if (ticket < 0 || !sl->busy || sl->ticket != ticket)
        return pl_cuda_fail_(__FILE__, __LINE__, "no step in flight with ticket %d", ticket);
    sl->busy = 0;
    PL_CUDA_CHECK(cudaEventSynchronize(sl->out_ready));
    float ms = 0.0f;
    PL_CUDA_CHECK(cudaEventElapsedTime(&ms, sl->t0, sl->t1));
    sl->out.exec_ms = ms;
    scatter_plp(sl);
    sl->out.logits = r->base.keep_logits ? sl->h_logits : NULL;
    *out = &sl->out;
    return 0;
}

static void cuda_copy_block(pl_runner *base, int32_t src, int32_t dst)
{
    cuda_runner *r = (cuda_runner *)base;
    int nb = r->geom.n_blocks - 1;
    if (src < 0 || dst < 0 || src >= nb || dst >= nb || src == dst)
        return;
    size_t bytes = r->block_bytes;
    for (int i = 0; i < 2 * r->n_layer; i++) {
        unsigned char *layer = r->kv + (size_t)i * r->layer_bytes;
        if (pl_cuda_check_(cudaMemcpyAsync(layer + (size_t)dst * bytes,
                                           layer + (size_t)src * bytes, bytes,
                                           cudaMemcpyDeviceToDevice, r->cs),
                           __FILE__, __LINE__))
            fprintf(stderr, "parley: cuda copy_block: %s\n", pl_cuda_last_error());
    }
}

void pl_cuda_runner_destroy_(cuda_runner *r);

void pl_cuda_runner_graph_stats(const pl_runner *base, pl_cuda_graph_stats *out)
{
    *out = ((const cuda_runner *)base)->graph_stats;
}

static void cuda_free(pl_runner *base)
{
    pl_cuda_runner_destroy_((cuda_runner *)base);
}

const pl_runner_ops pl_cuda_runner_ops_ = {
    .name = "cuda",
    .launch = cuda_launch,
    .wait = cuda_wait,
    .copy_block = cuda_copy_block,
    .free = cuda_free,
};
