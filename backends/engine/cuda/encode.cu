/* encode.cu - the encoder's kernels (encode.cuh). One block per row for
 * the norms, one warp per query row for attention (its scores in shared
 * memory), one block per text for pooling. */
#include "backends/engine/cuda/encode.cuh"

#define ENC_THREADS 256
#define ENC_ATTN_WARPS 4         /* query rows per attention block */

static __device__ __forceinline__ float gelu_erf(float v)
{
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

/* xr = LayerNorm(xr) in place (two passes: mean, then the variance of the
 * centred values, as torch), its bf16 copy into o. */
static __device__ void layernorm_row(float *xr, const float *w, const float *b, int d,
                                     float eps, __nv_bfloat16 *o, float *sh)
{
    float s = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x)
        s += xr[i];
    float mean = pl_block_sum(s, sh) / (float)d, q = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float t = xr[i] - mean;
        q += t * t;
    }
    float inv = rsqrtf(pl_block_sum(q, sh) / (float)d + eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float v = (xr[i] - mean) * inv * w[i] + b[i];
        xr[i] = v;
        o[i] = __float2bfloat16(v);
    }
}

static __global__ void embed_norm_kernel(const int32_t *ids, const int32_t *positions,
                                         const float *tok, const float *pos,
                                         const float *type0, const float *w, const float *b,
                                         float eps, float *x, __nv_bfloat16 *xb, int d)
{
    __shared__ float sh[32];
    int r = blockIdx.x;
    const float *te = tok + (size_t)ids[r] * d, *pe = pos + (size_t)positions[r] * d;
    float *xr = x + (size_t)r * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x)
        xr[i] = te[i] + pe[i] + type0[i];
    layernorm_row(xr, w, b, d, eps, xb + (size_t)r * d, sh);
}

static __global__ void add_norm_kernel(float *x, const float *y, const float *bias,
                                       const float *w, const float *b, float eps,
                                       __nv_bfloat16 *xb, int d)
{
    __shared__ float sh[32];
    int r = blockIdx.x;
    float *xr = x + (size_t)r * d;
    const float *yr = y ? y + (size_t)r * d : NULL;
    for (int i = threadIdx.x; (yr || bias) && i < d; i += blockDim.x)
        xr[i] += (yr ? yr[i] : 0.0f) + (bias ? bias[i] : 0.0f);
    layernorm_row(xr, w, b, d, eps, xb + (size_t)r * d, sh);
}

static __global__ void bias_kernel(float *y, const float *bias, int gelu, __nv_bfloat16 *yb,
                                   size_t n, int o)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = y[i] + bias[i % o];
        if (gelu)
            v = gelu_erf(v);
        y[i] = v;
        if (yb)
            yb[i] = __float2bfloat16(v);
    }
}

/* Block (text, head, chunk of ENC_ATTN_WARPS query rows); a warp per query
 * row: its scores over the text's keys (a lane per key), the softmax by
 * warp reductions, then the values (a lane per output dim). */
static __global__ void attention_kernel(const float *qkv, const int32_t *start,
                                        const int32_t *lens, int n_head, int hd, float scale,
                                        __nv_bfloat16 *out, int max_len)
{
    extern __shared__ float sc[];
    int t = blockIdx.x / n_head, h = blockIdx.x % n_head;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int L = lens[t], qi = blockIdx.y * ENC_ATTN_WARPS + warp;
    if (qi >= L)
        return;                  /* no block-wide sync below */
    int d = n_head * hd;
    size_t stride = (size_t)3 * d, r0 = (size_t)start[t];
    const float *q = qkv + (r0 + qi) * stride + (size_t)h * hd;
    const float *kb = qkv + r0 * stride + d + (size_t)h * hd;
    const float *vb = qkv + r0 * stride + 2 * (size_t)d + (size_t)h * hd;
    float *s = sc + (size_t)warp * max_len, mx = -INFINITY;
    for (int j = lane; j < L; j += 32) {
        const float *k = kb + (size_t)j * stride;
        float acc = 0.0f;
        for (int c = 0; c < hd; c++)
            acc += q[c] * k[c];
        acc *= scale;
        s[j] = acc;
        mx = fmaxf(mx, acc);
    }
    mx = pl_warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j < L; j += 32) {
        float e = __expf(s[j] - mx);
        s[j] = e;
        sum += e;
    }
    float inv = 1.0f / pl_warp_sum(sum);
    __syncwarp();
    __nv_bfloat16 *o = out + (r0 + qi) * (size_t)d + (size_t)h * hd;
    for (int c = lane; c < hd; c += 32) {
        float acc = 0.0f;
        for (int j = 0; j < L; j++)
            acc += s[j] * vb[(size_t)j * stride + c];
        o[c] = __float2bfloat16(acc * inv);
    }
}

static __global__ void pool_kernel(const float *x, const int32_t *start, const int32_t *lens,
                                   int d, int pooling, int normalize, float *out)
{
    __shared__ float sh[32];
    int t = blockIdx.x, L = lens[t];
    const float *xr = x + (size_t)start[t] * d;
    float *o = out + (size_t)t * d, ss = 0.0f;
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        float v;
        if (pooling == 2 || pooling == 3) {
            v = xr[(size_t)(pooling == 2 ? 0 : L - 1) * d + c];
        } else {
            float acc = 0.0f;
            for (int r = 0; r < L; r++)
                acc += xr[(size_t)r * d + c];
            v = acc / (float)L;
        }
        o[c] = v;
        ss += v * v;
    }
    if (!normalize)
        return;
    float inv = 1.0f / fmaxf(sqrtf(pl_block_sum(ss, sh)), 1e-12f);
    for (int c = threadIdx.x; c < d; c += blockDim.x)
        o[c] *= inv;
}

extern "C" int pl_cuda_enc_embed_norm(const int32_t *ids, const int32_t *positions,
                                      const float *tok, const float *pos, const float *type0,
                                      const float *w, const float *b, float eps, float *x,
                                      pl_bf16 *xb, int n_rows, int d, cudaStream_t st)
{
    PL_CUDA_ARG(ids && positions && tok && pos && type0 && w && b && x && xb && d > 0 &&
                n_rows >= 0 && eps >= 0.0f);
    if (n_rows == 0)
        return 0;
    embed_norm_kernel<<<n_rows, ENC_THREADS, 0, st>>>(ids, positions, tok, pos, type0, w, b,
                                                      eps, x, (__nv_bfloat16 *)xb, d);
    PL_CUDA_LAUNCHED();
    return 0;
}

extern "C" int pl_cuda_enc_bias(float *y, const float *bias, int gelu, pl_bf16 *yb,
                                int n_rows, int o, cudaStream_t st)
{
    PL_CUDA_ARG(y && bias && o > 0 && n_rows >= 0);
    size_t n = (size_t)n_rows * o;
    if (n == 0)
        return 0;
    bias_kernel<<<pl_cuda_stride_blocks(n, ENC_THREADS), ENC_THREADS, 0, st>>>(
        y, bias, gelu, (__nv_bfloat16 *)yb, n, o);
    PL_CUDA_LAUNCHED();
    return 0;
}

extern "C" int pl_cuda_enc_add_norm(float *x, const float *y, const float *bias,
                                    const float *w, const float *b, float eps, pl_bf16 *xb,
                                    int n_rows, int d, cudaStream_t st)
{
    PL_CUDA_ARG(x && w && b && xb && d > 0 && n_rows >= 0 && eps >= 0.0f);
    if (n_rows == 0)
        return 0;
    add_norm_kernel<<<n_rows, ENC_THREADS, 0, st>>>(x, y, bias, w, b, eps,
                                                    (__nv_bfloat16 *)xb, d);
    PL_CUDA_LAUNCHED();
    return 0;
}

extern "C" int pl_cuda_enc_attention(const float *qkv, const int32_t *start,
                                     const int32_t *lens, int n_texts, int max_len,
                                     int n_head, int head_dim, float scale, pl_bf16 *out,
                                     cudaStream_t st)
{
    PL_CUDA_ARG(qkv && start && lens && out && n_texts >= 0 && max_len > 0 &&
                max_len <= PL_CUDA_ENC_MAX_LEN && n_head > 0 && head_dim > 0);
    if (n_texts == 0)
        return 0;
    dim3 grid((unsigned)(n_texts * n_head),
              (unsigned)((max_len + ENC_ATTN_WARPS - 1) / ENC_ATTN_WARPS));
    size_t shm = sizeof(float) * ENC_ATTN_WARPS * (size_t)max_len;
    attention_kernel<<<grid, 32 * ENC_ATTN_WARPS, shm, st>>>(
        qkv, start, lens, n_head, head_dim, scale, (__nv_bfloat16 *)out, max_len);
    PL_CUDA_LAUNCHED();
    return 0;
}

extern "C" int pl_cuda_enc_pool(const float *x, const int32_t *start, const int32_t *lens,
                                int n_texts, int d, int pooling, int normalize, float *out,
                                cudaStream_t st)
{
    PL_CUDA_ARG(x && start && lens && out && d > 0 && n_texts >= 0 && pooling >= 1 &&
                pooling <= 3);
    if (n_texts == 0)
        return 0;
    pool_kernel<<<n_texts, ENC_THREADS, 0, st>>>(x, start, lens, d, pooling, normalize, out);
    PL_CUDA_LAUNCHED();
    return 0;
}
