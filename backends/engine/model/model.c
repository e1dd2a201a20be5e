/* model.c - the tensors of a model (model.h): every layer's tensors from
 * the slot table, as its architecture's row asks for them, shapes checked,
 * and no tensor of the file left unused. Hyperparameters are read in
 * model_meta.c. */
#include "backends/engine/model/model.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/model/model_internal.h"
#include "backends/engine/model/quant.h"

#define fail_ pl_model_fail_

/* The sizes a tensor's dimensions are named by. */
typedef enum dim {
    D_EMBD, D_Q, D_KV, D_FF, D_HEAD, D_HEADS, D_EXP, D_FF_EXP,
    D_QG,                        /* the query projection's rows (with its gate) */
    D_SSM_CONV, D_SSM_INNER, D_SSM_V, D_SSM_STATE, D_SSM_KERNEL,
    D_FF_SHEXP,                  /* the shared expert's width */
    D_PLE, D_ONE,
} dim;

/* What a slot holds at `off` in pl_layer: a vector (float *, `rows`
 * elements), a matrix (pl_weight), one matrix per expert (pl_experts,
 * n_expert of them) or one vector per expert (float *, n_expert rows of
 * `cols`). */
typedef enum slot_kind { S_VEC, S_MAT, S_EXPS, S_VEC2 } slot_kind;

/* One per-layer tensor: its GGUF name, kind, shape and field. */
typedef struct slot {
    const char *fmt;
    slot_kind kind;
    dim rows, cols;
    size_t off;
} slot;

#define VEC(f, d, field) {f, S_VEC, d, d, offsetof(pl_layer, field)}
#define MAT(f, r, c, field) {f, S_MAT, r, c, offsetof(pl_layer, field)}
#define EXPS(f, r, c, field) {f, S_EXPS, r, c, offsetof(pl_layer, field)}
#define VEC2(f, c, field) {f, S_VEC2, D_EXP, c, offsetof(pl_layer, field)}
#define VEC2R(f, r, c, field) {f, S_VEC2, r, c, offsetof(pl_layer, field)}

static const slot slots_[PL_T_COUNT] = {
    [PL_T_ATTN_NORM] = VEC("blk.%d.attn_norm.weight", D_EMBD, attn_norm),
    [PL_T_WQ] = MAT("blk.%d.attn_q.weight", D_QG, D_EMBD, wq),
    [PL_T_WK] = MAT("blk.%d.attn_k.weight", D_KV, D_EMBD, wk),
    [PL_T_WV] = MAT("blk.%d.attn_v.weight", D_KV, D_EMBD, wv),
    [PL_T_WO] = MAT("blk.%d.attn_output.weight", D_EMBD, D_Q, wo),
    [PL_T_BQ] = VEC("blk.%d.attn_q.bias", D_Q, bq),
    [PL_T_BK] = VEC("blk.%d.attn_k.bias", D_KV, bk),
    [PL_T_BV] = VEC("blk.%d.attn_v.bias", D_KV, bv),
    [PL_T_Q_NORM] = VEC("blk.%d.attn_q_norm.weight", D_HEAD, attn_q_norm),
    [PL_T_K_NORM] = VEC("blk.%d.attn_k_norm.weight", D_HEAD, attn_k_norm),
    [PL_T_ATTN_POST_NORM] = VEC("blk.%d.post_attention_norm.weight", D_EMBD, attn_post_norm),
    [PL_T_FFN_NORM] = VEC("blk.%d.ffn_norm.weight", D_EMBD, ffn_norm),
    [PL_T_GATE] = MAT("blk.%d.ffn_gate.weight", D_FF, D_EMBD, w_gate),
    [PL_T_UP] = MAT("blk.%d.ffn_up.weight", D_FF, D_EMBD, w_up),
    [PL_T_DOWN] = MAT("blk.%d.ffn_down.weight", D_EMBD, D_FF, w_down),
    [PL_T_FFN_POST_NORM] = VEC("blk.%d.post_ffw_norm.weight", D_EMBD, ffn_post_norm),
    [PL_T_BO] = VEC("blk.%d.attn_output.bias", D_EMBD, bo),
    [PL_T_SINKS] = VEC("blk.%d.attn_sinks.weight", D_HEADS, attn_sinks),
    [PL_T_GATE_INP] = MAT("blk.%d.ffn_gate_inp.weight", D_EXP, D_EMBD, gate_inp),
    [PL_T_GATE_INP_B] = VEC("blk.%d.ffn_gate_inp.bias", D_EXP, gate_inp_b),
    [PL_T_GATE_EXPS] = EXPS("blk.%d.ffn_gate_exps.weight", D_FF_EXP, D_EMBD, gate_exps),
    [PL_T_UP_EXPS] = EXPS("blk.%d.ffn_up_exps.weight", D_FF_EXP, D_EMBD, up_exps),
    [PL_T_DOWN_EXPS] = EXPS("blk.%d.ffn_down_exps.weight", D_EMBD, D_FF_EXP, down_exps),
    [PL_T_GATE_EXPS_B] = VEC2("blk.%d.ffn_gate_exps.bias", D_FF_EXP, gate_exps_b),
    [PL_T_UP_EXPS_B] = VEC2("blk.%d.ffn_up_exps.bias", D_FF_EXP, up_exps_b),
    [PL_T_DOWN_EXPS_B] = VEC2("blk.%d.ffn_down_exps.bias", D_EMBD, down_exps_b),
    [PL_T_SSM_QKV] = MAT("blk.%d.attn_qkv.weight", D_SSM_CONV, D_EMBD, ssm_qkv),
    [PL_T_SSM_Z] = MAT("blk.%d.attn_gate.weight", D_SSM_INNER, D_EMBD, ssm_z),
    [PL_T_SSM_BETA] = MAT("blk.%d.ssm_beta.weight", D_SSM_V, D_EMBD, ssm_beta),
    [PL_T_SSM_ALPHA] = MAT("blk.%d.ssm_alpha.weight", D_SSM_V, D_EMBD, ssm_alpha),
    [PL_T_SSM_CONV] = VEC2R("blk.%d.ssm_conv1d.weight", D_SSM_CONV, D_SSM_KERNEL, ssm_conv),
    [PL_T_SSM_DT] = VEC("blk.%d.ssm_dt.bias", D_SSM_V, ssm_dt),
    [PL_T_SSM_A] = VEC("blk.%d.ssm_a", D_SSM_V, ssm_a),
    [PL_T_SSM_NORM] = VEC("blk.%d.ssm_norm.weight", D_SSM_STATE, ssm_norm),
    [PL_T_SSM_OUT] = MAT("blk.%d.ssm_out.weight", D_EMBD, D_SSM_INNER, ssm_out),
    [PL_T_GATE_INP_SHEXP] = VEC("blk.%d.ffn_gate_inp_shexp.weight", D_EMBD, gate_inp_shexp),
    [PL_T_GATE_SHEXP] = MAT("blk.%d.ffn_gate_shexp.weight", D_FF_SHEXP, D_EMBD, gate_shexp),
    [PL_T_UP_SHEXP] = MAT("blk.%d.ffn_up_shexp.weight", D_FF_SHEXP, D_EMBD, up_shexp),
    [PL_T_DOWN_SHEXP] = MAT("blk.%d.ffn_down_shexp.weight", D_EMBD, D_FF_SHEXP, down_shexp),
    [PL_T_OUT_SCALE] = VEC("blk.%d.layer_output_scale.weight", D_ONE, out_scale),
    [PL_T_PLE_GATE] = MAT("blk.%d.inp_gate.weight", D_PLE, D_EMBD, ple_gate),
    [PL_T_PLE_PROJ] = MAT("blk.%d.proj.weight", D_EMBD, D_PLE, ple_proj),
    [PL_T_PLE_NORM] = VEC("blk.%d.post_norm.weight", D_EMBD, ple_norm),
    [PL_T_GATE_INP_S] = VEC("blk.%d.ffn_gate_inp.scale", D_EMBD, gate_inp_s),
    [PL_T_DOWN_EXPS_S] = VEC("blk.%d.ffn_down_exps.scale", D_EXP, down_exps_s),
    [PL_T_FFN_PRE_NORM_2] = VEC("blk.%d.pre_ffw_norm_2.weight", D_EMBD, ffn_pre_norm_2),
    [PL_T_FFN_POST_NORM_1] = VEC("blk.%d.post_ffw_norm_1.weight", D_EMBD, ffn_post_norm_1),
    [PL_T_FFN_POST_NORM_2] = VEC("blk.%d.post_ffw_norm_2.weight", D_EMBD, ffn_post_norm_2),
};

#define DENSE_FFN (PL_T_BIT(PL_T_GATE) | PL_T_BIT(PL_T_UP) | PL_T_BIT(PL_T_DOWN))

/* A load in progress: the file, the runner's packing wish and which of the
 * file's tensors were taken. */
typedef struct loader {
    const pl_gguf *g;
    pl_keep_packed_fn packed;
    pl_keep_packed_fn packed_experts; /* NULL: packed */
    bool f32;
    bool *used;                  /* (g->n_tensors) */
    char *err;
    size_t len;
} loader;

/* The size d names in layer l. */
static int dim_size(const pl_model *m, int l, dim d)
{
    const pl_layer *y = &m->layers[l];
    switch (d) {
    case D_EMBD: return m->n_embd;
    case D_Q: return m->n_head * y->head_dim;
    case D_KV: return y->n_head_kv * y->head_dim;
    case D_FF: return pl_layer_ff(m, y);
    case D_HEADS: return m->n_head;
    case D_EXP: return m->n_expert;
    case D_FF_EXP: return m->n_ff_exp;
    case D_QG: return m->n_head * y->head_dim * (m->attn_out_gate ? 2 : 1);
    case D_SSM_CONV: return m->ssm_conv_dim;
    case D_SSM_INNER: return m->ssm_d_inner;
    case D_SSM_V: return m->ssm_n_v;
    case D_SSM_STATE: return m->ssm_d_state;
    case D_SSM_KERNEL: return m->ssm_conv_kernel;
    case D_FF_SHEXP: return m->n_ff_shexp;
    case D_PLE: return m->n_ple;
    case D_ONE: return 1;
    default: return y->head_dim;
    }
}

static const pl_gguf_tensor *take(loader *ld, const char *name)
{
    const pl_gguf_tensor *t = pl_gguf_tensor_find(ld->g, name);
    if (t)
        ld->used[t - ld->g->tensors] = true;
    return t;
}

/* YaRN's correction dim of a rotation count beta (llama.cpp's
 * ggml_rope_yarn_corr_dim, in float as there). */
static float yarn_corr_dim(int n_rot, int orig_ctx, float beta, float base)
{
    return (float)n_rot * logf((float)orig_ctx / (beta * 2 * (float)M_PI)) / (2 * logf(base));
}

/* The factor on frequency i of YaRN's angle: 1/factor (interpolated) below
 * the ramp's start, 1 (extrapolated) past its end, linear between. The
 * ramp's ends are rounded out to whole dimensions (llama.cpp, transformers'
 * truncate true) unless exact (gpt-oss's truncate false). */
static double yarn_mix(int n_rot, float base, float factor, int orig_ctx, int i, bool exact)
{
    float lo = yarn_corr_dim(n_rot, orig_ctx, 32.0f, base);
    float hi = yarn_corr_dim(n_rot, orig_ctx, 1.0f, base);
    lo = exact ? lo : floorf(lo);
    hi = exact ? hi : ceilf(hi);
    lo = lo > 0 ? lo : 0;
    hi = hi < n_rot - 1 ? hi : (float)(n_rot - 1);
    float y = ((float)i - lo) / (hi - lo > 0.001f ? hi - lo : 0.001f);
    float ramp = 1 - (y < 0 ? 0 : y > 1 ? 1 : y);
    return (1.0 - ramp) / factor + ramp;
}

void pl_model_rope_freqs(float *out, int n_rot, float base, const char *scaling,
                         float factor, float low_ff, float high_ff, int orig_ctx,
                         const float *factors)
{
    for (int i = 0; i < n_rot / 2; i++) {
        double f = pow(base, -2.0 * i / n_rot);
        if (scaling && strcmp(scaling, "linear") == 0 && factor > 0) {
            f /= factor;
        } else if (scaling && strcmp(scaling, "llama3") == 0 && factor > 0) {
            double wl = 2.0 * M_PI / f;
            double lo_wl = orig_ctx / low_ff, hi_wl = orig_ctx / high_ff;
            if (wl > lo_wl) {
                f /= factor;
            } else if (wl >= hi_wl) {
                double sm = (orig_ctx / wl - low_ff) / (high_ff - low_ff);
                f = (1.0 - sm) * f / factor + sm * f;
            }
        } else if (scaling && strncmp(scaling, "yarn", 4) == 0 && factor > 0) {
            f *= yarn_mix(n_rot, base, factor, orig_ctx, i, !strcmp(scaling, "yarn_exact"));
        }
        if (factors)
            f /= factors[i];
        out[i] = (float)f;
    }
}

/* An f32 copy of a vector tensor of n elements (norms, biases), or with
 * rows > 0 of a 2-D one of `rows` such vectors (per-expert biases). A
 * vector may be stored as [n, 1] (the converter's shared-expert gate:
 * llama.cpp's shape check pads dimensions with 1). */
static int load_vec_rows(loader *ld, const char *name, int n, int rows, bool required,
                         float **out)
{
    const pl_gguf_tensor *t = take(ld, name);
    *out = NULL;
    if (!t)
        return required ? fail_(ld->err, ld->len, "missing tensor %s", name) : 0;
    bool col = rows == 0 && t->n_dims == 2 && t->ne[1] == 1;
    if (t->ne[0] != (uint64_t)n || (t->n_dims != (rows > 0 ? 2u : 1u) && !col) ||
        (rows > 0 && t->ne[1] != (uint64_t)rows))
        return fail_(ld->err, ld->len, "tensor %s: shape [%llu, %llu] != [%d, %d]", name,
                     (unsigned long long)t->ne[0],
                     (unsigned long long)(t->n_dims > 1 ? t->ne[1] : 1), n, rows > 0 ? rows : 1);
    n *= rows > 0 ? rows : 1;
    size_t be = 0;
    if (!pl_ggml_type_block(t->type, &be, NULL) || n % (int)be != 0)
        return fail_(ld->err, ld->len, "tensor %s: unsupported type %s", name,
                     pl_ggml_type_name(t->type));
    *out = malloc(sizeof(float) * (size_t)n);
    if (!*out)
        return fail_(ld->err, ld->len, "out of memory");
    int bad = -1;
    if (pl_dequant_row(t->type, t->data, *out, n) != 0) {
        fail_(ld->err, ld->len, "tensor %s: unsupported type %s", name,
              pl_ggml_type_name(t->type));
    } else {
        for (int i = 0; i < n && bad < 0; i++)
            if (!isfinite((*out)[i]))
                bad = i;
        if (bad < 0)
            return 0;
        fail_(ld->err, ld->len, "tensor %s: element %d is not finite", name, bad);
    }
    free(*out);                  /* a caller's local (load_rope's) is not freed after */
    *out = NULL;
    return -1;
}

static int load_vec(loader *ld, const char *name, int n, bool required, float **out)
{
    return load_vec_rows(ld, name, n, 0, required, out);
}

static int load_weight(loader *ld, const pl_gguf_tensor *t, const char *name, int rows,
                       int cols, pl_keep_packed_fn packed, pl_weight *w)
{
    size_t be = 0, bb = 0;
    char *err = ld->err;
    size_t len = ld->len;
    if (!t)
        return fail_(err, len, "missing tensor %s", name);
    if (t->n_dims != 2 || t->ne[0] != (uint64_t)cols || t->ne[1] != (uint64_t)rows)
        return fail_(err, len, "tensor %s: shape [%llu, %llu] != [%d, %d]", name,
                     (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], cols, rows);
    if (!pl_ggml_type_block(t->type, &be, &bb) || cols % (int)be != 0)
        return fail_(err, len, "tensor %s: unsupported type %s", name,
                     pl_ggml_type_name(t->type));
    float probe[256];
    if (be > 256 || pl_dequant_row(t->type, t->data, probe, (int64_t)be) != 0)
        return fail_(err, len, "tensor %s: type %s cannot be dequantised",
                     name, pl_ggml_type_name(t->type));
    *w = (pl_weight){.type = t->type, .rows = rows, .cols = cols,
                     .row_bytes = (size_t)cols / be * bb, .q = t->data};
    if (packed && packed(t->type))
        return 0;
    w->f32 = malloc(sizeof(float) * (size_t)rows * cols);
    if (!w->f32)
        return fail_(err, len, "out of memory for %s", name);
    for (int r = 0; r < rows; r++)
        pl_dequant_row(t->type, (const uint8_t *)t->data + (size_t)r * w->row_bytes,
                       w->f32 + (size_t)r * cols, cols);
    return 0;
}

/* One matrix per expert from a 3-D tensor [cols, rows * parts, n]: part
 * `part` of each expert's rows (parts 2: a fused gate/up tensor, gate
 * first). Kept packed when the runner reads the type packed (with no
 * keep_packed function, every type but F32, F16 and BF16: quantised
 * experts are too big to widen), else dequantised to f32. */
static int load_experts_part(loader *ld, const pl_gguf_tensor *t, const char *name, int n,
                             int rows, int cols, int part, int parts, pl_experts *x)
{
    size_t be = 0, bb = 0;
    if (!t)
        return fail_(ld->err, ld->len, "missing tensor %s", name);
    if (t->n_dims != 3 || t->ne[0] != (uint64_t)cols ||
        t->ne[1] != (uint64_t)rows * (uint64_t)parts || t->ne[2] != (uint64_t)n)
        return fail_(ld->err, ld->len, "tensor %s: shape [%llu, %llu, %llu] != [%d, %d, %d]",
                     name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                     (unsigned long long)(t->n_dims > 2 ? t->ne[2] : 1), cols, rows * parts,
                     n);
    float probe[256];
    if (!pl_ggml_type_block(t->type, &be, &bb) || cols % (int)be != 0 || be > 256 ||
        pl_dequant_row(t->type, t->data, probe, (int64_t)be) != 0)
        return fail_(ld->err, ld->len, "tensor %s: unsupported type %s", name,
                     pl_ggml_type_name(t->type));
    size_t row_bytes = (size_t)cols / be * bb, part_bytes = (size_t)rows * row_bytes;
    *x = (pl_experts){.w = {.type = t->type, .rows = rows, .cols = cols,
                            .row_bytes = row_bytes,
                            .q = (const uint8_t *)t->data + (size_t)part * part_bytes},
                      .n = n, .stride = (size_t)parts * part_bytes};
    bool is_float = t->type == PL_GGML_TYPE_F32 || t->type == PL_GGML_TYPE_F16 ||
                    t->type == PL_GGML_TYPE_BF16;
    pl_keep_packed_fn packed = ld->packed_experts ? ld->packed_experts : ld->packed;
    if (packed ? packed(t->type) : !is_float)
        return 0;
    size_t per = (size_t)rows * cols;
    x->w.f32 = malloc(sizeof(float) * per * (size_t)n);
    if (!x->w.f32)
        return fail_(ld->err, ld->len, "out of memory for %s", name);
    for (size_t r = 0; r < (size_t)rows * n; r++)
        pl_dequant_row(t->type, (const uint8_t *)x->w.q + r / rows * x->stride +
                       r % rows * row_bytes, x->w.f32 + r * cols, cols);
    return 0;
}

static int load_experts(loader *ld, const char *name, int n, int rows, int cols,
                        pl_experts *x)
{
    return load_experts_part(ld, take(ld, name), name, n, rows, cols, 0, 1, x);
}

/* The gate and up experts from one blk.N.ffn_gate_up_exps.weight when the
 * file has it (1: taken), else 0 (each its own tensor), -1 on error. */
static int load_gate_up_exps(pl_model *m, loader *ld, int l)
{
    char name[96];
    snprintf(name, sizeof name, "blk.%d.ffn_gate_up_exps.weight", l);
    const pl_gguf_tensor *t = take(ld, name);
    pl_layer *y = &m->layers[l];
    if (!t)
        return 0;
    if (load_experts_part(ld, t, name, m->n_expert, m->n_ff_exp, m->n_embd, 0, 2,
                          &y->gate_exps) ||
        load_experts_part(ld, t, name, m->n_expert, m->n_ff_exp, m->n_embd, 1, 2, &y->up_exps))
        return -1;
    return 1;
}

/* Slot s of layer l into its field of y; a matrix that is optional and
 * absent is left empty. The router is kept in f32 (it is small, and its
 * logits choose the experts: no quantisation between a token and its
 * choice). */
static int load_slot_(pl_model *m, loader *ld, int s, int l, bool required)
{
    const slot *sl = &slots_[s];
    void *field = (char *)&m->layers[l] + sl->off;
    char name[96];
    if (s == PL_T_FFN_NORM && m->info->ffn_norm_name)
        snprintf(name, sizeof name, "blk.%d.%s.weight", l, m->info->ffn_norm_name);
    else
        snprintf(name, sizeof name, sl->fmt, l);
    int rows = dim_size(m, l, sl->rows), cols = dim_size(m, l, sl->cols);
    switch (sl->kind) {
    case S_MAT: {
        const pl_gguf_tensor *t = take(ld, name);
        if (!t && !required)
            return 0;
        pl_keep_packed_fn packed = ld->f32 || s == PL_T_GATE_INP || s == PL_T_PLE_GATE ||
                                   s == PL_T_PLE_PROJ ? NULL : ld->packed;
        return load_weight(ld, t, name, rows, cols, packed, field);
    }
    case S_EXPS: return load_experts(ld, name, m->n_expert, rows, cols, field);
    case S_VEC2: return load_vec_rows(ld, name, cols, rows, required, field);
    default: return load_vec(ld, name, rows, required, field);
    }
}

/* The metadata key a dimension is, where it is one key's value. */
static const char *dim_key(dim d)
{
    switch (d) {
    case D_EMBD: return "embedding_length";
    case D_FF: return "feed_forward_length";
    case D_EXP: return "expert_count";
    case D_FF_EXP: return "expert_feed_forward_length";
    case D_FF_SHEXP: return "expert_shared_feed_forward_length";
    default: return NULL;
    }
}

/* load_slot_, and on a misshaped tensor the keys its wanted shape comes
 * from (so a key that contradicts the tensors is named). */
static int load_slot(pl_model *m, loader *ld, int s, int l, bool required)
{
    if (load_slot_(m, ld, s, l, required) == 0)
        return 0;
    if (!strstr(ld->err, ": shape ["))
        return -1;
    const slot *sl = &slots_[s];
    dim ds[3] = {sl->rows, sl->cols, sl->kind == S_EXPS ? D_EXP : sl->rows};
    const char *sep = " (";
    for (int i = 0; i < 3; i++) {
        const char *k = dim_key(ds[i]);
        size_t n = strlen(ld->err);
        if (!k || (i > 0 && ds[i] == ds[0]) || (i > 1 && ds[i] == ds[1]) || n + 1 >= ld->len)
            continue;
        snprintf(ld->err + n, ld->len - n, "%s%s.%s = %d", sep, m->arch_name, k,
                 dim_size(m, l, ds[i]));
        sep = ", ";
    }
    size_t n = strlen(ld->err);
    if (*sep == ',' && n + 1 < ld->len)
        snprintf(ld->err + n, ld->len - n, ")");
    return -1;
}

/* The attention block's tensors, which a recurrent layer replaces. */
#define ATTN_BLOCK                                                                   \
    (PL_T_BIT(PL_T_WQ) | PL_T_BIT(PL_T_WK) | PL_T_BIT(PL_T_WV) | PL_T_BIT(PL_T_WO) |   \
     PL_T_BIT(PL_T_BQ) | PL_T_BIT(PL_T_BK) | PL_T_BIT(PL_T_BV) |                       \
     PL_T_BIT(PL_T_Q_NORM) | PL_T_BIT(PL_T_K_NORM))

/* Layer l's tensors: those its architecture needs (missing: an error),
 * and its optional ones when the file has them. A layer with experts
 * needs the expert block instead of the dense feed-forward; a recurrent
 * one the Gated DeltaNet block instead of attention. */
static int load_layer(pl_model *m, loader *ld, int l)
{
    uint64_t need = m->info->need, opt = m->info->optional;
    if (m->n_expert > 0)
        need = (need & ~DENSE_FFN) | m->info->moe_need;
    if (m->layers[l].recurrent) {
        need = (need & ~ATTN_BLOCK) | m->info->need_recurrent;
        opt &= ~ATTN_BLOCK;
    }
    if (m->info->kind_geometry && !m->layers[l].no_kv)
        need |= PL_T_BIT(PL_T_WK) | PL_T_BIT(PL_T_K_NORM);   /* attn_v: optional, K = V */
    if (m->info->kind_geometry && m->layers[l].no_kv)
        opt &= ~(PL_T_BIT(PL_T_WK) | PL_T_BIT(PL_T_WV) | PL_T_BIT(PL_T_K_NORM));
    if (m->n_ple > 0)
        need |= PL_T_BIT(PL_T_PLE_GATE) | PL_T_BIT(PL_T_PLE_PROJ) | PL_T_BIT(PL_T_PLE_NORM);
    uint64_t want = need | opt;
    if (m->n_expert > 0 && (want & PL_T_BIT(PL_T_GATE_EXPS))) {
        int fused = load_gate_up_exps(m, ld, l);
        if (fused < 0)
            return -1;
        if (fused)
            want &= ~(PL_T_BIT(PL_T_GATE_EXPS) | PL_T_BIT(PL_T_UP_EXPS));
    }
    for (int s = 0; s < PL_T_COUNT; s++)
        if ((want & PL_T_BIT(s)) && load_slot(m, ld, s, l, need & PL_T_BIT(s)))
            return -1;
    pl_layer *y = &m->layers[l];
    if (y->out_scale && !isfinite(y->out_scale[0]))
        return fail_(ld->err, ld->len, "tensor blk.%d.layer_output_scale.weight: not finite",
                     l);
    return 0;
}

/* Per-layer embeddings: the token table (packed, read a row per token),
 * the model projection and its norm. */
static int load_ple(pl_model *m, loader *ld)
{
    char k[96];
    snprintf(k, sizeof k, "%s.embedding_length_per_layer_input", m->arch_name);
    const pl_gguf_kv *kv = pl_gguf_find(ld->g, k);
    uint64_t v = 0;
    if (!m->info->per_layer_embd)
        return 0;
    if (!kv)                     /* llama.cpp requires it (0: none) */
        return fail_(ld->err, ld->len, "%s: missing (required by %s)", k, m->arch_name);
    if (pl_gguf_get_u64(ld->g, k, &v) != 0 || v > (1u << 16))
        return fail_(ld->err, ld->len, "%s: expected an integer in [0, 65536]", k);
    m->n_ple = (int)v;
    if (m->n_ple == 0)
        return 0;
    int w = m->n_layer * m->n_ple;
    const pl_gguf_tensor *t = pl_gguf_tensor_find(ld->g, "per_layer_token_embd.weight");
    size_t be = 1;
    if (t && pl_ggml_type_block(t->type, &be, NULL) && m->n_ple % (int)be)
        return fail_(ld->err, ld->len, "%s: %d is not a multiple of "
                     "per_layer_token_embd.weight's %s blocks of %zu", k, m->n_ple,
                     pl_ggml_type_name(t->type), be);
    if (load_weight(ld, take(ld, "per_layer_token_embd.weight"), "per_layer_token_embd.weight",
                    m->n_vocab, w, pl_keep_packed_all, &m->ple_tok) ||
        load_weight(ld, take(ld, "per_layer_model_proj.weight"), "per_layer_model_proj.weight",
                    w, m->n_embd, NULL, &m->ple_model_proj))
        return -1;
    return load_vec(ld, "per_layer_proj_norm.weight", m->n_ple, true, &m->ple_proj_norm);
}

/* token_embd, output (or tied), output_norm. */
static int load_globals(pl_model *m, loader *ld)
{
    const pl_gguf_tensor *te = take(ld, "token_embd.weight");
    if (!te)
        return fail_(ld->err, ld->len, "missing tensor token_embd.weight");
    if (te->n_dims != 2 || te->ne[1] == 0 || te->ne[1] > INT32_MAX)
        return fail_(ld->err, ld->len, "tensor token_embd.weight: bad shape");
    m->n_vocab = (int)te->ne[1];
    uint64_t nv;
    char k[96];
    snprintf(k, sizeof k, "%s.vocab_size", m->arch_name);
    if (pl_gguf_find(ld->g, k) && (pl_gguf_get_u64(ld->g, k, &nv) != 0 ||
                                   nv != (uint64_t)m->n_vocab))
        return fail_(ld->err, ld->len, "%s: does not equal token_embd.weight's %d rows", k,
                     m->n_vocab);
    const pl_gguf_tensor *to = m->info->output_tied ? NULL : take(ld, "output.weight");
    m->tied = to == NULL;
    /* The embedding is gathered row by row, so it only needs f32 when tied
     * (then it is the output head too). */
    if (load_weight(ld, te, "token_embd.weight", m->n_vocab, m->n_embd,
                    ld->f32 && m->tied ? NULL : ld->packed, &m->tok_embd))
        return -1;
    if (m->tied)
        m->output = m->tok_embd;
    else if (load_weight(ld, to, "output.weight", m->n_vocab, m->n_embd,
                         ld->f32 ? NULL : ld->packed, &m->output))
        return -1;
    return load_vec(ld, "output_norm.weight", m->n_embd, true, &m->output_norm);
}

/* llama3's rope_freqs.weight (where the family reads it, as llama.cpp
 * does: llama files only). */
static int load_rope(pl_model *m, loader *ld)
{
    float *factors = NULL;
    if (m->info->rope_freqs_tensor && pl_gguf_tensor_find(ld->g, "rope_freqs.weight") &&
        load_vec(ld, "rope_freqs.weight", m->n_rot / 2, true, &factors))
        return -1;
    int rc = pl_model_read_rope_(m, ld->g, factors, ld->err, ld->len);
    free(factors);
    return rc;
}

/* Whether tensor name n is in blk.N. with N past the layers run (the
 * multi-token-prediction blocks, which parley skips). */
static bool mtp_tensor(const pl_gguf_str *n, const pl_model *m)
{
    char b[24];
    size_t k = n->len < sizeof b - 1 ? n->len : sizeof b - 1;
    memcpy(b, n->ptr, k);
    b[k] = 0;
    int blk, at = 0;
    return sscanf(b, "blk.%d.%n", &blk, &at) == 1 && at > 0 && blk >= m->n_layer &&
           blk < m->n_layer + m->n_layer_mtp;
}

/* A tensor no slot took would be silently ignored: refuse the file (as
 * llama.cpp does: "wrong number of tensors"). */
static int check_all_used(const loader *ld, const pl_model *m)
{
    for (uint64_t i = 0; i < ld->g->n_tensors; i++) {
        if (ld->used[i])
            continue;
        const pl_gguf_str *n = &ld->g->tensors[i].name;
        if (m->n_layer_mtp > 0 && mtp_tensor(n, m))
            continue;            /* a multi-token-prediction block: not run */
        return fail_(ld->err, ld->len, "tensor %.*s: not used by architecture %s (refusing "
                     "to ignore it)", (int)(n->len > 96 ? 96 : n->len), n->ptr, m->arch_name);
    }
    return 0;
}

int pl_keep_packed_all(pl_ggml_type t)
{
    (void)t;
    return 1;
}

pl_model *pl_model_load(const pl_gguf *g, const pl_model_opts *opts, char *err, size_t len)
{
    loader ld = {.g = g, .f32 = opts ? opts->keep_f32 : true,
                 .packed = opts ? opts->keep_packed : NULL,
                 .packed_experts = opts ? opts->keep_packed_experts : NULL, .err = err,
                 .len = len};
    pl_model *m = calloc(1, sizeof(*m));
    ld.used = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *ld.used);
    if (!m || !ld.used) {
        fail_(err, len, "out of memory");
        goto fail;
    }
    if (pl_model_read_arch_(m, g, err, len) || pl_model_read_hparams_(m, g, err, len))
        goto fail;
    m->layers = calloc((size_t)m->n_layer, sizeof(*m->layers));
    if (!m->layers) {
        fail_(err, len, "out of memory");
        goto fail;
    }
    if (pl_model_read_swa_(m, g, err, len) || pl_model_read_ssm_(m, g, err, len) ||
        pl_model_read_geometry_(m, g, err, len) || load_rope(m, &ld) ||
        load_globals(m, &ld) || load_ple(m, &ld))
        goto fail;
    m->moe_beside = m->n_expert > 0 &&
                    (m->info->moe_need & PL_T_BIT(PL_T_FFN_PRE_NORM_2)) != 0;
    for (int l = 0; l < m->n_layer; l++)
        if (load_layer(m, &ld, l))
            goto fail;
    if (check_all_used(&ld, m))
        goto fail;
    free(ld.used);
    return m;
fail:
    free(ld.used);
    pl_model_free(m);
    return NULL;
}

bool pl_model_has_extensions(const pl_model *m)
{
    for (int l = 0; l < m->n_layer; l++) {
        const pl_layer *y = &m->layers[l];
        if (y->n_swa || y->attn_q_norm || y->attn_k_norm || y->attn_post_norm ||
            y->ffn_post_norm || y->recurrent || y->no_kv || y->out_scale || !y->n_rot ||
            y->head_dim != m->head_dim || y->n_head_kv != m->n_head_kv)
            return true;
    }
    return m->attn_softcap > 0 || m->final_softcap > 0 || m->embd_scale != 1.0f ||
           m->ffn_act != PL_FFN_SILU || m->attn_scale != 1.0f / sqrtf((float)m->head_dim) ||
           m->attn_out_gate || m->n_ple > 0 || m->v_norm || m->attn_temp_scale > 0;
}

bool pl_model_has_moe(const pl_model *m)
{
    for (int l = 0; l < m->n_layer; l++)
        if (m->layers[l].attn_sinks || m->layers[l].bo)
            return true;
    return m->n_expert > 0 || (m->rope_mscale > 0 && m->rope_mscale != 1.0f) ||
           m->ffn_act == PL_FFN_SWIGLU_OAI;
}

void pl_model_free(pl_model *m)
{
    if (!m)
        return;
    for (int l = 0; m->layers && l < m->n_layer; l++) {
        pl_layer *y = &m->layers[l];
        for (int s = 0; s < PL_T_COUNT; s++) {
            char *field = (char *)y + slots_[s].off;
            if (slots_[s].kind == S_MAT)
                free(((pl_weight *)(void *)field)->f32);
            else if (slots_[s].kind == S_EXPS)
                free(((pl_experts *)(void *)field)->w.f32);
            else
                free(*(float **)(void *)field);
        }
    }
    free(m->layers);
    free(m->tok_embd.f32);
    if (!m->tied)
        free(m->output.f32);
    free(m->output_norm);
    free(m->ple_model_proj.f32);
    free(m->ple_proj_norm);
    free(m->rope_inv_freq);
    free(m->rope_inv_freq_swa);
    free(m);
}
