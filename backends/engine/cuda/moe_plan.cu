/* moe_plan.cu - the grouping, gather and weighted sum of a mixture-of-
 * experts layer (moe_plan.cuh). The grouping is one block: counts by
 * shared atomics (integers: any order gives the same), the scans by one
 * thread (512 experts at most), then one warp places the pairs 32 at a
 * time in their order (__match_any_sync finds the lanes of each expert, the
 * lowest of them takes the expert's cursor), so each expert's places
 * follow the pairs' order as in pl_op_moe_group. */
#include "backends/engine/cuda/moe_plan.cuh"

#define GROUP_THREADS 1024
#define MAX_EXPERTS 512

static __global__ void group_kernel(const int32_t *sel, int n_pairs, int k, int n_expert,
                                    pl_cuda_moe_plan p)
{
    __shared__ int cnt[MAX_EXPERTS], cur[MAX_EXPERTS], toff[MAX_EXPERTS + 1];
    int tid = threadIdx.x, lane = tid & 31;
    for (int e = tid; e < n_expert; e += blockDim.x)
        cnt[e] = 0;
    __syncthreads();
    for (int i = tid; i < n_pairs; i += blockDim.x)
        atomicAdd(&cnt[sel[i]], 1);
    __syncthreads();
    if (tid == 0) {
        int off = 0;
        toff[0] = 0;
        for (int e = 0; e < n_expert; e++) {
            p.counts[e] = cnt[e];
            p.offsets[e] = cur[e] = off;
            off += cnt[e];
            toff[e + 1] = toff[e] + (cnt[e] + PL_CUDA_MOE_TILE_ROWS - 1) / PL_CUDA_MOE_TILE_ROWS;
        }
        p.offsets[n_expert] = off;
        *p.n_tiles = toff[n_expert];
    }
    __syncthreads();
    for (int e = tid; e < n_expert; e += blockDim.x)
        for (int t = toff[e]; t < toff[e + 1]; t++) {
            p.tile_e[t] = e;
            p.tile_p0[t] = cur[e] + (t - toff[e]) * PL_CUDA_MOE_TILE_ROWS;
        }
    __syncthreads();                     /* the cursors move from here on */
    if (tid >= 32)
        return;
    unsigned lt = (1u << lane) - 1u;
    for (int base = 0; base < n_pairs; base += 32) {
        int i = base + lane, ok = i < n_pairs;
        int e = ok ? sel[i] : -1 - lane;     /* a lane past the end: alone */
        unsigned same = __match_any_sync(0xffffffffu, e);
        int leader = __ffs(same) - 1, c = 0;
        if (ok && lane == leader)
            c = cur[e];
        c = __shfl_sync(0xffffffffu, c, leader);
        if (ok) {
            int s = c + __popc(same & lt);
            p.slot_of[i] = s;
            p.row_of[s] = i / k;
        }
        __syncwarp();
        if (ok && lane == leader)
            cur[e] += __popc(same);
        __syncwarp();
    }
}

extern "C" int pl_cuda_moe_max_tiles(int n_pairs, int n_expert)
{
    return (n_pairs + PL_CUDA_MOE_TILE_ROWS - 1) / PL_CUDA_MOE_TILE_ROWS +
           (n_expert < n_pairs ? n_expert : n_pairs);
}

extern "C" int pl_cuda_moe_group(const int32_t *sel, int n_pairs, int k, int n_expert,
                                 const pl_cuda_moe_plan *p, cudaStream_t st)
{
    PL_CUDA_ARG(sel && p && p->counts && p->offsets && p->slot_of && p->row_of && p->tile_e &&
                p->tile_p0 && p->n_tiles && n_pairs >= 0 && k > 0 && n_expert > 0 &&
                n_expert <= MAX_EXPERTS && p->max_tiles >= pl_cuda_moe_max_tiles(n_pairs,
                                                                                n_expert));
    group_kernel<<<1, GROUP_THREADS, 0, st>>>(sel, n_pairs, k, n_expert, *p);
    PL_CUDA_LAUNCHED();
    return 0;
}

static __global__ void permute_kernel(const __nv_bfloat16 *x, const int32_t *row_of,
                                      __nv_bfloat16 *out, int dim, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    size_t s = i / dim, c = i % dim;
    out[i] = x[(size_t)row_of[s] * dim + c];
}

extern "C" int pl_cuda_moe_permute(const pl_bf16 *x, const int32_t *row_of, pl_bf16 *x_perm,
                                   int n_pairs, int dim, cudaStream_t st)
{
    PL_CUDA_ARG(x && row_of && x_perm && n_pairs >= 0 && dim > 0);
    size_t n = (size_t)n_pairs * dim;
    if (n == 0)
        return 0;
    permute_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(
        (const __nv_bfloat16 *)x, row_of, (__nv_bfloat16 *)x_perm, dim, n);
    PL_CUDA_LAUNCHED();
    return 0;
}

static __global__ void combine_kernel(const float *y, const int32_t *slot_of, const float *wt,
                                      float *out, int k, int dim)
{
    int r = blockIdx.x;
    const int32_t *slot = slot_of + (size_t)r * k;
    const float *w = wt + (size_t)r * k;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) {
        float s = w[0] * y[(size_t)slot[0] * dim + c];
        for (int j = 1; j < k; j++)
            s += w[j] * y[(size_t)slot[j] * dim + c];
        out[(size_t)r * dim + c] = s;
    }
}

extern "C" int pl_cuda_moe_combine(const float *y, const int32_t *slot_of, const float *wt,
                                   float *out, int n, int k, int dim, cudaStream_t st)
{
    PL_CUDA_ARG(y && slot_of && wt && out && n >= 0 && k > 0 && dim > 0);
    if (n == 0)
        return 0;
    combine_kernel<<<(unsigned)n, 256, 0, st>>>(y, slot_of, wt, out, k, dim);
    PL_CUDA_LAUNCHED();
    return 0;
}
