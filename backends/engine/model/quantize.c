/* quantize.c - float rows into ggml blocks (quantize.h), one function per
 * type, each writing one block. The block layouts are quant.c's.
 */
#include "backends/engine/model/quantize.h"

#include <float.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#include "src/base/half.h"

static void put16_(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put_f16_(uint8_t *p, float f) { put16_(p, pl_fp32_to_fp16(f)); }

/* The element of largest magnitude, with its sign. */
static float signed_absmax_(const float *x, int n)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void min_max_(const float *x, int n, float *mn, float *mx)
{
    *mn = FLT_MAX;
    *mx = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        *mn = x[j] < *mn ? x[j] : *mn;
        *mx = x[j] > *mx ? x[j] : *mx;
    }
}

static void q4_0_(const float *x, uint8_t *b)
{
    float d = signed_absmax_(x, 32) / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16_(b, d);
    for (int j = 0; j < 16; j++) {
        int lo = (int8_t)(x[j] * id + 8.5f), hi = (int8_t)(x[16 + j] * id + 8.5f);
        b[2 + j] = (uint8_t)((lo < 15 ? lo : 15) | (hi < 15 ? hi : 15) << 4);
    }
}

static void q4_1_(const float *x, uint8_t *b)
{
    float mn, mx;
    min_max_(x, 32, &mn, &mx);
    float d = (mx - mn) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16_(b, d);
    put_f16_(b + 2, mn);
    for (int j = 0; j < 16; j++) {
        int lo = (int8_t)((x[j] - mn) * id + 0.5f), hi = (int8_t)((x[16 + j] - mn) * id + 0.5f);
        b[4 + j] = (uint8_t)((lo < 15 ? lo : 15) | (hi < 15 ? hi : 15) << 4);
    }
}

/* Q5: nibbles into qs, bit 4 of element j into bit j of qh. */
static void q5_pack_(const int *q, uint8_t *qh4, uint8_t *qs)
{
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0xf) | (q[16 + j] & 0xf) << 4);
        qh |= (uint32_t)((q[j] >> 4) & 1) << j | (uint32_t)((q[16 + j] >> 4) & 1) << (j + 16);
    }
    for (int k = 0; k < 4; k++)
        qh4[k] = (uint8_t)(qh >> (8 * k));
}

static void q5_0_(const float *x, uint8_t *b)
{
    int q[32];
    float d = signed_absmax_(x, 32) / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16_(b, d);
    for (int j = 0; j < 32; j++) {
        int v = (int8_t)(x[j] * id + 16.5f);
        q[j] = v < 31 ? v : 31;
    }
    q5_pack_(q, b + 2, b + 6);
}

static void q5_1_(const float *x, uint8_t *b)
{
    int q[32];
    float mn, mx;
    min_max_(x, 32, &mn, &mx);
    float d = (mx - mn) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16_(b, d);
    put_f16_(b + 2, mn);
    for (int j = 0; j < 32; j++)
        q[j] = (uint8_t)((x[j] - mn) * id + 0.5f);
    q5_pack_(q, b + 4, b + 8);
}

/* roundf (halves away from zero) without the library call, exact for
 * |x| < 2^23: x minus its truncation is exact in float. */
static int round_half_away_(float x)
{
    int t = (int)x;
    float f = x - (float)t;
    return t + (f >= 0.5f) - (f <= -0.5f);
}

static void q8_0_(const float *x, uint8_t *b)
{
    float amax = 0.0f;
    for (int j = 0; j < 32; j++)
        amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16_(b, d);
    for (int j = 0; j < 32; j++)
        b[2 + j] = (uint8_t)(int8_t)round_half_away_(x[j] * id);
}

static int nearest_(float f) { return (int)lrintf(f); }

static int clampi_(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Scale and min (min <= 0) for n values in [0, nmax] that best fit x under
 * weights w: a grid of 21 candidate scales around (max - min) / nmax, each
 * refined by weighted least squares; L gets the levels. Returns the scale
 * and sets *neg_min = -min (ggml's make_qkx2_quants, in its words). */
static float fit_scale_min_(const float *x, const float *w, int n, int nmax, uint8_t *L,
                            float *neg_min)
{
    float mn, mx, sw = 0, sx = 0;
    uint8_t aux[32];
    min_max_(x, n, &mn, &mx);
    mn = mn > 0 ? 0 : mn;
    if (mx == mn) {
        memset(L, 0, (size_t)n);
        *neg_min = -mn;
        return 0.0f;
    }
    for (int i = 0; i < n; i++) {
        sw += w[i];
        sx += w[i] * x[i];
    }
    float scale = (mx - mn) / (float)nmax, best = FLT_MAX;
    for (int step = -1; step <= 20; step++) {
        float is = step < 0 ? (float)nmax / (mx - mn)
                            : (-1.0f + 0.1f * (float)step + (float)nmax) / (mx - mn);
        float sl = 0, sl2 = 0, sxl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi_(nearest_(is * (x[i] - mn)), 0, nmax);
            aux[i] = (uint8_t)l;
            sl += w[i] * (float)l;
            sl2 += w[i] * (float)l * (float)l;
            sxl += w[i] * (float)l * x[i];
        }
        float det = sw * sl2 - sl * sl, s, m;
        if (step < 0) {
            s = 1.0f / is;
            m = mn;
        } else if (det > 0) {
            s = (sw * sxl - sx * sl) / det;
            m = (sl2 * sx - sl * sxl) / det;
            if (m > 0) {
                m = 0;
                s = sxl / sl2;
            }
        } else {
            continue;
        }
        float e = 0;
        for (int i = 0; i < n; i++) {
            float d = s * (float)aux[i] + m - x[i];
            e += w[i] * d * d;
        }
        if (e < best) {
            best = e;
            memcpy(L, aux, (size_t)n);
            scale = s;
            mn = step < 0 ? mn : m;
        }
    }
    *neg_min = -mn;
    return scale;
}

/* Q4_K: f16 d, dmin; 6-bit scales and mins packed as pl_k4_scales reads
 * them; 4-bit levels, sub-block i in the nibbles (i % 2) of chunk i / 2. */
static void q4_k_(const float *x, uint8_t *b)
{
    float sc[8], mn[8], w[32], max_sc = 0, max_mn = 0;
    uint8_t L[256], *s = b + 4, *qs = b + 16;
    for (int i = 0; i < 8; i++) {
        const float *xi = x + 32 * i;
        float ss = 0;
        for (int l = 0; l < 32; l++)
            ss += xi[l] * xi[l];
        float av = sqrtf(ss / 32.0f);
        for (int l = 0; l < 32; l++)
            w[l] = av + fabsf(xi[l]);
        sc[i] = fit_scale_min_(xi, w, 32, 15, L + 32 * i, &mn[i]);
        max_sc = sc[i] > max_sc ? sc[i] : max_sc;
        max_mn = mn[i] > max_mn ? mn[i] : max_mn;
    }
    float isc = max_sc > 0 ? 63.0f / max_sc : 0, imn = max_mn > 0 ? 63.0f / max_mn : 0;
    int ls[8], lm[8];
    memset(s, 0, 12);
    for (int i = 0; i < 8; i++) {
        ls[i] = clampi_(nearest_(isc * sc[i]), 0, 63);
        lm[i] = clampi_(nearest_(imn * mn[i]), 0, 63);
        if (i < 4) {
            s[i] |= (uint8_t)ls[i];
            s[i + 4] |= (uint8_t)lm[i];
        } else {
            s[i + 4] = (uint8_t)((ls[i] & 0xf) | (lm[i] & 0xf) << 4);
            s[i - 4] |= (uint8_t)((ls[i] >> 4) << 6);
            s[i] |= (uint8_t)((lm[i] >> 4) << 6);
        }
    }
    put_f16_(b, max_sc / 63.0f);
    put_f16_(b + 2, max_mn / 63.0f);
    float d = pl_fp16_to_fp32(pl_fp32_to_fp16(max_sc / 63.0f));
    float dmin = pl_fp16_to_fp32(pl_fp32_to_fp16(max_mn / 63.0f));
    for (int i = 0; i < 8; i++) {
        float ds = d * (float)ls[i], dm = dmin * (float)lm[i];
        for (int l = 0; ds != 0.0f && l < 32; l++)
            L[32 * i + l] = (uint8_t)clampi_(nearest_((x[32 * i + l] + dm) / ds), 0, 15);
    }
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            qs[32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + 32 + l] << 4);
}

/* A signed scale for 16 values in [-32, 31]: candidates around -32 / max
 * (max the value of largest magnitude), the best by weighted (x^2) least
 * squares (ggml's make_qx_quants with rmse_type 1, in its words). */
static float fit_scale_sym_(const float *x, int n, int8_t *L)
{
    float max = signed_absmax_(x, n), best = 0, scale = 0;
    if (fabsf(max) < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    for (int k = 0; k < 19; k++) {      /* steps 0, then -9..-1, 1..9 */
        int step = k == 0 ? 0 : k <= 9 ? k - 10 : k - 9;
        float is = -(32.0f + 0.1f * (float)step) / max, sxl = 0, sl2 = 0;
        int8_t aux[16];
        for (int i = 0; i < n; i++) {
            int l = clampi_(nearest_(is * x[i]), -32, 31);
            float w = x[i] * x[i];
            aux[i] = (int8_t)l;
            sxl += w * x[i] * (float)l;
            sl2 += w * (float)l * (float)l;
        }
        if (sl2 > 0 && (k == 0 || sxl * sxl > best * sl2)) {
            memcpy(L, aux, (size_t)n);
            scale = sxl / sl2;
            best = scale * sxl;
        }
    }
    return scale;
}

/* Q6_K: ql[128], qh[64], i8 scales[16], f16 d; element e = 128h + 32s + l
 * as quant.c's deq_q6_k_ reads it. */
static void q6_k_(const float *x, uint8_t *b)
{
    float sc[16], max_abs = 0, max_sc = 0;
    int8_t L[256];
    uint8_t *ql = b, *qh = b + 128;
    int8_t *scales = (int8_t *)(b + 192);
    for (int i = 0; i < 16; i++) {
        sc[i] = fit_scale_sym_(x + 16 * i, 16, L + 16 * i);
        if (fabsf(sc[i]) > max_abs) {
            max_abs = fabsf(sc[i]);
            max_sc = sc[i];
        }
    }
    memset(b, 0, 210);
    if (max_abs < 1e-15f)
        return;
    float is = -128.0f / max_sc;
    put_f16_(b + 208, 1.0f / is);
    float d = pl_fp16_to_fp32(pl_fp32_to_fp16(1.0f / is));
    for (int i = 0; i < 16; i++) {
        scales[i] = (int8_t)clampi_(nearest_(is * sc[i]), -128, 127);
        float ds = d * (float)scales[i];
        for (int l = 0; ds != 0.0f && l < 16; l++)
            L[16 * i + l] = (int8_t)clampi_(nearest_(x[16 * i + l] / ds), -32, 31);
    }
    for (int e = 0; e < 256; e++) {
        int h = e / 128, s = (e / 32) % 4, l = e % 32, q = L[e] + 32;
        ql[64 * h + 32 * (s % 2) + l] |= (uint8_t)((q & 0xf) << (4 * (s / 2)));
        qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * s));
    }
}

static void f32_(const float *x, uint8_t *b) { memcpy(b, x, 4); }
static void f16_(const float *x, uint8_t *b) { put_f16_(b, *x); }
static void bf16_(const float *x, uint8_t *b) { put16_(b, pl_fp32_to_bf16(*x)); }

typedef void (*quant_block_fn)(const float *x, uint8_t *block);

static const struct {
    pl_ggml_type type;
    const char *name;
    quant_block_fn fn;
} quants_[] = {
    {PL_GGML_TYPE_F32, "f32", f32_},    {PL_GGML_TYPE_F16, "f16", f16_},
    {PL_GGML_TYPE_BF16, "bf16", bf16_}, {PL_GGML_TYPE_Q8_0, "q8_0", q8_0_},
    {PL_GGML_TYPE_Q4_0, "q4_0", q4_0_}, {PL_GGML_TYPE_Q4_1, "q4_1", q4_1_},
    {PL_GGML_TYPE_Q5_0, "q5_0", q5_0_}, {PL_GGML_TYPE_Q5_1, "q5_1", q5_1_},
    {PL_GGML_TYPE_Q4_K, "q4_k", q4_k_}, {PL_GGML_TYPE_Q6_K, "q6_k", q6_k_},
};
#define N_QUANTS (sizeof quants_ / sizeof quants_[0])

static quant_block_fn quant_fn_(pl_ggml_type t)
{
    for (size_t i = 0; i < N_QUANTS; i++)
        if (quants_[i].type == t)
            return quants_[i].fn;
    return NULL;
}

bool pl_quantize_supported(pl_ggml_type t) { return quant_fn_(t) != NULL; }

int pl_quantize_row(pl_ggml_type t, const float *src, void *dst, int64_t n)
{
    size_t be, bb;
    quant_block_fn fn = quant_fn_(t);
    if (!fn || !pl_ggml_type_block(t, &be, &bb) || n < 0 || n % (int64_t)be)
        return -1;
    uint8_t *p = dst;
    for (int64_t i = 0; i < n / (int64_t)be; i++)
        fn(src + (size_t)i * be, p + (size_t)i * bb);
    return 0;
}

int pl_quantize_type_parse(const char *name)
{
    for (size_t i = 0; i < N_QUANTS; i++)
        if (!strcasecmp(name, quants_[i].name))
            return (int)quants_[i].type;
    return -1;
}

const char *pl_quantize_type_names(void)
{
    return "f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q6_k";
}
