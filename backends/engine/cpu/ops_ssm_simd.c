/* ops_ssm_simd.c - the chunked gated delta rule (ops_ssm.h's
 * pl_op_gdn_chunk) on AVX2 and AVX-512: the same algebra as the scalar
 * pl_op_gdn_chunk_ref, arranged as small matrix products so the FMA units
 * do the work:
 *
 *   G = K K^T, P = Q K^T           (T, T) Gram products through K^T
 *   A = strictly lower beta G e^(c_t - c_s); P lower, times e^(c_t - c_s)
 *   U = (I + A)^-1 beta V, W = -(I + A)^-1 beta e^c K   (forward solves)
 *   U += W S;  O = (e^c Q) S + P U;  S = e^(c_T) S + (K e^(c_T - c))^T U
 *
 * Each product is a register tile of MR rows by NR vectors, the A entry
 * broadcast, the B row loaded once per k; sums run over k in order. The
 * result depends only on the chunk's own rows and the state (no other
 * sequence, no thread count), so batch invariance holds; it is not the
 * scalar form's bits, only within float tolerance of it (the Gram sums
 * run in another order).
 */
#include "backends/engine/cpu/ops_ssm_simd.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

size_t pl_op_gdn_chunk_simd_scratch(int T, int dk, int dv)
{
    size_t tp = ((size_t)T + 15) / 16 * 16;
    return 2 * (size_t)T * tp + (size_t)T * ((size_t)dv + 2 * dk) + (size_t)dk * tp + T;
}

/* ---- AVX-512: 16 floats a vector -------------------------------------- */

#define TGT512 __attribute__((target("avx512f,fma")))
#define INL __attribute__((always_inline)) static inline

/* C[MR x 16 NR] (+)= A[MR x K] B[K x 16 NR] */
TGT512 INL void tile512(int MR, int NR, int K, const float *A, size_t lda, const float *B,
                        size_t ldb, float *C, size_t ldc, int acc)
{
    __m512 c[4][4];
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NR; v++)
            c[r][v] = acc ? _mm512_loadu_ps(C + r * ldc + 16 * v) : _mm512_setzero_ps();
    for (int k = 0; k < K; k++) {
        __m512 b[4];
        for (int v = 0; v < NR; v++)
            b[v] = _mm512_loadu_ps(B + (size_t)k * ldb + 16 * v);
        for (int r = 0; r < MR; r++) {
            __m512 a = _mm512_set1_ps(A[r * lda + k]);
            for (int v = 0; v < NR; v++)
                c[r][v] = _mm512_fmadd_ps(a, b[v], c[r][v]);
        }
    }
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NR; v++)
            _mm512_storeu_ps(C + r * ldc + 16 * v, c[r][v]);
}

/* C (M, N) (+)= A (M, K) B (K, N), row-major, N % 16 == 0. */
TGT512 static void gemm512(int M, int N, int K, const float *A, size_t lda, const float *B,
                           size_t ldb, float *C, size_t ldc, int acc)
{
    int m = 0;
    for (; m + 4 <= M; m += 4) {
        int n = 0;
        for (; n + 64 <= N; n += 64)
            tile512(4, 4, K, A + m * lda, lda, B + n, ldb, C + m * ldc + n, ldc, acc);
        for (; n < N; n += 16)
            tile512(4, 1, K, A + m * lda, lda, B + n, ldb, C + m * ldc + n, ldc, acc);
    }
    for (; m < M; m++) {
        int n = 0;
        for (; n + 64 <= N; n += 64)
            tile512(1, 4, K, A + m * lda, lda, B + n, ldb, C + m * ldc + n, ldc, acc);
        for (; n < N; n += 16)
            tile512(1, 1, K, A + m * lda, lda, B + n, ldb, C + m * ldc + n, ldc, acc);
    }
}

/* X_t -= sum_{s<t} A[t][s] X_s for t in order (rows of n floats, n % 16 == 0). */
TGT512 static void solve512(const float *A, size_t lda, int T, float *X, int n)
{
    for (int t = 1; t < T; t++) {
        float *xt = X + (size_t)t * n;
        const float *at = A + (size_t)t * lda;
        int j = 0;
        for (; j + 64 <= n; j += 64) {
            __m512 x0 = _mm512_loadu_ps(xt + j), x1 = _mm512_loadu_ps(xt + j + 16);
            __m512 x2 = _mm512_loadu_ps(xt + j + 32), x3 = _mm512_loadu_ps(xt + j + 48);
            for (int s = 0; s < t; s++) {
                __m512 a = _mm512_set1_ps(at[s]);
                const float *xs = X + (size_t)s * n + j;
                x0 = _mm512_fnmadd_ps(a, _mm512_loadu_ps(xs), x0);
                x1 = _mm512_fnmadd_ps(a, _mm512_loadu_ps(xs + 16), x1);
                x2 = _mm512_fnmadd_ps(a, _mm512_loadu_ps(xs + 32), x2);
                x3 = _mm512_fnmadd_ps(a, _mm512_loadu_ps(xs + 48), x3);
            }
            _mm512_storeu_ps(xt + j, x0);
            _mm512_storeu_ps(xt + j + 16, x1);
            _mm512_storeu_ps(xt + j + 32, x2);
            _mm512_storeu_ps(xt + j + 48, x3);
        }
        for (; j < n; j += 16) {
            __m512 x0 = _mm512_loadu_ps(xt + j);
            for (int s = 0; s < t; s++)
                x0 = _mm512_fnmadd_ps(_mm512_set1_ps(at[s]),
                                      _mm512_loadu_ps(X + (size_t)s * n + j), x0);
            _mm512_storeu_ps(xt + j, x0);
        }
    }
}

TGT512 static void scale512(float *x, float a, int n)
{
    __m512 va = _mm512_set1_ps(a);
    for (int j = 0; j < n; j += 16)
        _mm512_storeu_ps(x + j, _mm512_mul_ps(_mm512_loadu_ps(x + j), va));
}

/* ---- AVX2: 8 floats a vector ------------------------------------------ */

#define TGT256 __attribute__((target("avx2,fma")))

TGT256 INL void tile256(int MR, int NR, int K, const float *A, size_t lda, const float *B,
                        size_t ldb, float *C, size_t ldc, int acc)
{
    __m256 c[4][2];
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NR; v++)
            c[r][v] = acc ? _mm256_loadu_ps(C + r * ldc + 8 * v) : _mm256_setzero_ps();
    for (int k = 0; k < K; k++) {
        __m256 b[2];
        for (int v = 0; v < NR; v++)
            b[v] = _mm256_loadu_ps(B + (size_t)k * ldb + 8 * v);
        for (int r = 0; r < MR; r++) {
            __m256 a = _mm256_broadcast_ss(A + r * lda + k);
            for (int v = 0; v < NR; v++)
                c[r][v] = _mm256_fmadd_ps(a, b[v], c[r][v]);
        }
    }
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NR; v++)
            _mm256_storeu_ps(C + r * ldc + 8 * v, c[r][v]);
}

/* C (M, N) (+)= A (M, K) B (K, N), row-major, N % 8 == 0. */
TGT256 static void gemm256(int M, int N, int K, const float *A, size_t lda, const float *B,
                           size_t ldb, float *C, size_t ldc, int acc)
{
    int m = 0;
    for (; m + 4 <= M; m += 4) {
        int n = 0;
        for (; n + 16 <= N; n += 16)
            tile256(4, 2, K, A + m * lda, lda, B + n, ldb, C + m * ldc + n, ldc, acc);
        for (; n < N; n += 8)
            tile256(4, 1, K, A + m * lda, lda, B + n, ldb, C + m * ldc + n, ldc, acc);
    }
    for (; m < M; m++) {
        int n = 0;
        for (; n + 16 <= N; n += 16)
            tile256(1, 2, K, A + m * lda, lda, B + n, ldb, C + m * ldc + n, ldc, acc);
        for (; n < N; n += 8)
            tile256(1, 1, K, A + m * lda, lda, B + n, ldb, C + m * ldc + n, ldc, acc);
    }
}

TGT256 static void solve256(const float *A, size_t lda, int T, float *X, int n)
{
    for (int t = 1; t < T; t++) {
        float *xt = X + (size_t)t * n;
        const float *at = A + (size_t)t * lda;
        int j = 0;
        for (; j + 32 <= n; j += 32) {
            __m256 x0 = _mm256_loadu_ps(xt + j), x1 = _mm256_loadu_ps(xt + j + 8);
            __m256 x2 = _mm256_loadu_ps(xt + j + 16), x3 = _mm256_loadu_ps(xt + j + 24);
            for (int s = 0; s < t; s++) {
                __m256 a = _mm256_broadcast_ss(at + s);
                const float *xs = X + (size_t)s * n + j;
                x0 = _mm256_fnmadd_ps(a, _mm256_loadu_ps(xs), x0);
                x1 = _mm256_fnmadd_ps(a, _mm256_loadu_ps(xs + 8), x1);
                x2 = _mm256_fnmadd_ps(a, _mm256_loadu_ps(xs + 16), x2);
                x3 = _mm256_fnmadd_ps(a, _mm256_loadu_ps(xs + 24), x3);
            }
            _mm256_storeu_ps(xt + j, x0);
            _mm256_storeu_ps(xt + j + 8, x1);
            _mm256_storeu_ps(xt + j + 16, x2);
            _mm256_storeu_ps(xt + j + 24, x3);
        }
        for (; j < n; j += 8) {
            __m256 x0 = _mm256_loadu_ps(xt + j);
            for (int s = 0; s < t; s++)
                x0 = _mm256_fnmadd_ps(_mm256_broadcast_ss(at + s),
                                      _mm256_loadu_ps(X + (size_t)s * n + j), x0);
            _mm256_storeu_ps(xt + j, x0);
        }
    }
}

TGT256 static void scale256(float *x, float a, int n)
{
    __m256 va = _mm256_set1_ps(a);
    for (int j = 0; j < n; j += 8)
        _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), va));
}

/* ---- the chunk, over either set of kernels ---------------------------- */

typedef struct {
    void (*gemm)(int, int, int, const float *, size_t, const float *, size_t, float *, size_t,
                 int);
    void (*solve)(const float *, size_t, int, float *, int);
    void (*scale)(float *, float, int);
} kernels;

static void gdn_chunk(const kernels *kn, float *S, const float *q, size_t ld_qk, const float *k,
                      const float *v, size_t ld_v, const float *log_g, const float *beta,
                      float *o, size_t ld_o, int T, int dk, int dv, float *scratch)
{
    size_t tp = ((size_t)T + 15) / 16 * 16;
    float *A = scratch, *P = A + (size_t)T * tp, *U = P + (size_t)T * tp;
    float *W = U + (size_t)T * dv, *Qe = W + (size_t)T * dk, *KT = Qe + (size_t)T * dk;
    float *c = KT + (size_t)dk * tp;
    for (int t = 0; t < T; t++)
        c[t] = (t ? c[t - 1] : 0.0f) + log_g[t];
    for (int i = 0; i < dk; i++) {          /* K^T, padded with zero columns */
        float *kt = KT + (size_t)i * tp;
        for (int s = 0; s < T; s++)
            kt[s] = k[(size_t)s * ld_qk + i];
        for (size_t s = (size_t)T; s < tp; s++)
            kt[s] = 0.0f;
    }
    kn->gemm(T, (int)tp, dk, k, ld_qk, KT, tp, A, tp, 0);
    kn->gemm(T, (int)tp, dk, q, ld_qk, KT, tp, P, tp, 0);
    for (int t = 0; t < T; t++) {
        float *at = A + (size_t)t * tp, *pt = P + (size_t)t * tp;
        for (int s = 0; s < t; s++) {
            float d = expf(c[t] - c[s]);
            at[s] *= beta[t] * d;
            pt[s] *= d;
        }
        for (size_t s = (size_t)t; s < tp; s++)
            at[s] = 0.0f;
        for (size_t s = (size_t)t + 1; s < tp; s++)
            pt[s] = 0.0f;
        float ec = expf(c[t]);
        const float *vt = v + (size_t)t * ld_v, *kr = k + (size_t)t * ld_qk;
        const float *qr = q + (size_t)t * ld_qk;
        for (int j = 0; j < dv; j++)
            U[(size_t)t * dv + j] = beta[t] * vt[j];
        for (int i = 0; i < dk; i++) {
            W[(size_t)t * dk + i] = -(beta[t] * ec * kr[i]);
            Qe[(size_t)t * dk + i] = ec * qr[i];
        }
    }
    kn->solve(A, tp, T, U, dv);
    kn->solve(A, tp, T, W, dk);
    kn->gemm(T, dv, dk, W, dk, S, dv, U, dv, 1);       /* U += W S */
    kn->gemm(T, dv, dk, Qe, dk, S, dv, o, ld_o, 0);    /* O = e^c Q S */
    kn->gemm(T, dv, T, P, tp, U, dv, o, ld_o, 1);      /* O += P U */
    for (int s = 0; s < T; s++) {                      /* K^T columns e^(c_T - c_s) */
        float d = expf(c[T - 1] - c[s]);
        for (int i = 0; i < dk; i++)
            KT[(size_t)i * tp + s] *= d;
    }
    kn->scale(S, expf(c[T - 1]), dk * dv);
    kn->gemm(dk, dv, T, KT, tp, U, dv, S, dv, 1);      /* S += (K e^(c_T - c))^T U */
}

static const kernels k512 = {gemm512, solve512, scale512};
static const kernels k256 = {gemm256, solve256, scale256};

void pl_op_gdn_chunk_avx512(float *S, const float *q, size_t ld_qk, const float *k,
                            const float *v, size_t ld_v, const float *log_g, const float *beta,
                            float *o, size_t ld_o, int T, int dk, int dv, float *scratch)
{
    gdn_chunk(&k512, S, q, ld_qk, k, v, ld_v, log_g, beta, o, ld_o, T, dk, dv, scratch);
}

void pl_op_gdn_chunk_avx2(float *S, const float *q, size_t ld_qk, const float *k,
                          const float *v, size_t ld_v, const float *log_g, const float *beta,
                          float *o, size_t ld_o, int T, int dk, int dv, float *scratch)
{
    gdn_chunk(&k256, S, q, ld_qk, k, v, ld_v, log_g, beta, o, ld_o, T, dk, dv, scratch);
}

#endif
