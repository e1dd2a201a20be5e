/* weights_host.c - the host half of the weight upload: rows of a pl_weight
 * to bf16 on several threads (each row through pl_dequant_row, the C
 * reference the CPU runner reads too, then rounded to nearest-even bf16). */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "backends/engine/cuda/weights.h"
#include "backends/engine/model/quant.h"

typedef struct dq_job {
    const pl_weight *wt;
    size_t r0, n;
    pl_bf16 *dst;
    int rc;
} dq_job;

static void *dq_run(void *arg)
{
    dq_job *j = arg;
    size_t cols = (size_t)j->wt->cols;
    float *tmp = j->wt->f32 ? NULL : malloc(cols * sizeof(float));
    if (!j->wt->f32 && !tmp) {
        j->rc = -1;
        return NULL;
    }
    for (size_t r = 0; r < j->n && j->rc == 0; r++) {
        size_t row = j->r0 + r;
        const float *src = tmp;
        if (j->wt->f32)
            src = j->wt->f32 + row * cols;
        else if (pl_dequant_row(j->wt->type, (const uint8_t *)j->wt->q + row * j->wt->row_bytes,
                                tmp, (int64_t)cols) != 0)
            j->rc = -1;
        for (size_t c = 0; c < cols && j->rc == 0; c++)
            j->dst[r * cols + c] = pl_fp32_to_bf16(src[c]);
    }
    free(tmp);
    return NULL;
}

int pl_cuda_weights_threads(int want)
{
    long n = want > 0 ? want : sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > PL_CUDA_LOAD_MAX_THREADS ? PL_CUDA_LOAD_MAX_THREADS : (int)n;
}

int pl_cuda_dequant_bf16(const pl_weight *wt, size_t r0, size_t n, pl_bf16 *dst, int n_threads)
{
    dq_job jobs[PL_CUDA_LOAD_MAX_THREADS];
    pthread_t tid[PL_CUDA_LOAD_MAX_THREADS];
    if (n_threads < 1)
        n_threads = 1;
    if (n_threads > PL_CUDA_LOAD_MAX_THREADS)
        n_threads = PL_CUDA_LOAD_MAX_THREADS;
    if ((size_t)n_threads > n)
        n_threads = n > 0 ? (int)n : 1;
    size_t per = (n + (size_t)n_threads - 1) / (size_t)n_threads, cols = (size_t)wt->cols;
    unsigned started = 0;
    int rc = 0;
    for (int t = 0; t < n_threads; t++) {
        size_t a = (size_t)t * per, b = a + per < n ? a + per : n;
        jobs[t] = (dq_job){.wt = wt, .r0 = r0 + a, .n = b > a ? b - a : 0, .dst = dst + a * cols};
        if (t == n_threads - 1 || pthread_create(&tid[t], NULL, dq_run, &jobs[t]) != 0)
            dq_run(&jobs[t]);          /* the last share (or a failed start) runs here */
        else
            started |= 1u << t;
    }
    for (int t = 0; t < n_threads; t++) {
        if (started & (1u << t))
            pthread_join(tid[t], NULL);
        rc |= jobs[t].rc;
    }
    return rc ? -1 : 0;
}
