/* forward_moe.c - the expert blocks of the CPU forward pass (model.h's
 * formula): each row is routed after its FFN norm (pl_fwd_moe_route_, in
 * PH_FFN_IN's row items), then the call's rows are grouped by expert:
 *
 *   PH_MOE_GROUP    one item: a counting sort of the (row, rank) pairs by
 *                   expert, rows ascending within each (pl_op_moe_group),
 *                   so every expert's inputs are one run of places;
 *   PH_MOE_GATHER   each place gets its row's q8 input (f32 for float
 *                   experts): the quantised kernels read them as one batch;
 *   PH_MOE_UP       units of (expert, a slice of its features): gate and up
 *                   on the expert's quantised weights for all its rows,
 *                   biases, the activation, and the q8 blocks of the down
 *                   projection's input;
 *   PH_MOE_DOWN     units of (expert, a slice of n_embd): the down
 *                   projection (+ bias) of every place of the expert;
 *   PH_MOE_COMBINE  per row: tmp = sum over its ranks, in rank order, of
 *                   weight * output (the scatter-add, in a fixed order).
 *
 * The units of UP and DOWN are (active expert, slice) in expert order,
 * split into one contiguous run per thread, each thread taking units from
 * the front of its run and, when done, from the back of the others' (as
 * the dense matmuls' spans): at decode (one row, k experts) two threads
 * share the k experts' slices; at prefill (many rows) the same units carry
 * more rows each. How many experts are active is known only after routing,
 * so the plan counts the most there can be, and the thread that takes the
 * first run also counts the units that do not exist. Every value is
 * computed by the same code whoever takes it, and a row's outputs do not
 * depend on the other rows of its batch: the quantised kernels give each
 * activation row the single-row sum bit for bit.
 */
#include "backends/engine/cpu/forward_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOE_UNIT_BYTES (64 * 1024) /* weight bytes of one unit, about */

struct pl_fwd_moe {
    int k, max_slots, nth;
    int32_t *sel;                /* (max_rows, k) chosen experts, by rank */
    float *wt;                   /* (max_rows, k) their weights */
    int32_t *slot_of;            /* (max_rows, k) the place of (row, rank) */
    int32_t *row_of;             /* (max_slots) the row at each place */
    int32_t *act_e, *act_off, *act_cnt; /* (n_expert) active experts, first
                                           place, places */
    int32_t *count, *offsets;    /* (n_expert), (n_expert + 1) the grouping's */
    int n_active, units[2];      /* this layer's; units of UP and DOWN */
    float *xe;                   /* (max_rows, n_embd) the experts' own input
                                    beside a dense FFN (moe_beside), else NULL */
    pl_q8_act *xeq;              /* (max_rows, n_embd / 32) its q8 blocks */
    pl_q8_act *xg;               /* (max_slots, n_embd / 32) gathered inputs */
    float *xgf;                  /* (max_slots, n_embd) the same in f32 (float
                                    gate/up experts), or NULL */
    pl_q8_act *hq;               /* (max_slots, n_ff_exp / 32) down's input */
    float *h;                    /* (max_slots, n_ff_exp) the same in f32 (float
                                    down experts), or NULL */
    float *y;                    /* (max_slots, n_embd) each place's output */
    float *scr;                  /* (nth, 2, max_rows, max unit features)
                                    a unit's gate and up */
    int scr_w;                   /* max unit features */
    span *spans;                 /* (n_layer, 2, nth) UP's and DOWN's runs:
                                    a layer's own, so a thread still looking
                                    for units of a layer whose units are all
                                    done (having done none, the others did
                                    not wait for it) finds none, never the
                                    next layer's */
};

static int is_f32(const pl_experts *x) { return x->w.f32 != NULL; }

/* Features per unit of a projection of `rows` outputs: ~MOE_UNIT_BYTES of
 * weights for `mats` matrices, a multiple of `align`. */
static int unit_rows(const pl_experts *x, int mats, int align)
{
    size_t rb = x->w.f32 ? sizeof(float) * (size_t)x->w.cols : x->w.row_bytes;
    int u = (int)(MOE_UNIT_BYTES / ((size_t)mats * rb)) / align * align;
    u = u < align ? align : u;
    return u < x->w.rows ? u : x->w.rows;
}

static int up_rows(const pl_layer *y)
{
    return unit_rows(&y->gate_exps, 2, is_f32(&y->down_exps) ? 8 : PL_QK);
}

static int down_rows(const pl_layer *y) { return unit_rows(&y->down_exps, 1, 16); }

static int moe_check(const pl_model *m, char *err, size_t len)
{
    for (int l = 0; l < m->n_layer; l++) {
        const pl_layer *y = &m->layers[l];
        const pl_experts *x[] = {&y->gate_exps, &y->up_exps, &y->down_exps};
        for (int i = 0; i < 3; i++)
            if (!x[i]->w.f32 && !pl_op_qdot_supported(x[i]->w.type)) {
                snprintf(err, len, "layer %d: experts of type %s have no CPU kernel", l,
                         pl_ggml_type_name(x[i]->w.type));
                return -1;
            }
        if (!y->gate_inp.f32 || y->gate_exps.w.type != y->up_exps.w.type ||
            is_f32(&y->gate_exps) != is_f32(&y->up_exps)) {
            snprintf(err, len, "layer %d: gate and up experts of different types", l);
            return -1;
        }
    }
    return 0;
}

static void *alloc_z(size_t n, size_t sz, int *bad)
{
    void *p = calloc(n ? n : 1, sz);
    *bad |= !p;
    return p;
}

/* The widest unit of any layer, and which kinds of input any layer reads. */
static void moe_shapes(const pl_model *m, int *scr_w, int *f32_in, int *f32_down)
{
    *scr_w = *f32_in = *f32_down = 0;
    for (int l = 0; l < m->n_layer; l++) {
        const pl_layer *y = &m->layers[l];
        int w = up_rows(y);
        *scr_w = w > *scr_w ? w : *scr_w;
        *f32_in |= is_f32(&y->gate_exps);
        *f32_down |= is_f32(&y->down_exps);
    }
}

int pl_fwd_moe_init_(pl_cpu_fwd *f, char *err, size_t len)
{
    const pl_model *m = f->m;
    if (m->n_expert == 0)
        return 0;
    if (moe_check(m, err, len))
        return -1;
    struct pl_fwd_moe *mo = calloc(1, sizeof(*mo));
    int bad = !mo, f32_in, f32_down;
    if (bad)
        goto oom;
    f->moe = mo;
    size_t R = (size_t)f->o.max_rows, S = R * (size_t)m->n_expert_used;
    size_t E = (size_t)m->n_expert, ne = (size_t)m->n_embd, nf = (size_t)m->n_ff_exp;
    mo->k = m->n_expert_used;
    mo->max_slots = (int)S;
    mo->nth = pl_pool_size(f->pool);
    moe_shapes(m, &mo->scr_w, &f32_in, &f32_down);
    mo->sel = alloc_z(S, sizeof(int32_t), &bad);
    mo->wt = alloc_z(S, sizeof(float), &bad);
    mo->slot_of = alloc_z(S, sizeof(int32_t), &bad);
    mo->row_of = alloc_z(S, sizeof(int32_t), &bad);
    mo->act_e = alloc_z(E, sizeof(int32_t), &bad);
    mo->act_off = alloc_z(E, sizeof(int32_t), &bad);
    mo->act_cnt = alloc_z(E, sizeof(int32_t), &bad);
    mo->count = alloc_z(E, sizeof(int32_t), &bad);
    mo->offsets = alloc_z(E + 1, sizeof(int32_t), &bad);
    if (m->moe_beside) {
        mo->xe = alloc_z(R * ne, sizeof(float), &bad);
        mo->xeq = alloc_z(R * (ne / PL_QK), sizeof(pl_q8_act), &bad);
    }
    mo->xg = alloc_z(S * (ne / PL_QK), sizeof(pl_q8_act), &bad);
    mo->xgf = f32_in ? alloc_z(S * ne, sizeof(float), &bad) : NULL;
    mo->hq = alloc_z(S * (nf / PL_QK), sizeof(pl_q8_act), &bad);
    mo->h = f32_down ? alloc_z(S * nf, sizeof(float), &bad) : NULL;
    mo->y = alloc_z(S * ne, sizeof(float), &bad);
    mo->scr = alloc_z((size_t)mo->nth * 2 * R * (size_t)mo->scr_w, sizeof(float), &bad);
    mo->spans = aligned_alloc(64, (size_t)m->n_layer * 2 * (size_t)mo->nth * sizeof(span));
    if (!bad && mo->spans)
        return 0;
oom:
    snprintf(err, len, "out of memory for the expert buffers");
    return -1;
}

void pl_fwd_moe_free_(pl_cpu_fwd *f)
{
    struct pl_fwd_moe *mo = f->moe;
    if (!mo)
        return;
    void *p[] = {mo->sel, mo->wt, mo->slot_of, mo->row_of, mo->act_e, mo->act_off,
                 mo->act_cnt, mo->count, mo->offsets, mo->xe, mo->xeq, mo->xg, mo->xgf, mo->hq,
                 mo->h, mo->y, mo->scr, mo->spans};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        free(p[i]);
    free(mo);
    f->moe = NULL;
}

/* Beside a dense FFN (model.h): the router reads rmsnorm(x) / sqrt(n_embd)
 * * gate_inp_s, into xe, which then gets the experts' input,
 * rmsnorm(x, pre_ffw_norm_2). */
static void beside_router_in(const pl_cpu_fwd *f, const pl_layer *y, int r, float *xe)
{
    int ne = f->m->n_embd;
    const float *x = f->x + (size_t)r * ne;
    float s = 1.0f / sqrtf((float)ne);
    pl_op_rmsnorm(xe, x, NULL, ne, f->m->rms_eps);
    for (int i = 0; i < ne; i++)
        xe[i] = xe[i] * s * y->gate_inp_s[i];
}

void pl_fwd_moe_route_(pl_cpu_fwd *f, int l, int r)
{
    const pl_model *m = f->m;
    const pl_layer *y = &m->layers[l];
    struct pl_fwd_moe *mo = f->moe;
    int ne = m->n_embd, E = m->n_expert, k = mo->k;
    const float *xn = f->xn + (size_t)r * ne;
    float lg[PL_MOE_MAX_EXPERTS], *xe = mo->xe ? mo->xe + (size_t)r * ne : NULL;
    if (xe) {
        beside_router_in(f, y, r, xe);
        xn = xe;
    }
    for (int e = 0; e < E; e++)
        lg[e] = pl_op_dot_f32(y->gate_inp.f32 + (size_t)e * ne, xn, ne) +
                (y->gate_inp_b ? y->gate_inp_b[e] : 0.0f);
    int32_t *sel = mo->sel + (size_t)r * k;
    float *wt = mo->wt + (size_t)r * k;
    pl_op_moe_route(lg, E, k, m->moe_gating == PL_MOE_TOPK_SOFTMAX, m->moe_norm_w, sel, wt);
    for (int j = 0; y->down_exps_s && j < k; j++)
        wt[j] *= y->down_exps_s[sel[j]];
    if (xe)
        pl_op_rmsnorm(xe, f->x + (size_t)r * ne, y->ffn_pre_norm_2, ne, m->rms_eps);
    if (!is_f32(&y->gate_exps))
        pl_op_quantize_row_q8(xn, (xe ? mo->xeq : f->xq) + (size_t)r * (ne / PL_QK), ne);
}

/* Splits units [0, n) into one contiguous run per thread. */
static void runs_init(span *sp, int nth, int n)
{
    for (int i = 0; i < nth; i++) {
        uint64_t b = (uint64_t)n * i / nth, e = (uint64_t)n * (i + 1) / nth;
        atomic_store_explicit(&sp[i].fb, b << 32 | e, memory_order_relaxed);
    }
}

/* PH_MOE_GROUP: the places of each (row, rank), expert by expert; then
 * the runs of UP and DOWN (their phases follow GATHER in the plan). */
static void moe_group(pl_cpu_fwd *f, const phase *ph)
{
    struct pl_fwd_moe *mo = f->moe;
    int E = f->m->n_expert, a = 0;
    pl_op_moe_group(mo->sel, f->b->n_rows * mo->k, mo->k, E, mo->count, mo->offsets,
                    mo->slot_of, mo->row_of);
    for (int e = 0; e < E; e++) {
        if (!mo->count[e])
            continue;
        mo->act_e[a] = e;
        mo->act_off[a] = mo->offsets[e];
        mo->act_cnt[a++] = mo->count[e];
    }
    mo->n_active = a;
    const pl_layer *y = &f->m->layers[ph->layer];
    mo->units[0] = a * ((y->gate_exps.w.rows + ph[2].split - 1) / ph[2].split);
    mo->units[1] = a * ((y->down_exps.w.rows + ph[3].split - 1) / ph[3].split);
    span *sp = mo->spans + (size_t)ph->layer * 2 * mo->nth;
    runs_init(sp, mo->nth, mo->units[0]);
    runs_init(sp + mo->nth, mo->nth, mo->units[1]);
}

/* PH_MOE_GATHER: place s gets its row's input. */
static void moe_gather(pl_cpu_fwd *f, const phase *ph, int s)
{
    struct pl_fwd_moe *mo = f->moe;
    const pl_layer *y = &f->m->layers[ph->layer];
    size_t ne = (size_t)f->m->n_embd;
    if (is_f32(&y->gate_exps))
        pl_op_moe_gather(mo->xe ? mo->xe : f->xn, sizeof(float) * ne, mo->row_of, s, s + 1,
                         mo->xgf);
    else
        pl_op_moe_gather(mo->xe ? mo->xeq : f->xq, sizeof(pl_q8_act) * (ne / PL_QK),
                         mo->row_of, s, s + 1, mo->xg);
}

/* out[i, o - o0] = x_i . row o of w for places [p0, p0 + cnt), o in
 * [o0, o1) (ldo apart): the quantised kernels on q8 inputs, or f32 dots. */
static void expert_mm(const pl_weight *w, const pl_q8_act *xq, const float *xf, int p0, int cnt,
                      int o0, int o1, float *out, int ldo)
{
    int nb = w->cols / PL_QK;
    if (!w->f32) {
        pl_op_qmatmul_rows(w->type, (const char *)w->q + (size_t)o0 * w->row_bytes,
                           w->row_bytes, xq + (size_t)p0 * nb, nb, cnt, out, ldo, 0, o1 - o0);
        return;
    }
    for (int i = 0; i < cnt; i++)
        for (int o = o0; o < o1; o++)
            out[(size_t)i * ldo + o - o0] =
                pl_op_dot_f32(w->f32 + (size_t)o * w->cols, xf + (size_t)(p0 + i) * w->cols,
                              w->cols);
}

static void act_row(pl_ffn_act act, float *g, const float *u, int n)
{
    if (act == PL_FFN_SWIGLU_OAI)
        pl_op_swiglu_oai(g, u, n, PL_OAI_SWIGLU_ALPHA, PL_OAI_SWIGLU_LIMIT);
    else if (act == PL_FFN_GELU_TANH)
        pl_op_geglu(g, u, n);
    else
        pl_op_swiglu(g, u, n);
}

static void add_bias(float *x, const float *b, int n)
{
    for (int i = 0; b && i < n; i++)
        x[i] += b[i];
}

/* Unit u of PH_MOE_UP: features [o0, o1) of active expert u / chunks. */
static void moe_up(pl_cpu_fwd *f, const phase *ph, int u, int ith)
{
    const pl_model *m = f->m;
    const pl_layer *y = &m->layers[ph->layer];
    struct pl_fwd_moe *mo = f->moe;
    int nf = m->n_ff_exp, chunks = (nf + ph->split - 1) / ph->split, a = u / chunks;
    int e = mo->act_e[a], p0 = mo->act_off[a], cnt = mo->act_cnt[a];
    int o0 = u % chunks * ph->split, o1 = o0 + ph->split < nf ? o0 + ph->split : nf, w = o1 - o0;
    float *g = mo->scr + (size_t)ith * 2 * f->o.max_rows * mo->scr_w;
    float *up = g + (size_t)f->o.max_rows * mo->scr_w;
    pl_weight wg = pl_experts_at(&y->gate_exps, e), wu = pl_experts_at(&y->up_exps, e);
    expert_mm(&wg, mo->xg, mo->xgf, p0, cnt, o0, o1, g, w);
    expert_mm(&wu, mo->xg, mo->xgf, p0, cnt, o0, o1, up, w);
    for (int i = 0; i < cnt; i++) {
        float *gi = g + (size_t)i * w, *ui = up + (size_t)i * w;
        add_bias(gi, y->gate_exps_b ? y->gate_exps_b + (size_t)e * nf + o0 : NULL, w);
        add_bias(ui, y->up_exps_b ? y->up_exps_b + (size_t)e * nf + o0 : NULL, w);
        act_row(m->ffn_act, gi, ui, w);
        size_t p = (size_t)(p0 + i);
        if (mo->h)
            memcpy(mo->h + p * nf + o0, gi, sizeof(float) * (size_t)w);
        else
            pl_op_quantize_row_q8(gi, mo->hq + p * (nf / PL_QK) + o0 / PL_QK, w);
    }
}

/* Unit u of PH_MOE_DOWN: outputs [o0, o1) of active expert u / chunks. */
static void moe_down(pl_cpu_fwd *f, const phase *ph, int u)
{
    const pl_model *m = f->m;
    const pl_layer *y = &m->layers[ph->layer];
    struct pl_fwd_moe *mo = f->moe;
    int ne = m->n_embd, chunks = (ne + ph->split - 1) / ph->split, a = u / chunks;
    int e = mo->act_e[a], p0 = mo->act_off[a], cnt = mo->act_cnt[a];
    int o0 = u % chunks * ph->split, o1 = o0 + ph->split < ne ? o0 + ph->split : ne;
    pl_weight wd = pl_experts_at(&y->down_exps, e);
    float *out = mo->y + (size_t)p0 * ne + o0;
    expert_mm(&wd, mo->hq, mo->h, p0, cnt, o0, o1, out, ne);
    for (int i = 0; y->down_exps_b && i < cnt; i++)
        add_bias(out + (size_t)i * ne, y->down_exps_b + (size_t)e * ne + o0, o1 - o0);
}

/* PH_MOE_COMBINE: tmp[r] = the weighted sum of row r's expert outputs. */
static void moe_combine(pl_cpu_fwd *f, int r)
{
    struct pl_fwd_moe *mo = f->moe;
    int ne = f->m->n_embd, k = mo->k;
    pl_op_moe_combine(mo->y, mo->slot_of + (size_t)r * k, mo->wt + (size_t)r * k, k, ne,
                      (f->tmp2 ? f->tmp2 : f->tmp) + (size_t)r * ne);
}

/* UP or DOWN: this thread's run, then what is left of the others'; the
 * thread that takes the first run counts the units that do not exist. */
static int moe_units(pl_cpu_fwd *f, phase *ph, int ith)
{
    struct pl_fwd_moe *mo = f->moe;
    int down = ph->kind == PH_MOE_DOWN, done = 0;
    span *sp = mo->spans + ((size_t)ph->layer * 2 + (size_t)down) * mo->nth;
    int s = atomic_fetch_add(&ph->taken, 1);
    if (s == 0)
        done += ph->n - mo->units[down];
    for (; s < mo->nth; s = atomic_fetch_add(&ph->taken, 1))
        for (int u; (u = pl_fwd_span_take_(&sp[s], 0)) >= 0; done++)
            down ? moe_down(f, ph, u) : moe_up(f, ph, u, ith);
    for (int i = 0; i < mo->nth; i++)
        for (int u; (u = pl_fwd_span_take_(&sp[(i + ith) % mo->nth], 1)) >= 0; done++)
            down ? moe_down(f, ph, u) : moe_up(f, ph, u, ith);
    return done;
}

int pl_fwd_moe_phase_(pl_cpu_fwd *f, phase *ph, int ith)
{
    if (ph->kind == PH_MOE_UP || ph->kind == PH_MOE_DOWN)
        return moe_units(f, ph, ith);
    int done = 0;
    for (int it = atomic_fetch_add(&ph->taken, 1); it < ph->n;
         it = atomic_fetch_add(&ph->taken, 1), done++) {
        if (ph->kind == PH_MOE_GROUP)
            moe_group(f, ph);
        else if (ph->kind == PH_MOE_GATHER)
            moe_gather(f, ph, it);
        else
            moe_combine(f, it);
    }
    return done;
}

void pl_fwd_moe_plan_(pl_cpu_fwd *f, int l, int n)
{
    const pl_layer *y = &f->m->layers[l];
    int k = f->moe->k, E = f->m->n_expert, max_active = n * k < E ? n * k : E;
    int ur = up_rows(y), dr = down_rows(y);
    pl_fwd_ph_add_(f, PH_MOE_GROUP, l, 1, NULL);
    pl_fwd_ph_add_(f, PH_MOE_GATHER, l, n * k, NULL);
    phase *up = pl_fwd_ph_add_(f, PH_MOE_UP, l,
                               max_active * ((y->gate_exps.w.rows + ur - 1) / ur), NULL);
    phase *down = pl_fwd_ph_add_(f, PH_MOE_DOWN, l,
                                 max_active * ((y->down_exps.w.rows + dr - 1) / dr), NULL);
    up->split = ur;
    down->split = dr;
    pl_fwd_ph_add_(f, PH_MOE_COMBINE, l, n, NULL);
}
