/* ssm.cu - the Gated DeltaNet kernels (ssm.cuh). The conv: a thread per
 * (sequence, channel), its history in registers. The rule: a block per
 * (sequence, value head), a thread per value dim owning its column of the
 * state (in shared memory when it fits, else in place in global memory),
 * the rows taken in order; or, from chunk_min rows, the chunked form over
 * chunks of T rows (chunk_kernel below). */
#include "backends/engine/cuda/ssm.cuh"

#include <limits.h>

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

/* The sequences of fewer than lim rows (the others are chunk_kernel's). */
template <bool SHARED>
static __global__ void rule_kernel(pl_cuda_gdn_args a, pl_cuda_ssm_seqs s, int lim)
{
    extern __shared__ float sm[];
    __shared__ float red[32];
    int q = blockIdx.x / a.nv, h = blockIdx.x % a.nv, j = threadIdx.x, d = a.d;
    int i0 = s.off[q], i1 = s.off[q + 1], kh = h % a.nk;
    if (i0 == i1 || i1 - i0 >= lim)
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

/* The chunked form (pl_op_gdn_chunk_ref's algebra, term by term and in its
 * order): a block per (sequence, value head), a thread per value dim j
 * owning column j of the state S, of U and of W, so the triangular solves,
 * U -= W S, o = e^c q S + P U and the state's update need no barrier; the
 * chunk's q, k rows are shared (rows d + 1 floats apart, so the warp's (t,
 * s) dot products read 32 banks), A then P in one T x T tile. */
#define CHUNK_ROWS 64            /* rows per chunk, the CPU's GDN_CHUNK */

typedef struct chunk_tiles {
    float *q, *k;                /* (T, d + 1) normalised q (scaled), k */
    float *u, *w;                /* (T, d) beta v then U; beta e^c k then W */
    float *a;                    /* (T, T) A (strictly lower), then P (lower) */
    float *c, *bt, *ec, *ed;     /* (T) log decays then their cumulative sums
                                  * c; beta; e^c; e^(c_last - c) */
    int *rs;                     /* (T) the rows */
} chunk_tiles;

static __host__ __device__ size_t chunk_floats_(int d, int T)
{
    return (size_t)T * (4 * (size_t)d + 2 + (size_t)T + 5);
}

static __device__ chunk_tiles chunk_tiles_(float *p, int d, int T)
{
    chunk_tiles m;
    size_t n = (size_t)T * d;
    m.q = p, m.k = m.q + n + T, m.u = m.k + n + T, m.w = m.u + n, m.a = m.w + n;
    m.c = m.a + (size_t)T * T, m.bt = m.c + T, m.ec = m.bt + T, m.ed = m.ec + T;
    m.rs = (int *)(m.ed + T);
    return m;
}

static __device__ __forceinline__ float dot_(const float *x, const float *y, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s = fmaf(x[i], y[i], s);
    return s;
}

/* The chunk's n rows (a warp per row): q, k normalised as rule_kernel
 * does, beta v into u, the log decay and beta. */
static __device__ void chunk_load_(const pl_cuda_gdn_args &a, const int32_t *rows, int n,
                                   int h, chunk_tiles m)
{
    int d = a.d, ld = d + 1, lane = threadIdx.x & 31, kh = h % a.nk;
    for (int t = threadIdx.x >> 5; t < n; t += blockDim.x >> 5) {
        int r = rows[t];
        const float *row = a.qkv + (size_t)r * a.C, *qr = row + (size_t)kh * d;
        const float *kr = row + (size_t)(a.nk + kh) * d;
        const float *vr = row + (size_t)2 * a.nk * d + (size_t)h * d;
        float *qt = m.q + (size_t)t * ld, *kt = m.k + (size_t)t * ld, qq = 0.0f, kk = 0.0f;
        for (int e = lane; e < d; e += 32) {
            float qv = qr[e], kv = kr[e];
            qt[e] = qv, kt[e] = kv;
            qq = fmaf(qv, qv, qq), kk = fmaf(kv, kv, kk);
        }
        qq = pl_warp_sum(qq), kk = pl_warp_sum(kk);
        float qs = (1.0f / sqrtf((float)d)) / sqrtf(qq + a.eps), ks = 1.0f / sqrtf(kk + a.eps);
        float bt = 1.0f / (1.0f + expf(-a.beta[(size_t)r * a.nv + h]));
        for (int e = lane; e < d; e += 32) {
            qt[e] *= qs, kt[e] *= ks;
            m.u[(size_t)t * d + e] = bt * vr[e];
        }
        if (lane == 0) {
            m.c[t] = a.a[h] * softplus(a.alpha[(size_t)r * a.nv + h] + a.dt[h]);
            m.bt[t] = bt, m.rs[t] = r;
        }
    }
}

/* A[t][s] = beta_t k_t.k_s e^(c_t - c_s) (s < t), or P[t][s] = q_t.k_s
 * e^(c_t - c_s) (s <= t): a thread per entry. */
static __device__ void chunk_gram_(chunk_tiles m, int n, int d, int T, bool p)
{
    int ld = d + 1;
    for (int e = threadIdx.x; e < n * n; e += blockDim.x) {
        int t = e / n, s = e % n;
        const float *ks = m.k + (size_t)s * ld;
        if (p && s <= t)
            m.a[t * T + s] = dot_(m.q + (size_t)t * ld, ks, d) * expf(m.c[t] - m.c[s]);
        else if (!p && s < t)
            m.a[t * T + s] = m.bt[t] * dot_(m.k + (size_t)t * ld, ks, d) *
                             expf(m.c[t] - m.c[s]);
    }
}

/* Column j of U and W through (I + A)^-1: forward substitution. */
static __device__ void chunk_solve_(chunk_tiles m, int n, int d, int T, int j)
{
    for (int t = 1; t < n; t++) {
        float u = m.u[(size_t)t * d + j], w = m.w[(size_t)t * d + j];
        for (int s = 0; s < t; s++) {
            float x = -m.a[t * T + s];
            u = fmaf(x, m.u[(size_t)s * d + j], u);
            w = fmaf(x, m.w[(size_t)s * d + j], w);
        }
        m.u[(size_t)t * d + j] = u, m.w[(size_t)t * d + j] = w;
    }
}

/* Column j: U_t -= W_t S, o_t = e^(c_t) q_t S + sum_{s <= t} P[t][s] U_s
 * (before the norm, into out), then S = e^(c_last) S + sum_s e^(c_last -
 * c_s) k_s U_s^T. */
static __device__ void chunk_apply_(const pl_cuda_gdn_args &a, chunk_tiles m, float *S, int n,
                                    int h, int T, int j)
{
    int d = a.d, ld = d + 1;
    size_t inner = (size_t)a.nv * d;
    for (int t = 0; t < n; t++) {
        const float *qt = m.q + (size_t)t * ld, *wt = m.w + (size_t)t * d;
        float u = m.u[(size_t)t * d + j], o = 0.0f, ec = m.ec[t];
        for (int i = 0; i < d; i++) {
            float sv = S[(size_t)i * d + j];
            u = fmaf(-wt[i], sv, u);
            o = fmaf(ec * qt[i], sv, o);
        }
        m.u[(size_t)t * d + j] = u;
        for (int s = 0; s <= t; s++)
            o = fmaf(m.a[t * T + s], m.u[(size_t)s * d + j], o);
        a.out[(size_t)m.rs[t] * inner + (size_t)h * d + j] = o;
    }
    float eT = m.ec[n - 1];
    for (int i = 0; i < d; i++) {
        float v = S[(size_t)i * d + j] * eT;
        for (int s = 0; s < n; s++)
            v = fmaf(m.ed[s] * m.k[(size_t)s * ld + i], m.u[(size_t)s * d + j], v);
        S[(size_t)i * d + j] = v;
    }
}

/* The gated RMSNorm of the chunk's outputs, in place (a warp per row). */
static __device__ void chunk_norm_(const pl_cuda_gdn_args &a, chunk_tiles m, int n, int h)
{
    int d = a.d, lane = threadIdx.x & 31;
    for (int t = threadIdx.x >> 5; t < n; t += blockDim.x >> 5) {
        size_t base = (size_t)m.rs[t] * a.nv * d + (size_t)h * d;
        float ss = 0.0f;
        for (int e = lane; e < d; e += 32)
            ss = fmaf(a.out[base + e], a.out[base + e], ss);
        float inv = 1.0f / sqrtf(pl_warp_sum(ss) / (float)d + a.eps);
        for (int e = lane; e < d; e += 32)
            a.out[base + e] = a.out[base + e] * inv * a.norm_w[e] * silu(a.z[base + e]);
    }
}

/* One chunk of n rows: the steps above, a barrier wherever a step reads
 * what other threads wrote. */
static __device__ void chunk_rows_(const pl_cuda_gdn_args &a, const int32_t *rows, int n, int h,
                                   int T, chunk_tiles m, float *S)
{
    int d = a.d, j = threadIdx.x;
    chunk_load_(a, rows, n, h, m);
    __syncthreads();
    if (j == 0)                          /* the CPU's order of the sums */
        for (int t = 1; t < n; t++)
            m.c[t] += m.c[t - 1];
    __syncthreads();
    for (int t = j; t < n; t += blockDim.x)
        m.ec[t] = expf(m.c[t]), m.ed[t] = expf(m.c[n - 1] - m.c[t]);
    for (int t = 0; t < n; t++)
        m.w[(size_t)t * d + j] = m.bt[t] * expf(m.c[t]) * m.k[(size_t)t * (d + 1) + j];
    chunk_gram_(m, n, d, T, false);
    __syncthreads();
    chunk_solve_(m, n, d, T, j);
    __syncthreads();                     /* A read; P takes its place */
    chunk_gram_(m, n, d, T, true);
    __syncthreads();
    chunk_apply_(a, m, S, n, h, T, j);
    __syncthreads();
    chunk_norm_(a, m, n, h);
    __syncthreads();                     /* rs read before the next load */
}

/* The sequences of at least lim rows, chunks of T rows (the last shorter);
 * the state as rule_kernel keeps it. */
template <bool SHARED>
static __global__ void chunk_kernel(pl_cuda_gdn_args a, pl_cuda_ssm_seqs s, int T, int lim)
{
    extern __shared__ float sm[];
    int q = blockIdx.x / a.nv, h = blockIdx.x % a.nv, j = threadIdx.x, d = a.d;
    int i0 = s.off[q], i1 = s.off[q + 1];
    if (i0 == i1 || i1 - i0 < lim)
        return;
    size_t dd = (size_t)d * d;
    float *G = a.state + ((size_t)s.slot_of[q] * a.nv + h) * dd;
    float *S = SHARED ? sm : G;
    chunk_tiles m = chunk_tiles_(SHARED ? sm + dd : sm, d, T);
    for (size_t e = j; (SHARED || s.reset[q]) && e < dd; e += blockDim.x)
        S[e] = s.reset[q] ? 0.0f : G[e];   /* column j: thread j's own */
    for (int c0 = i0; c0 < i1; c0 += T)
        chunk_rows_(a, s.rows + c0, i1 - c0 < T ? i1 - c0 : T, h, T, m, S);
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

static int rule_launch_(const pl_cuda_gdn_args *a, pl_cuda_ssm_seqs s, int lim,
                        cudaStream_t st)
{
    size_t dd = (size_t)a->d * a->d, shm = sizeof(float) * (dd + 2 * (size_t)a->d);
    if (shm <= SHARED_STATE_MAX) {
        PL_CUDA_CHECK(cudaFuncSetAttribute(rule_kernel<true>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)shm));
        rule_kernel<true><<<s.n * a->nv, a->d, shm, st>>>(*a, s, lim);
    } else {
        rule_kernel<false><<<s.n * a->nv, a->d, sizeof(float) * 2 * a->d, st>>>(*a, s, lim);
    }
    PL_CUDA_LAUNCHED();
    return 0;
}

/* Rows per chunk and where the state lives: the state in shared memory
 * with the largest T (64, 32, 16) whose tiles fit beside it, else in
 * global memory with the largest T that fits (d 256: 32 on sm_80 and
 * sm_90). */
static int chunk_launch_(const pl_cuda_gdn_args *a, pl_cuda_ssm_seqs s, int lim,
                         cudaStream_t st)
{
    int dev, optin, d = a->d, T = CHUNK_ROWS;
    PL_CUDA_CHECK(cudaGetDevice(&dev));
    PL_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    size_t dd = (size_t)d * d, cap = (size_t)optin;
    while (T > 16 && sizeof(float) * (dd + chunk_floats_(d, T)) > cap)
        T /= 2;
    bool shared = sizeof(float) * (dd + chunk_floats_(d, T)) <= cap;
    if (!shared)
        for (T = CHUNK_ROWS; T > 8 && sizeof(float) * chunk_floats_(d, T) > cap; T /= 2)
            ;
    size_t shm = sizeof(float) * ((shared ? dd : 0) + chunk_floats_(d, T));
    PL_CUDA_ARG(shm <= cap);
    void (*k)(pl_cuda_gdn_args, pl_cuda_ssm_seqs, int, int) =
        shared ? chunk_kernel<true> : chunk_kernel<false>;
    PL_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm));
    k<<<s.n * a->nv, d, shm, st>>>(*a, s, T, lim);
    PL_CUDA_LAUNCHED();
    return 0;
}

/* A decode row (or a handful: a speculative check) through the chunked
 * form would pay its fixed cost (the cumulative decays, the triangular
 * matrices, seven barriers) for one or two rows' work, so a sequence
 * takes it from chunk_min rows (the CPU's GDN_CHUNK_MIN); the rest go row
 * by row. Lengths are on the device, so both kernels run over every
 * sequence, each taking its own; max_len (the host's bound) skips the
 * chunked launch on a step of short sequences. */
extern "C" int pl_cuda_gdn_rule(const pl_cuda_gdn_args *a, pl_cuda_ssm_seqs s,
                                cudaStream_t st)
{
    PL_CUDA_ARG(a && a->qkv && a->z && a->beta && a->alpha && a->a && a->dt && a->norm_w &&
                a->state && a->out && a->d >= 32 && a->d <= PL_CUDA_SSM_MAX_D &&
                a->d % 32 == 0 && a->nk > 0 && a->nv % a->nk == 0 &&
                a->C >= (2 * a->nk + a->nv) * a->d && a->chunk_min >= 0 && s.n >= 0);
    if (s.n == 0)
        return 0;
    int lim = a->chunk_min > 0 ? a->chunk_min : PL_CUDA_GDN_CHUNK_MIN;
    bool chunked = lim < INT_MAX && (s.max_len <= 0 || s.max_len >= lim);
    if (rule_launch_(a, s, chunked ? lim : INT_MAX, st))
        return -1;
    return chunked ? chunk_launch_(a, s, lim, st) : 0;
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
