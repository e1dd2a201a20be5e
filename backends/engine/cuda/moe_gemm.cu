/* moe_gemm.cu - the grouped expert GEMM and the experts' activation
 * (moe_gemm.cuh). A block computes a tile of 32 places of one expert by 64
 * outputs: 32-wide slices of the inputs and of the expert's rows go
 * through shared memory as fp32 (MXFP4 blocks decoded on the way: the E8M0
 * byte as 2^(e - 128), a nibble as the doubled FP4 value), and each
 * thread keeps 2 x 4 sums. A first version on the CUDA cores, for
 * correctness; tensor cores are the next step. */
#include "backends/engine/cuda/moe_gemm.cuh"

#include <math.h>

#define TM PL_CUDA_MOE_TILE_ROWS     /* places per tile */
#define TN 64                        /* outputs per tile */
#define TK 32                        /* one MXFP4 block */
#define GEMM_THREADS 256

__constant__ float c_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static __device__ __forceinline__ float e8m0_half(unsigned e)
{
    return __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

/* Element k of a weight row. */
template <int FMT>
static __device__ __forceinline__ float load_w(const uint8_t *row, int k)
{
    if (FMT == PL_CUDA_MOE_W_BF16)
        return __bfloat162float(((const __nv_bfloat16 *)row)[k]);
    const uint8_t *blk = row + (size_t)(k / 32) * 17;
    int j = k % 32;
    unsigned q = blk[1 + (j & 15)];
    return e8m0_half(blk[0]) * c_mxfp4_values[j < 16 ? q & 15 : q >> 4];
}

template <int FMT>
static __global__ void moe_gemm_kernel(const uint8_t *w, size_t row_bytes, size_t expert_bytes,
                                       const float *bias, int rows, int cols,
                                       const __nv_bfloat16 *a, float *y, pl_cuda_moe_plan p)
{
    __shared__ float as[TM][TK + 1], ws[TN][TK + 1];
    int t = blockIdx.y;
    if (t >= *p.n_tiles)
        return;
    int e = p.tile_e[t], p0 = p.tile_p0[t], pend = min(p0 + TM, p.offsets[e + 1]);
    int o0 = blockIdx.x * TN, tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    const uint8_t *we = w + (size_t)e * expert_bytes;
    float acc[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
    for (int k0 = 0; k0 < cols; k0 += TK) {
        for (int i = tid; i < TM * TK; i += GEMM_THREADS) {
            int r = i / TK, kk = i % TK;
            as[r][kk] = p0 + r < pend ? __bfloat162float(a[(size_t)(p0 + r) * cols + k0 + kk])
                                      : 0.0f;
        }
        for (int i = tid; i < TN * TK; i += GEMM_THREADS) {
            int oo = i / TK, kk = i % TK, o = o0 + oo;
            ws[oo][kk] = o < rows ? load_w<FMT>(we + (size_t)o * row_bytes, k0 + kk) : 0.0f;
        }
        __syncthreads();
        for (int kk = 0; kk < TK; kk++) {
            float a0 = as[ty * 2][kk], a1 = as[ty * 2 + 1][kk];
            for (int c = 0; c < 4; c++) {
                float wv = ws[tx * 4 + c][kk];
                acc[0][c] += a0 * wv;
                acc[1][c] += a1 * wv;
            }
        }
        __syncthreads();
    }
    for (int i = 0; i < 2; i++) {
        int s = p0 + ty * 2 + i;
        for (int c = 0; c < 4 && s < pend; c++) {
            int o = o0 + tx * 4 + c;
            if (o < rows)
                y[(size_t)s * rows + o] = acc[i][c] + (bias ? bias[(size_t)e * rows + o] : 0.0f);
        }
    }
}

extern "C" size_t pl_cuda_moe_row_bytes(pl_cuda_moe_wfmt fmt, int cols)
{
    return fmt == PL_CUDA_MOE_W_MXFP4 ? (size_t)cols / 32 * 17 : (size_t)cols * 2;
}

extern "C" int pl_cuda_moe_gemm(const pl_cuda_moe_w *w, const pl_bf16 *a, float *y,
                                const pl_cuda_moe_plan *p, cudaStream_t st)
{
    PL_CUDA_ARG(w && w->w && a && y && p && w->rows > 0 && w->cols > 0 && w->cols % TK == 0 &&
                w->n_expert > 0 && p->max_tiles >= 0 && p->max_tiles <= 65535);
    if (p->max_tiles == 0)
        return 0;
    size_t rb = pl_cuda_moe_row_bytes(w->fmt, w->cols), eb = rb * (size_t)w->rows;
    dim3 grid((unsigned)((w->rows + TN - 1) / TN), (unsigned)p->max_tiles);
    const uint8_t *wb = (const uint8_t *)w->w;
    const __nv_bfloat16 *ab = (const __nv_bfloat16 *)a;
    if (w->fmt == PL_CUDA_MOE_W_MXFP4)
        moe_gemm_kernel<PL_CUDA_MOE_W_MXFP4><<<grid, GEMM_THREADS, 0, st>>>(
            wb, rb, eb, w->bias, w->rows, w->cols, ab, y, *p);
    else
        moe_gemm_kernel<PL_CUDA_MOE_W_BF16><<<grid, GEMM_THREADS, 0, st>>>(
            wb, rb, eb, w->bias, w->rows, w->cols, ab, y, *p);
    PL_CUDA_LAUNCHED();
    return 0;
}

static __global__ void act_kernel(const float *g, const float *u, __nv_bfloat16 *h, int act,
                                  size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float x = g[i], v = u[i], out;
    if (act == 2) {                      /* gpt-oss: clamped, alpha 1.702, limit 7 */
        x = fminf(x, 7.0f);
        v = fminf(fmaxf(v, -7.0f), 7.0f);
        out = x / (1.0f + expf(-1.702f * x)) * (v + 1.0f);
    } else if (act == 1) {
        out = 0.5f * x * (1.0f + tanhf(0.7978845608f * x * (1.0f + 0.044715f * x * x))) * v;
    } else {
        out = x / (1.0f + expf(-x)) * v;
    }
    h[i] = __float2bfloat16(out);
}

extern "C" int pl_cuda_moe_act(const float *g, const float *u, pl_bf16 *h, int n_pairs, int ff,
                               int act, cudaStream_t st)
{
    PL_CUDA_ARG(g && u && h && n_pairs >= 0 && ff > 0 && act >= 0 && act <= 2);
    size_t n = (size_t)n_pairs * ff;
    if (n == 0)
        return 0;
    act_kernel<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(g, u, (__nv_bfloat16 *)h, act, n);
    PL_CUDA_LAUNCHED();
    return 0;
}
