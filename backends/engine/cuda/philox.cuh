/* philox.cuh - Philox4x32-10 counter-based generator, host and device, so
 * that sampling draws are reproducible: key = request seed, counter = step. */
#ifndef PL_CUDA_PHILOX_CUH
#define PL_CUDA_PHILOX_CUH

#include <stdint.h>

#ifdef __CUDACC__
#define PL_HD static __host__ __device__ __forceinline__
#else
#define PL_HD static inline
#endif

PL_HD uint32_t pl_mulhilo32(uint32_t a, uint32_t b, uint32_t *hi)
{
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

/** Philox4x32 with 10 rounds of counter c under key (k0, k1); out: 4 words. */
PL_HD void pl_philox4x32(const uint32_t c_in[4], uint32_t k0, uint32_t k1, uint32_t out[4])
{
    uint32_t c0 = c_in[0], c1 = c_in[1], c2 = c_in[2], c3 = c_in[3];
    for (int i = 0; i < 10; i++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = pl_mulhilo32(0xD2511F53u, c0, &hi0);
        uint32_t lo1 = pl_mulhilo32(0xCD9E8D57u, c2, &hi1);
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

/** Uniform in [0, 1) for draw `step` of the stream `seed` (24-bit resolution). */
PL_HD float pl_philox_uniform(uint64_t seed, uint64_t step)
{
    uint32_t c[4] = {(uint32_t)step, (uint32_t)(step >> 32), 0u, 0u}, o[4];
    pl_philox4x32(c, (uint32_t)seed, (uint32_t)(seed >> 32), o);
    return (float)(o[0] >> 8) * (1.0f / 16777216.0f);
}

#endif
