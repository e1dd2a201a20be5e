/* qdot_amx.c - block-order matmuls with AMX tiles (see qdot_amx.h).
 *
 * The tile kernel is written once against a small table of tile operations
 * (tile_ops): the CPU's instructions, or tile_emu.c's C model of them. Its
 * registers:
 *   tmm0..3  C: 16 activation rows x 16 weight rows of int32 block sums
 *   tmm4, 5  A: 16 activation rows x one block (32 bytes), loaded straight
 *               from the q8 activations (the row stride is their stride)
 *   tmm6, 7  B: 16 weight rows x one block, unpacked to bytes in the pairs
 *               of fours TDPBSSD wants: B[k][4n + i] = w[n][4k + i]
 * so C[m][n] += sum_j a[m][j] * w[n][j] over the block: TDPBSSD (signed x
 * signed; Q4 nibbles 0..15 fit a signed byte, their -8 or m offset is the
 * m_w * s_a term, as in the reference).
 */
#include "backends/engine/cpu/qdot_amx.h"

#include "backends/engine/cpu/tile_emu.h"
#include "backends/formats/gguf.h"
#include "src/base/cpu_features.h"
#include "src/base/half.h"
#include "src/base/le.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define PL_HAVE_X86 1
#endif

#define KC 32                    /* blocks of weights unpacked at a time */

bool pl_amx_supported(pl_ggml_type t)
{
    return t == PL_GGML_TYPE_Q4_0 || t == PL_GGML_TYPE_Q4_1 || t == PL_GGML_TYPE_Q8_0;
}

static size_t block_bytes(pl_ggml_type t)
{
    size_t bb = 0;
    pl_ggml_type_block(t, NULL, &bb);
    return bb;
}

/* Weight rows [o, o + n_out) (n_out <= 32) of blocks [k0, k0 + nk), as two
 * B tiles per block (wb: nk x 2 x 512 bytes; rows past n_out are zero) and
 * their scales: dw[b * 32 + n] = d, mw = m (Q4_1) or -8 d (Q4_0). */
static void unpack_b(pl_ggml_type t, const uint8_t *w, size_t row_bytes, int o, int n_out,
                     int k0, int nk, int8_t *wb, float *dw, float *mw)
{
    size_t bb = block_bytes(t);
    memset(wb, 0, (size_t)nk * 1024);
    memset(dw, 0, sizeof(float) * 32 * (size_t)nk);
    memset(mw, 0, sizeof(float) * 32 * (size_t)nk);
    for (int n = 0; n < n_out; n++) {
        const uint8_t *row = w + (size_t)(o + n) * row_bytes;
        for (int b = 0; b < nk; b++) {
            const uint8_t *blk = row + (size_t)(k0 + b) * bb;
            int8_t q[32];
            float d = pl_fp16_to_fp32(pl_le16(blk));
            if (t == PL_GGML_TYPE_Q8_0) {
                memcpy(q, blk + 2, 32);
            } else {
                const uint8_t *qs = blk + (t == PL_GGML_TYPE_Q4_1 ? 4 : 2);
                for (int j = 0; j < 16; j++) {
                    q[j] = (int8_t)(qs[j] & 0x0f);
                    q[j + 16] = (int8_t)(qs[j] >> 4);
                }
                mw[b * 32 + n] = t == PL_GGML_TYPE_Q4_1 ? pl_fp16_to_fp32(pl_le16(blk + 2))
                                                        : -8.0f * d;
            }
            dw[b * 32 + n] = d;
            int8_t *tile = wb + (size_t)b * 1024 + (n / 16) * 512;
            for (int k = 0; k < 8; k++)
                memcpy(tile + k * 64 + (n % 16) * 4, q + 4 * k, 4);
        }
    }
}

/* One C tile's block sums c (16 x 16) into y: for activation row m (xa, m
 * rows of n_blk blocks apart) and weight row n < nn,
 * y[m][n] = (first ? 0 : y[m][n]) + (dw[n] * d_a * c[m][n] (+ mw[n] * s_a)),
 * the reference's expression, operation for operation. */
typedef void epilogue_fn(int q4, const int32_t *c, const pl_q8_act *xa, int n_blk,
                         const float *dw, const float *mw, float *y, int ldy, int nn,
                         int first);

static void epilogue_scalar(int q4, const int32_t *c, const pl_q8_act *xa, int n_blk,
                            const float *dw, const float *mw, float *y, int ldy, int nn,
                            int first)
{
    for (int m = 0; m < 16; m++) {
        const pl_q8_act *a = xa + (size_t)m * n_blk;
        float *yr = y + (size_t)m * ldy;
        for (int n = 0; n < nn; n++) {
            float acc = first ? 0.0f : yr[n];
            if (q4)
                acc += dw[n] * a->d * (float)c[m * 16 + n] + mw[n] * a->s;
            else
                acc += dw[n] * a->d * (float)c[m * 16 + n];
            yr[n] = acc;
        }
    }
}

#ifdef PL_HAVE_X86
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void
epilogue_avx512(int q4, const int32_t *c, const pl_q8_act *xa, int n_blk, const float *dw,
                const float *mw, float *y, int ldy, int nn, int first)
{
    __mmask16 k = (__mmask16)((1u << nn) - 1);
    __m512 vdw = _mm512_loadu_ps(dw), vmw = _mm512_loadu_ps(mw);
    for (int m = 0; m < 16; m++) {
        const pl_q8_act *a = xa + (size_t)m * n_blk;
        float *yr = y + (size_t)m * ldy;
        __m512 s = _mm512_cvtepi32_ps(_mm512_loadu_si512(c + m * 16));
        __m512 v = _mm512_mul_ps(_mm512_mul_ps(vdw, _mm512_set1_ps(a->d)), s);
        if (q4)
            v = _mm512_add_ps(v, _mm512_mul_ps(vmw, _mm512_set1_ps(a->s)));
        __m512 acc = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(k, yr);
        _mm512_mask_storeu_ps(yr, k, _mm512_add_ps(acc, v));
    }
}
#endif

/* The CPU's tile instructions name their registers in the opcode: a switch
 * over the register numbers the kernel uses.
 *
 * GCC 12's intrinsics under-declare their memory operands: _tile_loadconfig
 * reads "8 bytes" of the 64-byte config and _tile_loadd names no memory at
 * all. Once these calls are inlined (the table is static and const), the
 * compiler drops or sinks the stores they read: the config went to the CPU
 * as all zeros but the palette, and TILEZERO raised #UD (SIGILL) on the first
 * AMX CPU this ran on. A compiler barrier before each makes the stores land
 * first. */
#ifdef PL_HAVE_X86
#define AMX_TARGET __attribute__((target("amx-tile,amx-int8")))
#define AMX_STORES_DONE() __asm__ volatile("" ::: "memory")
AMX_TARGET static void hw_config(void *ctx, const uint8_t *cfg)
{
    (void)ctx;
    AMX_STORES_DONE();
    _tile_loadconfig(cfg);
}
AMX_TARGET static void hw_zero(void *ctx, int t)
{
    (void)ctx;
    switch (t) {
    case 0: _tile_zero(0); break;
    case 1: _tile_zero(1); break;
    case 2: _tile_zero(2); break;
    default: _tile_zero(3); break;
    }
}
AMX_TARGET static void hw_load(void *ctx, int t, const void *p, size_t stride)
{
    (void)ctx;
    AMX_STORES_DONE();
    switch (t) {
    case 4: _tile_loadd(4, p, stride); break;
    case 5: _tile_loadd(5, p, stride); break;
    case 6: _tile_loadd(6, p, stride); break;
    default: _tile_loadd(7, p, stride); break;
    }
}
AMX_TARGET static void hw_store(void *ctx, int t, void *p, size_t stride)
{
    (void)ctx;
    switch (t) {
    case 0: _tile_stored(0, p, stride); break;
    case 1: _tile_stored(1, p, stride); break;
    case 2: _tile_stored(2, p, stride); break;
    default: _tile_stored(3, p, stride); break;
    }
}
AMX_TARGET static void hw_dp(void *ctx, int c, int a, int b)
{
    (void)ctx;
    switch (c * 100 + a * 10 + b) {  /* the four products the kernel makes */
    case 46: _tile_dpbssd(0, 4, 6); break;
    case 147: _tile_dpbssd(1, 4, 7); break;
    case 256: _tile_dpbssd(2, 5, 6); break;
    default: _tile_dpbssd(3, 5, 7); break;
    }
}
AMX_TARGET static void hw_release(void *ctx) { (void)ctx, _tile_release(); }

static const pl_tile_ops hw_ops = {hw_config, hw_zero, hw_load, hw_store, hw_dp, hw_release};
#endif

static void tile_config(const pl_tile_ops *ops, void *ctx)
{
    uint8_t cfg[64] = {1};       /* palette 1 */
    for (int t = 0; t < 8; t++) {
        int colsb = t >= 4 && t < 6 ? 32 : 64, rows = t >= 6 ? 8 : 16;
        cfg[16 + 2 * t] = (uint8_t)colsb;
        cfg[48 + t] = (uint8_t)rows;
    }
    ops->config(ctx, cfg);
}

/* Activation rows [ra, ra + 16 * (1 + two)) against one unpacked chunk of
 * weight rows [og, og + n_out): block after block, four (or two) tile
 * products, then the epilogue of each C tile into y. */
static void tiles_chunk(const pl_tile_ops *ops, void *ctx, epilogue_fn *epi, int q4,
                        const pl_q8_act *x, int n_blk, int ra, int two, int k0, int nk,
                        const int8_t *wb, const float *dw, const float *mw, float *y, int ldy,
                        int og, int n_out)
{
    int32_t cb[4][256];
    size_t xs = (size_t)n_blk * sizeof(pl_q8_act);
    for (int b = 0; b < nk; b++) {
        const pl_q8_act *xa = x + (size_t)ra * n_blk + k0 + b;
        for (int c = 0; c < 2 + 2 * two; c++)
            ops->zero(ctx, c);
        ops->load(ctx, 4, xa->qs, xs);
        if (two)
            ops->load(ctx, 5, xa[(size_t)16 * n_blk].qs, xs);
        ops->load(ctx, 6, wb + (size_t)b * 1024, 64);
        ops->load(ctx, 7, wb + (size_t)b * 1024 + 512, 64);
        ops->dp(ctx, 0, 4, 6);
        ops->dp(ctx, 1, 4, 7);
        if (two) {
            ops->dp(ctx, 2, 5, 6);
            ops->dp(ctx, 3, 5, 7);
        }
        for (int c = 0; c < 2 + 2 * two; c++)
            ops->store(ctx, c, cb[c], 64);
        for (int c = 0; c < 2 + 2 * two; c++) {
            int half = c & 1, nn = n_out - 16 * half;
            if (nn <= 0)
                continue;
            epi(q4, cb[c], xa + (size_t)(c >> 1) * 16 * n_blk, n_blk, dw + b * 32 + 16 * half,
                mw + b * 32 + 16 * half, y + (size_t)(ra + 16 * (c >> 1)) * ldy + og + 16 * half,
                ldy, nn > 16 ? 16 : nn, k0 + b == 0);
        }
    }
}

static void tiles_kernel(const pl_tile_ops *ops, void *ctx, epilogue_fn *epi, pl_ggml_type t,
                         const uint8_t *w, size_t row_bytes, const pl_q8_act *x, int n_blk,
                         int n_rows, float *y, int ldy, int o0, int o1)
{
    int8_t wb[KC * 1024];
    float dw[KC * 32], mw[KC * 32];
    int q4 = t != PL_GGML_TYPE_Q8_0;
    tile_config(ops, ctx);
    for (int og = o0; og < o1; og += 32) {
        int n_out = o1 - og < 32 ? o1 - og : 32;
        for (int k0 = 0; k0 < n_blk; k0 += KC) {
            int nk = n_blk - k0 < KC ? n_blk - k0 : KC;
            unpack_b(t, w, row_bytes, og, n_out, k0, nk, wb, dw, mw);
            for (int ra = 0; ra < n_rows; ra += 32)
                tiles_chunk(ops, ctx, epi, q4, x, n_blk, ra, ra + 16 < n_rows, k0, nk, wb, dw,
                            mw, y, ldy, og, n_out);
        }
    }
    ops->release(ctx);
}

void pl_amx_qmatmul_tiles(pl_amx_mode mode, int avx512, pl_ggml_type t, const void *w,
                          size_t row_bytes, const pl_q8_act *x, int n_blk, int n_rows,
                          float *y, int ldy, int o0, int o1)
{
    epilogue_fn *epi = epilogue_scalar;
#ifdef PL_HAVE_X86
    if (avx512)
        epi = epilogue_avx512;
    if (mode == PL_AMX_TILES) {
        tiles_kernel(&hw_ops, NULL, epi, t, w, row_bytes, x, n_blk, n_rows, y, ldy, o0, o1);
        return;
    }
#endif
    pl_tile_emu emu;
    tiles_kernel(&pl_tile_emu_ops, &emu, epi, t, w, row_bytes, x, n_blk, n_rows, y, ldy, o0,
                 o1);
}

void pl_amx_qmatmul(pl_amx_mode mode, pl_ggml_type t, const void *w, size_t row_bytes,
                    const pl_q8_act *x, int n_blk, int n_rows, float *y, int ldy, int o0,
                    int o1)
{
    int n16 = mode == PL_AMX_OFF ? 0 : n_rows / 16 * 16;
    if (n16 > 0)
        pl_amx_qmatmul_tiles(mode, mode == PL_AMX_TILES, t, w, row_bytes, x, n_blk, n16, y,
                             ldy, o0, o1);
    if (n_rows > n16)            /* the default kernels: the same sums */
        pl_op_qmatmul_rows(t, w, row_bytes, x + (size_t)n16 * n_blk, n_blk, n_rows - n16,
                           y + (size_t)n16 * ldy, ldy, o0, o1);
}

/* The self-check's problem: 40 weight rows of 3 blocks (two 32-row groups,
 * the second partial), 32 activation rows, pseudo-random but fixed. */
enum { SC_ROWS = 40, SC_BLK = 3, SC_ACT = 32 };

static uint32_t lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static void self_check_data(pl_ggml_type t, uint8_t *w, pl_q8_act *x)
{
    uint32_t s = 12345u + (uint32_t)t;
    size_t bb = block_bytes(t);
    for (size_t i = 0; i < SC_ROWS * SC_BLK * bb; i++)
        w[i] = (uint8_t)lcg(&s);
    for (int b = 0; b < SC_ROWS * SC_BLK; b++) {  /* finite scales */
        uint16_t d = pl_fp32_to_fp16((float)(lcg(&s) % 1000) * 1e-4f - 0.05f);
        uint16_t m = pl_fp32_to_fp16((float)(lcg(&s) % 1000) * 1e-3f - 0.5f);
        memcpy(w + (size_t)b * bb, &d, 2);
        if (t == PL_GGML_TYPE_Q4_1)
            memcpy(w + (size_t)b * bb + 2, &m, 2);
    }
    for (int i = 0; i < SC_ACT * SC_BLK; i++) {
        int sum = 0;
        for (int j = 0; j < PL_QK; j++) {
            x[i].qs[j] = (int8_t)((int)(lcg(&s) % 255) - 127);
            sum += x[i].qs[j];
        }
        x[i].d = (float)(lcg(&s) % 1000) * 1e-5f;
        x[i].s = x[i].d * (float)sum;
    }
}

int pl_amx_self_check(char *err, size_t errlen)
{
    if (!pl_cpu_features()->amx_int8) {
        snprintf(err, errlen, "this CPU has no AMX-INT8, or Linux refused the tile state "
                              "(arch_prctl ARCH_REQ_XCOMP_PERM)");
        return -1;
    }
    static const pl_ggml_type types[] = {PL_GGML_TYPE_Q4_0, PL_GGML_TYPE_Q4_1,
                                         PL_GGML_TYPE_Q8_0};
    uint8_t w[SC_ROWS * SC_BLK * 34];
    pl_q8_act x[SC_ACT * SC_BLK];
    float hw[SC_ACT * SC_ROWS], model[SC_ACT * SC_ROWS];
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        pl_ggml_type t = types[i];
        size_t rb = SC_BLK * block_bytes(t);
        self_check_data(t, w, x);
        pl_amx_qmatmul_tiles(PL_AMX_TILES, 1, t, w, rb, x, SC_BLK, SC_ACT, hw, SC_ROWS, 0,
                             SC_ROWS);
        pl_amx_qmatmul_tiles(PL_AMX_EMULATED, 0, t, w, rb, x, SC_BLK, SC_ACT, model, SC_ROWS,
                             0, SC_ROWS);
        if (memcmp(hw, model, sizeof hw) != 0) {
            snprintf(err, errlen, "the AMX tiles' sums differ from their model (type %d): "
                                  "not using them", (int)t);
            return -1;
        }
    }
    return 0;
}
