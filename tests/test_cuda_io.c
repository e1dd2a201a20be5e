/* test_cuda_io.c - the CUDA runner's input packing (cuda_io.c), which is
 * host code and runs without a GPU: graph-bucket padding of decode steps,
 * block-table repacking onto the spare block, sampling parameters, logit
 * bias and penalty history, the rows of prompt logprobs, and rejection of
 * out-of-range rows and ids. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/cuda/cuda_runner_internal.h"

#define MAXR 64
#define MAXS 8
#define MBPS 4
#define BS 16

static cuda_runner *R;
static void *g_mem;

static void setup(void)
{
    R = calloc(1, sizeof *R);
    R->max_rows = MAXR;
    R->max_seqs = MAXS;
    R->n_vocab = 1000;
    R->mbps = MBPS;
    R->geom = (pl_kv_geom){.n_kv_heads = 1, .head_dim = 64, .block_size = BS,
                           .max_blocks_per_seq = MBPS, .n_blocks = 21};  /* 20 + spare */
    R->bias_cap = 4;
    R->hist_cap = 6;
    R->hist_per_seq = 3;                 /* each sequence's share */
    R->base.info.max_model_len = MBPS * BS;
    R->use_graphs = true;
    int sizes[] = {1, 2, 4, 8};
    R->n_buckets = 4;
    memcpy(R->bucket_size, sizes, sizeof sizes);
    size_t n = pl_cuda_io_map(&R->slot[0].hio, NULL, MAXR, MAXS, MBPS, 4, 6);
    g_mem = calloc(1, n);
    pl_cuda_io_map(&R->slot[0].hio, g_mem, MAXR, MAXS, MBPS, 4, 6);
}

static void teardown(void)
{
    free(g_mem);
    free(R);
}

TestSuite(cuda_io, .init = setup, .fini = teardown);

typedef struct inbuf {
    int32_t tokens[MAXR], positions[MAXR], row_seq[MAXR];
    int32_t slot[MAXS + 1], first[MAXS + 1], nrows[MAXS + 1], ctx[MAXS + 1];
    int32_t bt[(MAXS + 1) * 3];          /* one sequence more than the runner takes */
    bool sample[MAXS + 1];
    pl_seq_sampling smp[MAXS + 1];
    const int32_t *hist[MAXS + 1];
    int32_t hist_len[MAXS + 1];
    pl_step_input in;
} inbuf;

/* n sequences of rows[s] rows each, at positions ctx-rows .. ctx-1; block
 * table width 3 with ids 3s, 3s+1, 3s+2. */
static pl_step_input *make(inbuf *b, int n, const int *rows, const int *ctx)
{
    memset(b, 0, sizeof *b);
    int r = 0;
    for (int s = 0; s < n; s++) {
        b->first[s] = r;
        for (int i = 0; i < rows[s]; i++, r++) {
            b->tokens[r] = i == rows[s] - 1 ? PL_TOKEN_PLACEHOLDER : 100 + r;
            b->positions[r] = ctx[s] - rows[s] + i;
            b->row_seq[r] = s;
        }
        b->nrows[s] = rows[s];
        b->ctx[s] = ctx[s];
        b->slot[s] = 7 - s;
        b->sample[s] = true;
        b->smp[s] = (pl_seq_sampling){.temperature = 0.5f, .top_p = 0.9f, .top_k = 40,
                                      .repetition_penalty = 1, .seed = 0x1122334455667788ull,
                                      .step = 3, .top_logprobs = s};
        for (int k = 0; k < 3; k++)
            b->bt[s * 3 + k] = 3 * s + k;
    }
    b->in = (pl_step_input){.n_rows = r, .tokens = b->tokens, .positions = b->positions,
                            .row_seq = b->row_seq, .n_seqs = n, .seq_slot = b->slot,
                            .seq_first_row = b->first, .seq_n_rows = b->nrows,
                            .seq_ctx_len = b->ctx, .seq_sample = b->sample,
                            .block_table = b->bt, .max_blocks_per_seq = 3,
                            .sampling = b->smp, .seq_hist = b->hist,
                            .seq_hist_len = b->hist_len};
    return &b->in;
}

Test(cuda_io, decode_step_is_padded_to_its_graph_bucket)
{
    static inbuf b;
    int rows[3] = {1, 1, 1}, ctx[3] = {5, 17, 40};
    cr_step st;
    cr_assert_eq(pl_cuda_io_pack(R, &R->slot[0], make(&b, 3, rows, ctx), &st), 0);
    cr_io *h = &R->slot[0].hio;
    cr_assert_eq(st.bucket, 2);
    cr_assert_eq(st.n_rows, 4);
    cr_assert_eq(st.n_seqs, 4);
    cr_assert_eq(st.real_seqs, 3);
    cr_assert_eq(st.max_seq_rows, 1);
    cr_assert_eq(h->tokens[1], PL_TOKEN_PLACEHOLDER);
    cr_assert_eq(h->positions[2], 39);
    /* the padding row: its own sequence, no slot, spare blocks, no sampling */
    cr_assert_eq(h->tokens[3], 0);
    cr_assert_eq(h->row_seq[3], 3);
    cr_assert_eq(h->seq_slot[3], -1);
    cr_assert_eq(h->last_row[3], 3);
    for (int i = 0; i < MBPS; i++)
        cr_assert_eq(h->bt[3 * MBPS + i], 20);
    cr_assert_eq(h->samp[3].sample, 0);
    cr_assert_eq(h->samp[3].slot, -1);
    /* real sequences: width-3 tables repacked to 4, the rest spare */
    cr_assert_eq(h->bt[1 * MBPS + 0], 3);
    cr_assert_eq(h->bt[1 * MBPS + 2], 5);
    cr_assert_eq(h->bt[1 * MBPS + 3], 20);
    cr_assert_eq(h->seq_slot[2], 5);
    cr_assert_eq(h->samp[2].slot, 5);
    cr_assert_eq(h->samp[1].top_k, 40);
    cr_assert_float_eq(h->samp[1].top_p, 0.9f, 1e-7);
    cr_assert_eq(h->samp[1].seed_lo, 0x55667788u);
    cr_assert_eq(h->samp[1].seed_hi, 0x11223344u);
    cr_assert_eq(h->samp[1].step_lo, 3u);
    cr_assert_eq(h->samp[2].top_logprobs, 2);
}

Test(cuda_io, prefill_step_runs_eager_without_padding)
{
    static inbuf b;
    int rows[2] = {20, 1}, ctx[2] = {20, 9};
    cr_step st;
    cr_assert_eq(pl_cuda_io_pack(R, &R->slot[0], make(&b, 2, rows, ctx), &st), 0);
    cr_assert_eq(st.bucket, -1);
    cr_assert_eq(st.n_rows, 21);
    cr_assert_eq(st.n_seqs, 2);
    cr_assert_eq(st.max_seq_rows, 20);
    cr_assert_eq(R->slot[0].hio.last_row[0], 19);
    cr_assert_eq(R->slot[0].hio.last_row[1], 20);
    R->use_graphs = false;
    int r1[1] = {1}, c1[1] = {3};
    cr_assert_eq(pl_cuda_io_pack(R, &R->slot[0], make(&b, 1, r1, c1), &st), 0);
    cr_assert_eq(st.bucket, -1, "no buckets when graphs are off");
}

Test(cuda_io, bad_block_ids_go_to_the_spare_block)
{
    static inbuf b;
    int rows[1] = {1}, ctx[1] = {3};
    pl_step_input *in = make(&b, 1, rows, ctx);
    b.bt[0] = -5;
    b.bt[1] = 20;  /* the spare itself is not the engine's to use */
    cr_step st;
    cr_assert_eq(pl_cuda_io_pack(R, &R->slot[0], in, &st), 0);
    cr_assert_eq(R->slot[0].hio.bt[0], 20);
    cr_assert_eq(R->slot[0].hio.bt[1], 20);
    cr_assert_eq(R->slot[0].hio.bt[2], 2);
}

Test(cuda_io, bias_and_history_are_packed_within_capacity)
{
    static inbuf b;
    int rows[2] = {1, 1}, ctx[2] = {4, 4};
    pl_step_input *in = make(&b, 2, rows, ctx);
    pl_logit_bias lb[3] = {{5, 1.0f}, {6, -2.0f}, {7, 3.0f}};
    b.smp[0].logit_bias = lb;
    b.smp[0].n_logit_bias = 3;
    b.smp[1].logit_bias = lb;
    b.smp[1].n_logit_bias = 3;           /* only one more fits (capacity 4) */
    int32_t h0[4] = {1, 2, 3, 4}, h1[5] = {9, 8, 7, 6, 5};
    b.hist[0] = h0; b.hist_len[0] = 4;   /* no penalty: not copied */
    b.hist[1] = h1; b.hist_len[1] = 5;
    b.smp[1].frequency_penalty = 0.5f;
    cr_step st;
    cr_assert_eq(pl_cuda_io_pack(R, &R->slot[0], in, &st), 0);
    cr_io *h = &R->slot[0].hio;
    cr_assert_eq(st.n_bias, 4);
    cr_assert_eq(h->samp[0].n_bias, 3);
    cr_assert_eq(h->samp[1].bias_off, 3);
    cr_assert_eq(h->samp[1].n_bias, 1);
    cr_assert_eq(h->bias_tok[3], 5);
    cr_assert_eq(h->samp[0].n_hist, 0);
    cr_assert_eq(h->samp[0].ph_row1, 0, "no penalties: no placeholder history");
    cr_assert_eq(h->samp[1].n_hist, 3, "its share: the latest 3 ids");
    cr_assert_eq(h->hist[0], 7);
    cr_assert_eq(h->samp[1].ph_row1, 2, "the placeholder row (1) counts on the device");
    /* A second penalised sequence first in the step does not take the
     * other's share (first-come-first-served did: 4 and then 2). */
    b.smp[0].presence_penalty = 0.1f;
    cr_assert_eq(pl_cuda_io_pack(R, &R->slot[0], in, &st), 0);
    cr_assert_eq(h->samp[0].n_hist, 3);
    cr_assert_eq(h->samp[1].n_hist, 3);
    cr_assert_eq(h->samp[1].hist_off, 3);
    int32_t want[6] = {2, 3, 4, 7, 6, 5};
    cr_assert_eq(memcmp(h->hist, want, sizeof want), 0);
    cr_assert_eq(h->samp[0].ph_row1, 1);
    /* Explicit last tokens (sync scheduling): nothing added on the device. */
    b.tokens[0] = 42;
    b.tokens[1] = 43;
    cr_assert_eq(pl_cuda_io_pack(R, &R->slot[0], in, &st), 0);
    cr_assert_eq(h->samp[0].ph_row1, 0);
    cr_assert_eq(h->samp[1].ph_row1, 0);
}

/* A step mixing prefill and decode sequences lists each kind for its kernel. */
Test(cuda_io, mixed_steps_list_decode_rows_and_prefill_sequences)
{
    static inbuf b;
    int rows[4] = {1, 5, 1, 3}, ctx[4] = {7, 5, 9, 20};
    cr_step st;
    cr_assert_eq(pl_cuda_io_pack(R, &R->slot[0], make(&b, 4, rows, ctx), &st), 0);
    cr_io *h = &R->slot[0].hio;
    cr_assert_eq(st.bucket, -1);
    cr_assert_eq(st.n_dec, 2);
    cr_assert_eq(h->dec_rows[0], 0);
    cr_assert_eq(h->dec_rows[1], 6);
    cr_assert_eq(st.n_pf, 2);
    cr_assert_eq(h->pf_seqs[0], 1);
    cr_assert_eq(h->pf_seqs[1], 3);
    cr_assert_eq(st.pf_max_rows, 5);
    int d1[2] = {1, 1}, c1[2] = {3, 4};    /* decode only: no lists */
    cr_assert_eq(pl_cuda_io_pack(R, &R->slot[0], make(&b, 2, d1, c1), &st), 0);
    cr_assert_eq(st.n_dec, 0);
    cr_assert_eq(st.n_pf, 0);
}

Test(cuda_io, out_of_range_steps_are_rejected)
{
    static inbuf b;
    int rows[1] = {2}, ctx[1] = {4};
    cr_step st;
    pl_step_input *in = make(&b, 1, rows, ctx);
    b.row_seq[1] = 1;
    cr_assert_eq(pl_cuda_io_pack(R, &R->slot[0], in, &st), -1);
    in = make(&b, 1, rows, ctx);
    b.positions[1] = MBPS * BS;           /* past the device block table */
    cr_assert_eq(pl_cuda_io_pack(R, &R->slot[0], in, &st), -1);
    in = make(&b, 1, rows, ctx);
    b.nrows[0] = 3;                       /* more rows than the step has */
    cr_assert_eq(pl_cuda_io_pack(R, &R->slot[0], in, &st), -1);
    int r9[MAXS + 1], c9[MAXS + 1];
    for (int i = 0; i <= MAXS; i++) { r9[i] = 1; c9[i] = 2; }
    cr_assert_eq(pl_cuda_io_pack(R, &R->slot[0], make(&b, MAXS + 1, r9, c9), &st), -1);
    cr_assert(strstr(pl_cuda_last_error(), "exceeds"));
}

/* Prompt logprobs: the rows with a next id listed in order with their id
 * and the sequence's top_logprobs (clamped to 0..20); a next id outside
 * the vocabulary is refused with the row named. */
Test(cuda_io, prompt_logprob_rows_are_listed)
{
    static inbuf b;
    int rows[3] = {3, 1, 4}, ctx[3] = {3, 9, 4};
    pl_step_input *in = make(&b, 3, rows, ctx);
    int32_t next[8] = {11, 12, -1, -1, 21, 22, 23, -1};
    in->row_next = next;
    in->n_row_next = 5;
    b.smp[0].top_logprobs = 3;
    b.smp[2].top_logprobs = 99;
    b.smp[1].top_logprobs = -1;
    cr_step st;
    cr_assert_eq(pl_cuda_io_pack(R, &R->slot[0], in, &st), 0, "%s", pl_cuda_last_error());
    cr_io *h = &R->slot[0].hio;
    int want_rows[5] = {0, 1, 4, 5, 6}, want_top[5] = {3, 3, 20, 20, 20};
    cr_assert_eq(st.n_lp, 5);
    for (int k = 0; k < 5; k++) {
        cr_assert_eq(h->lp_rows[k], want_rows[k]);
        cr_assert_eq(h->lp_next[k], next[want_rows[k]]);
        cr_assert_eq(h->lp_top[k], want_top[k]);
    }
    cr_assert_eq(st.bucket, -1, "a prefill step is eager");
    next[5] = 1000;              /* R->n_vocab */
    cr_assert_eq(pl_cuda_io_pack(R, &R->slot[0], in, &st), -1);
    cr_assert(strstr(pl_cuda_last_error(), "row 5"), "%s", pl_cuda_last_error());
}
