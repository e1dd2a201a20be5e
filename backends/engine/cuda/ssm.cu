/* ssm.cu - the Gated DeltaNet kernels (ssm.cuh). The conv: a thread per
 * (sequence, channel), its history in registers. The rule: a block per
 * (sequence, value head), a thread per value dim owning its column of the
 * state (in shared memory when it fits, else in place in global memory),
 * the rows taken in order. */
#include "backends/engine/cuda/ssm.cuh"

#define CONV_THREADS 128
#define SHARED_STATE_MAX (96 * 1024)   /* bytes of state kept in shared memory */

static __device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

/* K a constant, so the history stays in registers (no local memory). */
template <int K>
static __global__ void conv_kernel(const float *w, float *conv_state, float *qkv,
                                   pl_cuda_ssm_seqs s, int C)
{
    int q = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    int i0 = s.off[q], i1 = s.off[q + 1];
    if (c >= C || i0 == i1)
        return;
    float hist[K - 1], wk[K];
    float *hs = conv_state + (size_t)s.slot_of[q] * (K - 1) * C + c;
#pragma unroll
    for (int j = 0; j < K - 1; j++)
        hist[j] = s.reset[q] ? 0.0f : hs[(size_t)j * C];
#pragma unroll
    for (int j = 0; j < K; j++)
        wk[j] = w[(size_t)j * C + c];
    for (int i = i0; i < i1; i++) {
        float *x = qkv + (size_t)s.rows[i] * C + c, xv = *x, acc = wk[K - 1] * xv;
#pragma unroll
        for (int j = 0; j < K - 1; j++)         /* the CPU's order (ops_ssm.c) */
            acc = fmaf(wk[j], hist[j], acc);
#pragma unroll
        for (int j = 0; j + 1 < K - 1; j++)
            hist[j] = hist[j + 1];
        hist[K - 2] = xv;
        *x = silu(acc);
    }
#pragma unroll
    for (int j = 0; j < K - 1; j++)
        hs[(size_t)j * C] = hist[j];
}

static __device__ __forceinline__ float softplus(float x)
{
    return x > 20.0f ? x : log1pf(expf(x));
}

template <bool SHARED>
static __global__ void rule_kernel(pl_cuda_gdn_args a, pl_cuda_ssm_seqs s)
{
    extern __shared__ float sm[];
    __shared__ float red[32];
    int q = blockIdx.x / a.nv, h = blockIdx.x % a.nv, j = threadIdx.x, d = a.d;
    int i0 = s.off[q], i1 = s.off[q + 1], kh = h % a.nk;
    if (i0 == i1)
        return;
    size_t dd = (size_t)d * d;
    float *G = a.state + ((size_t)s.slot_of[q] * a.nv + h) * dd;
    float *S = SHARED ? sm : G, *qs = SHARED ? sm + dd : sm, *ks = qs + d;
    for (size_t e = j; (SHARED || s.reset[q]) && e < dd; e += blockDim.x)
        S[e] = s.reset[q] ? 0.0f : G[e];
    size_t inner = (size_t)a.nv * d;
    for (int i = i0; i < i1; i++) {
        int r = s.rows[i];
        const float *row = a.qkv + (size_t)r * a.C;
        float qv = row[(size_t)kh * d + j], kv = row[(size_t)(a.nk + kh) * d + j];
        float vv = row[(size_t)2 * a.nk * d + (size_t)h * d + j];
        float qn = pl_block_sum(qv * qv, red), kn = pl_block_sum(kv * kv, red);
        qs[j] = qv * ((1.0f / sqrtf((float)d)) / sqrtf(qn + a.eps));   /* pl_op_l2norm */
        ks[j] = kv * (1.0f / sqrtf(kn + a.eps));
        float g = expf(a.a[h] * softplus(a.alpha[(size_t)r * a.nv + h] + a.dt[h]));
        float beta = 1.0f / (1.0f + expf(-a.beta[(size_t)r * a.nv + h]));
        __syncthreads();
        float u = 0.0f;
        for (int k = 0; k < d; k++) {
            float v = S[(size_t)k * d + j] * g;
            S[(size_t)k * d + j] = v;
            u = fmaf(v, ks[k], u);
        }
        u = (vv - u) * beta;
        float o = 0.0f;
        for (int k = 0; k < d; k++) {
            float v = fmaf(ks[k], u, S[(size_t)k * d + j]);
            S[(size_t)k * d + j] = v;
            o = fmaf(v, qs[k], o);
        }
        float on = pl_block_sum(o * o, red);   /* also orders qs/ks reuse */
        float zv = a.z[(size_t)r * inner + (size_t)h * d + j];
        a.out[(size_t)r * inner + (size_t)h * d + j] =
            o * (1.0f / sqrtf(on / (float)d + a.eps)) * a.norm_w[j] * silu(zv);
    }
    __syncthreads();
    for (size_t e = j; SHARED && e < dd; e += blockDim.x)
        G[e] = S[e];
}

extern "C" int pl_cuda_ssm_conv(const float *w, float *conv_state, float *qkv,
                                pl_cuda_ssm_seqs s, int C, int K, cudaStream_t st)
{
    PL_CUDA_ARG(w && conv_state && qkv && s.rows && s.off && s.slot_of && s.reset && C > 0 &&
                K >= 2 && K <= PL_CUDA_SSM_MAX_K && s.n >= 0);
    if (s.n == 0)
        return 0;
    dim3 grid((unsigned)s.n, (unsigned)((C + CONV_THREADS - 1) / CONV_THREADS));
    switch (K) {
#define CONV_K(k) case k: conv_kernel<k><<<grid, CONV_THREADS, 0, st>>>(w, conv_state, qkv, s, C); break;
    CONV_K(2) CONV_K(3) CONV_K(4) CONV_K(5) CONV_K(6) CONV_K(7) CONV_K(8)
#undef CONV_K
    }
    PL_CUDA_LAUNCHED();
    return 0;
}

extern "C" int pl_cuda_gdn_rule(const pl_cuda_gdn_args *a, pl_cuda_ssm_seqs s,
                                cudaStream_t st)
{
    PL_CUDA_ARG(a && a->qkv && a->z && a->beta && a->alpha && a->a && a->dt && a->norm_w &&
                a->state && a->out && a->d >= 32 && a->d <= PL_CUDA_SSM_MAX_D &&
                a->d % 32 == 0 && a->nk > 0 && a->nv % a->nk == 0 &&
                a->C >= (2 * a->nk + a->nv) * a->d && s.n >= 0);
    if (s.n == 0)
        return 0;
    size_t dd = (size_t)a->d * a->d, shm = sizeof(float) * (dd + 2 * (size_t)a->d);
    if (shm <= SHARED_STATE_MAX) {
        PL_CUDA_CHECK(cudaFuncSetAttribute(rule_kernel<true>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)shm));
        rule_kernel<true><<<s.n * a->nv, a->d, shm, st>>>(*a, s);
    } else {
        rule_kernel<false><<<s.n * a->nv, a->d, sizeof(float) * 2 * a->d, st>>>(*a, s);
    }
    PL_CUDA_LAUNCHED();
    return 0;
}

extern "C" int pl_cuda_ssm_copy_slot(void *states, size_t bytes, size_t slot_stride,
                                     size_t layer_stride, int n_layers, int src, int dst,
                                     cudaStream_t st)
{
    PL_CUDA_ARG(states && bytes > 0 && bytes <= layer_stride && n_layers > 0 && src >= 0 &&
                dst >= 0);
    if (src == dst)
        return 0;
    char *base = (char *)states;
    PL_CUDA_CHECK(cudaMemcpy2DAsync(base + (size_t)dst * slot_stride, layer_stride,
                                    base + (size_t)src * slot_stride, layer_stride, bytes,
                                    (size_t)n_layers, cudaMemcpyDeviceToDevice, st));
    return 0;
}
