/* cuda_profile.c - device time per phase of the forward pass, for tuning:
 * with --cuda-profile (PARLEY_CUDA_PROFILE=1) and CUDA graphs off, the
 * forward records an event after each phase and, at its end, waits for the
 * step and adds the intervals to per-phase sums. Off by default: nothing is recorded and the
 * pipeline is not serialised. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/cuda/cuda_runner_internal.h"
#include "src/base/log.h"

static const char *const phase_name[CR_PH_COUNT] = {
    "embed", "norm", "gemm_qkv", "rope", "kv_write", "attn_decode", "attn_prefill",
    "gemm_o", "gemm_gate_up", "swiglu", "gemm_down", "lm_head", "sample", "moe_route",
    "moe_experts",
};

int pl_cuda_prof_init(cuda_runner *r, bool on)
{
    if (!on)
        return 0;
    r->prof = calloc(1, sizeof *r->prof);
    if (!r->prof)
        return -1;
    for (int i = 0; i < CR_PROF_EVENTS; i++)
        if (cudaEventCreate(&r->prof->ev[i]) != cudaSuccess)
            return -1;
    return 0;
}

/* The sums so far in the log (`parley serve --cuda-profile` shows them
 * when the model is closed; benchmarks read pl_cuda_runner_profile). */
static void prof_log(const cr_prof *p)
{
    char line[512];
    size_t w = 0;
    for (int i = 0; i < CR_PH_COUNT && w < sizeof line; i++)
        w += (size_t)snprintf(line + w, sizeof line - w, "%s%s %.1f", i ? ", " : "",
                              phase_name[i], p->ms[i]);
    pl_info("cuda profile, device ms per phase: %s", line);
}

void pl_cuda_prof_free(cuda_runner *r)
{
    if (!r->prof)
        return;
    prof_log(r->prof);
    for (int i = 0; i < CR_PROF_EVENTS; i++)
        if (r->prof->ev[i])
            cudaEventDestroy(r->prof->ev[i]);
    free(r->prof);
    r->prof = NULL;
}

void pl_cuda_prof_mark(cuda_runner *r, int phase)
{
    cr_prof *p = r->prof;
    if (!p || p->n >= CR_PROF_EVENTS)
        return;
    cudaEventRecord(p->ev[p->n], r->cs);
    p->phase[p->n++] = phase;
}

void pl_cuda_prof_step_end(cuda_runner *r)
{
    cr_prof *p = r->prof;
    if (!p || p->n < 2)
        return;
    cudaEventSynchronize(p->ev[p->n - 1]);
    for (int i = 1; i < p->n; i++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, p->ev[i - 1], p->ev[i]) == cudaSuccess)
            p->ms[p->phase[i]] += ms;
    }
    p->n = 0;
}

int pl_cuda_runner_profile(pl_runner *base, const char *const **names, double *ms, int cap,
                           bool reset)
{
    cuda_runner *r = (cuda_runner *)base;
    *names = phase_name;
    if (!r->prof)
        return 0;
    for (int i = 0; i < CR_PH_COUNT && i < cap; i++)
        ms[i] = r->prof->ms[i];
    if (reset)
        memset(r->prof->ms, 0, sizeof r->prof->ms);
    return CR_PH_COUNT < cap ? CR_PH_COUNT : cap;
}
