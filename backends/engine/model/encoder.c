/* encoder.c - an encoder's hyperparameters and tensors from GGUF
 * (encoder.h), under llama.cpp's bert names; every tensor of the file is
 * taken or the file is refused. */
#include "backends/engine/model/encoder.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/families/family.h"
#include "backends/engine/model/quant.h"

#define MAX_DIM (1 << 20)

typedef struct loader {
    const pl_gguf *g;
    const char *arch;
    bool *used;                  /* (g->n_tensors) */
    char *err;
    size_t len;
} loader;

static int fail_(loader *ld, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail_(loader *ld, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ld->err, ld->len, fmt, ap);
    va_end(ap);
    return -1;
}

int pl_pooling_from_name(const char *name, pl_pooling *out)
{
    static const char *const names[] = {"mean", "cls", "last"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, names[i]))
            return *out = (pl_pooling)(i + 1), 0;
    return -1;
}

const char *pl_pooling_name(pl_pooling p)
{
    switch (p) {
    case PL_POOLING_MEAN: return "mean";
    case PL_POOLING_CLS: return "cls";
    case PL_POOLING_LAST: return "last";
    default: return "none";
    }
}

static const pl_family *family_of_(const pl_gguf *g)
{
    pl_gguf_str s;
    if (pl_gguf_get_str(g, "general.architecture", &s) != 0)
        return NULL;
    return pl_family_find(s.ptr, (size_t)s.len);
}

bool pl_encoder_is(const pl_gguf *g)
{
    const pl_family *f = family_of_(g);
    return f && f->model.encoder;
}

/* <arch>.key as an integer in [lo, hi]; dflt < 0: required. */
static int meta_int_(loader *ld, const char *key, long lo, long hi, long dflt, int *out)
{
    char k[128];
    uint64_t v;
    snprintf(k, sizeof k, "%s.%s", ld->arch, key);
    if (!pl_gguf_find(ld->g, k)) {
        if (dflt < 0)
            return fail_(ld, "%s: missing", k);
        *out = (int)dflt;
        return 0;
    }
    if (pl_gguf_get_u64(ld->g, k, &v) != 0 || v < (uint64_t)lo || v > (uint64_t)hi)
        return fail_(ld, "%s: expected an integer in [%ld, %ld]", k, lo, hi);
    *out = (int)v;
    return 0;
}

static int read_hparams_(pl_encoder *m, loader *ld)
{
    char k[128];
    int causal = 0, pool = 0;
    if (meta_int_(ld, "block_count", 1, 4096, -1, &m->n_layer) ||
        meta_int_(ld, "embedding_length", 1, MAX_DIM, -1, &m->n_embd) ||
        meta_int_(ld, "feed_forward_length", 1, MAX_DIM, -1, &m->n_ff) ||
        meta_int_(ld, "attention.head_count", 1, 4096, -1, &m->n_head) ||
        meta_int_(ld, "pooling_type", 0, 3, 0, &pool))
        return -1;
    if (m->n_embd % m->n_head)
        return fail_(ld, "%s.attention.head_count: %d does not divide embedding_length %d",
                     ld->arch, m->n_head, m->n_embd);
    m->head_dim = m->n_embd / m->n_head;
    m->pooling = (pl_pooling)pool;
    snprintf(k, sizeof k, "%s.attention.head_count_kv", ld->arch);
    int kv = m->n_head;
    if (pl_gguf_find(ld->g, k) && (meta_int_(ld, "attention.head_count_kv", 1, 4096, 0, &kv) ||
                                   kv != m->n_head))
        return fail_(ld, "%s: %d, but an encoder has one key/value head per query head", k, kv);
    snprintf(k, sizeof k, "%s.attention.layer_norm_epsilon", ld->arch);
    if (pl_gguf_get_f32(ld->g, k, &m->eps) != 0 || !(m->eps > 0) || m->eps > 0.5f)
        return fail_(ld, "%s: missing, or not a number in (0, 0.5]", k);
    snprintf(k, sizeof k, "%s.attention.causal", ld->arch);
    const pl_gguf_kv *c = pl_gguf_find(ld->g, k);
    if (c && (c->type != PL_GGUF_TYPE_BOOL || (causal = c->v.b)))
        return fail_(ld, "%s: only bidirectional (false) attention is implemented for "
                     "encoders", k);
    return 0;
}

/* Tensor name as f32 (rows, cols), or a vector (rows = 0) of cols. */
static int tensor_(loader *ld, const char *name, int rows, int cols, float **out)
{
    const pl_gguf_tensor *t = pl_gguf_tensor_find(ld->g, name);
    if (!t)
        return fail_(ld, "missing tensor %s", name);
    ld->used[t - ld->g->tensors] = true;
    bool vec = rows == 0;
    if (t->n_dims != (vec ? 1u : 2u) || t->ne[0] != (uint64_t)cols ||
        (!vec && t->ne[1] != (uint64_t)rows))
        return fail_(ld, "tensor %s: shape [%llu, %llu] != [%d, %d]", name,
                     (unsigned long long)t->ne[0],
                     (unsigned long long)(t->n_dims > 1 ? t->ne[1] : 1), cols, vec ? 1 : rows);
    size_t be = 0, bb = 0;
    if (!pl_ggml_type_block(t->type, &be, &bb) || cols % (int)be)
        return fail_(ld, "tensor %s: unsupported type %s", name, pl_ggml_type_name(t->type));
    size_t nr = vec ? 1 : (size_t)rows, row_bytes = (size_t)cols / be * bb;
    *out = malloc(sizeof(float) * nr * (size_t)cols);
    if (!*out)
        return fail_(ld, "out of memory for %s", name);
    for (size_t r = 0; r < nr; r++)
        if (pl_dequant_row(t->type, (const char *)t->data + r * row_bytes,
                           *out + r * (size_t)cols, cols) != 0)
            return fail_(ld, "tensor %s: type %s cannot be dequantised", name,
                         pl_ggml_type_name(t->type));
    for (size_t i = 0; i < nr * (size_t)cols; i++)
        if (!isfinite((*out)[i]))
            return fail_(ld, "tensor %s: element %zu is not finite", name, i);
    return 0;
}

static int layer_(pl_encoder *m, loader *ld, int l)
{
    pl_enc_layer *y = &m->layers[l];
    int d = m->n_embd, ff = m->n_ff;
    struct { const char *name; int rows, cols; float **out; } t[] = {
        {"attn_q.weight", d, d, &y->wq}, {"attn_q.bias", 0, d, &y->bq},
        {"attn_k.weight", d, d, &y->wk}, {"attn_k.bias", 0, d, &y->bk},
        {"attn_v.weight", d, d, &y->wv}, {"attn_v.bias", 0, d, &y->bv},
        {"attn_output.weight", d, d, &y->wo}, {"attn_output.bias", 0, d, &y->bo},
        {"attn_output_norm.weight", 0, d, &y->attn_norm_w},
        {"attn_output_norm.bias", 0, d, &y->attn_norm_b},
        {"ffn_up.weight", ff, d, &y->w_up}, {"ffn_up.bias", 0, ff, &y->b_up},
        {"ffn_down.weight", d, ff, &y->w_down}, {"ffn_down.bias", 0, d, &y->b_down},
        {"layer_output_norm.weight", 0, d, &y->out_norm_w},
        {"layer_output_norm.bias", 0, d, &y->out_norm_b},
    };
    char name[96];
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        snprintf(name, sizeof name, "blk.%d.%s", l, t[i].name);
        if (tensor_(ld, name, t[i].rows, t[i].cols, t[i].out))
            return -1;
    }
    return 0;
}

/* token_embd fixes the vocabulary, position_embd the longest text,
 * token_types the types. */
static int globals_(pl_encoder *m, loader *ld)
{
    const char *rows[] = {"token_embd.weight", "position_embd.weight", "token_types.weight"};
    int *n[] = {&m->n_vocab, &m->n_pos, &m->n_types};
    float **out[] = {&m->tok_embd, &m->pos_embd, &m->type_embd};
    for (int i = 0; i < 3; i++) {
        const pl_gguf_tensor *t = pl_gguf_tensor_find(ld->g, rows[i]);
        if (!t)
            return fail_(ld, "missing tensor %s", rows[i]);
        if (t->n_dims != 2 || t->ne[1] == 0 || t->ne[1] > MAX_DIM * 16)
            return fail_(ld, "tensor %s: bad shape", rows[i]);
        *n[i] = (int)t->ne[1];
        if (tensor_(ld, rows[i], *n[i], m->n_embd, out[i]))
            return -1;
    }
    return tensor_(ld, "token_embd_norm.weight", 0, m->n_embd, &m->embd_norm_w) ||
           tensor_(ld, "token_embd_norm.bias", 0, m->n_embd, &m->embd_norm_b) ? -1 : 0;
}

static int check_all_used_(loader *ld)
{
    for (uint64_t i = 0; i < ld->g->n_tensors; i++) {
        if (ld->used[i])
            continue;
        const pl_gguf_str *s = &ld->g->tensors[i].name;
        return fail_(ld, "tensor %.*s: not used by architecture %s (refusing to ignore it)",
                     (int)(s->len > 96 ? 96 : s->len), s->ptr, ld->arch);
    }
    return 0;
}

pl_encoder *pl_encoder_load(const pl_gguf *g, char *err, size_t len)
{
    loader ld = {.g = g, .err = err, .len = len};
    pl_encoder *m = calloc(1, sizeof *m);
    ld.used = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *ld.used);
    if (!m || !ld.used) {
        fail_(&ld, "out of memory");
        goto fail;
    }
    m->family = family_of_(g);
    if (!m->family || !m->family->model.encoder) {
        fail_(&ld, "general.architecture: not an encoder (embedding families: bert)");
        goto fail;
    }
    ld.arch = m->family->name;
    if (read_hparams_(m, &ld) || !(m->layers = calloc((size_t)m->n_layer, sizeof *m->layers))) {
        if (!m->layers && !err[0])
            fail_(&ld, "out of memory");
        goto fail;
    }
    if (globals_(m, &ld))
        goto fail;
    for (int l = 0; l < m->n_layer; l++)
        if (layer_(m, &ld, l))
            goto fail;
    if (check_all_used_(&ld))
        goto fail;
    free(ld.used);
    return m;
fail:
    free(ld.used);
    pl_encoder_free(m);
    return NULL;
}

void pl_encoder_free(pl_encoder *m)
{
    if (!m)
        return;
    for (int l = 0; m->layers && l < m->n_layer; l++) {
        pl_enc_layer *y = &m->layers[l];
        float **f = &y->wq;      /* the layer is a run of float pointers */
        for (size_t i = 0; i < sizeof *y / sizeof(float *); i++)
            free(f[i]);
    }
    free(m->layers);
    free(m->tok_embd);
    free(m->pos_embd);
    free(m->type_embd);
    free(m->embd_norm_w);
    free(m->embd_norm_b);
    free(m);
}
