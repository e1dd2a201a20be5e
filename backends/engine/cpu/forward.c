/* forward.c - the forward pass of model.h's layers over a batch of rows (forward.h).
 *
 * A call is one run of the thread pool: a plan of phases (norms, matmuls,
 * rope, attention, ...) whose work items the threads take in order, with a
 * barrier between phases that counts finished items (pool.h). Matmul items
 * are slices of output features: many rows use single-threaded OpenBLAS
 * sgemm on f32 weights, few rows (decode) the quantised kernels on q8
 * activations. Each value is computed by the same code whichever thread
 * takes it, so results do not depend on threads or timing.
 */
#include "backends/engine/cpu/forward.h"
#include "backends/engine/cpu/forward_internal.h"
#include "backends/engine/cpu/hdot.h"
#include "backends/engine/cpu/qdot_amx.h"

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define PH_OUTSIDE 5             /* embed, final add, out norm, logits, softcap */
#define SOFTCAP_CHUNK 16384      /* logits per soft-capping item */
#define SW_CHUNK 256            /* swiglu elements per work item (a multiple of PL_QK) */

/* Quantised matmuls are one contiguous slice of output features per
 * thread. With 32-feature slices handed out alternately, two threads
 * decoded slower than one (AMD EPYC Zen 5, SmolLM2 Q4_1: 95 vs 105-112
 * tok/s at context 512; 2 threads with halves: 157-169; the longer
 * each thread's run of contiguous slices, the faster: 16, 32, 64, 128 KB
 * gave 126, 166, 204, 223 tok/s at context 16). Each thread's weight stream
 * broke every 11 KB; presumably the hardware prefetchers, running past the
 * end of a slice into the other thread's, fetched lines twice. Slices are
 * still taken dynamically, so a thread that starts late takes none and the
 * others do its share; and a thread that finishes its slice takes units
 * (~16 KB of weights) from the far end of the others', so one descheduled
 * mid-slice (a busy shared machine) stalls the step by at most a unit.
 * GEMM work items are larger too: OpenBLAS packs the whole activation
 * matrix on every call, so a few calls per thread keep that cost small. */
static int mm_chunk(const pl_weight *w, int use_f32, int nth)
{
    if (!use_f32)                /* one contiguous slice per thread */
        return ((w->rows + nth - 1) / nth + 15) / 16 * 16;
    int c = (w->rows / (2 * nth) + 15) / 16 * 16;
    return c < 64 ? 64 : c;
}

/* Output features per unit: ~UNIT_BYTES of quantised weights (a multiple
 * of 16), or the whole chunk for OpenBLAS. */
static int mm_unit_rows(const pl_weight *w, int use_f32, int size)
{
    if (use_f32)
        return size;
    int u = (int)(UNIT_BYTES / w->row_bytes + 15) / 16 * 16;
    return u < size ? u : size;
}

/* Slices per weight: at most 2 * nth + 1, whichever mm_chunk branch. */
static int max_spans(const pl_model *m, int nth)
{
    return (m->n_layer * MM_PER_LAYER + 1) * (2 * nth + 1);
}

phase *pl_fwd_ph_add_(pl_cpu_fwd *f, ph_kind kind, int layer, int n, const mm_job *next)
{
    phase *ph = &f->ph[f->n_ph++];
    *ph = (phase){.kind = kind, .layer = layer, .n = n, .next = next};
    return ph;
}

/* Adds the phase y[i] = x @ w[i]^T (n weights of the same input width);
 * returns its job, which a row phase before it names as `next`. */
static const mm_job *ph_add_mm(pl_cpu_fwd *f, const float *x, int n_rows, int n,
                               const pl_weight *const *w, float *const *y)
{
    phase *ph = pl_fwd_ph_add_(f, PH_MM, -1, 0, NULL);
    mm_job *j = &ph->mm;
    *j = (mm_job){.n = n, .n_rows = n_rows, .cols = w[0]->cols, .x = x,
                  .spans = f->spans + f->n_spans};
    int nth = pl_pool_size(f->pool);
    for (int i = 0; i < n; i++) {
        j->w[i] = w[i];
        j->y[i] = y[i];
        /* F16/BF16 (a checkpoint in its own precision) without an f32 copy,
         * or with few rows: their own kernels on the f32 activations */
        if (pl_op_hdot_supported(w[i]->type) && w[i]->q)
            j->use_f32[i] = w[i]->f32 && n_rows >= f->o.gemm_min_rows;
        else
            j->use_f32[i] = !pl_op_qdot_supported(w[i]->type) ||
                            (w[i]->f32 && n_rows >= f->o.gemm_min_rows);
        j->any_q |= !j->use_f32[i] && !pl_op_hdot_supported(w[i]->type);
        j->size[i] = mm_chunk(w[i], j->use_f32[i], nth);
        j->chunks[i] = (w[i]->rows + j->size[i] - 1) / j->size[i];
        j->unit[i] = mm_unit_rows(w[i], j->use_f32[i], j->size[i]);
        for (int c = 0; c < j->chunks[i]; c++) {
            int rows = w[i]->rows - c * j->size[i];
            rows = rows < j->size[i] ? rows : j->size[i];
            int units = (rows + j->unit[i] - 1) / j->unit[i];
            atomic_store_explicit(&j->spans[j->n_slices++].fb, (uint64_t)units,
                                  memory_order_relaxed);
            ph->n += units;          /* the barrier counts units */
        }
    }
    f->n_spans += j->n_slices;
    assert(f->n_spans <= f->max_spans);
    return j;
}

const mm_job *pl_fwd_ph_add_mm_(pl_cpu_fwd *f, const float *x, int n_rows, int n,
                                const pl_weight *const *w, float *const *y)
{
    return ph_add_mm(f, x, n_rows, n, w, y);
}

int pl_fwd_span_take_(span *sp, int from_back)
{
    uint64_t v = atomic_load_explicit(&sp->fb, memory_order_relaxed);
    for (;;) {
        uint32_t front = (uint32_t)(v >> 32), back = (uint32_t)v;
        if (front >= back)
            return -1;
        uint64_t nv = from_back ? v - 1 : v + (1ULL << 32);
        if (atomic_compare_exchange_weak(&sp->fb, &v, nv))
            return from_back ? (int)back - 1 : (int)front;
    }
}

/* Unit u of slice s: output features [o0, o1) of one weight. */
static void mm_unit(const pl_cpu_fwd *f, const mm_job *j, int s, int u)
{
    int i = 0;
    while (s >= j->chunks[i])
        s -= j->chunks[i++];
    const pl_weight *w = j->w[i];
    int end = (s + 1) * j->size[i] < w->rows ? (s + 1) * j->size[i] : w->rows;
    int o0 = s * j->size[i] + u * j->unit[i];
    int o1 = o0 + j->unit[i] < end ? o0 + j->unit[i] : end;
    if (j->use_f32[i])
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->n_rows, o1 - o0, w->cols,
                    1.0f, j->x, w->cols, w->f32 + (size_t)o0 * w->cols, w->cols,
                    0.0f, j->y[i] + o0, w->rows);
    else if (pl_op_hdot_supported(w->type))
        pl_op_hmatmul_rows(w->type, w->q, w->row_bytes, j->x, w->cols, j->n_rows,
                           j->y[i], w->rows, o0, o1);
    else if (f->o.amx && pl_amx_supported(w->type))
        pl_amx_qmatmul((pl_amx_mode)f->o.amx, w->type, w->q, w->row_bytes, f->xq,
                       w->cols / PL_QK, j->n_rows, j->y[i], w->rows, o0, o1);
    else
        pl_op_qmatmul_rows(w->type, w->q, w->row_bytes, f->xq, w->cols / PL_QK,
                           j->n_rows, j->y[i], w->rows, o0, o1);
}

static void add_row(float *x, const float *d, int n)
{
    for (int i = 0; i < n; i++)
        x[i] += d[i];
}

static void embed_row(pl_cpu_fwd *f, int r)
{
    const pl_weight *te = &f->m->tok_embd;
    float *dst = f->x + (size_t)r * te->cols, sc = f->m->embd_scale;
    int32_t id = f->b->tokens[r];
    if (te->f32)
        memcpy(dst, te->f32 + (size_t)id * te->cols, sizeof(float) * te->cols);
    else
        pl_op_dequant_row(te->type, (const uint8_t *)te->q + (size_t)id * te->row_bytes,
                          dst, te->cols);
    for (int i = 0; sc != 1.0f && i < te->cols; i++)
        dst[i] *= sc;
    if (f->m->n_ple > 0)
        pl_fwd_ple_inputs_(f, r, dst, id);
}

/* x += d, d first normalised by post_norm (gemma's post-norms) when given. */
static void add_block_out(float *x, float *d, const float *post_norm, int n, float eps)
{
    if (post_norm)
        pl_op_rmsnorm(d, d, post_norm, n, eps);
    add_row(x, d, n);
}

/* Layer l's dense FFN width: the shared expert's (f->n_ff) beside
 * experts, else the layer's own (Gemma 4 E2B's double-wide layers). */
static int dense_ff(const pl_cpu_fwd *f, int l)
{
    return f->m->n_ff_shexp ? f->n_ff : pl_layer_ff(f->m, &f->m->layers[l]);
}

/* Item it of the swiglu phase: a SW_CHUNK slice of a row, and its q8
 * blocks (element-wise and block-wise work: the same values however the
 * row is cut). */
static void swiglu_item(pl_cpu_fwd *f, int l, const mm_job *next, int it)
{
    int n_ff = dense_ff(f, l), per = (n_ff + SW_CHUNK - 1) / SW_CHUNK;
    int r = it / per, c0 = it % per * SW_CHUNK;
    int len = n_ff - c0 < SW_CHUNK ? n_ff - c0 : SW_CHUNK;
    size_t off = (size_t)r * n_ff + c0;
    if (f->m->ffn_act == PL_FFN_GELU_TANH)
        pl_op_geglu(f->gate + off, f->up + off, len);
    else if (f->m->ffn_act == PL_FFN_SWIGLU_OAI)
        pl_op_swiglu_oai(f->gate + off, f->up + off, len, PL_OAI_SWIGLU_ALPHA,
                         PL_OAI_SWIGLU_LIMIT);
    else
        pl_op_swiglu(f->gate + off, f->up + off, len);
    if (next->any_q)
        pl_op_quantize_row_q8(f->gate + off, f->xq + off / PL_QK, len);
}

/* The row phases' work on row (or output row) r. */
static void row_item(pl_cpu_fwd *f, const phase *ph, int r)
{
    const pl_model *m = f->m;
    const pl_layer *y = ph->layer >= 0 && ph->layer < m->n_layer ? &m->layers[ph->layer] : NULL;
    int e = m->n_embd;
    float *x = f->x + (size_t)r * e, *xn = f->xn + (size_t)r * e, *t = f->tmp + (size_t)r * e;
    switch (ph->kind) {
    case PH_EMBED: embed_row(f, r); break;
    case PH_ATTN_IN:
        if (ph->layer > 0 && !f->layer_end)
            add_block_out(x, t, m->layers[ph->layer - 1].ffn_post_norm, e, m->rms_eps);
        pl_op_rmsnorm(xn, x, y->attn_norm, e, m->rms_eps);
        break;
    case PH_QKV_FINISH: pl_fwd_qkv_finish_(f, ph->layer, r); break;
    case PH_FFN_IN:
        if (y->bo)
            add_row(t, y->bo, e);
        add_block_out(x, t, y->attn_post_norm, e, m->rms_eps);
        pl_op_rmsnorm(xn, x, y->ffn_norm, e, m->rms_eps);
        if (m->n_expert > 0)
            pl_fwd_moe_route_(f, ph->layer, r);
        break;
    case PH_SWIGLU:
        swiglu_item(f, ph->layer, ph->next, r);
        return;
    case PH_ATTN_GATE: pl_fwd_attn_gate_row_(f, r); break;
    case PH_FINAL_ADD:
        if (!f->layer_end)
            add_block_out(x, t, m->layers[m->n_layer - 1].ffn_post_norm, e, m->rms_eps);
        break;
    case PH_LAYER_END: pl_fwd_layer_end_(f, ph->layer, r); break;

    case PH_OUT_NORM:
        pl_op_rmsnorm(f->xo + (size_t)r * e, f->x + (size_t)f->out_rows[r] * e,
                      m->output_norm, e, m->rms_eps);
        break;
    default: break;
    }
    const mm_job *j = ph->next;
    if (j && j->any_q)
        pl_op_quantize_row_q8(j->x + (size_t)r * j->cols, f->xq + (size_t)r * (j->cols / PL_QK),
                              j->cols);
}

/* A thread's part of a matmul phase: the slices it takes, front to back,
 * then what is left of the others', from their backs. Returns the units
 * it computed. */
static int mm_phase(pl_cpu_fwd *f, phase *ph, int ith)
{
    const mm_job *j = &ph->mm;
    int done = 0;
    for (int s = atomic_fetch_add(&ph->taken, 1); s < j->n_slices;
         s = atomic_fetch_add(&ph->taken, 1))
        for (int u; (u = pl_fwd_span_take_(&j->spans[s], 0)) >= 0; done++)
            mm_unit(f, j, s, u);
    for (int k = 0; k < j->n_slices; k++) {
        int s = (k + ith) % j->n_slices;
        for (int u; (u = pl_fwd_span_take_(&j->spans[s], 1)) >= 0; done++)
            mm_unit(f, j, s, u);
    }
    return done;
}

/* Item it of the final soft-capping: a slice of one logits row. */
static void softcap_item(pl_cpu_fwd *f, int it)
{
    int nv = f->m->n_vocab, per = (nv + SOFTCAP_CHUNK - 1) / SOFTCAP_CHUNK;
    int c0 = it % per * SOFTCAP_CHUNK, len = nv - c0 < SOFTCAP_CHUNK ? nv - c0 : SOFTCAP_CHUNK;
    pl_op_softcap(f->logits + (size_t)(it / per) * nv + c0, len, f->m->final_softcap);
}

static void run_item(pl_cpu_fwd *f, const phase *ph, int it, int ith)
{
    if (ph->kind == PH_SOFTCAP)
        softcap_item(f, it);
    else if (ph->kind == PH_ATTN || (ph->kind >= PH_ATT_SCORES && ph->kind <= PH_ATT_VALUES))
        pl_fwd_attn_item_(f, ph, it, ith);
    else if (ph->kind == PH_GDN_CONV || ph->kind == PH_GDN_RULE)
        pl_fwd_gdn_item_(f, ph, it, ith);
    else
        row_item(f, ph, it);
}

/* Every thread walks the phases in order: it waits until all items of the
 * earlier phases are done, takes items of this phase until none are left,
 * and publishes how many it finished (one atomic per thread per phase, not
 * per item). A thread never holds an item while it waits, so one that is
 * descheduled at a barrier (a busy shared machine) holds nobody up. */
static void plan_worker(void *arg, int ith, int nth)
{
    (void)nth;
    pl_cpu_fwd *f = arg;
    for (int k = 0, base = 0; k < f->n_ph; base += f->ph[k++].n) {
        phase *ph = &f->ph[k];
        if (ph->n == 0)
            continue;
        pl_pool_wait_done(f->pool, ith, base);
        int mine = 0;
        if (ph->kind == PH_MM)
            mine = mm_phase(f, ph, ith);
        else if (ph->kind >= PH_MOE_GROUP)
            mine = pl_fwd_moe_phase_(f, ph, ith);
        else
            for (int it = atomic_fetch_add(&ph->taken, 1); it < ph->n;
                 it = atomic_fetch_add(&ph->taken, 1), mine++)
                run_item(f, ph, it, ith);
        if (mine)
            pl_pool_done(f->pool, mine);
    }
}

/* The output phases: final norm of rows[0..n) of x, then the logits. */
static void plan_output(pl_cpu_fwd *f, const int32_t *rows, int n, float *logits)
{
    const pl_model *m = f->m;
    const pl_weight *w[] = {&m->output};
    float *y[] = {logits};
    f->out_rows = rows;
    phase *norm = pl_fwd_ph_add_(f, PH_OUT_NORM, -1, n, NULL);
    norm->next = ph_add_mm(f, f->xo, n, 1, w, y);
    f->logits = logits;
    if (m->final_softcap > 0)
        pl_fwd_ph_add_(f, PH_SOFTCAP, -1, n * ((m->n_vocab + SOFTCAP_CHUNK - 1) / SOFTCAP_CHUNK), NULL);
}

static void plan_layer(pl_cpu_fwd *f, int l, int n)
{
    const pl_layer *y = &f->m->layers[l];
    bool sh = y->gate_inp_shexp != NULL;  /* the shared expert as the dense FFN */
    const pl_weight *wgu[] = {sh ? &y->gate_shexp : &y->w_gate, sh ? &y->up_shexp : &y->w_up};
    const pl_weight *wd[] = {sh ? &y->down_shexp : &y->w_down};
    float *ygu[] = {f->gate, f->up}, *yt[] = {f->tmp};
    phase *in = pl_fwd_ph_add_(f, PH_ATTN_IN, l, n, NULL);
    if (y->recurrent)
        pl_fwd_gdn_plan_(f, in, l, n);
    else
        pl_fwd_attn_plan_(f, in, l, n);
    phase *ffn = pl_fwd_ph_add_(f, PH_FFN_IN, l, n, NULL);
    if (f->m->n_expert > 0)      /* into tmp, or tmp2 beside a dense FFN */
        pl_fwd_moe_plan_(f, l, n);
    if (f->n_ff > 0) {           /* into tmp; its input's q8 (xq) outlives the experts' */
        ffn->next = ph_add_mm(f, f->xn, n, 2, wgu, ygu);
        int items = n * ((dense_ff(f, l) + SW_CHUNK - 1) / SW_CHUNK);
        phase *sw = pl_fwd_ph_add_(f, PH_SWIGLU, l, items, NULL);
        sw->next = ph_add_mm(f, f->gate, n, 1, wd, yt);
    }
    if (f->layer_end)
        pl_fwd_ph_add_(f, PH_LAYER_END, l, n, NULL);
}

static int check_batch(const pl_cpu_fwd *f, const pl_fwd_batch *b)
{
    if (b->n_rows < 1 || b->n_rows > f->o.max_rows || b->n_out < 0 || b->n_out > f->o.max_out ||
        (b->n_groups > 0 ? b->n_groups : 1) != f->lo.n_groups)
        return -1;
    for (int r = 0; r < b->n_rows; r++) {
        int pos = b->positions[r];
        if (b->tokens[r] < 0 || b->tokens[r] >= f->m->n_vocab || pos < 0 ||
            pos >= f->o.max_ctx || pos / f->o.block_size >= b->max_blocks_per_seq)
            return -1;
        for (int g = 0; g < f->lo.n_groups; g++) {
            int32_t blk = pl_fwd_row_blocks_(b, r, g)[pos / f->o.block_size];
            if (blk < 0 || blk >= f->o.num_blocks)
                return -1;
        }
    }
    for (int i = 0; i < b->n_out; i++)
        if (b->out_rows[i] < 0 || b->out_rows[i] >= b->n_rows)
            return -1;
    return 0;
}

int pl_cpu_forward(pl_cpu_fwd *f, const pl_fwd_batch *b, float *logits)
{
    const pl_model *m = f->m;
    f->last_rows = 0;
    if (check_batch(f, b) != 0 || pl_fwd_gdn_check_(f, b) != 0)
        return -1;
    f->b = b;
    f->n_ph = 0;
    f->n_spans = 0;
    pl_fwd_ph_add_(f, PH_EMBED, -1, b->n_rows, NULL);
    for (int l = 0; l < m->n_layer; l++)
        plan_layer(f, l, b->n_rows);
    if (m->n_layer > 0)
        pl_fwd_ph_add_(f, PH_FINAL_ADD, m->n_layer, b->n_rows, NULL);
    if (b->n_out > 0)
        plan_output(f, b->out_rows, b->n_out, logits);
    pl_pool_run(f->pool, plan_worker, f);
    pl_fwd_gdn_commit_(f, b);
    f->b = NULL;
    f->last_rows = b->n_rows;
    return 0;
}

int pl_cpu_fwd_row_logits(pl_cpu_fwd *f, const int32_t *rows, int n, float *logits)
{
    if (n < 1 || n > f->o.max_out)
        return -1;
    for (int i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= f->last_rows)
            return -1;
    f->n_ph = 0;
    f->n_spans = 0;
    plan_output(f, rows, n, logits);
    pl_pool_run(f->pool, plan_worker, f);
    return 0;
}

int pl_cpu_fwd_row_hidden(pl_cpu_fwd *f, const int32_t *rows, int n, float *out)
{
    const pl_model *m = f->m;
    if (n < 0 || m->n_layer < 1)
        return -1;
    for (int i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= f->last_rows)
            return -1;
    for (int i = 0; i < n; i++)
        pl_op_rmsnorm(out + (size_t)i * m->n_embd, f->x + (size_t)rows[i] * m->n_embd,
                      m->output_norm, m->n_embd, m->rms_eps);
    return 0;
}

void pl_cpu_fwd_copy_block(pl_cpu_fwd *f, int32_t src, int32_t dst)
{
    if (src < 0 || dst < 0 || src >= f->o.num_blocks || dst >= f->o.num_blocks || src == dst)
        return;
    size_t n = f->kv_esz * (size_t)f->lo.n_slots * (size_t)f->o.block_size * f->kv_dim;
    size_t d = (size_t)dst * n, s = (size_t)src * n;
    memcpy((char *)f->k_cache + d, (char *)f->k_cache + s, n);
    memcpy((char *)f->v_cache + d, (char *)f->v_cache + s, n);
}

void pl_cpu_fwd_set_gemm_min_rows(pl_cpu_fwd *f, int rows) { f->o.gemm_min_rows = rows; }

void pl_cpu_fwd_set_amx(pl_cpu_fwd *f, int amx) { f->o.amx = amx; }

static void *alloc_f(size_t n, int *bad)
{
    void *p = calloc(n ? n : 1, sizeof(float));
    if (!p)
        *bad = 1;
    return p;
}

/* n floats of K/V cache, on transparent huge pages where the kernel gives
 * them only on request (THP "madvise"): a block holds every layer's rows, so a
 * layer's head rows of consecutive positions lie a block (~180 KB on
 * SmolLM2) apart, a new 4 KB page every 16 positions, and attention's TLB
 * misses grew with the context (SmolLM2 Q8_0 decode at 1,024-1,536
 * positions: 1.14x with them, Zen 4). Untouched calloc memory: pages are
 * faulted in after the advice. A hint only; nothing fails without it. */
static void *alloc_kv(size_t n, int *bad)
{
    void *p = alloc_f(n, bad);
#ifdef MADV_HUGEPAGE
    uintptr_t b = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
    uintptr_t e = ((uintptr_t)p + n * sizeof(float)) & ~(uintptr_t)4095;
    if (p && e > b)
        (void)madvise((void *)b, e - b, MADV_HUGEPAGE);
#endif
    return p;
}

pl_cpu_fwd *pl_cpu_fwd_new(const pl_model *m, pl_pool *pool, const pl_fwd_opts *o,
                           char *err, size_t errlen)
{
    pl_cpu_fwd *f = calloc(1, sizeof(*f));
    int bad = !f;
    if (bad)
        goto fail;
    f->m = m;
    f->pool = pool;
    f->o = *o;
    f->q_dim = m->q_dim;
    f->kv_dim = m->kv_dim;
    /* the dense FFN's width: the shared expert's, none beside experts alone */
    int n_ff = f->n_ff = m->n_ff_shexp ? m->n_ff_shexp
                         : m->n_expert && !m->moe_beside ? 0 : m->n_ff;
    f->max_in = n_ff > f->q_dim ? n_ff : f->q_dim;
    f->max_in = f->max_in > m->n_embd ? f->max_in : m->n_embd;
    f->max_in = f->max_in > m->ssm_d_inner ? f->max_in : m->ssm_d_inner;
    size_t R = (size_t)o->max_rows;
    if (o->kv_layout ? o->kv_layout->n_layer != m->n_layer
                     : pl_kv_layout_init_full(&f->lo, m->n_layer) < 0) {
        snprintf(err, errlen, "the K/V cache layout does not fit the model's %d layers",
                 m->n_layer);
        pl_cpu_fwd_free(f);
        return NULL;
    }
    if (o->kv_layout)
        f->lo = *o->kv_layout;
    f->o.kv_layout = NULL;
    size_t kv = (size_t)f->lo.n_slots * o->num_blocks * o->block_size * f->kv_dim;
    f->o.kv_f16 = o->kv_f16 && m->head_dim <= PL_ATTN_MAX_F16_HEAD_DIM &&
                  m->head_dim_swa <= PL_ATTN_MAX_F16_HEAD_DIM;
    f->kv_esz = f->o.kv_f16 ? 2 : 4;
    f->k_cache = alloc_kv(kv * f->kv_esz / 4 + 1, &bad);
    f->v_cache = alloc_kv(kv * f->kv_esz / 4 + 1, &bad);
    f->x = alloc_f(R * m->n_embd, &bad);
    f->xn = alloc_f(R * m->n_embd, &bad);
    f->tmp = alloc_f(R * m->n_embd, &bad);
    f->q = alloc_f(R * f->q_dim, &bad);
    f->att = alloc_f(R * f->q_dim, &bad);
    f->k = alloc_f(R * f->kv_dim, &bad);
    f->v = alloc_f(R * f->kv_dim, &bad);
    f->gate = alloc_f(R * n_ff, &bad);
    f->up = alloc_f(R * n_ff, &bad);
    f->xo = alloc_f((size_t)o->max_out * m->n_embd + 1, &bad);
    for (int l = 0; l < m->n_layer; l++)
        f->layer_end |= m->layers[l].out_scale != NULL;
    f->layer_end |= m->n_ple > 0 || m->moe_beside || m->n_ff_shexp;
    f->tmp2 = m->moe_beside || m->n_ff_shexp ? alloc_f(R * m->n_embd, &bad) : NULL;
    if (m->n_ple > 0) {
        f->ple = alloc_f(R * m->n_layer * m->n_ple, &bad);
        f->ple_g = alloc_f(R * m->n_ple, &bad);
    }
    if (m->attn_out_gate) {
        f->qg = alloc_f(R * 2 * f->q_dim, &bad);
        f->qgate = alloc_f(R * f->q_dim, &bad);
    }
    f->attn_scr = alloc_f((size_t)pl_pool_size(pool) * m->n_head * o->max_ctx, &bad);
    f->att_sc = alloc_f((size_t)ATT_SPLIT_ROWS * m->n_head * o->max_ctx, &bad);
    f->xq = calloc(R * (f->max_in / PL_QK) + 1, sizeof(pl_q8_act));
    f->ph = calloc((size_t)m->n_layer * PH_PER_LAYER + PH_OUTSIDE, sizeof(*f->ph));
    f->max_spans = max_spans(m, pl_pool_size(pool));
    f->spans = aligned_alloc(64, (size_t)f->max_spans * sizeof(span));
    if (bad || !f->xq || !f->ph || !f->spans)
        goto fail;
    bool ff_ok = true;
    for (int l = 0; f->n_ff > 0 && l < m->n_layer; l++)   /* the dense FFN's, where used */
        ff_ok &= dense_ff(f, l) % PL_QK == 0;
    if (m->n_embd % PL_QK || n_ff % PL_QK || f->q_dim % PL_QK || !ff_ok) {
        snprintf(err, errlen, "model widths must be multiples of %d", PL_QK);
        pl_cpu_fwd_free(f);
        return NULL;
    }
    if (pl_fwd_moe_init_(f, err, errlen) != 0 || pl_fwd_gdn_init_(f, err, errlen) != 0) {
        pl_cpu_fwd_free(f);
        return NULL;
    }
    return f;
fail:
    snprintf(err, errlen, "out of memory for the CPU forward buffers / KV pool");
    pl_cpu_fwd_free(f);
    return NULL;
}

void pl_cpu_fwd_free(pl_cpu_fwd *f)
{
    if (!f)
        return;
    float *bufs[] = {f->k_cache, f->v_cache, f->x, f->xn, f->tmp, f->q, f->att, f->k,
                     f->v, f->gate, f->up, f->xo, f->attn_scr, f->att_sc, f->qg, f->qgate,
                     f->ple, f->ple_g, f->tmp2};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        free(bufs[i]);
    free(f->xq);
    free(f->ph);
    free(f->spans);
    pl_fwd_moe_free_(f);
    pl_fwd_gdn_free_(f);
    free(f);
}
