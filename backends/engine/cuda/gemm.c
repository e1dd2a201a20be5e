/* gemm.c - cuBLAS bf16 GEMM (bf16 in, fp32 accumulate and out) through a
 * dlopen()ed libcublas: only four entry points are needed, and loading at
 * run time keeps the binary free of a hard libcublas dependency. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include <cublas_api.h>

#include "backends/engine/cuda/gemm.h"

#define GEMM_WORKSPACE (32u << 20)

struct pl_cuda_gemm {
    void *lib;
    cublasHandle_t h;
    void *ws;
    __typeof__(&cublasCreate_v2) create;
    __typeof__(&cublasDestroy_v2) destroy;
    __typeof__(&cublasSetStream_v2) set_stream;
    __typeof__(&cublasSetWorkspace_v2) set_ws;
    __typeof__(&cublasGemmEx) gemm_ex;
};

/* The soname first (ld.so.conf, LD_LIBRARY_PATH), then $CUDA_HOME/lib64
 * and the toolkit this was built with (PL_CUDA_LIBDIR from meson). */
static void *open_cublas(void)
{
    char name[64], path[512];
    snprintf(name, sizeof name, "libcublas.so.%d", CUBLAS_VER_MAJOR);
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    const char *home = getenv("CUDA_HOME");
    const char *dirs[] = {home, "/usr/local/cuda/lib64",
#ifdef PL_CUDA_LIBDIR
                          PL_CUDA_LIBDIR,
#endif
    };
    for (size_t i = 0; !lib && i < sizeof dirs / sizeof dirs[0]; i++) {
        if (!dirs[i])
            continue;
        snprintf(path, sizeof path, "%s%s/%s", dirs[i], dirs[i] == home ? "/lib64" : "", name);
        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    return lib ? lib : dlopen("libcublas.so", RTLD_NOW | RTLD_LOCAL);
}

static int load_syms(pl_cuda_gemm *g)
{
    *(void **)&g->create = dlsym(g->lib, "cublasCreate_v2");
    *(void **)&g->destroy = dlsym(g->lib, "cublasDestroy_v2");
    *(void **)&g->set_stream = dlsym(g->lib, "cublasSetStream_v2");
    *(void **)&g->set_ws = dlsym(g->lib, "cublasSetWorkspace_v2");
    *(void **)&g->gemm_ex = dlsym(g->lib, "cublasGemmEx");
    return g->create && g->destroy && g->set_stream && g->set_ws && g->gemm_ex ? 0 : -1;
}

pl_cuda_gemm *pl_cuda_gemm_new(cudaStream_t st, char *err, size_t errlen)
{
    pl_cuda_gemm *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    g->lib = open_cublas();
    if (!g->lib) {
        snprintf(err, errlen, "cannot load libcublas.so.%d: %s", CUBLAS_VER_MAJOR, dlerror());
        goto fail;
    }
    if (load_syms(g) < 0) {
        snprintf(err, errlen, "libcublas lacks a needed symbol");
        goto fail;
    }
    if (g->create(&g->h) != CUBLAS_STATUS_SUCCESS) {
        g->h = NULL;
        snprintf(err, errlen, "cublasCreate failed");
        goto fail;
    }
    if (pl_cuda_check_(cudaMalloc(&g->ws, GEMM_WORKSPACE), __FILE__, __LINE__)) {
        g->ws = NULL;
        snprintf(err, errlen, "%s", pl_cuda_last_error());
        goto fail;
    }
    if (g->set_stream(g->h, st) != CUBLAS_STATUS_SUCCESS
        || g->set_ws(g->h, g->ws, GEMM_WORKSPACE) != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "cublasSetStream/SetWorkspace failed");
        goto fail;
    }
    return g;
fail:
    pl_cuda_gemm_free(g);
    return NULL;
}

void pl_cuda_gemm_free(pl_cuda_gemm *g)
{
    if (!g)
        return;
    if (g->h)
        g->destroy(g->h);
    if (g->ws)
        cudaFree(g->ws);
    if (g->lib)
        dlclose(g->lib);
    free(g);
}

int pl_cuda_gemm_bf16(pl_cuda_gemm *g, const pl_bf16 *x, const pl_bf16 *w, float *y,
                      int rows, int out, int in)
{
    if (!g || !x || !w || !y || rows < 0 || out <= 0 || in <= 0)
        return pl_cuda_fail_(__FILE__, __LINE__, "bad GEMM arguments");
    if (rows == 0)
        return 0;
    /* Column-major view: Y^T (out, rows) = W^T' (out, in) . X^T (in, rows),
     * i.e. op(A) = transpose of w as stored (in, out) with lda = in. */
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t s = g->gemm_ex(g->h, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &one,
                                  w, CUDA_R_16BF, in, x, CUDA_R_16BF, in, &zero,
                                  y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
        return pl_cuda_fail_(__FILE__, __LINE__, "cublasGemmEx (%d x %d x %d) failed: %d",
                             out, rows, in, (int)s);
    return 0;
}
