/* forced.c - see forced.h. */
#include "tests/helpers/forced.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

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
