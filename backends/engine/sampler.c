/* sampler.c - penalties, filters and seeded draws over one logits row
 * (sampler.h). All scratch is sized at pl_sampler_new(). */
#include "backends/engine/sampler.h"

#include "backends/constrain/token_fsm.h"
#include "src/base/cpu_features.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

#include "backends/engine/cpu/simd_x86.h"
#define PL_HAVE_X86 1
#endif

typedef struct cand {
    float v;
    int32_t id;
} cand;

struct pl_sampler {
    int n_vocab;
    float *work;                 /* (n_vocab) adjusted logits */
    int32_t *count;              /* (n_vocab) history counts, kept zeroed */
    cand *c;                     /* (n_vocab) candidates */
};

pl_sampler *pl_sampler_new(int n_vocab)
{
    pl_sampler *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->n_vocab = n_vocab;
    s->work = malloc(sizeof(float) * (size_t)n_vocab);
    s->count = calloc((size_t)n_vocab, sizeof(int32_t));
    s->c = malloc(sizeof(cand) * (size_t)n_vocab);
    if (!s->work || !s->count || !s->c) {
        pl_sampler_free(s);
        return NULL;
    }
    return s;
}

void pl_sampler_free(pl_sampler *s)
{
    if (!s)
        return;
    free(s->work);
    free(s->count);
    free(s->c);
    free(s);
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

double pl_sampler_uniform(uint64_t seed, uint64_t step)
{
    uint64_t x = mix64(mix64(seed ^ 0x5851f42d4c957f2dULL) + 0x9e3779b97f4a7c15ULL * (step + 1));
    return (double)(x >> 11) * (1.0 / 9007199254740992.0);
}

/* The passes over a whole logits row (262,144 floats for Gemma: a scalar
 * argmax, max and double-precision exp sum took 1.7 ms per sequence, 12 %
 * of a decode step). On x86 they run on 8 lanes, the same code on every
 * SIMD path, so the AVX2, AVX-VNNI and AVX-512 paths give the same bits;
 * the scalar path keeps the scalar loops. */
#ifdef PL_HAVE_X86
#define SAMP_AVX2 __attribute__((target("avx2,fma,f16c")))

SAMP_AVX2 static float row_max_avx2(const float *l, int n)
{
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        m0 = _mm256_max_ps(m0, _mm256_loadu_ps(l + i));
        m1 = _mm256_max_ps(m1, _mm256_loadu_ps(l + i + 8));
    }
    float v[8], mx = -INFINITY;
    _mm256_storeu_ps(v, _mm256_max_ps(m0, m1));
    for (int k = 0; k < 8; k++)
        mx = v[k] > mx ? v[k] : mx;
    for (; i < n; i++)
        mx = l[i] > mx ? l[i] : mx;
    return mx;
}

/* sum of e^(l - mx) over the row: 8-lane partial sums in floats, folded
 * into a double every 4,096 entries (the float error stays near 1e-6 of
 * the sum); the tail's lanes are masked to 0. */
SAMP_AVX2 static double sum_exp_avx2(const float *l, int n, float mx)
{
    const __m256 vmx = _mm256_set1_ps(mx);
    double total = 0.0;
    for (int c = 0; c < n; c += 4096) {
        int e = c + 4096 < n ? c + 4096 : n, i = c;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;
        for (; i + 16 <= e; i += 16) {
            a0 = _mm256_add_ps(a0, exp256(_mm256_sub_ps(_mm256_loadu_ps(l + i), vmx)));
            a1 = _mm256_add_ps(a1, exp256(_mm256_sub_ps(_mm256_loadu_ps(l + i + 8), vmx)));
        }
        for (; i < e; i += 8) {
            int left = e - i < 8 ? e - i : 8;
            __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            __m256i on = _mm256_cmpgt_epi32(_mm256_set1_epi32(left), lane);
            __m256 x = _mm256_maskload_ps(l + i, on);
            __m256 ex = exp256(_mm256_sub_ps(x, vmx));
            a0 = _mm256_add_ps(a0, _mm256_and_ps(ex, _mm256_castsi256_ps(on)));
        }
        total += (double)hsum8(_mm256_add_ps(a0, a1));
    }
    return total;
}
#endif

static float row_max(const float *l, int n)
{
#ifdef PL_HAVE_X86
    if (pl_cpu_has_avx2())
        return row_max_avx2(l, n);
#endif
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        mx = l[i] > mx ? l[i] : mx;
    return mx;
}

static double sum_exp(const float *l, int n, float mx)
{
#ifdef PL_HAVE_X86
    if (pl_cpu_has_avx2())
        return sum_exp_avx2(l, n, mx);
#endif
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += exp((double)(l[i] - mx));
    return sum;
}

/* The lowest id of the largest logit (the max, then its first place: both
 * passes exact, so every path picks the same id). */
static int32_t argmax(const float *w, int n)
{
    float mx = row_max(w, n);
    for (int i = 0; i < n; i++)
        if (w[i] == mx)
            return i;
    return 0;                    /* no entry equals it: NaNs only */
}

void pl_sampler_raw_logprobs(const float *l, int n, int32_t id, int top, pl_sample *out)
{
    out->n_top = top < 0 ? 0 : (top > PL_MAX_TOP_LOGPROBS ? PL_MAX_TOP_LOGPROBS : top);
    if (top < 0) {               /* none asked for: the row's log-softmax is not */
        out->logprob = 0.0f;     /* worth its pass over the vocabulary */
        return;
    }
    float mx = row_max(l, n);
    float lse = mx + (float)log(sum_exp(l, n, mx));
    out->logprob = l[id] - lse;
    int k = 0;
    for (int i = 0; i < n && out->n_top > 0; i++) {
        if (k == out->n_top && l[i] <= out->top_logprobs[k - 1])
            continue;
        int j = k < out->n_top ? k++ : k - 1;
        while (j > 0 && out->top_logprobs[j - 1] < l[i]) {
            out->top_logprobs[j] = out->top_logprobs[j - 1];
            out->top_ids[j] = out->top_ids[j - 1];
            j--;
        }
        out->top_logprobs[j] = l[i];
        out->top_ids[j] = i;
    }
    for (int j = 0; j < out->n_top; j++)
        out->top_logprobs[j] -= lse;
}

static void apply_penalties(pl_sampler *s, const pl_seq_sampling *p, const int32_t *hist,
                            int n_hist, int32_t eos_id)
{
    float *w = s->work;
    for (int i = 0; i < p->n_logit_bias; i++) {
        int32_t t = p->logit_bias[i].token;
        if (t >= 0 && t < s->n_vocab)
            w[t] += p->logit_bias[i].bias;
    }
    bool rep = p->repetition_penalty > 0 && p->repetition_penalty != 1.0f;
    if (rep || p->presence_penalty != 0 || p->frequency_penalty != 0) {
        for (int i = 0; i < n_hist; i++)
            if (hist[i] >= 0 && hist[i] < s->n_vocab)
                s->count[hist[i]]++;
        for (int i = 0; i < n_hist; i++) {
            int32_t t = hist[i];
            if (t < 0 || t >= s->n_vocab || s->count[t] == 0)
                continue;
            if (rep)
                w[t] = w[t] > 0 ? w[t] / p->repetition_penalty : w[t] * p->repetition_penalty;
            w[t] -= p->frequency_penalty * (float)s->count[t] + p->presence_penalty;
            s->count[t] = 0;
        }
    }
    if (p->ignore_eos && eos_id >= 0 && eos_id < s->n_vocab)
        w[eos_id] = -INFINITY;
}

/* Refused tokens of the automaton's state to -inf. Returns how many tokens
 * stay allowed (0: the state allows nothing, e.g. a dead state). */
static int apply_mask(pl_sampler *s, const pl_seq_sampling *p)
{
    const pl_token_fsm *f = p->fsm;
    if (p->fsm_state < 0 || p->fsm_state >= f->n_states)
        return -1;
    const uint32_t *row = pl_token_fsm_row(f, p->fsm_state);
    int n = s->n_vocab < f->n_vocab ? s->n_vocab : f->n_vocab, allowed = 0;
    for (int w = 0; w * 32 < n; w++) {
        uint32_t m = row[w];
        int base = w * 32, end = base + 32 < n ? base + 32 : n;
        if (m == 0xffffffffu && end - base == 32) {
            allowed += 32;
            continue;
        }
        for (int i = base; i < end; i++) {
            if ((m >> (i - base)) & 1)
                allowed++;
            else
                s->work[i] = -INFINITY;
        }
    }
    for (int i = n; i < s->n_vocab; i++)
        s->work[i] = -INFINITY;
    return allowed;
}

static int cand_cmp(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->v != y->v)
        return x->v > y->v ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

/* Move the k best candidates (by cand_cmp) to the front, unordered. */
static void select_top(cand *c, int n, int k)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        cand piv = c[(lo + hi) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (cand_cmp(&c[i], &piv) < 0)
                i++;
            while (cand_cmp(&c[j], &piv) > 0)
                j--;
            if (i <= j) {
                cand t = c[i];
                c[i++] = c[j];
                c[j--] = t;
            }
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            break;
    }
}

/* Candidates as unnormalised probabilities exp((l - max) / T); returns the
 * count after top_k and min_p. */
static int build_candidates(pl_sampler *s, const pl_seq_sampling *p)
{
    float mx = s->work[argmax(s->work, s->n_vocab)], inv_t = 1.0f / p->temperature;
    int n = 0;
    for (int i = 0; i < s->n_vocab; i++) {
        if (s->work[i] == -INFINITY)
            continue;
        float e = expf((s->work[i] - mx) * inv_t);
        if (p->min_p > 0 && e < p->min_p)
            continue;            /* min_p is relative to the top probability (1) */
        s->c[n++] = (cand){e, i};
    }
    if (p->top_k > 0 && p->top_k < n) {
        select_top(s->c, n, p->top_k);
        n = p->top_k;
    }
    return n;
}

/* Keep the smallest prefix (by descending probability) whose mass reaches
 * top_p. Only candidates above a probability floor are sorted: the floor is
 * lowered until the candidates above it already hold top_p of the mass. */
static int nucleus(cand *c, int n, float top_p)
{
    double total = 0.0;
    for (int i = 0; i < n; i++)
        total += c[i].v;
    double need = top_p * total;
    for (float floor = 1e-3f;; floor *= 0.01f) {
        int m = 0;
        double mass = 0.0;
        for (int i = 0; i < n; i++)
            if (c[i].v >= floor * (float)total) {
                cand t = c[m];
                c[m++] = c[i];
                c[i] = t;
                mass += c[m - 1].v;
            }
        if (mass >= need || floor < 1e-30f) {
            qsort(c, (size_t)m, sizeof(cand), cand_cmp);
            double acc = 0.0;
            for (int i = 0; i < m; i++) {
                acc += c[i].v;
                if (acc >= need)
                    return i + 1;
            }
            return m > 0 ? m : n;
        }
    }
}

static int32_t draw(const cand *c, int n, double u)
{
    double total = 0.0;
    for (int i = 0; i < n; i++)
        total += c[i].v;
    double target = u * total, acc = 0.0;
    for (int i = 0; i < n; i++) {
        acc += c[i].v;
        if (acc > target)
            return c[i].id;
    }
    return c[n - 1].id;
}

int32_t pl_sampler_sample(pl_sampler *s, const float *logits, const pl_seq_sampling *p,
                          const int32_t *hist, int n_hist, int32_t eos_id, pl_sample *out)
{
    memcpy(s->work, logits, sizeof(float) * (size_t)s->n_vocab);
    apply_penalties(s, p, hist, n_hist, eos_id);
    int32_t id;
    if (p->fsm && apply_mask(s, p) == 0 && eos_id >= 0) {
        id = eos_id;             /* nothing allowed: end rather than break the grammar */
    } else if (p->temperature <= 0.0f || p->top_k == 1) {
        id = argmax(s->work, s->n_vocab);
    } else {
        int n = build_candidates(s, p);
        if (n > 1 && p->top_p > 0.0f && p->top_p < 1.0f)
            n = nucleus(s->c, n, p->top_p);
        id = n > 0 ? draw(s->c, n, pl_sampler_uniform(p->seed, p->step))
                   : argmax(s->work, s->n_vocab);
    }
    out->id = id;
    pl_sampler_raw_logprobs(logits, s->n_vocab, id, p->top_logprobs, out);
    return id;
}
