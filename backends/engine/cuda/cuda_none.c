/* cuda_none.c - the CUDA entry points in builds without CUDA, so callers
 * need no #ifdef: nothing is available and no runner can be made. */
#include <stdio.h>

#include "backends/engine/cuda/cuda_runner.h"

int pl_cuda_available(char *why, size_t n)
{
    if (why && n)
        snprintf(why, n, "parley was built without CUDA (meson -Dcuda=enabled)");
    return 0;
}

pl_runner *pl_cuda_runner_new(const pl_model *m, const pl_runner_info *want,
                              const pl_cuda_opts *o, char *err, size_t errlen)
{
    (void)m; (void)want; (void)o;
    snprintf(err, errlen, "parley was built without CUDA (meson -Dcuda=enabled)");
    return NULL;
}

void pl_cuda_runner_graph_stats(const pl_runner *r, pl_cuda_graph_stats *out)
{
    (void)r;
    *out = (pl_cuda_graph_stats){0};
}

int pl_cuda_runner_profile(pl_runner *r, const char *const **names, double *ms, int cap,
                           bool reset)
{
    (void)r; (void)ms; (void)cap; (void)reset;
    *names = NULL;
    return 0;
}
