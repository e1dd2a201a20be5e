/* mma.cuh - the bf16 tensor-core pieces the attention kernels share
 * (sm_80 and up; device code only). PTX fixes the m16n8k16 fragment
 * layouts: for the fp32 accumulator, lane l holds rows l/4 (elements 0, 1)
 * and l/4 + 8 (elements 2, 3), columns 2*(l%4) and +1 of an 8-column tile;
 * the A operand (16 x 16) is that layout for columns 0-7 (registers 0, 1)
 * and 8-15 (registers 2, 3); the B operand (16 x 8) holds rows 2*(l%4), +1
 * (register 0) and +8 (register 1) of column l/4. So two 8-column score
 * tiles are, after rounding, the A operand of P.V without leaving
 * registers. */
#ifndef PL_CUDA_MMA_CUH
#define PL_CUDA_MMA_CUH

#include <stdint.h>

#include <cuda_bf16.h>

#define PL_LOG2E 1.4426950408889634f   /* scores scaled by it: softmax in exp2 */

/* d += a.b: one m16n8k16 bf16 MMA with fp32 accumulation. */
static __device__ __forceinline__ void pl_mma16816(float (&d)[4], const uint32_t (&a)[4],
                                                   uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two floats as one register of bf16 (lo in the low half). */
static __device__ __forceinline__ uint32_t pl_pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* O (16 x HD, accumulator tiles) += P (16 x BK, the probabilities in
 * accumulator tiles) . V, with V staged transposed: sv[dim * LD + key]. */
template <int HD, int BK, int LD>
static __device__ __forceinline__ void pl_mma_pv(float (&o)[HD / 8][4],
                                                 const float (&p)[BK / 8][4],
                                                 const __nv_bfloat16 *sv, int lane)
{
    int gq = lane >> 2, c2 = 2 * (lane & 3);
#pragma unroll
    for (int k = 0; k < BK / 16; k++) {
        uint32_t a[4] = {pl_pack_bf16(p[2 * k][0], p[2 * k][1]),
                         pl_pack_bf16(p[2 * k][2], p[2 * k][3]),
                         pl_pack_bf16(p[2 * k + 1][0], p[2 * k + 1][1]),
                         pl_pack_bf16(p[2 * k + 1][2], p[2 * k + 1][3])};
#pragma unroll
        for (int d = 0; d < HD / 8; d++) {
            const __nv_bfloat16 *vr = sv + (d * 8 + gq) * LD + 16 * k + c2;
            pl_mma16816(o[d], a, *(const uint32_t *)vr, *(const uint32_t *)(vr + 8));
        }
    }
}

#endif
