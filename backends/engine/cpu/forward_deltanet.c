/* forward_deltanet.c - the Gated DeltaNet layers of the forward pass
 * (model.h's pl_layer.recurrent; forward_internal.h):
 *
 *   PH_ATTN_IN     xn = rmsnorm(x) (forward.c), then one matmul phase:
 *                  qkv, z, beta and alpha projections of xn
 *   PH_GDN_CONV    (sequence, slice of channels): the causal conv over the
 *                  sequence's rows in order, from and into its slot's conv
 *                  state, then SiLU (in place in qkv)
 *   PH_GDN_RULE    (sequence, value head): L2 norms of its q and k, the
 *                  decay and beta, the delta rule over the rows from and
 *                  into its slot's state (the chunked form from
 *                  GDN_CHUNK_MIN rows, the recurrent step below), the
 *                  gated RMSNorm with z into out
 *   PH_ROW_Q8      out's q8 blocks, then the ssm_out matmul into tmp
 *
 * A sequence's state lives in its slot (pl_fwd_batch.seq_slot), allocated
 * once here: per recurrent layer, the conv's last K - 1 inputs and the
 * (n_v, d, d) delta-rule state. Each item reads and writes only its own
 * sequence's slot and rows, so a row's values do not depend on the other
 * sequences in the batch; threads split the work over heads and channel
 * slices. A slot knows the position it has reached: a row that does not
 * continue it (and does not start at 0) fails the step before anything
 * runs (pl_fwd_gdn_check_), never giving another sequence's state.
 */
#include "backends/engine/cpu/forward_internal.h"
#include "backends/engine/cpu/ops_ssm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONV_SLICE 64            /* channels per conv item */
#define GDN_CHUNK 64             /* rows per chunk of the chunked form */
#define GDN_CHUNK_MIN 8          /* a sequence's rows from which it is used */

struct pl_fwd_gdn {
    int n_rec, slots, K, C, nk, nv, d;
    int *rec_of;                 /* (n_layer) index among recurrent layers, or -1 */
    float *convw;                /* (n_rec, K, C) kernels, tap-major */
    float *conv_state;           /* (n_rec, slots, K - 1, C) */
    float *state;                /* (n_rec, slots, nv, d, d) */
    int32_t *slot_pos;           /* (slots) positions a slot has consumed */
    int32_t *slot_mark;          /* (slots) check's stamp: slot taken this call */
    int32_t stamp;
    float *qkv, *z, *beta, *alpha, *out; /* (max_rows, C | inner | nv | nv | inner) */
    /* the call's sequences: rows of sequence s are rows[off[s] .. off[s+1]) */
    int n_seqs;
    int32_t *rows, *off, *slot_of; /* (max_rows), (max_rows + 1), (max_rows) */
    bool *reset;                 /* (max_rows) sequence s starts at position 0 */
    float *scratch;              /* (n_threads, scr) */
    size_t scr;
    int align;                   /* chunks never cross a multiple of it */
    int32_t *p0;                 /* (max_rows) first position of sequence s */
    /* checkpoints: (n_ck, n_rec, per_rec) floats, a layer's conv history
     * (K - 1, C) then its delta-rule state (nv, d, d) */
    int n_ck;
    size_t per_rec;
    float *ck;
    /* the call's saves: sequence, position reached, checkpoint */
    int n_sv;
    int32_t *sv_seq, *sv_pos, *sv_ck; /* (2 * max_rows) */
};

size_t pl_cpu_fwd_ckpt_bytes(const pl_model *m)
{
    size_t d = (size_t)m->ssm_d_state, hist = (size_t)(m->ssm_conv_kernel - 1);
    return (size_t)m->n_recurrent * sizeof(float) *
           (hist * (size_t)m->ssm_conv_dim + (size_t)m->ssm_n_v * d * d);
}

static float softplus_(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

int pl_fwd_gdn_init_(pl_cpu_fwd *f, char *err, size_t len)
{
    const pl_model *m = f->m;
    if (m->n_recurrent == 0)
        return 0;
    if (m->ssm_d_inner % PL_QK) {
        snprintf(err, len, "ssm.inner_size %d must be a multiple of %d", m->ssm_d_inner, PL_QK);
        return -1;
    }
    struct pl_fwd_gdn *g = calloc(1, sizeof *g);
    if (!(f->gdn = g))
        goto oom;
    *g = (struct pl_fwd_gdn){.n_rec = m->n_recurrent, .K = m->ssm_conv_kernel,
                             .C = m->ssm_conv_dim, .nk = m->ssm_n_k, .nv = m->ssm_n_v,
                             .d = m->ssm_d_state,
                             .slots = f->o.max_slots > 0 ? f->o.max_slots : f->o.max_out};
    size_t R = (size_t)f->o.max_rows, S = (size_t)g->slots, nr = (size_t)g->n_rec;
    size_t d = (size_t)g->d, C = (size_t)g->C;
    g->scr = pl_op_gdn_chunk_scratch(GDN_CHUNK, g->d, g->d) + 4 * GDN_CHUNK * d +
             2 * GDN_CHUNK + d;
    g->rec_of = malloc(sizeof(int) * (size_t)m->n_layer);
    g->convw = malloc(sizeof(float) * nr * g->K * C);
    g->conv_state = calloc(nr * S * (g->K - 1) * C, sizeof(float));
    g->state = calloc(nr * S * g->nv * d * d, sizeof(float));
    g->slot_pos = calloc(S, sizeof(int32_t));
    g->slot_mark = calloc(S, sizeof(int32_t));
    g->qkv = malloc(sizeof(float) * R * C);
    g->z = malloc(sizeof(float) * R * m->ssm_d_inner);
    g->out = calloc(R * m->ssm_d_inner, sizeof(float));
    g->beta = malloc(sizeof(float) * R * g->nv);
    g->alpha = malloc(sizeof(float) * R * g->nv);
    g->rows = malloc(sizeof(int32_t) * R);
    g->off = malloc(sizeof(int32_t) * (R + 1));
    g->slot_of = malloc(sizeof(int32_t) * R);
    g->reset = malloc(sizeof(bool) * R);
    g->scratch = malloc(sizeof(float) * g->scr * (size_t)pl_pool_size(f->pool));
    g->align = f->o.gdn_align > 0 ? f->o.gdn_align : GDN_CHUNK;
    g->p0 = malloc(sizeof(int32_t) * R);
    g->n_ck = f->o.max_ckpts > 0 ? f->o.max_ckpts : 0;
    g->per_rec = (size_t)(g->K - 1) * C + (size_t)g->nv * d * d;
    g->ck = g->n_ck ? calloc((size_t)g->n_ck * nr * g->per_rec, sizeof(float)) : NULL;
    g->sv_seq = malloc(sizeof(int32_t) * 2 * R);
    g->sv_pos = malloc(sizeof(int32_t) * 2 * R);
    g->sv_ck = malloc(sizeof(int32_t) * 2 * R);
    if (!g->p0 || (g->n_ck && !g->ck) || !g->sv_seq || !g->sv_pos || !g->sv_ck)
        goto oom;
    if (!g->rec_of || !g->convw || !g->conv_state || !g->state || !g->slot_pos ||
        !g->slot_mark || !g->qkv || !g->z || !g->out || !g->beta || !g->alpha || !g->rows ||
        !g->off || !g->slot_of || !g->reset || !g->scratch)
        goto oom;
    for (int l = 0, i = 0; l < m->n_layer; l++) {
        g->rec_of[l] = m->layers[l].recurrent ? i : -1;
        if (!m->layers[l].recurrent)
            continue;
        const float *w = m->layers[l].ssm_conv;      /* (C, K) as the file has it */
        float *t = g->convw + (size_t)i++ * g->K * C;
        for (size_t c = 0; c < C; c++)
            for (int j = 0; j < g->K; j++)
                t[(size_t)j * C + c] = w[c * g->K + j];
    }
    return 0;
oom:
    snprintf(err, len, "out of memory for the recurrent state slots");
    return -1;
}

void pl_fwd_gdn_free_(pl_cpu_fwd *f)
{
    struct pl_fwd_gdn *g = f->gdn;
    if (!g)
        return;
    void *p[] = {g->rec_of, g->convw, g->conv_state, g->state, g->slot_pos, g->slot_mark,
                 g->qkv, g->z, g->out, g->beta, g->alpha, g->rows, g->off, g->slot_of,
                 g->reset, g->scratch, g->p0, g->ck, g->sv_seq, g->sv_pos, g->sv_ck};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        free(p[i]);
    free(g);
    f->gdn = NULL;
}

/* Sequence s's slot and rows: consecutive positions in row order, the
 * first at 0 or where the slot stands, the slot in range and not shared. */
static int check_seq(struct pl_fwd_gdn *g, const pl_fwd_batch *b, int s)
{
    int32_t slot = b->seq_slot ? b->seq_slot[s] : s;
    if (slot < 0 || slot >= g->slots || g->slot_mark[slot] == g->stamp)
        return -1;
    g->slot_mark[slot] = g->stamp;
    int32_t p0 = b->positions[g->rows[g->off[s]]];
    for (int i = g->off[s]; i < g->off[s + 1]; i++)
        if (b->positions[g->rows[i]] != p0 + (i - g->off[s]))
            return -1;
    if (p0 != 0 && g->slot_pos[slot] != p0)
        return -1;
    g->slot_of[s] = slot;
    g->reset[s] = p0 == 0;
    g->p0[s] = p0;
    return 0;
}

/* The call's checkpoint saves: each names a slot of the call, a position
 * among its rows (after the first, at most after the last) on a chunk
 * boundary, a checkpoint in range. */
static int check_saves(struct pl_fwd_gdn *g, const pl_fwd_batch *b)
{
    g->n_sv = 0;
    if (b->n_ck_save > 2 * b->n_rows || (b->n_ck_save > 0 && g->n_ck == 0))
        return -1;
    for (int i = 0; i < b->n_ck_save; i++) {
        int s = 0;
        while (s < g->n_seqs && (g->off[s + 1] == g->off[s] || g->slot_of[s] != b->ck_save_slot[i]))
            s++;
        int pos = b->ck_save_pos[i], n = s < g->n_seqs ? g->off[s + 1] - g->off[s] : 0;
        if (n == 0 || pos <= g->p0[s] || pos > g->p0[s] + n || pos % g->align ||
            b->ck_save_id[i] < 0 || b->ck_save_id[i] >= g->n_ck)
            return -1;
        g->sv_seq[g->n_sv] = s;
        g->sv_pos[g->n_sv] = pos;
        g->sv_ck[g->n_sv++] = b->ck_save_id[i];
    }
    return 0;
}

/* The checkpoint sequence s saves once it reaches position pos, or NULL;
 * its layer rec's conv history, or with state its delta-rule state. */
static float *save_at(const struct pl_fwd_gdn *g, int rec, int s, int pos, bool state)
{
    for (int i = 0; i < g->n_sv; i++)
        if (g->sv_seq[i] == s && g->sv_pos[i] == pos) {
            float *c = g->ck + ((size_t)g->sv_ck[i] * g->n_rec + rec) * g->per_rec;
            return state ? c + (size_t)(g->K - 1) * g->C : c;
        }
    return NULL;
}

int pl_cpu_fwd_ckpt_load(pl_cpu_fwd *f, int ck, int slot, int pos)
{
    struct pl_fwd_gdn *g = f->gdn;
    if (!g || ck < 0 || ck >= g->n_ck || slot < 0 || slot >= g->slots || pos < 1)
        return -1;
    size_t hist = (size_t)(g->K - 1) * g->C, st = (size_t)g->nv * g->d * g->d;
    for (int rec = 0; rec < g->n_rec; rec++) {
        const float *c = g->ck + ((size_t)ck * g->n_rec + rec) * g->per_rec;
        memcpy(g->conv_state + ((size_t)rec * g->slots + slot) * hist, c, sizeof(float) * hist);
        memcpy(g->state + ((size_t)rec * g->slots + slot) * st, c + hist, sizeof(float) * st);
    }
    g->slot_pos[slot] = pos;
    return 0;
}

int pl_fwd_gdn_check_(pl_cpu_fwd *f, const pl_fwd_batch *b)
{
    struct pl_fwd_gdn *g = f->gdn;
    if (!g)
        return 0;
    int n = 0;
    for (int r = 0; r < b->n_rows; r++) {
        if (b->row_seq[r] < 0 || b->row_seq[r] >= f->o.max_rows)
            return -1;
        n = b->row_seq[r] + 1 > n ? b->row_seq[r] + 1 : n;
    }
    memset(g->off, 0, sizeof(int32_t) * (size_t)(n + 1));
    for (int r = 0; r < b->n_rows; r++)
        g->off[b->row_seq[r] + 1]++;
    for (int s = 0; s < n; s++)
        g->off[s + 1] += g->off[s];
    for (int r = 0; r < b->n_rows; r++)     /* slot_of: fill cursors, for now */
        g->slot_of[b->row_seq[r]] = 0;
    for (int r = 0; r < b->n_rows; r++) {
        int s = b->row_seq[r];
        g->rows[g->off[s] + g->slot_of[s]++] = r;
    }
    g->stamp++;
    g->n_seqs = n;
    for (int s = 0; s < n; s++)
        if (g->off[s + 1] > g->off[s] && check_seq(g, b, s) != 0)
            return -1;
    return check_saves(g, b);
}

void pl_fwd_gdn_commit_(pl_cpu_fwd *f, const pl_fwd_batch *b)
{
    struct pl_fwd_gdn *g = f->gdn;
    for (int s = 0; g && s < g->n_seqs; s++)
        if (g->off[s + 1] > g->off[s])
            g->slot_pos[g->slot_of[s]] = b->positions[g->rows[g->off[s + 1] - 1]] + 1;
}

void pl_fwd_gdn_plan_(pl_cpu_fwd *f, phase *in, int l, int n)
{
    struct pl_fwd_gdn *g = f->gdn;
    const pl_layer *y = &f->m->layers[l];
    const pl_weight *w4[] = {&y->ssm_qkv, &y->ssm_z, &y->ssm_beta, &y->ssm_alpha};
    const pl_weight *wo[] = {&y->ssm_out};
    float *y4[] = {g->qkv, g->z, g->beta, g->alpha}, *yt[] = {f->tmp};
    in->next = pl_fwd_ph_add_mm_(f, f->xn, n, 4, w4, y4);
    int slices = (g->C + CONV_SLICE - 1) / CONV_SLICE;
    pl_fwd_ph_add_(f, PH_GDN_CONV, l, g->n_seqs * slices, NULL);
    pl_fwd_ph_add_(f, PH_GDN_RULE, l, g->n_seqs * g->nv, NULL);
    phase *q8 = pl_fwd_ph_add_(f, PH_ROW_Q8, l, n, NULL);
    q8->next = pl_fwd_ph_add_mm_(f, g->out, n, 1, wo, yt);
    if (!q8->next->any_q)
        q8->n = 0;
}

/* Conv item: sequence s's rows over channels [c0, c0 + CONV_SLICE). */
static void conv_item(struct pl_fwd_gdn *g, int rec, int it)
{
    int slices = (g->C + CONV_SLICE - 1) / CONV_SLICE, s = it / slices;
    int c0 = it % slices * CONV_SLICE, n = g->C - c0 < CONV_SLICE ? g->C - c0 : CONV_SLICE;
    size_t C = (size_t)g->C;
    float *hist = g->conv_state + ((size_t)rec * g->slots + g->slot_of[s]) * (g->K - 1) * C;
    if (g->off[s + 1] == g->off[s])
        return;
    if (g->reset[s])
        for (int j = 0; j < g->K - 1; j++)
            memset(hist + (size_t)j * C + c0, 0, sizeof(float) * (size_t)n);
    const float *w = g->convw + (size_t)rec * g->K * C + c0;
    for (int i = g->off[s]; i < g->off[s + 1]; i++) {
        pl_op_ssm_conv_row(w, C, hist + c0, C, g->qkv + (size_t)g->rows[i] * C + c0, n, g->K);
        float *ck = g->n_sv ? save_at(g, rec, s, g->p0[s] + i - g->off[s] + 1, false) : NULL;
        for (int j = 0; ck && j < g->K - 1; j++)
            memcpy(ck + (size_t)j * C + c0, hist + (size_t)j * C + c0, sizeof(float) * (size_t)n);
    }
}

/* Row r's q and k of value head h (its key head h % nk), normalised (q
 * scaled by 1/sqrt(d)), into q and k; its log decay and beta. */
static void rule_inputs(const pl_cpu_fwd *f, int l, int r, int h, float *q, float *k,
                        float *log_g, float *beta)
{
    const struct pl_fwd_gdn *g = f->gdn;
    const pl_layer *y = &f->m->layers[l];
    int d = g->d, kh = h % g->nk;
    const float *row = g->qkv + (size_t)r * g->C;
    memcpy(q, row + (size_t)kh * d, sizeof(float) * d);
    memcpy(k, row + (size_t)(g->nk + kh) * d, sizeof(float) * d);
    pl_op_l2norm(q, d, f->m->rms_eps, 1.0f / sqrtf((float)d));
    pl_op_l2norm(k, d, f->m->rms_eps, 1.0f);
    *log_g = y->ssm_a[h] * softplus_(g->alpha[(size_t)r * g->nv + h] + y->ssm_dt[h]);
    *beta = 1.0f / (1.0f + expf(-g->beta[(size_t)r * g->nv + h]));
}

/* Rows [i0, i0 + T) of sequence s (T <= GDN_CHUNK) through the delta rule
 * of head h, then the gated RMSNorm into out. */
static void rule_rows(pl_cpu_fwd *f, int l, int s, int h, float *S, int i0, int T, float *scr)
{
    struct pl_fwd_gdn *g = f->gdn;
    const pl_layer *y = &f->m->layers[l];
    size_t d = (size_t)g->d;
    float *q = scr, *k = q + GDN_CHUNK * d, *v = k + GDN_CHUNK * d, *o = v + GDN_CHUNK * d;
    float *lg = o + GDN_CHUNK * d, *bt = lg + GDN_CHUNK, *rest = bt + GDN_CHUNK;
    for (int t = 0; t < T; t++) {
        int r = g->rows[g->off[s] + i0 + t];
        rule_inputs(f, l, r, h, q + t * d, k + t * d, lg + t, bt + t);
        memcpy(v + t * d, g->qkv + (size_t)r * g->C + (size_t)2 * g->nk * d + (size_t)h * d,
               sizeof(float) * d);
    }
    if (T >= GDN_CHUNK_MIN)
        pl_op_gdn_chunk(S, q, d, k, v, d, lg, bt, o, d, T, g->d, g->d, rest);
    else
        for (int t = 0; t < T; t++)
            pl_op_gdn_step(S, q + t * d, k + t * d, v + t * d, expf(lg[t]), bt[t], o + t * d,
                           g->d, g->d, rest);
    size_t inner = (size_t)g->nv * d;
    for (int t = 0; t < T; t++) {
        int r = g->rows[g->off[s] + i0 + t];
        pl_op_rmsnorm_gated(g->out + (size_t)r * inner + h * d, o + t * d, y->ssm_norm,
                            g->z + (size_t)r * inner + h * d, g->d, f->m->rms_eps);
    }
}

/* Rule item: sequence s's rows through value head h, chunk by chunk. */
static void rule_item(pl_cpu_fwd *f, int l, int rec, int it, int ith)
{
    struct pl_fwd_gdn *g = f->gdn;
    int s = it / g->nv, h = it % g->nv, n = g->off[s + 1] - g->off[s];
    if (n == 0)
        return;
    size_t dd = (size_t)g->d * g->d;
    float *S = g->state + (((size_t)rec * g->slots + g->slot_of[s]) * g->nv + h) * dd;
    if (g->reset[s])
        memset(S, 0, sizeof(float) * dd);
    /* Chunks end at multiples of align: the same chunks from position 0
     * whatever the calls were, so a checkpointed state resumes exactly. */
    for (int i0 = 0, T; i0 < n; i0 += T) {
        int p = g->p0[s] + i0, to_edge = g->align - p % g->align;
        T = n - i0 < GDN_CHUNK ? n - i0 : GDN_CHUNK;
        T = T < to_edge ? T : to_edge;
        rule_rows(f, l, s, h, S, i0, T, g->scratch + (size_t)ith * g->scr);
        float *ck = g->n_sv ? save_at(g, rec, s, p + T, true) : NULL;
        if (ck)
            memcpy(ck + (size_t)h * dd, S, sizeof(float) * dd);
    }
}

void pl_fwd_gdn_item_(pl_cpu_fwd *f, const phase *ph, int it, int ith)
{
    int rec = f->gdn->rec_of[ph->layer];
    if (ph->kind == PH_GDN_CONV)
        conv_item(f->gdn, rec, it);
    else
        rule_item(f, ph->layer, rec, it, ith);
}
