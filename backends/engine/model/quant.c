/* quant.c - reference dequantisation of ggml block formats, one function
 * per type, each decoding one block.
 *
 * Block layouts (little-endian, packed, f16 = IEEE half):
 *   Q4_0 (32):  f16 d; u8 qs[16]              x = d * (q - 8)
 *   Q4_1 (32):  f16 d, m; u8 qs[16]           x = d * q + m
 *   Q5_0 (32):  f16 d; u8 qh[4]; u8 qs[16]    x = d * (q - 16)
 *   Q5_1 (32):  f16 d, m; u8 qh[4]; u8 qs[16] x = d * q + m
 *   Q8_0 (32):  f16 d; i8 qs[32]              x = d * q
 *   Q8_1 (32):  f16 d, s; i8 qs[32]           x = d * q
 *   MXFP4 (32): u8 e (E8M0); u8 qs[16]      x = 2^(e - 128) * v[q], v the
 *               doubled FP4 values pl_mxfp4_values
 * In the 32-element types, element j < 16 is the low nibble of qs[j] and
 * element j + 16 the high nibble; Q5 adds bit j (resp. j + 16) of qh.
 * The K-quants are 256-element super-blocks of 16 or 8 sub-blocks, each
 * with its own scale (and min) quantised against the super-block's d
 * (and dmin); their layouts are spelled out above each function.
 */
#include "backends/engine/model/quant.h"

#include "src/base/le.h"

static float f16_(const uint8_t *p) { return pl_fp16_to_fp32(pl_le16(p)); }

static void deq_q4_0_(const uint8_t *b, float *y)
{
    float d = f16_(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)((qs[j] & 0xf) - 8);
        y[j + 16] = d * (float)((qs[j] >> 4) - 8);
    }
}

static void deq_q4_1_(const uint8_t *b, float *y)
{
    float d = f16_(b), m = f16_(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)(qs[j] & 0xf) + m;
        y[j + 16] = d * (float)(qs[j] >> 4) + m;
    }
}

/* The 5-bit values of a Q5 block: nibbles of qs plus bit 4 from qh. */
static void q5_values_(const uint8_t *qh4, const uint8_t *qs, int *q)
{
    uint32_t qh = (uint32_t)qh4[0] | (uint32_t)qh4[1] << 8 |
                  (uint32_t)qh4[2] << 16 | (uint32_t)qh4[3] << 24;
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 0xf) | (int)(((qh >> j) & 1) << 4);
        q[j + 16] = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
    }
}

static void deq_q5_0_(const uint8_t *b, float *y)
{
    int q[32];
    float d = f16_(b);
    q5_values_(b + 2, b + 6, q);
    for (int j = 0; j < 32; j++)
        y[j] = d * (float)(q[j] - 16);
}

static void deq_q5_1_(const uint8_t *b, float *y)
{
    int q[32];
    float d = f16_(b), m = f16_(b + 2);
    q5_values_(b + 4, b + 8, q);
    for (int j = 0; j < 32; j++)
        y[j] = d * (float)q[j] + m;
}

static void deq_q8_0_(const uint8_t *b, float *y)
{
    float d = f16_(b);
    for (int j = 0; j < 32; j++)
        y[j] = d * (float)(int8_t)b[2 + j];
}

static void deq_q8_1_(const uint8_t *b, float *y)
{
    float d = f16_(b);
    for (int j = 0; j < 32; j++)
        y[j] = d * (float)(int8_t)b[4 + j];
}

/* Q2_K: u8 scales[16]; u8 qs[64]; f16 d; f16 dmin.
 * Sub-block i (16 elements) has scale d * (scales[i] & 0xf) and min
 * dmin * (scales[i] >> 4). Element e = 128*h + 32*s + l (h: half, s: 2-bit
 * plane, l < 32) is bits 2s..2s+1 of qs[32*h + l]; its sub-block is e / 16. */
static void deq_q2_k_(const uint8_t *b, float *y)
{
    const uint8_t *sc = b, *qs = b + 16;
    float d = f16_(b + 80), dmin = f16_(b + 82);
    for (int e = 0; e < 256; e++) {
        int h = e / 128, s = (e / 32) % 4, l = e % 32;
        int q = (qs[32 * h + l] >> (2 * s)) & 3;
        uint8_t k = sc[e / 16];
        y[e] = d * (float)(k & 0xf) * (float)q - dmin * (float)(k >> 4);
    }
}

/* The sixteen 6-bit Q3_K scales: low 4 bits from the nibbles of bytes
 * 0..7, high 2 bits from the bit pairs of bytes 8..11. */
static void q3_k_scales_(const uint8_t *s, int *out)
{
    for (int i = 0; i < 16; i++) {
        int lo = i < 8 ? (s[i] & 0xf) : (s[i - 8] >> 4);
        int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        out[i] = (lo | (hi << 4)) - 32;
    }
}

/* Q3_K: u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d.
 * Element e = 128*h + 32*s + l takes its low 2 bits like Q2_K and its
 * third bit from bit (4h + s) of hmask[l]; a clear bit subtracts 4.
 * x = d * scale[e / 16] * q. */
static void deq_q3_k_(const uint8_t *b, float *y)
{
    const uint8_t *hm = b, *qs = b + 32;
    int sc[16];
    float d = f16_(b + 108);
    q3_k_scales_(b + 96, sc);
    for (int e = 0; e < 256; e++) {
        int h = e / 128, s = (e / 32) % 4, l = e % 32;
        int q = (qs[32 * h + l] >> (2 * s)) & 3;
        if (!(hm[l] & (1u << (4 * h + s))))
            q -= 4;
        y[e] = d * (float)sc[e / 16] * (float)q;
    }
}

/* Q4_K: f16 d, dmin; u8 scales[12]; u8 qs[128].
 * Sub-block i (32 elements): 32-byte chunk i/2 of qs, low nibbles for even
 * i, high for odd. x = d * sc[i] * q - dmin * mn[i]. */
static void deq_q4_k_(const uint8_t *b, float *y)
{
    float d = f16_(b), dmin = f16_(b + 2);
    const uint8_t *qs = b + 16;
    int sc[8], mn[8];
    pl_k4_scales(b + 4, sc, mn);
    for (int i = 0; i < 8; i++) {
        float ds = d * (float)sc[i], dm = dmin * (float)mn[i];
        const uint8_t *q = qs + 32 * (i / 2);
        int shift = 4 * (i % 2);
        for (int l = 0; l < 32; l++)
            y[32 * i + l] = ds * (float)((q[l] >> shift) & 0xf) - dm;
    }
}

/* Q5_K: f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128].
 * As Q4_K, with bit 4 of element l of sub-block i in bit i of qh[l]. */
static void deq_q5_k_(const uint8_t *b, float *y)
{
    float d = f16_(b), dmin = f16_(b + 2);
    const uint8_t *qh = b + 16, *qs = b + 48;
    int sc[8], mn[8];
    pl_k4_scales(b + 4, sc, mn);
    for (int i = 0; i < 8; i++) {
        float ds = d * (float)sc[i], dm = dmin * (float)mn[i];
        const uint8_t *q = qs + 32 * (i / 2);
        int shift = 4 * (i % 2);
        for (int l = 0; l < 32; l++) {
            int v = ((q[l] >> shift) & 0xf) | (((qh[l] >> i) & 1) << 4);
            y[32 * i + l] = ds * (float)v - dm;
        }
    }
}

/* Q6_K: u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d.
 * Element e = 128*h + 32*s + l: low 4 bits are nibble (s / 2) of
 * ql[64*h + 32*(s % 2) + l], high 2 bits are bits 2s..2s+1 of
 * qh[32*h + l]; x = d * scales[e / 16] * (q - 32). */
static void deq_q6_k_(const uint8_t *b, float *y)
{
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = f16_(b + 208);
    for (int e = 0; e < 256; e++) {
        int h = e / 128, s = (e / 32) % 4, l = e % 32;
        int lo = (ql[64 * h + 32 * (s % 2) + l] >> (4 * (s / 2))) & 0xf;
        int hi = (qh[32 * h + l] >> (2 * s)) & 3;
        y[e] = d * (float)sc[e / 16] * (float)((lo | (hi << 4)) - 32);
    }
}

/* Q8_K: f32 d; i8 qs[256]; i16 bsums[16] (sums, unused here). */
static void deq_q8_k_(const uint8_t *b, float *y)
{
    uint32_t bits = pl_le32(b);
    float d;
    memcpy(&d, &bits, 4);
    for (int j = 0; j < 256; j++)
        y[j] = d * (float)(int8_t)b[4 + j];
}

const int8_t pl_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static void deq_mxfp4_(const uint8_t *b, float *y)
{
    float d = pl_e8m0_half(b[0]);
    const uint8_t *qs = b + 1;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)pl_mxfp4_values[qs[j] & 0xf];
        y[j + 16] = d * (float)pl_mxfp4_values[qs[j] >> 4];
    }
}

static void deq_f32_(const uint8_t *b, float *y) { memcpy(y, b, 4); }
static void deq_f16_(const uint8_t *b, float *y) { *y = f16_(b); }
static void deq_bf16_(const uint8_t *b, float *y)
{
    *y = pl_bf16_to_fp32(pl_le16(b));
}

typedef void (*deq_block_fn)(const uint8_t *block, float *out);

static deq_block_fn deq_fn_(pl_ggml_type t)
{
    switch (t) {
    case PL_GGML_TYPE_F32: return deq_f32_;
    case PL_GGML_TYPE_F16: return deq_f16_;
    case PL_GGML_TYPE_BF16: return deq_bf16_;
    case PL_GGML_TYPE_Q4_0: return deq_q4_0_;
    case PL_GGML_TYPE_Q4_1: return deq_q4_1_;
    case PL_GGML_TYPE_Q5_0: return deq_q5_0_;
    case PL_GGML_TYPE_Q5_1: return deq_q5_1_;
    case PL_GGML_TYPE_Q8_0: return deq_q8_0_;
    case PL_GGML_TYPE_Q8_1: return deq_q8_1_;
    case PL_GGML_TYPE_Q2_K: return deq_q2_k_;
    case PL_GGML_TYPE_Q3_K: return deq_q3_k_;
    case PL_GGML_TYPE_Q4_K: return deq_q4_k_;
    case PL_GGML_TYPE_Q5_K: return deq_q5_k_;
    case PL_GGML_TYPE_Q6_K: return deq_q6_k_;
    case PL_GGML_TYPE_Q8_K: return deq_q8_k_;
    case PL_GGML_TYPE_MXFP4: return deq_mxfp4_;
    default: return NULL;
    }
}

int pl_dequant_row(pl_ggml_type t, const void *src, float *dst, int64_t n)
{
    size_t be, bb;
    deq_block_fn fn = deq_fn_(t);
    if (!fn || !pl_ggml_type_block(t, &be, &bb) || n < 0 ||
        n % (int64_t)be)
        return -1;
    const uint8_t *p = src;
    for (int64_t i = 0; i < n / (int64_t)be; i++)
        fn(p + (size_t)i * bb, dst + (size_t)i * be);
    return 0;
}
