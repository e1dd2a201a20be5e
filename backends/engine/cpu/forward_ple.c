/* forward_ple.c - the end of a Gemma 4 layer on the CPU forward pass:
 * the per-layer embeddings' inputs of a row (at its embedding) and, after
 * each layer's feed-forward (its dense and expert outputs joined), their
 * gated projection and the layer's output scale (model.h's formula); and
 * the end of a qwen35moe layer: its experts' and gated shared expert's
 * outputs joined. Row work: a row's values do not depend on the batch. */
#include <math.h>
#include <stdint.h>

#include "backends/engine/cpu/forward_internal.h"
#include "backends/engine/cpu/ops.h"

/* x += d, d first normalised by post_norm when given. */
static void add_block_out(float *x, float *d, const float *post_norm, int n, float eps)
{
    if (post_norm)
        pl_op_rmsnorm(d, d, post_norm, n, eps);
    for (int i = 0; i < n; i++)
        x[i] += d[i];
}

/* n values of a per-layer table row from column c0 (whole blocks of a
 * quantised type: c0 and n are multiples of its block where it has one). */
static void ple_table_part(const pl_weight *tw, const uint8_t *row, int c0, int n, float *out)
{
    size_t be = 1, bb = 4;
    pl_ggml_type_block(tw->type, &be, &bb);
    pl_op_dequant_row(tw->type, row + (size_t)c0 / be * bb, out, n);
}


/* Row r's per-layer embedding inputs (model.h) from its scaled embedding
 * x0: the projection of x0, normed per layer, plus the token's row of the
 * per-layer table (read from the mapping), over sqrt(2). */
void pl_fwd_ple_inputs_(pl_cpu_fwd *f, int r, const float *x0, int32_t id)
{
    const pl_model *m = f->m;
    const pl_weight *pw = &m->ple_model_proj, *tw = &m->ple_tok;
    int np = m->n_ple, w = pw->rows;
    float *e = f->ple + (size_t)r * w, ps = 1.0f / sqrtf((float)m->n_embd);
    float ts = sqrtf((float)np), tok[256];
    for (int j = 0; j < w; j++)
        e[j] = pl_op_dot_f32(pw->f32 + (size_t)j * pw->cols, x0, pw->cols) * ps;
    const uint8_t *row = (const uint8_t *)tw->q + (size_t)id * tw->row_bytes;
    for (int l = 0; l < m->n_layer; l++) {
        float *el = e + (size_t)l * np;
        pl_op_rmsnorm(el, el, m->ple_proj_norm, np, m->rms_eps);
        for (int c0 = 0; c0 < np; c0 += 256) {   /* the table's part of layer l */
            int n = np - c0 < 256 ? np - c0 : 256;
            ple_table_part(tw, row, l * np + c0, n, tok);
            for (int i = 0; i < n; i++)
                el[c0 + i] = (el[c0 + i] + tok[i] * ts) * (float)M_SQRT1_2;
        }
    }
}

/* The end of layer l on row r: with experts beside the dense FFN, its
 * output is rmsnorm(dense, post_ffw_norm_1) + rmsnorm(experts,
 * post_ffw_norm_2), beside a shared expert (its output in tmp, the
 * experts' in tmp2, h = rmsnorm(x, ffn_norm) still in xn) experts +
 * sigmoid(h . gate_inp_shexp) shared; the feed-forward's residual add, then
 * x += rmsnorm(proj @ (gelu(inp_gate @ x) * e_l), post_norm) with
 * per-layer embeddings, then x *= layer_output_scale. */
void pl_fwd_layer_end_(pl_cpu_fwd *f, int l, int r)
{
    const pl_model *m = f->m;
    const pl_layer *y = &m->layers[l];
    int e = m->n_embd, np = m->n_ple;
    float *x = f->x + (size_t)r * e, *t = f->tmp + (size_t)r * e;
    if (y->ffn_post_norm_1) {
        float *t2 = f->tmp2 + (size_t)r * e;
        pl_op_rmsnorm(t, t, y->ffn_post_norm_1, e, m->rms_eps);
        pl_op_rmsnorm(t2, t2, y->ffn_post_norm_2, e, m->rms_eps);
        for (int i = 0; i < e; i++)
            t[i] += t2[i];
    }
    if (y->gate_inp_shexp) {     /* experts + sigmoid(h . gate_inp_shexp) shared */
        const float *t2 = f->tmp2 + (size_t)r * e;
        float g = pl_op_dot_f32(y->gate_inp_shexp, f->xn + (size_t)r * e, e);
        float s = 1.0f / (1.0f + expf(-g));
        for (int i = 0; i < e; i++)
            t[i] = t2[i] + s * t[i];
    }
    add_block_out(x, t, y->ffn_post_norm, e, m->rms_eps);
    if (np > 0) {
        float *g = f->ple_g + (size_t)r * np;
        for (int i = 0; i < np; i++)
            g[i] = pl_op_dot_f32(y->ple_gate.f32 + (size_t)i * e, x, e);
        pl_op_geglu(g, f->ple + (size_t)r * m->n_layer * np + (size_t)l * np, np);
        for (int i = 0; i < e; i++)
            t[i] = pl_op_dot_f32(y->ple_proj.f32 + (size_t)i * np, g, np);
        add_block_out(x, t, y->ple_norm, e, m->rms_eps);
    }
    for (int i = 0; y->out_scale && i < e; i++)
        x[i] *= y->out_scale[0];
}

