/* cuda_io.c - packing a pl_step_input into the runner's fixed-layout input
 * block (pinned staging, then one copy per array to the device). Fixed
 * device addresses are what lets a captured CUDA graph replay any step of
 * its batch size; decode-only steps are padded up to the graph's size with
 * rows that write the spare KV block and sample nothing. */
#include <stdint.h>
#include <string.h>

#include "backends/engine/cuda/cuda_runner_internal.h"
#include "src/base/log.h"

static size_t take(size_t *off, size_t bytes)
{
    size_t at = *off;
    *off += (bytes + 255) & ~(size_t)255;
    return at;
}

size_t pl_cuda_io_map(cr_io *io, void *base, int max_rows, int max_seqs, int mbps,
                      int bias_cap, int hist_cap)
{
    uintptr_t b = (uintptr_t)base;  /* integer arithmetic: base may be NULL (sizing) */
    size_t off = 0, R = (size_t)max_rows, S = (size_t)max_seqs;
    io->tokens = (int32_t *)(b + take(&off, R * 4));
    io->positions = (int32_t *)(b + take(&off, R * 4));
    io->row_seq = (int32_t *)(b + take(&off, R * 4));
    io->seq_slot = (int32_t *)(b + take(&off, S * 4));
    io->first_row = (int32_t *)(b + take(&off, S * 4));
    io->n_rows = (int32_t *)(b + take(&off, S * 4));
    io->last_row = (int32_t *)(b + take(&off, S * 4));
    io->bt = (int32_t *)(b + take(&off, S * (size_t)mbps * 4));
    io->samp = (pl_cuda_samp *)(b + take(&off, S * sizeof(pl_cuda_samp)));
    io->bias_tok = (int32_t *)(b + take(&off, (size_t)bias_cap * 4));
    io->bias_val = (float *)(b + take(&off, (size_t)bias_cap * 4));
    io->hist = (int32_t *)(b + take(&off, (size_t)hist_cap * 4));
    io->dec_rows = (int32_t *)(b + take(&off, R * 4));
    io->pf_seqs = (int32_t *)(b + take(&off, S * 4));
    io->lp_rows = (int32_t *)(b + take(&off, R * 4));
    io->lp_next = (int32_t *)(b + take(&off, R * 4));
    io->lp_top = (int32_t *)(b + take(&off, R * 4));
    return off;
}

size_t pl_cuda_plp_map(cr_plp *p, void *base, int max_rows)
{
    uintptr_t b = (uintptr_t)base;
    size_t off = 0, R = (size_t)max_rows;
    p->lp = (float *)(b + take(&off, R * 4));
    p->top_ids = (int32_t *)(b + take(&off, R * PL_CUDA_TOPN * 4));
    p->top_lp = (float *)(b + take(&off, R * PL_CUDA_TOPN * 4));
    return off;
}

/* Graph bucket for a decode-only step of n sequences, or -1. */
static int pick_bucket(const cuda_runner *r, const pl_step_input *in)
{
    if (!r->use_graphs || in->n_rows != in->n_seqs)
        return -1;
    for (int s = 0; s < in->n_seqs; s++)
        if (in->seq_n_rows[s] != 1)
            return -1;
    for (int b = 0; b < r->n_buckets; b++)
        if (r->bucket_size[b] >= in->n_seqs)
            return b;
    return -1;
}

static bool penalised(const pl_seq_sampling *p)
{
    return (p->repetition_penalty > 0 && p->repetition_penalty != 1.0f)
           || p->presence_penalty != 0 || p->frequency_penalty != 0;
}

static void pack_sampling(cuda_runner *r, cr_io *h, const pl_step_input *in, int s,
                          cr_step *st)
{
    const pl_seq_sampling *p = &in->sampling[s];
    pl_cuda_samp *o = &h->samp[s];
    memset(o, 0, sizeof *o);
    o->temperature = p->temperature;
    o->top_p = p->top_p;
    o->min_p = p->min_p;
    o->presence = p->presence_penalty;
    o->frequency = p->frequency_penalty;
    o->repetition = p->repetition_penalty;
    o->top_k = p->top_k;
    o->top_logprobs = p->top_logprobs > PL_CUDA_TOPN ? PL_CUDA_TOPN : p->top_logprobs;
    o->sample = in->seq_sample[s];
    o->slot = in->seq_slot[s] >= 0 && in->seq_slot[s] < r->max_seqs ? in->seq_slot[s] : -1;
    o->ignore_eos = p->ignore_eos;
    o->seed_lo = (uint32_t)p->seed;
    o->seed_hi = (uint32_t)(p->seed >> 32);
    o->step_lo = (uint32_t)p->step;
    o->step_hi = (uint32_t)(p->step >> 32);
    /* Each sequence owns CR_BIAS_PER_SEQ bias entries and hist_per_seq
     * history ids of the capacity (max_seqs of each), so no sequence can
     * take another's room, whatever the order. */
    o->bias_off = st->n_bias;
    int nb = p->n_logit_bias < CR_BIAS_PER_SEQ ? p->n_logit_bias : CR_BIAS_PER_SEQ;
    for (int i = 0; i < nb && st->n_bias < r->bias_cap; i++, o->n_bias++) {
        h->bias_tok[st->n_bias] = p->logit_bias[i].token;
        h->bias_val[st->n_bias++] = p->logit_bias[i].bias;
    }
    o->hist_off = st->n_hist;
    if (!penalised(p) || !in->seq_hist_len)
        return;
    int len = in->seq_hist[s] ? in->seq_hist_len[s] : 0;
    /* A placeholder last row stands for an id the host does not know yet:
     * the penalties kernel counts it from the device's token (async == sync,
     * as the CPU runner does). */
    int last = in->seq_first_row[s] + in->seq_n_rows[s] - 1;
    if (in->tokens[last] == PL_TOKEN_PLACEHOLDER && len < r->base.info.max_model_len)
        o->ph_row1 = last + 1;
    int n = len < r->hist_per_seq ? len : r->hist_per_seq;  /* the latest ids */
    if (n > r->hist_cap - st->n_hist)    /* never with max_seqs shares; defensive */
        n = r->hist_cap - st->n_hist;
    if (n < len && !r->hist_warned) {
        r->hist_warned = true;
        pl_warn("cuda: a penalised sequence has %d generated ids; penalties count the "
                "latest %d (the runner's per-sequence history)", len, n);
    }
    if (n > 0)
        memcpy(h->hist + st->n_hist, in->seq_hist[s] + (len - n), (size_t)n * 4);
    o->n_hist = n;
    st->n_hist += n;
}

static void pack_seq(cuda_runner *r, cr_io *h, const pl_step_input *in, int s, cr_step *st)
{
    int spare = r->geom.n_blocks - 1;
    h->seq_slot[s] = in->seq_slot[s] >= 0 && in->seq_slot[s] < r->max_seqs ? in->seq_slot[s] : -1;
    h->first_row[s] = in->seq_first_row[s];
    h->n_rows[s] = in->seq_n_rows[s];
    h->last_row[s] = in->seq_first_row[s] + in->seq_n_rows[s] - 1;
    if (in->seq_n_rows[s] > st->max_seq_rows)
        st->max_seq_rows = in->seq_n_rows[s];
    int32_t *bt = h->bt + (size_t)s * r->mbps;
    int n = in->max_blocks_per_seq < r->mbps ? in->max_blocks_per_seq : r->mbps;
    for (int i = 0; i < r->mbps; i++) {
        int32_t b = i < n ? in->block_table[(size_t)s * in->max_blocks_per_seq + i] : spare;
        bt[i] = b >= 0 && b < spare ? b : spare;
    }
    pack_sampling(r, h, in, s, st);
}

/* Padding sequence s (one row, row s): writes the spare block, samples nothing. */
static void pack_pad(cuda_runner *r, cr_io *h, int s)
{
    h->tokens[s] = 0;
    h->positions[s] = 0;
    h->row_seq[s] = s;
    h->seq_slot[s] = -1;
    h->first_row[s] = s;
    h->n_rows[s] = 1;
    h->last_row[s] = s;
    for (int i = 0; i < r->mbps; i++)
        h->bt[(size_t)s * r->mbps + i] = r->geom.n_blocks - 1;
    memset(&h->samp[s], 0, sizeof h->samp[s]);
    h->samp[s].top_logprobs = -1;
    h->samp[s].slot = -1;
}

/* A step with prefill rows: one-row sequences go to the decode kernel (a
 * list of their rows), the others to the prefill kernel (a list of them),
 * instead of every sequence taking a 32-row prefill tile. */
static void split_mixed(cr_io *h, const pl_step_input *in, cr_step *st)
{
    for (int s = 0; s < in->n_seqs; s++) {
        if (in->seq_n_rows[s] == 1) {
            h->dec_rows[st->n_dec++] = in->seq_first_row[s];
        } else {
            h->pf_seqs[st->n_pf++] = s;
            if (in->seq_n_rows[s] > st->pf_max_rows)
                st->pf_max_rows = in->seq_n_rows[s];
        }
    }
}

/* Prompt logprobs: the rows with a next id, listed (the next id checked
 * against the vocabulary). 0, or -1 with the row named. */
static int pack_prompt_lp(cuda_runner *r, cr_io *h, const pl_step_input *in, cr_step *st)
{
    if (in->n_row_next <= 0 || !in->row_next)
        return 0;
    for (int i = 0; i < in->n_rows; i++) {
        int32_t next = in->row_next[i];
        if (next < 0)
            continue;
        if (next >= r->n_vocab)
            return pl_cuda_fail_(__FILE__, __LINE__, "row %d: next id %d out of range", i,
                                 (int)next);
        int top = in->sampling[in->row_seq[i]].top_logprobs;
        h->lp_rows[st->n_lp] = i;
        h->lp_next[st->n_lp] = next;
        h->lp_top[st->n_lp++] = top < 0 ? 0 : top > PL_CUDA_TOPN ? PL_CUDA_TOPN : top;
    }
    return 0;
}

int pl_cuda_io_pack(cuda_runner *r, cr_slot *sl, const pl_step_input *in, cr_step *st)
{
    if (in->n_rows < 0 || in->n_rows > r->max_rows || in->n_seqs <= 0
        || in->n_seqs > r->max_seqs)
        return pl_cuda_fail_(__FILE__, __LINE__, "step of %d rows / %d sequences exceeds "
                             "the runner (%d / %d)", in->n_rows, in->n_seqs, r->max_rows,
                             r->max_seqs);
    int max_pos = r->mbps * r->geom.block_size;
    for (int i = 0; i < in->n_rows; i++)
        if (in->row_seq[i] < 0 || in->row_seq[i] >= in->n_seqs || in->positions[i] < 0
            || in->positions[i] >= max_pos)
            return pl_cuda_fail_(__FILE__, __LINE__, "row %d: sequence %d / position %d out "
                                 "of range", i, in->row_seq[i], in->positions[i]);
    cr_io *h = &sl->hio;
    memset(st, 0, sizeof *st);
    st->bucket = pick_bucket(r, in);
    st->real_seqs = in->n_seqs;
    st->n_rows = in->n_rows;
    st->n_seqs = in->n_seqs;
    memcpy(h->tokens, in->tokens, (size_t)in->n_rows * 4);
    memcpy(h->positions, in->positions, (size_t)in->n_rows * 4);
    memcpy(h->row_seq, in->row_seq, (size_t)in->n_rows * 4);
    r->fsm_pack++;
    for (int s = 0; s < in->n_seqs; s++) {
        if (in->seq_n_rows[s] < 1 || in->seq_first_row[s] < 0
            || in->seq_first_row[s] + in->seq_n_rows[s] > in->n_rows)
            return pl_cuda_fail_(__FILE__, __LINE__, "sequence %d has bad rows", s);
        pack_seq(r, h, in, s, st);
        if (pl_cuda_fsm_attach(r, in, s, &h->samp[s]) < 0)
            return -1;
    }
    if (st->max_seq_rows > 1)
        split_mixed(h, in, st);
    if (pack_prompt_lp(r, h, in, st) != 0)
        return -1;
    if (st->bucket >= 0) {
        int B = r->bucket_size[st->bucket];
        for (int s = in->n_seqs; s < B; s++)
            pack_pad(r, h, s);
        st->n_rows = st->n_seqs = B;
        st->max_seq_rows = 1;
    }
    return 0;
}

#define UP(field, count) do { if ((count) > 0) PL_CUDA_CHECK(cudaMemcpyAsync(r->dio.field, \
        sl->hio.field, (size_t)(count) * sizeof(*sl->hio.field), cudaMemcpyHostToDevice, \
        r->cs)); } while (0)

int pl_cuda_io_upload(cuda_runner *r, cr_slot *sl, const cr_step *st)
{
    UP(tokens, st->n_rows);
    UP(positions, st->n_rows);
    UP(row_seq, st->n_rows);
    UP(seq_slot, st->n_seqs);
    UP(first_row, st->n_seqs);
    UP(n_rows, st->n_seqs);
    UP(last_row, st->n_seqs);
    UP(bt, (size_t)st->n_seqs * r->mbps);
    UP(samp, st->n_seqs);
    UP(bias_tok, st->n_bias);
    UP(bias_val, st->n_bias);
    UP(hist, st->n_hist);
    if (st->n_dec > 0) {
        UP(dec_rows, st->n_dec);
        UP(pf_seqs, st->n_pf);
    }
    UP(lp_rows, st->n_lp);
    UP(lp_next, st->n_lp);
    UP(lp_top, st->n_lp);
    PL_CUDA_CHECK(cudaEventRecord(sl->in_done, r->cs));
    return 0;
}
