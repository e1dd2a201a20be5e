/* rope.cu - rotary position embedding kernel (normal and NeoX pairings).
 * Angles are computed in fp32 with accurate sincosf (no fast-math), since
 * pos * theta reaches thousands of radians. */
#include "backends/engine/cuda/rope.cuh"

/* grid (n_rows, n_heads); one thread per rotated pair. */
static __global__ void rope_kernel(float *qk, const int32_t *positions, int row_stride,
                                   int head_dim, int n_rot, const float *inv_freq,
                                   float mscale, int neox)
{
    int r = blockIdx.x, h = blockIdx.y;
    float *v = qk + (size_t)r * row_stride + (size_t)h * head_dim;
    float pos = (float)positions[r];
    int half = n_rot / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float s, c;
        sincosf(pos * inv_freq[i], &s, &c);
        int a = neox ? i : 2 * i;
        int b = neox ? i + half : 2 * i + 1;
        float x0 = v[a], x1 = v[b];
        v[a] = (x0 * c - x1 * s) * mscale;
        v[b] = (x0 * s + x1 * c) * mscale;
    }
}

extern "C" int pl_cuda_rope(float *qk, const int32_t *positions, int n_rows,
                            int row_stride, int n_heads, int head_dim, int n_rot,
                            const float *inv_freq, float mscale, pl_rope_mode mode,
                            cudaStream_t st)
{
    PL_CUDA_ARG(qk && positions && n_rows >= 0 && n_heads > 0 && head_dim > 0);
    PL_CUDA_ARG(n_rot > 0 && n_rot <= head_dim && n_rot % 2 == 0 && inv_freq);
    PL_CUDA_ARG(row_stride >= n_heads * head_dim && mscale > 0.0f && mscale < 1e30f);
    PL_CUDA_ARG(mode == PL_ROPE_MODE_NORM || mode == PL_ROPE_MODE_NEOX);
    if (n_rows == 0)
        return 0;
    int threads = n_rot / 2 < 128 ? ((n_rot / 2 + 31) / 32) * 32 : 128;
    dim3 grid(n_rows, n_heads);
    rope_kernel<<<grid, threads, 0, st>>>(qk, positions, row_stride, head_dim, n_rot,
                                          inv_freq, mscale, mode == PL_ROPE_MODE_NEOX);
    PL_CUDA_LAUNCHED();
    return 0;
}
