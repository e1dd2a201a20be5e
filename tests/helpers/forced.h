/* forced.h - teacher-forced logits of a fixture section through the CPU
 * forward pass, compared row by row with a reference's top-k (used by
 * test_cpu_forward against llama.cpp/float64 and by test_cpu_kquant) or
 * with a reference's whole logits (the families' tests: transformers and
 * llama.cpp on the tiny checkpoints). */
#ifndef PL_TEST_FORCED_H
#define PL_TEST_FORCED_H

#include <jansson.h>

#include "backends/engine/cpu/forward.h"
#include "backends/engine/cpu/pool.h"
#include "backends/formats/gguf.h"
#include "backends/engine/model/model.h"

typedef struct pl_forced_stats {
    int n;              /* rows compared (every token of "ids") */
    int agree;          /* our top-1 == the reference's top-1 */
    int agree_or_tie;   /* ... or its top-2 where its top-2 gap < near_tie */
    float max_d;        /* max |ours - ref| over the reference's top-k logits */
} pl_forced_stats;

/* sec: {"ids": [...], "top_ids": [[...]...], "top_logits": [[...]...]}.
 * Runs chunk rows per forward call on a pool of `threads`, with the blocks
 * of the sequence out of order on purpose. gemm_min_rows picks the f32 GEMM
 * path for chunks of at least that many rows (1 << 30: quantised only);
 * flags: PL_FORCED_KV_F16 keeps the K/V cache in halves (--kv-cache-f16),
 * PL_FORCED_AMX_EMULATED runs the AMX mode on the model of the tiles. */
#define PL_FORCED_KV_F16 1
#define PL_FORCED_AMX_EMULATED 2
pl_forced_stats pl_test_run_forced(const pl_model *m, json_t *sec, int block_size,
                                   int gemm_min_rows, int chunk, int threads,
                                   int flags, float near_tie);

/* A forward pass of its own pool (2 threads) over n_seqs sequences of
 * max_ctx positions, in blocks of bs tokens laid out in reverse (out of
 * order on purpose), at most max_rows rows a call. */
typedef struct pl_test_fwd {
    pl_pool *pool;
    pl_cpu_fwd *f;
    int32_t *bt;                 /* (n_seqs, mb) */
    int mb;
} pl_test_fwd;

pl_test_fwd pl_test_fwd_new(const pl_model *m, int n_seqs, int max_ctx, int bs, int max_rows,
                            int gemm_min_rows, int kv_f16);
void pl_test_fwd_free(pl_test_fwd *w);
/* One call over n rows (token, position, sequence); every row's logits. */
void pl_test_fwd_run(pl_test_fwd *w, const int32_t *tok, const int32_t *pos,
                     const int32_t *seq, int n, float *logits);

/* tests/fixtures/<gguf> opened and loaded into *g and *m, and
 * tests/fixtures/<ref> read into *ref (under PARLEY_SRC, else the current
 * folder); any failure fails the test. */
void pl_test_open_fixture(const char *gguf, const char *ref, pl_gguf **g, pl_model **m,
                          json_t **j);

/* Rows [p0, p0 + n) of ids as sequence seq, in one call. */
void pl_test_fwd_rows(pl_test_fwd *w, const int32_t *ids, int p0, int n, int seq,
                      float *logits);

/* Sequence i of a reference section sec ({"ids": [[...], ...], key: [[[row
 * logits], ...], ...]}, as the fixtures' generators write it): its ids and,
 * with ref, the reference's logits (n, nv) under key ("hf_logits":
 * transformers, "llama_logits": llama.cpp). Returns n (<= max_n). */
int pl_test_ref_seq(json_t *sec, const char *key, int i, int nv, int max_n, int32_t *ids,
                    float *ref);

/* m's teacher-forced logits (one call a sequence, blocks of bs) on every
 * sequence sec has under key, against them: max |dlogit| below tol, prompt
 * logprobs within mean_tol nats mean, greedy tokens equal where the
 * reference's top two are more than tie apart (logged where they are not).
 * what names the reference in messages; each sequence's figures are
 * logged and the worst and the mean printed. */
void pl_test_match_ref(const pl_model *m, json_t *sec, const char *key, const char *what,
                       double tol, double tie, double mean_tol, int bs, int max_ctx);

/* ids (n rows) whole in one call, one row a call, and in the pieces ending
 * at ends[0..n_ends) (ascending, the last n): each within tol of the
 * whole and, with ref (n, nv), of ref. */
void pl_test_check_pieces(const pl_model *m, const int32_t *ids, int n, const int *ends,
                          int n_ends, const float *ref, double tol, int bs, int max_ctx);

/* Sequence a (n rows, n + 1 ids) alone, then beside b's first 7 rows (its
 * own slot), and its decode row n alone and first before b's next 3: the
 * same bits. */
void pl_test_check_batch_invariant(const pl_model *m, const int32_t *a, int n,
                                   const int32_t *b, int bs, int max_ctx, int kv_f16);

int pl_test_argmax(const float *row, int nv);
/* log softmax(row)[id], in double. */
double pl_test_log_softmax_at(const float *row, int nv, int id);

#endif
