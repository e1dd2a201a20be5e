/* ops_ssm.c - the Gated DeltaNet operations (ops_ssm.h). */
#include "backends/engine/cpu/ops_ssm.h"
#include "backends/engine/cpu/ops_ssm_simd.h"

#include "src/base/cpu_features.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "backends/engine/cpu/simd_x86.h"
#define PL_HAVE_X86 1
#endif

static inline float silu(float x) { return x / (1.0f + expf(-x)); }

static void conv_row_ref(const float *w, size_t ldw, float *hist, size_t ldh, float *x, int n,
                         int K)
{
    for (int c = 0; c < n; c++) {
        float acc = w[(size_t)(K - 1) * ldw + c] * x[c];
        for (int j = 0; j < K - 1; j++)
            acc = fmaf(w[(size_t)j * ldw + c], hist[(size_t)j * ldh + c], acc);
        for (int j = 0; j < K - 2; j++)
            hist[(size_t)j * ldh + c] = hist[(size_t)(j + 1) * ldh + c];
        hist[(size_t)(K - 2) * ldh + c] = x[c];
        x[c] = silu(acc);
    }
}

#ifdef PL_HAVE_X86
/* conv_row_ref, eight channels at a time: the same sums in the same order
 * (its bits before the SiLU), the SiLU's e^-x from exp256. */
__attribute__((target("avx2,fma")))
static void conv_row_avx2(const float *w, size_t ldw, float *hist, size_t ldh, float *x, int n,
                          int K)
{
    int c = 0;
    for (; c + 8 <= n; c += 8) {
        __m256 xc = _mm256_loadu_ps(x + c);
        __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(w + (size_t)(K - 1) * ldw + c), xc);
        for (int j = 0; j < K - 1; j++)
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(w + (size_t)j * ldw + c),
                                  _mm256_loadu_ps(hist + (size_t)j * ldh + c), acc);
        for (int j = 0; j < K - 2; j++)
            _mm256_storeu_ps(hist + (size_t)j * ldh + c,
                             _mm256_loadu_ps(hist + (size_t)(j + 1) * ldh + c));
        _mm256_storeu_ps(hist + (size_t)(K - 2) * ldh + c, xc);
        __m256 den = _mm256_add_ps(_mm256_set1_ps(1.0f),
                                   exp256(_mm256_sub_ps(_mm256_setzero_ps(), acc)));
        _mm256_storeu_ps(x + c, _mm256_div_ps(acc, den));
    }
    if (c < n)
        conv_row_ref(w + c, ldw, hist + c, ldh, x + c, n - c, K);
}
#endif

void pl_op_ssm_conv_row(const float *w, size_t ldw, float *hist, size_t ldh, float *x, int n,
                        int K)
{
#ifdef PL_HAVE_X86
    const pl_cpu_feature_set *cpu = pl_cpu_features();
    if (cpu->avx2 && cpu->fma && K >= 2) {
        conv_row_avx2(w, ldw, hist, ldh, x, n, K);
        return;
    }
#endif
    conv_row_ref(w, ldw, hist, ldh, x, n, K);
}

void pl_op_gdn_step_ref(float *S, const float *q, const float *k, const float *v, float g,
                        float beta, float *o, int dk, int dv, float *u)
{
    for (int j = 0; j < dv; j++)
        u[j] = 0.0f;
    for (int i = 0; i < dk; i++) {
        float *s = S + (size_t)i * dv;
        for (int j = 0; j < dv; j++) {
            s[j] *= g;
            u[j] = fmaf(s[j], k[i], u[j]);
        }
    }
    for (int j = 0; j < dv; j++) {
        u[j] = (v[j] - u[j]) * beta;
        o[j] = 0.0f;
    }
    for (int i = 0; i < dk; i++) {
        float *s = S + (size_t)i * dv;
        for (int j = 0; j < dv; j++) {
            s[j] = fmaf(k[i], u[j], s[j]);
            o[j] = fmaf(s[j], q[i], o[j]);
        }
    }
}

#ifdef PL_HAVE_X86
/* pl_op_gdn_step_ref, eight value dims at a time (dv % 8 == 0). */
__attribute__((target("avx2,fma")))
static void gdn_step_avx2(float *S, const float *q, const float *k, const float *v, float g,
                          float beta, float *o, int dk, int dv, float *u)
{
    __m256 vg = _mm256_set1_ps(g), vb = _mm256_set1_ps(beta);
    for (int j = 0; j < dv; j += 8)
        _mm256_storeu_ps(u + j, _mm256_setzero_ps());
    for (int i = 0; i < dk; i++) {
        float *s = S + (size_t)i * dv;
        __m256 ki = _mm256_set1_ps(k[i]);
        for (int j = 0; j < dv; j += 8) {
            __m256 sj = _mm256_mul_ps(_mm256_loadu_ps(s + j), vg);
            _mm256_storeu_ps(s + j, sj);
            _mm256_storeu_ps(u + j, _mm256_fmadd_ps(sj, ki, _mm256_loadu_ps(u + j)));
        }
    }
    for (int j = 0; j < dv; j += 8) {
        __m256 d = _mm256_sub_ps(_mm256_loadu_ps(v + j), _mm256_loadu_ps(u + j));
        _mm256_storeu_ps(u + j, _mm256_mul_ps(d, vb));
        _mm256_storeu_ps(o + j, _mm256_setzero_ps());
    }
    for (int i = 0; i < dk; i++) {
        float *s = S + (size_t)i * dv;
        __m256 ki = _mm256_set1_ps(k[i]), qi = _mm256_set1_ps(q[i]);
        for (int j = 0; j < dv; j += 8) {
            __m256 sj = _mm256_fmadd_ps(ki, _mm256_loadu_ps(u + j), _mm256_loadu_ps(s + j));
            _mm256_storeu_ps(s + j, sj);
            _mm256_storeu_ps(o + j, _mm256_fmadd_ps(sj, qi, _mm256_loadu_ps(o + j)));
        }
    }
}

/* The same step on AVX-512, 64 value dims at a time with u and o held in
 * registers over the key dims (dv % 64 == 0): every element sees the
 * scalar's operations in the scalar's order, so the same bits. */
__attribute__((target("avx512f,fma")))
static void gdn_step_avx512(float *S, const float *q, const float *k, const float *v, float g,
                            float beta, float *o, int dk, int dv)
{
    __m512 vg = _mm512_set1_ps(g), vb = _mm512_set1_ps(beta);
    for (int j = 0; j < dv; j += 64) {
        __m512 u[4], a[4];
        for (int b = 0; b < 4; b++)
            u[b] = _mm512_setzero_ps();
        for (int i = 0; i < dk; i++) {
            float *s = S + (size_t)i * dv + j;
            __m512 ki = _mm512_set1_ps(k[i]);
            for (int b = 0; b < 4; b++) {
                __m512 sj = _mm512_mul_ps(_mm512_loadu_ps(s + 16 * b), vg);
                _mm512_storeu_ps(s + 16 * b, sj);
                u[b] = _mm512_fmadd_ps(sj, ki, u[b]);
            }
        }
        for (int b = 0; b < 4; b++) {
            u[b] = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(v + j + 16 * b), u[b]), vb);
            a[b] = _mm512_setzero_ps();
        }
        for (int i = 0; i < dk; i++) {
            float *s = S + (size_t)i * dv + j;
            __m512 ki = _mm512_set1_ps(k[i]), qi = _mm512_set1_ps(q[i]);
            for (int b = 0; b < 4; b++) {
                __m512 sj = _mm512_fmadd_ps(ki, u[b], _mm512_loadu_ps(s + 16 * b));
                _mm512_storeu_ps(s + 16 * b, sj);
                a[b] = _mm512_fmadd_ps(sj, qi, a[b]);
            }
        }
        for (int b = 0; b < 4; b++)
            _mm512_storeu_ps(o + j + 16 * b, a[b]);
    }
}
#endif

void pl_op_gdn_step(float *S, const float *q, const float *k, const float *v, float g,
                    float beta, float *o, int dk, int dv, float *scratch)
{
#ifdef PL_HAVE_X86
    const pl_cpu_feature_set *cpu = pl_cpu_features();
    if (cpu->avx512f && dv % 64 == 0) {
        gdn_step_avx512(S, q, k, v, g, beta, o, dk, dv);
        return;
    }
    if (cpu->avx2 && cpu->fma && dv % 8 == 0) {
        gdn_step_avx2(S, q, k, v, g, beta, o, dk, dv, scratch);
        return;
    }
#endif
    pl_op_gdn_step_ref(S, q, k, v, g, beta, o, dk, dv, scratch);
}

size_t pl_op_gdn_chunk_scratch(int T, int dk, int dv)
{
    size_t ref = (size_t)T * T * 2 + (size_t)T * ((size_t)dk + dv + 1);
#ifdef PL_HAVE_X86
    size_t simd = pl_op_gdn_chunk_simd_scratch(T, dk, dv);
    return simd > ref ? simd : ref;
#else
    return ref;
#endif
}

static float dot_(const float *a, const float *b, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s = fmaf(a[i], b[i], s);
    return s;
}

/* y[0..n) += a x[0..n) */
static void axpy_(float *y, float a, const float *x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] = fmaf(a, x[i], y[i]);
}

/* X_t -= sum_{s<t} A[t][s] X_s, in place (forward substitution through the
 *  unit lower triangular I + A), rows of n floats. */
static void unit_lower_solve_(const float *A, int T, float *X, int n)
{
    for (int t = 1; t < T; t++)
        for (int s = 0; s < t; s++)
            axpy_(X + (size_t)t * n, -A[(size_t)t * T + s], X + (size_t)s * n, n);
}

void pl_op_gdn_chunk_ref(float *S, const float *q, size_t ld_qk, const float *k,
                         const float *v, size_t ld_v, const float *log_g, const float *beta,
                         float *o, size_t ld_o, int T, int dk, int dv, float *scratch)
{
    float *A = scratch, *P = A + (size_t)T * T, *U = P + (size_t)T * T;
    float *W = U + (size_t)T * dv, *c = W + (size_t)T * dk;
    for (int t = 0; t < T; t++)
        c[t] = (t ? c[t - 1] : 0.0f) + log_g[t];
    for (int t = 0; t < T; t++) {
        const float *kt = k + (size_t)t * ld_qk, *qt = q + (size_t)t * ld_qk;
        for (int s = 0; s <= t; s++) {
            float d = expf(c[t] - c[s]);
            const float *ks = k + (size_t)s * ld_qk;
            A[(size_t)t * T + s] = s < t ? beta[t] * dot_(kt, ks, dk) * d : 0.0f;
            P[(size_t)t * T + s] = dot_(qt, ks, dk) * d;
        }
        float ec = expf(c[t]);
        for (int j = 0; j < dv; j++)
            U[(size_t)t * dv + j] = beta[t] * v[(size_t)t * ld_v + j];
        for (int i = 0; i < dk; i++)
            W[(size_t)t * dk + i] = beta[t] * ec * kt[i];
    }
    unit_lower_solve_(A, T, U, dv);
    unit_lower_solve_(A, T, W, dk);
    for (int t = 0; t < T; t++) {           /* U_t -= W_t S; o_t = e^c q_t S */
        float *ot = o + (size_t)t * ld_o, *ut = U + (size_t)t * dv, ec = expf(c[t]);
        const float *qt = q + (size_t)t * ld_qk;
        memset(ot, 0, sizeof(float) * (size_t)dv);
        for (int i = 0; i < dk; i++) {
            axpy_(ut, -W[(size_t)t * dk + i], S + (size_t)i * dv, dv);
            axpy_(ot, ec * qt[i], S + (size_t)i * dv, dv);
        }
    }
    for (int t = 0; t < T; t++)             /* o_t += sum_{s<=t} P[t][s] U_s */
        for (int s = 0; s <= t; s++)
            axpy_(o + (size_t)t * ld_o, P[(size_t)t * T + s], U + (size_t)s * dv, dv);
    float eT = expf(c[T - 1]);
    for (int i = 0; i < dk; i++) {
        float *si = S + (size_t)i * dv;
        for (int j = 0; j < dv; j++)
            si[j] *= eT;
        for (int s = 0; s < T; s++)
            axpy_(si, expf(c[T - 1] - c[s]) * k[(size_t)s * ld_qk + i], U + (size_t)s * dv, dv);
    }
}

void pl_op_gdn_chunk(float *S, const float *q, size_t ld_qk, const float *k, const float *v,
                     size_t ld_v, const float *log_g, const float *beta, float *o, size_t ld_o,
                     int T, int dk, int dv, float *scratch)
{
#ifdef PL_HAVE_X86
    const pl_cpu_feature_set *cpu = pl_cpu_features();
    if (cpu->avx512f && dk % 16 == 0 && dv % 16 == 0) {
        pl_op_gdn_chunk_avx512(S, q, ld_qk, k, v, ld_v, log_g, beta, o, ld_o, T, dk, dv,
                               scratch);
        return;
    }
    if (cpu->avx2 && cpu->fma && dk % 8 == 0 && dv % 8 == 0) {
        pl_op_gdn_chunk_avx2(S, q, ld_qk, k, v, ld_v, log_g, beta, o, ld_o, T, dk, dv, scratch);
        return;
    }
#endif
    pl_op_gdn_chunk_ref(S, q, ld_qk, k, v, ld_v, log_g, beta, o, ld_o, T, dk, dv, scratch);
}

void pl_op_l2norm(float *x, int n, float eps, float scale)
{
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float inv = scale / sqrtf((float)ss + eps);
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

void pl_op_rmsnorm_gated(float *out, const float *x, const float *w, const float *z, int n,
                         float eps)
{
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float inv = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int i = 0; i < n; i++)
        out[i] = x[i] * inv * w[i] * silu(z[i]);
}
