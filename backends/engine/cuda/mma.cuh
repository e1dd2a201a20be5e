/* mma.cuh - the tensor-core pieces the attention kernels share (sm_80 and
 * up; device code only): m16n8k16 MMAs on bf16 or fp16 with fp32
 * accumulation, ldmatrix / ldmatrix.trans / movmatrix, and 16-byte
 * cp.async with zero fill.
 *
 * PTX fixes the fragment layouts, with g = lane / 4 and c = lane % 4: the
 * fp32 accumulator of a 16 x 8 tile holds rows g (elements 0, 1) and g + 8
 * (2, 3), columns 2c and 2c + 1; the A operand (16 x 16) is that layout for
 * columns 0-7 (registers 0, 1: rows g, g + 8) and 8-15 (registers 2, 3);
 * the B operand (16 x 8) holds rows 2c, 2c + 1 (register 0) and 2c + 8,
 * 2c + 9 (register 1) of column g. ldmatrix gives each lane row g,
 * elements 2c and 2c + 1 of an 8 x 8 matrix whose rows the lanes address
 * (.trans: of its transpose), and movmatrix transposes such a fragment in
 * registers. */
#ifndef PL_CUDA_MMA_CUH
#define PL_CUDA_MMA_CUH

#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

/* d += a.b: one m16n8k16 MMA with fp32 accumulation; F16: fp16 operands,
 * else bf16. */
template <bool F16>
static __device__ __forceinline__ void pl_mma16816(float (&d)[4], const uint32_t (&a)[4],
                                                   uint32_t b0, uint32_t b1)
{
    if constexpr (F16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two floats as one register of bf16 or fp16 (lo in the low half). */
template <bool F16>
static __device__ __forceinline__ uint32_t pl_pack2(float lo, float hi)
{
    if constexpr (F16) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *(uint32_t *)&v;
    } else {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *(uint32_t *)&v;
    }
}

static __device__ __forceinline__ uint32_t pl_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* Four 8 x 8 b16 matrices; lane i gives the address of row i % 8 of
 * matrix i / 8. */
static __device__ __forceinline__ void pl_ldmatrix_x4(uint32_t (&r)[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(pl_smem_addr(p)));
}

static __device__ __forceinline__ void pl_ldmatrix_x4_trans(uint32_t (&r)[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(pl_smem_addr(p)));
}

/* The fragment of the transposed 8 x 8 b16 matrix. */
static __device__ __forceinline__ uint32_t pl_movmatrix_trans(uint32_t x)
{
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}

/* 16 bytes global -> shared, asynchronously; !valid: 16 zero bytes (the
 * source is not read). */
static __device__ __forceinline__ void pl_cp_async16(void *dst, const void *src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(pl_smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
}

static __device__ __forceinline__ void pl_cp_async_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::);
}

/* Wait until at most N of this thread's committed groups are pending. */
template <int N>
static __device__ __forceinline__ void pl_cp_async_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N));
}

/* 16 e4m3 (one 16-byte chunk) as 16 fp16 (two 16-byte chunks); exact. */
static __device__ __forceinline__ void pl_e4m3x16_to_f16(const void *src, void *dst)
{
    uint4 v = *(const uint4 *)src;
    const uint16_t *b = (const uint16_t *)&v;
    uint32_t h[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        __half2_raw r = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)b[i], __NV_E4M3);
        h[i] = (uint32_t)r.x | ((uint32_t)r.y << 16);
    }
    ((uint4 *)dst)[0] = make_uint4(h[0], h[1], h[2], h[3]);
    ((uint4 *)dst)[1] = make_uint4(h[4], h[5], h[6], h[7]);
}

#endif
