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

/* Row passes fold their float partial sums every CHUNK entries. */
#define CHUNK 4096

typedef struct cand {
    float v;
    int32_t id;
} cand;

struct pl_sampler {
    int n_vocab;
    float *work;                 /* (n_vocab) adjusted logits */
    int32_t *count;              /* (n_vocab) history counts, kept zeroed */
    cand *c;                     /* (n_vocab) candidates */
    float *prob;                 /* (n_vocab) the temperature path's row */
    float *csum;                 /* (n_vocab / CHUNK + 1) its chunk sums */
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
    s->prob = malloc(sizeof(float) * (size_t)n_vocab);
    s->csum = malloc(sizeof(float) * ((size_t)n_vocab / CHUNK + 1));
    if (!s->work || !s->count || !s->c || !s->prob || !s->csum) {
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
    free(s->prob);
    free(s->csum);
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

/* The lanes of a group of 8 that lie before the row's end, left ahead. */
SAMP_AVX2 static inline __m256i lanes_before(int left)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* sum of e^(l - mx) over the row: 8-lane partial sums in floats, folded
 * into a double every CHUNK entries (the float error stays near 1e-6 of
 * the sum); the tail's lanes are masked to 0. */
SAMP_AVX2 static double sum_exp_avx2(const float *l, int n, float mx)
{
    const __m256 vmx = _mm256_set1_ps(mx);
    double total = 0.0;
    for (int c = 0; c < n; c += CHUNK) {
        int e = c + CHUNK < n ? c + CHUNK : n, i = c;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;
        for (; i + 16 <= e; i += 16) {
            a0 = _mm256_add_ps(a0, exp256(_mm256_sub_ps(_mm256_loadu_ps(l + i), vmx)));
            a1 = _mm256_add_ps(a1, exp256(_mm256_sub_ps(_mm256_loadu_ps(l + i + 8), vmx)));
        }
        for (; i < e; i += 8) {
            __m256i on = lanes_before(e - i);
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
        return row_max_avx2(l, n, -INFINITY);
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

/* The temperature path keeps a probability row, not a candidate list:
 * prob[i] = e^((w_i - max) / T), 0 where w_i is -inf (masked) or the
 * value is under min_p (relative to the top probability, 1), filled by one
 * pass that also sums each CHUNK of it. Candidates are gathered from it
 * only as far as top_k or top_p need them (building and sorting all
 * 262,144 of Gemma's took 1.5-4 ms per sequence and token); a draw with
 * neither walks the chunk sums, then one chunk. */
#ifdef PL_HAVE_X86
SAMP_AVX2 static void probs_avx2(const float *w, float *prob, float *csum, int n, float mx,
                                 float inv_t, float min_p)
{
    const __m256 vmx = _mm256_set1_ps(mx), vt = _mm256_set1_ps(inv_t);
    const __m256 vmin = _mm256_set1_ps(min_p), ninf = _mm256_set1_ps(-INFINITY);
    for (int c = 0; c < n; c += CHUNK) {
        int e = c + CHUNK < n ? c + CHUNK : n;
        __m256 acc = _mm256_setzero_ps();
        for (int i = c; i < e; i += 8) {
            __m256i on = lanes_before(e - i);
            __m256 x = _mm256_maskload_ps(w + i, on);
            __m256 v = exp256(_mm256_mul_ps(_mm256_sub_ps(x, vmx), vt));
            __m256 keep = _mm256_and_ps(_mm256_cmp_ps(x, ninf, _CMP_NEQ_OQ),
                                        _mm256_cmp_ps(v, vmin, _CMP_GE_OQ));
            v = _mm256_and_ps(_mm256_and_ps(v, keep), _mm256_castsi256_ps(on));
            _mm256_maskstore_ps(prob + i, on, v);
            acc = _mm256_add_ps(acc, v);
        }
        csum[c / CHUNK] = hsum8(acc);
    }
}
#endif

/* Fills s->prob and s->csum; returns the row's total. */
static double probs(pl_sampler *s, float mx, float inv_t, float min_p)
{
    int n = s->n_vocab;
#ifdef PL_HAVE_X86
    if (pl_cpu_has_avx2())
        probs_avx2(s->work, s->prob, s->csum, n, mx, inv_t, min_p);
    else
#endif
    for (int c = 0; c < n; c += CHUNK) {
        int e = c + CHUNK < n ? c + CHUNK : n;
        float acc = 0.0f;
        for (int i = c; i < e; i++) {
            float v = s->work[i] == -INFINITY ? 0.0f : expf((s->work[i] - mx) * inv_t);
            s->prob[i] = v >= min_p ? v : 0.0f;
            acc += s->prob[i];
        }
        s->csum[c / CHUNK] = acc;
    }
    double total = 0.0;
    for (int c = 0; c < n; c += CHUNK)
        total += s->csum[c / CHUNK];
    return total;
}

/* a ranks below b in cand_cmp's order. */
static inline bool worse(cand a, cand b) { return cand_cmp(&a, &b) > 0; }

#ifdef PL_HAVE_X86
SAMP_AVX2 static int any_above8(const float *p, float t)
{
    return _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(p), _mm256_set1_ps(t), _CMP_GT_OQ));
}
#endif

/* The k best entries of prob (by cand_cmp) into s->c, sorted: a heap of
 * the k best so far with its worst at the root. Ids come in rising order,
 * so a new entry ranks above the root only when strictly more probable;
 * once the heap is full, groups of 8 that hold no such entry are skipped
 * whole. Returns the count (< k when fewer are live). */
static int top_k_(pl_sampler *s, int k)
{
    cand *h = s->c;
    int m = 0, n = s->n_vocab;
#ifdef PL_HAVE_X86
    bool simd = pl_cpu_has_avx2();
#endif
    for (int i = 0; i < n; i++) {
#ifdef PL_HAVE_X86
        if (simd && m == k && (i & 7) == 0 && i + 8 <= n && !any_above8(s->prob + i, h[0].v)) {
            i += 7;
            continue;
        }
#endif
        cand x = {s->prob[i], i};
        if (x.v <= 0.0f || (m == k && x.v <= h[0].v))
            continue;
        int j;
        if (m < k) {             /* sift the new leaf up */
            for (j = m++; j > 0 && worse(x, h[(j - 1) / 2]); j = (j - 1) / 2)
                h[j] = h[(j - 1) / 2];
        } else {                 /* replace the root, sift it down */
            for (j = 0;;) {
                int l = 2 * j + 1, r = l + 1, w = -1;
                cand wv = x;
                if (l < m && worse(h[l], wv))
                    w = l, wv = h[l];
                if (r < m && worse(h[r], wv))
                    w = r;
                if (w < 0)
                    break;
                h[j] = h[w];
                j = w;
            }
        }
        h[j] = x;
    }
    qsort(h, (size_t)m, sizeof(cand), cand_cmp);
    return m;
}

/* The smallest prefix (by descending probability) of c[0..n), sorted,
 * whose mass reaches top_p of their total. */
static int nucleus_prefix(const cand *c, int n, double need)
{
    double acc = 0.0;
    for (int i = 0; i < n; i++) {
        acc += c[i].v;
        if (acc >= need)
            return i + 1;
    }
    return n;
}

/* top_p over the whole row: only the entries above a floor are gathered
 * and sorted, the floor lowered until they hold top_p of the total. */
static int nucleus_row(pl_sampler *s, double total, float top_p)
{
    double need = top_p * total;
    for (float floor = 1e-3f;; floor *= 0.01f) {
        float f = floor * (float)total;
        int m = 0;
        double mass = 0.0;
        for (int i = 0; i < s->n_vocab; i++)
            if (s->prob[i] > 0.0f && s->prob[i] >= f) {
                s->c[m++] = (cand){s->prob[i], i};
                mass += s->prob[i];
            }
        if (mass >= need || floor < 1e-30f) {
            qsort(s->c, (size_t)m, sizeof(cand), cand_cmp);
            return nucleus_prefix(s->c, m, need);
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

/* A draw from the whole probability row: the chunk holding the target by
 * the chunk sums, then entry by entry from there (past the chunk's end if
 * its float sum ran ahead of the entries'); -1 when nothing is live. */
static int32_t draw_row(const pl_sampler *s, double total, double u)
{
    int n = s->n_vocab, c = 0, last = -1;
    double target = u * total, acc = 0.0;
    for (; c + CHUNK < n && acc + s->csum[c / CHUNK] <= target; c += CHUNK)
        acc += s->csum[c / CHUNK];
    for (int i = c; i < n; i++) {
        if (s->prob[i] <= 0.0f)
            continue;
        acc += s->prob[i];
        last = i;
        if (acc > target)
            return i;
    }
    for (int i = c - 1; last < 0 && i >= 0; i--)   /* the float sums ran over */
        if (s->prob[i] > 0.0f)
            last = i;
    return last;
}

/* Temperature, then top_k, top_p and min_p, then one seeded draw; -1 when
 * the filters leave nothing. */
static int32_t sample_temperature(pl_sampler *s, const pl_seq_sampling *p)
{
    float mx = row_max(s->work, s->n_vocab);
    double total = probs(s, mx, 1.0f / p->temperature, p->min_p > 0 ? p->min_p : 0.0f);
    double u = pl_sampler_uniform(p->seed, p->step);
    bool nuc = p->top_p > 0.0f && p->top_p < 1.0f;
    if (p->top_k > 0) {
        int n = top_k_(s, p->top_k);
        if (n > 1 && nuc) {
            double t = 0.0;
            for (int i = 0; i < n; i++)
                t += s->c[i].v;
            n = nucleus_prefix(s->c, n, p->top_p * t);
        }
        return n > 0 ? draw(s->c, n, u) : -1;
    }
    if (!(total > 0.0))
        return -1;
    if (nuc) {
        int n = nucleus_row(s, total, p->top_p);
        return n > 0 ? draw(s->c, n, u) : -1;
    }
    return draw_row(s, total, u);
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
        id = sample_temperature(s, p);
        if (id < 0)
            id = argmax(s->work, s->n_vocab);
    }
    out->id = id;
    pl_sampler_raw_logprobs(logits, s->n_vocab, id, p->top_logprobs, out);
    return id;
}
