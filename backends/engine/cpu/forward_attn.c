/* forward_attn.c - the attention block of the CPU forward pass
 * (forward_internal.h): q/k/v after their projections (biases, norms,
 * rope, the query temperature, K = V), the K/V cache's slots, attention over
 * a row's blocks in one phase or split in three for a few long rows, and the
 * gated attention's output gate. Each value is computed by the same code
 * whichever plan or thread computes it (see forward.c). */
#include "backends/engine/cpu/forward_internal.h"

#include <math.h>
#include <string.h>

#define ATT_SPLIT_CTX 256        /* the split's default least context (attn_split_ctx) */
#define ATT_CHUNK 128            /* positions per scores item */
#define ATT_DIMS 32              /* output dims per values item (one q8 block) */

/* The start of a layer's slot in block blk (all its heads). */
static char *kv_at(const pl_cpu_fwd *f, void *cache, int layer, int32_t blk)
{
    size_t bs = (size_t)f->o.block_size;
    size_t slot = (size_t)blk * (size_t)f->lo.n_slots + (size_t)f->lo.layer_slot[layer];
    return (char *)cache + slot * bs * f->kv_dim * f->kv_esz;
}

/* Stores a K or V row (all heads) into slot `slot` of block `blk`, each
 * head's part into that head's rows (rounded to half when f16). */
static void kv_store(const pl_cpu_fwd *f, const pl_layer *y, char *blk, int slot,
                     const float *src)
{
    int hd = y->head_dim;
    for (int h = 0; h < y->n_head_kv; h++) {
        char *dst = blk + ((size_t)h * f->o.block_size + slot) * hd * f->kv_esz;
        if (f->o.kv_f16)
            pl_op_f32_to_f16_row((uint16_t *)(void *)dst, src + (size_t)h * hd, hd);
        else
            memcpy(dst, src + (size_t)h * hd, sizeof(float) * hd);
    }
}

/* Layer y's rotation of n heads at pos, then YaRN's magnitude factor on
 * their rotated dims (llama.cpp scales cos and sin by it). */
static void rope_rows(const pl_model *m, const pl_layer *y, float *x, int n, int pos)
{
    pl_op_rope(x, n, y->head_dim, y->n_rot, pos, y->rope_inv_freq, m->rope_neox);
    for (int h = 0; m->rope_mscale > 0 && m->rope_mscale != 1.0f && h < n; h++)
        for (int i = 0; i < y->n_rot; i++)
            x[(size_t)h * y->head_dim + i] *= m->rope_mscale;
}

/* A gated query projection's row r (per head: the query, then its gate)
 * into q and qgate. */
static void split_query_gate(pl_cpu_fwd *f, int r)
{
    int hd = f->m->head_dim;   /* qwen35: one head size */
    const float *src = f->qg + (size_t)r * 2 * f->q_dim;
    for (int h = 0; h < f->m->n_head; h++) {
        memcpy(f->q + (size_t)r * f->q_dim + (size_t)h * hd, src + (size_t)2 * h * hd,
               sizeof(float) * hd);
        memcpy(f->qgate + (size_t)r * f->q_dim + (size_t)h * hd, src + (size_t)(2 * h + 1) * hd,
               sizeof(float) * hd);
    }
}

/* att[r] *= sigmoid(gate[r]): the gated attention's output gate. */
void pl_fwd_attn_gate_row_(pl_cpu_fwd *f, int r)
{
    float *a = f->att + (size_t)r * f->q_dim;
    const float *g = f->qgate + (size_t)r * f->q_dim;
    for (int i = 0; i < f->q_dim; i++)
        a[i] *= 1.0f / (1.0f + expf(-g[i]));
}

/* Rope q/k of row r, add biases, and store its k/v into their cache slots
 * (a layer reading another's K/V only ropes its queries). */
void pl_fwd_qkv_finish_(pl_cpu_fwd *f, int l, int r)
{
    const pl_model *m = f->m;
    const pl_layer *y = &m->layers[l];
    const pl_fwd_batch *b = f->b;
    int qd = q_dim_(f, l), kvd = kv_dim_(f, l), nkv = y->n_head_kv;
    float *q = f->q + (size_t)r * qd, *k = f->k + (size_t)r * kvd;
    float *v = f->v + (size_t)r * kvd;
    if (m->attn_out_gate)
        split_query_gate(f, r);
    for (int i = 0; y->bq && i < qd; i++)
        q[i] += y->bq[i];
    int pos = b->positions[r], hd = y->head_dim;
    for (int h = 0; y->attn_q_norm && h < m->n_head; h++)
        pl_op_rmsnorm(q + (size_t)h * hd, q + (size_t)h * hd, y->attn_q_norm, hd, m->rms_eps);
    rope_rows(m, y, q, m->n_head, pos);
    float tq = m->attn_temp_scale > 0 ? query_temperature(m, pos) : 1;
    for (int i = 0; tq != 1 && i < qd; i++)
        q[i] *= tq;
    if (y->kv_src != l)
        return;
    if (!y->wv.rows)                       /* K = V, before the k norm */
        memcpy(v, k, sizeof(float) * kvd);
    for (int i = 0; y->bk && i < kvd; i++) {
        k[i] += y->bk[i];
        v[i] += y->bv[i];
    }
    for (int h = 0; y->attn_k_norm && h < nkv; h++)
        pl_op_rmsnorm(k + (size_t)h * hd, k + (size_t)h * hd, y->attn_k_norm, hd, m->rms_eps);
    for (int h = 0; m->v_norm && h < nkv; h++)
        pl_op_rmsnorm(v + (size_t)h * hd, v + (size_t)h * hd, NULL, hd, m->rms_eps);
    rope_rows(m, y, k, nkv, pos);
    int32_t blk = pl_fwd_row_blocks_(b, r, f->lo.layer_group[l])[pos / f->o.block_size];
    int slot = pos % f->o.block_size;
    kv_store(f, y, kv_at(f, f->k_cache, l, blk), slot, k);
    kv_store(f, y, kv_at(f, f->v_cache, l, blk), slot, v);
}

/* The first position row r attends to in layer l: its sliding window's
 * start, or 0. */
static int attn_first(const pl_cpu_fwd *f, int l, int r)
{
    int w = f->m->layers[l].n_swa, n_ctx = f->b->positions[r] + 1;
    return w > 0 && n_ctx > w ? n_ctx - w : 0;
}

/* The attention arguments of row r's kv head kh in layer l (the K/V of
 * the layer it reads). */
static pl_attn_args attn_args(const pl_cpu_fwd *f, int l, int r, int kh)
{
    int hd = f->m->layers[l].head_dim, src = f->m->layers[l].kv_src;
    return (pl_attn_args){.block_size = f->o.block_size,
                          .block_stride = (size_t)f->lo.n_slots * f->o.block_size * f->kv_dim,
                          .row_stride = (size_t)hd, .head_dim = hd,
                          .scale = f->m->attn_scale, .softcap = f->m->attn_softcap,
                          .first = attn_first(f, l, r),
                          .k_base = kv_at(f, f->k_cache, src, 0) +
                                    f->kv_esz * kh * f->o.block_size * hd,
                          .v_base = kv_at(f, f->v_cache, src, 0) +
                                    f->kv_esz * kh * f->o.block_size * hd,
                          .kv_f16 = f->o.kv_f16,
                          .block_table = pl_fwd_row_blocks_(f->b, r, f->lo.layer_group[src]),
                          .sinks = f->m->layers[l].attn_sinks};
}

/* Attention item it: (row, kv head, 1 of ph->split slices of its query
 * heads). Each query head's scores, softmax and sum are computed alone, so
 * the slicing does not change a value. With ph->next, also the q8 blocks of
 * the outputs it wrote (whole blocks: see plan_layer). */
static void attn_item(pl_cpu_fwd *f, const phase *ph, int it, int ith)
{
    const pl_model *m = f->m;
    const pl_layer *y = &m->layers[ph->layer];
    int per = y->n_head_kv * ph->split, nq = m->n_head / y->n_head_kv / ph->split;
    int r = it / per, kh = it % per / ph->split, hd = y->head_dim;
    pl_attn_args a = attn_args(f, ph->layer, r, kh);
    size_t off = (size_t)r * q_dim_(f, ph->layer) + (size_t)(it % per) * nq * hd;
    if (a.sinks)
        a.sinks += (it % per) * nq;  /* this item's first query head */
    pl_op_attention(&a, f->q + off, nq, f->b->positions[r] + 1, f->att + off,
                    f->attn_scr + (size_t)ith * m->n_head * f->o.max_ctx);
    if (ph->next)
        pl_op_quantize_row_q8(f->att + off, f->xq + off / PL_QK, nq * hd);
}

/* The split attention of a few long rows: pl_op_attention cut into three
 * phases whose items are position chunks, query heads and dim chunks, so
 * that every thread has work when there are fewer (row, kv head) pairs
 * than threads, and each K/V row is still read once per step. The parts
 * give the whole's values bit for bit (ops.h), so a row's outputs do not
 * depend on which plan ran. */
static void att_split_item(pl_cpu_fwd *f, const phase *ph, int it)
{
    const pl_model *m = f->m;
    const pl_layer *y = &m->layers[ph->layer];
    int group = m->n_head / y->n_head_kv, hd = y->head_dim;
    size_t ctx = (size_t)f->o.max_ctx;
    if (ph->kind == PH_ATT_SOFTMAX) {
        int r = it / m->n_head, first = attn_first(f, ph->layer, r);
        const float *sinks = m->layers[ph->layer].attn_sinks;
        float *sc = f->att_sc + (size_t)it * ctx + first;
        if (sinks)
            pl_op_softmax_sink(sc, f->b->positions[r] + 1 - first, sinks[it % m->n_head]);
        else
            pl_op_softmax(sc, f->b->positions[r] + 1 - first);
        return;
    }
    int per = y->n_head_kv * ph->split, r = it / per, kh = it % per / ph->split;
    int c = it % ph->split, n_ctx = f->b->positions[r] + 1;
    pl_attn_args a = attn_args(f, ph->layer, r, kh);
    float *sc = f->att_sc + ((size_t)r * m->n_head + (size_t)kh * group) * ctx;
    size_t off = (size_t)r * q_dim_(f, ph->layer) + (size_t)kh * group * hd;
    if (ph->kind == PH_ATT_SCORES) {
        int t0 = a.first + c * ATT_CHUNK, t1 = t0 + ATT_CHUNK < n_ctx ? t0 + ATT_CHUNK : n_ctx;
        if (t0 < t1)
            pl_op_attn_scores(&a, f->q + off, group, t0, t1, sc, ctx);
        return;
    }
    int d0 = c * ATT_DIMS, d1 = d0 + ATT_DIMS < hd ? d0 + ATT_DIMS : hd;
    pl_op_attn_values(&a, sc, ctx, group, n_ctx, d0, d1, f->att + off);
    for (int h = 0; ph->next && h < group; h++)   /* one whole q8 block each */
        pl_op_quantize_row_q8(f->att + off + (size_t)h * hd + d0,
                              f->xq + (off + (size_t)h * hd + d0) / PL_QK, ATT_DIMS);
}

/* Query heads of a (row, kv head) go to one attention item, which reads
 * the K/V rows once for all of them, unless there are fewer such items
 * than threads (decode on a wide pool): then each is cut into `split`
 * items of group / split query heads, each reading the rows again. The
 * least split that gives every thread an item: on 2 threads (AMD EPYC Zen
 * 4, SmolLM2 Q4_1, 3 kv heads of 3 query heads), one item per kv head
 * decoded 1.05x as fast as one per query head at context 512-768 and 1.08x
 * at 1,536-1,792 (medians of 8 alternating pairs: the re-reads cost more
 * than the thread left idle for a third of the phase). Slicing never
 * changes a value (see attn_item). */
static int attn_split(int group, int kv_items, int nth)
{
    int s = 1;
    while (kv_items * s < nth && s < group)
        for (s++; group % s; s++)
            ;
    return s;
}

/* The attention phases of layer l, then an (empty) PH_ROW_Q8 phase,
 * which it returns: one PH_ATTN phase, or the split attention when there
 * are at most ATT_SPLIT_ROWS rows, more than one thread and a row attends
 * to at least attn_split_ctx positions. */
static phase *plan_attention(pl_cpu_fwd *f, int l, int n)
{
    const pl_model *m = f->m;
    const pl_layer *y = &m->layers[l];
    int group = m->n_head / y->n_head_kv, kv_items = n * y->n_head_kv, max_ctx = 0;
    int nth = pl_pool_size(f->pool), min_ctx = f->o.attn_split_ctx;
    for (int r = 0; r < n; r++) {      /* the most positions a row attends to */
        int span = f->b->positions[r] + 1 - attn_first(f, l, r);
        max_ctx = span > max_ctx ? span : max_ctx;
    }
    if (min_ctx == 0)
        min_ctx = ATT_SPLIT_CTX;
    if (n <= ATT_SPLIT_ROWS && nth > 1 && min_ctx > 0 && max_ctx >= min_ctx) {
        int nc = (max_ctx + ATT_CHUNK - 1) / ATT_CHUNK;
        int nd = (y->head_dim + ATT_DIMS - 1) / ATT_DIMS;
        pl_fwd_ph_add_(f, PH_ATT_SCORES, l, kv_items * nc, NULL)->split = nc;
        pl_fwd_ph_add_(f, PH_ATT_SOFTMAX, l, n * m->n_head, NULL);
        pl_fwd_ph_add_(f, PH_ATT_VALUES, l, kv_items * nd, NULL)->split = nd;
    } else {
        int split = attn_split(group, kv_items, nth);
        pl_fwd_ph_add_(f, PH_ATTN, l, kv_items * split, NULL)->split = split;
    }
    return pl_fwd_ph_add_(f, PH_ROW_Q8, l, n, NULL);
}

/* Layer l's attention block over n rows (after its PH_ATTN_IN phase):
 * q/k/v, rope and the cache, attention, the output gate when the model has
 * one, attn_output into tmp. */
void pl_fwd_attn_plan_(pl_cpu_fwd *f, phase *in, int l, int n)
{
    const pl_layer *y = &f->m->layers[l];
    const pl_weight *wqkv[] = {&y->wq, &y->wk, &y->wv}, *wo[] = {&y->wo};
    float *yqkv[] = {f->m->attn_out_gate ? f->qg : f->q, f->k, f->v}, *yt[] = {f->tmp};
    /* q only for a layer reading another's K/V; q, k when K = V */
    int n_proj = y->kv_src != l ? 1 : y->wv.rows ? 3 : 2;
    in->next = pl_fwd_ph_add_mm_(f, f->xn, n, n_proj, wqkv, yqkv);
    pl_fwd_ph_add_(f, PH_QKV_FINISH, l, n, NULL);
    phase *q8 = plan_attention(f, l, n);
    q8->next = pl_fwd_ph_add_mm_(f, f->att, n, 1, wo, yt);
    if (f->m->attn_out_gate) {   /* gate, then quantise, row by row */
        q8->kind = PH_ATTN_GATE;
        return;
    }
    phase *at = q8 - 1;          /* the attention phase whose items write att */
    int whole = at->kind == PH_ATTN ? f->m->n_head / y->n_head_kv / at->split * y->head_dim
                                    : y->head_dim % ATT_DIMS ? 1 : ATT_DIMS;
    if (q8->next->any_q && whole % PL_QK == 0)
        at->next = q8->next;     /* each item's outputs are whole q8 blocks */
    if (!q8->next->any_q || at->next)
        q8->n = 0;
}

void pl_fwd_attn_item_(pl_cpu_fwd *f, const phase *ph, int it, int ith)
{
    if (ph->kind == PH_ATTN)
        attn_item(f, ph, it, ith);
    else
        att_split_item(f, ph, it);
}
