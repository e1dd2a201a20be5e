/* forced.c - see forced.h. */
#include "tests/helpers/forced.h"

#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/cpu/forward.h"
#include "backends/engine/cpu/pool.h"
#include "backends/engine/cpu/qdot_amx.h"

static int jint(json_t *a, size_t i) { return (int)json_integer_value(json_array_get(a, i)); }
static float jnum(json_t *a, size_t i) { return (float)json_number_value(json_array_get(a, i)); }

static void compare_row(pl_forced_stats *st, const float *row, int nv, json_t *ti,
                        json_t *tl, float near_tie)
{
    int best = 0;
    for (int v = 1; v < nv; v++)
        best = row[v] > row[best] ? v : best;
    st->agree += best == jint(ti, 0);
    st->agree_or_tie += best == jint(ti, 0) ||
        (best == jint(ti, 1) && jnum(tl, 0) - jnum(tl, 1) < near_tie);
    for (size_t j = 0; j < json_array_size(ti); j++)
        st->max_d = fmaxf(st->max_d, fabsf(row[jint(ti, j)] - jnum(tl, j)));
}

pl_forced_stats pl_test_run_forced(const pl_model *m, json_t *sec, int block_size,
                                   int gemm_min_rows, int chunk, int threads,
                                   int flags, float near_tie)
{
    json_t *ids = json_object_get(sec, "ids");
    int n = (int)json_array_size(ids), mb = (n + block_size - 1) / block_size;
    int nv = m->n_vocab;
    char err[256];
    pl_pool *pool = pl_pool_new(threads);
    pl_fwd_opts o = {.max_rows = chunk, .max_out = chunk, .max_ctx = mb * block_size,
                     .num_blocks = mb, .block_size = block_size,
                     .gemm_min_rows = gemm_min_rows, .kv_f16 = flags & PL_FORCED_KV_F16,
                     .amx = flags & PL_FORCED_AMX_EMULATED ? PL_AMX_EMULATED : PL_AMX_OFF};
    pl_cpu_fwd *f = pl_cpu_fwd_new(m, pool, &o, err, sizeof err);
    cr_assert(f, "%s", err);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)chunk * 4), *pos = tok + chunk;
    int32_t *rs = pos + chunk, *outr = rs + chunk, *bt = malloc(sizeof(int32_t) * mb);
    float *logits = malloc(sizeof(float) * (size_t)chunk * nv);
    for (int i = 0; i < mb; i++)
        bt[i] = mb - 1 - i;      /* blocks out of order on purpose */
    pl_forced_stats st = {.n = n};
    for (int base = 0; base < n; base += chunk) {
        int k = n - base < chunk ? n - base : chunk;
        for (int i = 0; i < k; i++) {
            tok[i] = jint(ids, base + i);
            pos[i] = base + i;
            rs[i] = 0;
            outr[i] = i;
        }
        pl_fwd_batch b = {.n_rows = k, .tokens = tok, .positions = pos, .row_seq = rs,
                          .block_table = bt, .max_blocks_per_seq = mb, .n_out = k,
                          .out_rows = outr};
        cr_assert_eq(pl_cpu_forward(f, &b, logits), 0);
        for (int i = 0; i < k; i++)
            compare_row(&st, logits + (size_t)i * nv, nv,
                        json_array_get(json_object_get(sec, "top_ids"), base + i),
                        json_array_get(json_object_get(sec, "top_logits"), base + i),
                        near_tie);
    }
    free(tok);
    free(bt);
    free(logits);
    pl_cpu_fwd_free(f);
    pl_pool_free(pool);
    return st;
}

pl_test_fwd pl_test_fwd_new(const pl_model *m, int n_seqs, int max_ctx, int bs, int max_rows,
                            int gemm_min_rows, int kv_f16)
{
    pl_test_fwd w = {.pool = pl_pool_new(2), .mb = (max_ctx + bs - 1) / bs};
    int nb = n_seqs * w.mb;
    w.bt = malloc(sizeof(int32_t) * (size_t)nb);
    for (int i = 0; i < nb; i++)
        w.bt[i] = nb - 1 - i;
    pl_fwd_opts o = {.max_rows = max_rows, .max_out = max_rows, .max_ctx = w.mb * bs,
                     .num_blocks = nb, .block_size = bs, .gemm_min_rows = gemm_min_rows,
                     .kv_f16 = kv_f16};
    char err[256];
    w.f = pl_cpu_fwd_new(m, w.pool, &o, err, sizeof err);
    cr_assert(w.f, "%s", err);
    return w;
}

void pl_test_fwd_free(pl_test_fwd *w)
{
    pl_cpu_fwd_free(w->f);
    pl_pool_free(w->pool);
    free(w->bt);
}

void pl_test_fwd_run(pl_test_fwd *w, const int32_t *tok, const int32_t *pos,
                     const int32_t *seq, int n, float *logits)
{
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++)
        rows[i] = i;
    pl_fwd_batch b = {.n_rows = n, .tokens = tok, .positions = pos, .row_seq = seq,
                      .block_table = w->bt, .max_blocks_per_seq = w->mb, .n_out = n,
                      .out_rows = rows};
    cr_assert_eq(pl_cpu_forward(w->f, &b, logits), 0);
    free(rows);
}

int pl_test_argmax(const float *row, int nv)
{
    int b = 0;
    for (int v = 1; v < nv; v++)
        b = row[v] > row[b] ? v : b;
    return b;
}

double pl_test_log_softmax_at(const float *row, int nv, int id)
{
    double mx = row[0], sum = 0;
    for (int v = 1; v < nv; v++)
        mx = row[v] > mx ? row[v] : mx;
    for (int v = 0; v < nv; v++)
        sum += exp((double)row[v] - mx);
    return (double)row[id] - mx - log(sum);
}

void pl_test_open_fixture(const char *gguf, const char *ref, pl_gguf **g, pl_model **m,
                          json_t **j)
{
    const char *src = getenv("PARLEY_SRC");
    char p[1024], err[256];
    snprintf(p, sizeof p, "%s/tests/fixtures/%s", src ? src : ".", ref);
    json_error_t je;
    *j = json_load_file(p, 0, &je);
    cr_assert(*j, "%s: %s", p, je.text);
    snprintf(p, sizeof p, "%s/tests/fixtures/%s", src ? src : ".", gguf);
    *g = pl_gguf_open(p, err, sizeof err);
    cr_assert(*g, "%s", err);
    *m = pl_model_load(*g, NULL, err, sizeof err);
    cr_assert(*m, "%s", err);
}

void pl_test_fwd_rows(pl_test_fwd *w, const int32_t *ids, int p0, int n, int seq,
                      float *logits)
{
    int32_t *pos = malloc(sizeof(int32_t) * 2 * (size_t)n), *sq = pos + n;
    for (int i = 0; i < n; i++) {
        pos[i] = p0 + i;
        sq[i] = seq;
    }
    pl_test_fwd_run(w, ids + p0, pos, sq, n, logits);
    free(pos);
}

int pl_test_ref_seq(json_t *sec, const char *key, int i, int nv, int max_n, int32_t *ids,
                    float *ref)
{
    json_t *s = json_array_get(json_object_get(sec, "ids"), (size_t)i);
    json_t *lg = json_array_get(json_object_get(sec, key), (size_t)i);
    cr_assert(s && (!ref || lg), "reference: no sequence %d under %s (run its generator)", i,
              key);
    int n = (int)json_array_size(s);
    cr_assert_leq(n, max_n);
    for (int t = 0; t < n; t++) {
        ids[t] = jint(s, (size_t)t);
        json_t *row = json_array_get(lg, (size_t)t);
        cr_assert(!ref || (int)json_array_size(row) == nv, "reference row %d: not %d logits",
                  t, nv);
        for (int v = 0; ref && v < nv; v++)
            ref[(size_t)t * nv + v] = jnum(row, (size_t)v);
    }
    return n;
}

/* The gap between the two largest of x's n values. */
static double top2_gap(const float *x, int n)
{
    double a = -INFINITY, b = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > a)
            b = a, a = x[i];
        else if (x[i] > b)
            b = x[i];
    return a - b;
}

void pl_test_match_ref(const pl_model *m, json_t *sec, const char *key, const char *what,
                       double tol, double tie, double mean_tol, int bs, int max_ctx)
{
    int nv = m->n_vocab;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)max_ctx);
    float *ref = malloc(sizeof(float) * (size_t)max_ctx * nv);
    float *lg = malloc(sizeof(float) * (size_t)max_ctx * nv);
    int n_seq = (int)json_array_size(json_object_get(sec, key));
    cr_assert_gt(n_seq, 0, "reference: no %s (run its generator)", key);
    double worst = 0, sum = 0;
    for (int s = 0; s < n_seq; s++) {
        int n = pl_test_ref_seq(sec, key, s, nv, max_ctx, ids, ref);
        pl_test_fwd w = pl_test_fwd_new(m, 1, max_ctx, bs, max_ctx, INT_MAX, 0);
        pl_test_fwd_rows(&w, ids, 0, n, 0, lg);
        double maxd = 0, dlp = 0, maxlp = 0;
        for (int t = 0; t < n; t++) {
            const float *a = lg + (size_t)t * nv, *b = ref + (size_t)t * nv;
            for (int v = 0; v < nv; v++)
                maxd = fmax(maxd, fabs(a[v] - b[v]));
            if (t + 1 < n) {
                double d = fabs(pl_test_log_softmax_at(a, nv, ids[t + 1]) -
                                pl_test_log_softmax_at(b, nv, ids[t + 1]));
                dlp += d;
                maxlp = fmax(maxlp, d);
            }
            if (top2_gap(b, nv) > tie)
                cr_expect_eq(pl_test_argmax(a, nv), pl_test_argmax(b, nv),
                             "%s: seq %d row %d", what, s, t);
            else
                cr_log_info("%s: seq %d row %d: a tie in the reference (top two %.1e apart)",
                            what, s, t, top2_gap(b, nv));
        }
        dlp /= n > 1 ? n - 1 : 1;
        worst = fmax(worst, maxlp);
        sum += dlp;
        cr_log_info("%s: seq %d: max |dlogit| %.2e, prompt logprobs max %.2e mean %.2e nats",
                    what, s, maxd, maxlp, dlp);
        cr_expect_lt(maxd, tol, "seq %d: max |dlogit| %g from %s", s, maxd, what);
        cr_expect_lt(dlp, mean_tol, "seq %d: mean |dlp| %g nats from %s", s, dlp, what);
        pl_test_fwd_free(&w);
    }
    printf("%s %s: prompt logprobs max %.2e, mean %.2e nats\n", m->arch_name, what, worst,
           sum / n_seq);
    free(ids);
    free(ref);
    free(lg);
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

/* part against whole (and ref): what the rows were computed as. */
static void check_part(const float *part, const float *whole, const float *ref, size_t n,
                       double tol, const char *how)
{
    double d = max_diff(part, whole, n), dr = ref ? max_diff(part, ref, n) : 0;
    cr_log_info("%s vs the whole: max |dlogit| %.2e; vs the reference %.2e", how, d, dr);
    cr_expect_lt(d, tol, "%s differs from the whole: %g", how, d);
    cr_expect_lt(dr, tol, "%s differs from the reference: %g", how, dr);
}

void pl_test_check_pieces(const pl_model *m, const int32_t *ids, int n, const int *ends,
                          int n_ends, const float *ref, double tol, int bs, int max_ctx)
{
    int nv = m->n_vocab;
    size_t sz = (size_t)n * nv;
    float *whole = malloc(sizeof(float) * sz), *part = malloc(sizeof(float) * sz);
    pl_test_fwd w1 = pl_test_fwd_new(m, 1, max_ctx, bs, max_ctx, INT_MAX, 0);
    pl_test_fwd w2 = pl_test_fwd_new(m, 1, max_ctx, bs, max_ctx, INT_MAX, 0);
    pl_test_fwd w3 = pl_test_fwd_new(m, 1, max_ctx, bs, max_ctx, INT_MAX, 0);
    pl_test_fwd_rows(&w1, ids, 0, n, 0, whole);
    for (int t = 0; t < n; t++)
        pl_test_fwd_rows(&w2, ids, t, 1, 0, part + (size_t)t * nv);
    check_part(part, whole, ref, sz, tol, "one row a call");
    for (int c = 0, p0 = 0; c < n_ends; p0 = ends[c++])
        pl_test_fwd_rows(&w3, ids, p0, ends[c] - p0, 0, part + (size_t)p0 * nv);
    check_part(part, whole, ref, sz, tol, "prefill in pieces");
    pl_test_fwd_free(&w1);
    pl_test_fwd_free(&w2);
    pl_test_fwd_free(&w3);
    free(whole);
    free(part);
}

void pl_test_check_batch_invariant(const pl_model *m, const int32_t *a, int n,
                                   const int32_t *b, int bs, int max_ctx, int kv_f16)
{
    int nv = m->n_vocab, k = 0;
    size_t row = sizeof(float) * (size_t)nv;
    int32_t *tok = malloc(sizeof(int32_t) * 3 * (size_t)(n + 7)), *pos = tok + n + 7;
    int32_t *sq = pos + n + 7;
    float *alone = malloc(row * (size_t)(n + 7)), *mixed = malloc(row * (size_t)(n + 7));
    pl_test_fwd w1 = pl_test_fwd_new(m, 2, max_ctx, bs, 2 * max_ctx, INT_MAX, kv_f16);
    pl_test_fwd w2 = pl_test_fwd_new(m, 2, max_ctx, bs, 2 * max_ctx, INT_MAX, kv_f16);
    pl_test_fwd_rows(&w1, a, 0, n, 0, alone);
    for (int i = 0; i < 7; i++, k++)
        tok[k] = b[i], pos[k] = i, sq[k] = 1;
    for (int i = 0; i < n; i++, k++)
        tok[k] = a[i], pos[k] = i, sq[k] = 0;
    pl_test_fwd_run(&w2, tok, pos, sq, k, mixed);
    cr_assert(!memcmp(alone, mixed + 7 * (size_t)nv, row * (size_t)n),
              "prefill rows differ beside another sequence");
    pl_test_fwd_rows(&w1, a, n, 1, 0, alone);                 /* decode: a alone */
    tok[0] = a[n], pos[0] = n, sq[0] = 0;             /* ... and first, then b's 3 rows */
    for (int i = 0; i < 3; i++)
        tok[1 + i] = b[7 + i], pos[1 + i] = 7 + i, sq[1 + i] = 1;
    pl_test_fwd_run(&w2, tok, pos, sq, 4, mixed);
    cr_assert(!memcmp(alone, mixed, row), "a decode row differs in a batch");
    pl_test_fwd_free(&w1);
    pl_test_fwd_free(&w2);
    free(tok);
    free(alone);
    free(mixed);
}
