/* model.c - hyperparameters and weights of a llama/qwen2 GGUF (model.h). */
#include "backends/engine/model/model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/model/quant.h"

static int fail_(char *err, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail_(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && len)
        vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return -1;
}

static int meta_int(const pl_gguf *g, const char *arch, const char *key, int def)
{
    char k[128];
    uint64_t v;
    snprintf(k, sizeof(k), "%s.%s", arch, key);
    return pl_gguf_get_u64(g, k, &v) == 0 ? (int)v : def;
}

static float meta_f32(const pl_gguf *g, const char *arch, const char *key, float def)
{
    char k[128];
    float v;
    snprintf(k, sizeof(k), "%s.%s", arch, key);
    return pl_gguf_get_f32(g, k, &v) == 0 ? v : def;
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
        }
        if (factors)
            f /= factors[i];
        out[i] = (float)f;
    }
}

/* A 1-D f32 copy of a vector tensor of n elements (norms, biases). */
static int load_vec(const pl_gguf *g, const char *fmt, int l, int n, bool required,
                    float **out, char *err, size_t len)
{
    char name[96];
    snprintf(name, sizeof(name), fmt, l);
    const pl_gguf_tensor *t = pl_gguf_tensor_find(g, name);
    *out = NULL;
    if (!t)
        return required ? fail_(err, len, "missing tensor %s", name) : 0;
    if (t->ne[0] != (uint64_t)n || t->n_dims != 1)
        return fail_(err, len, "tensor %s: shape [%llu] != [%d]", name,
                     (unsigned long long)t->ne[0], n);
    *out = malloc(sizeof(float) * (size_t)n);
    if (!*out)
        return fail_(err, len, "out of memory");
    if (pl_dequant_row(t->type, t->data, *out, n) != 0)
        return fail_(err, len, "tensor %s: unsupported type %s", name,
                     pl_ggml_type_name(t->type));
    return 0;
}

static int load_weight(const pl_gguf_tensor *t, const char *name, int rows, int cols,
                       pl_keep_packed_fn packed, pl_weight *w, char *err, size_t len)
{
    size_t be = 0, bb = 0;
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

static int load_mat(const pl_gguf *g, const char *fmt, int l, int rows, int cols,
                    pl_keep_packed_fn packed, pl_weight *w, char *err, size_t len)
{
    char name[96];
    snprintf(name, sizeof(name), fmt, l);
    return load_weight(pl_gguf_tensor_find(g, name), name, rows, cols, packed, w, err, len);
}

static int load_layer(pl_model *m, const pl_gguf *g, int l, pl_keep_packed_fn packed,
                      char *err, size_t len)
{
    pl_layer *y = &m->layers[l];
    int q = m->n_head * m->head_dim, kv = m->n_head_kv * m->head_dim;
    bool bias = m->arch == PL_MODEL_ARCH_QWEN2;
    if (load_vec(g, "blk.%d.attn_norm.weight", l, m->n_embd, true, &y->attn_norm, err, len) ||
        load_vec(g, "blk.%d.ffn_norm.weight", l, m->n_embd, true, &y->ffn_norm, err, len) ||
        load_mat(g, "blk.%d.attn_q.weight", l, q, m->n_embd, packed, &y->wq, err, len) ||
        load_mat(g, "blk.%d.attn_k.weight", l, kv, m->n_embd, packed, &y->wk, err, len) ||
        load_mat(g, "blk.%d.attn_v.weight", l, kv, m->n_embd, packed, &y->wv, err, len) ||
        load_mat(g, "blk.%d.attn_output.weight", l, m->n_embd, q, packed, &y->wo, err, len) ||
        load_mat(g, "blk.%d.ffn_gate.weight", l, m->n_ff, m->n_embd, packed, &y->w_gate, err, len) ||
        load_mat(g, "blk.%d.ffn_up.weight", l, m->n_ff, m->n_embd, packed, &y->w_up, err, len) ||
        load_mat(g, "blk.%d.ffn_down.weight", l, m->n_embd, m->n_ff, packed, &y->w_down, err, len) ||
        load_vec(g, "blk.%d.attn_q.bias", l, q, bias, &y->bq, err, len) ||
        load_vec(g, "blk.%d.attn_k.bias", l, kv, bias, &y->bk, err, len) ||
        load_vec(g, "blk.%d.attn_v.bias", l, kv, bias, &y->bv, err, len))
        return -1;
    return 0;
}

static int load_hparams(pl_model *m, const pl_gguf *g, char *err, size_t len)
{
    pl_gguf_str s;
    if (pl_gguf_get_str(g, "general.architecture", &s) != 0 || s.len >= sizeof(m->arch_name))
        return fail_(err, len, "general.architecture missing");
    memcpy(m->arch_name, s.ptr, s.len);
    m->arch_name[s.len] = 0;
    if (strcmp(m->arch_name, "llama") == 0)
        m->arch = PL_MODEL_ARCH_LLAMA;
    else if (strcmp(m->arch_name, "qwen2") == 0)
        m->arch = PL_MODEL_ARCH_QWEN2;
    else
        return fail_(err, len, "unsupported model architecture '%s' (supported: llama, qwen2)",
                     m->arch_name);
    const char *a = m->arch_name;
    m->n_layer = meta_int(g, a, "block_count", 0);
    m->n_embd = meta_int(g, a, "embedding_length", 0);
    m->n_ff = meta_int(g, a, "feed_forward_length", 0);
    m->n_head = meta_int(g, a, "attention.head_count", 0);
    m->n_head_kv = meta_int(g, a, "attention.head_count_kv", m->n_head);
    m->n_ctx_train = meta_int(g, a, "context_length", 2048);
    m->rope_base = meta_f32(g, a, "rope.freq_base", 10000.0f);
    m->rms_eps = meta_f32(g, a, "attention.layer_norm_rms_epsilon", 1e-5f);
    if (m->n_layer <= 0 || m->n_embd <= 0 || m->n_ff <= 0 || m->n_head <= 0 ||
        m->n_head_kv <= 0 || m->n_head % m->n_head_kv != 0)
        return fail_(err, len, "bad hyperparameters: layers %d embd %d ff %d heads %d/%d",
                     m->n_layer, m->n_embd, m->n_ff, m->n_head, m->n_head_kv);
    m->head_dim = meta_int(g, a, "attention.key_length", m->n_embd / m->n_head);
    m->n_rot = meta_int(g, a, "rope.dimension_count", m->head_dim);
    if (m->head_dim <= 0 || m->head_dim % 2 || m->n_rot > m->head_dim || m->n_rot % 2)
        return fail_(err, len, "bad head_dim %d / rope dims %d", m->head_dim, m->n_rot);
    m->rope_neox = m->arch == PL_MODEL_ARCH_QWEN2;
    uint64_t v;
    m->bos_id = pl_gguf_get_u64(g, "tokenizer.ggml.bos_token_id", &v) == 0 ? (int32_t)v : -1;
    m->eos_id = pl_gguf_get_u64(g, "tokenizer.ggml.eos_token_id", &v) == 0 ? (int32_t)v : -1;
    return 0;
}

static int load_rope(pl_model *m, const pl_gguf *g, char *err, size_t len)
{
    char type[32] = "none", k[128];
    pl_gguf_str s;
    snprintf(k, sizeof(k), "%s.rope.scaling.type", m->arch_name);
    if (pl_gguf_get_str(g, k, &s) == 0 && s.len < sizeof(type)) {
        memcpy(type, s.ptr, s.len);
        type[s.len] = 0;
    }
    if (strcmp(type, "none") && strcmp(type, "linear") && strcmp(type, "llama3"))
        return fail_(err, len, "unsupported rope scaling type '%s'", type);
    const char *a = m->arch_name;
    float factor = meta_f32(g, a, "rope.scaling.factor", 1.0f);
    float lo = meta_f32(g, a, "rope.scaling.low_freq_factor", 1.0f);
    float hi = meta_f32(g, a, "rope.scaling.high_freq_factor", 4.0f);
    int orig = meta_int(g, a, "rope.scaling.original_context_length", m->n_ctx_train);
    float *factors = NULL;
    if (pl_gguf_tensor_find(g, "rope_freqs.weight")) {
        if (load_vec(g, "rope_freqs.weight", 0, m->n_rot / 2, true, &factors, err, len))
            return -1;
        strcpy(type, "none");    /* the factors already carry the scaling */
    }
    m->rope_inv_freq = malloc(sizeof(float) * (size_t)(m->n_rot / 2));
    if (!m->rope_inv_freq) {
        free(factors);
        return fail_(err, len, "out of memory");
    }
    pl_model_rope_freqs(m->rope_inv_freq, m->n_rot, m->rope_base, type, factor, lo, hi,
                        orig, factors);
    free(factors);
    return 0;
}

static int load_globals(pl_model *m, const pl_gguf *g, pl_keep_packed_fn packed,
                        bool f32, char *err, size_t len)
{
    const pl_gguf_tensor *te = pl_gguf_tensor_find(g, "token_embd.weight");
    if (!te)
        return fail_(err, len, "missing tensor token_embd.weight");
    m->n_vocab = (int)te->ne[1];
    int nv = meta_int(g, m->arch_name, "vocab_size", m->n_vocab);
    if (nv != m->n_vocab)
        return fail_(err, len, "vocab_size %d != token_embd rows %d", nv, m->n_vocab);
    const pl_gguf_tensor *to = pl_gguf_tensor_find(g, "output.weight");
    m->tied = to == NULL;
    /* The embedding is gathered row by row, so it only needs f32 when tied
     * (then it is the output head too). */
    if (load_weight(te, "token_embd.weight", m->n_vocab, m->n_embd,
                    f32 && m->tied ? NULL : packed, &m->tok_embd, err, len))
        return -1;
    if (m->tied)
        m->output = m->tok_embd;
    else if (load_weight(to, "output.weight", m->n_vocab, m->n_embd, f32 ? NULL : packed,
                             &m->output, err, len))
        return -1;
    return load_vec(g, "output_norm.weight", 0, m->n_embd, true, &m->output_norm, err, len);
}

int pl_keep_packed_all(pl_ggml_type t)
{
    (void)t;
    return 1;
}

pl_model *pl_model_load(const pl_gguf *g, const pl_model_opts *opts, char *err, size_t len)
{
    bool f32 = opts ? opts->keep_f32 : true;
    pl_keep_packed_fn packed = opts ? opts->keep_packed : NULL;
    pl_model *m = calloc(1, sizeof(*m));
    if (!m) {
        fail_(err, len, "out of memory");
        return NULL;
    }
    if (load_hparams(m, g, err, len) || load_rope(m, g, err, len) ||
        load_globals(m, g, packed, f32, err, len))
        goto fail;
    m->layers = calloc((size_t)m->n_layer, sizeof(*m->layers));
    if (!m->layers) {
        fail_(err, len, "out of memory");
        goto fail;
    }
    for (int l = 0; l < m->n_layer; l++)
        if (load_layer(m, g, l, f32 ? NULL : packed, err, len))
            goto fail;
    return m;
fail:
    pl_model_free(m);
    return NULL;
}

void pl_model_free(pl_model *m)
{
    if (!m)
        return;
    for (int l = 0; m->layers && l < m->n_layer; l++) {
        pl_layer *y = &m->layers[l];
        free(y->attn_norm);
        free(y->ffn_norm);
        free(y->bq);
        free(y->bk);
        free(y->bv);
        pl_weight *ws[] = {&y->wq, &y->wk, &y->wv, &y->wo, &y->w_gate, &y->w_up, &y->w_down};
        for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++)
            free(ws[i]->f32);
    }
    free(m->layers);
    free(m->tok_embd.f32);
    if (!m->tied)
        free(m->output.f32);
    free(m->output_norm);
    free(m->rope_inv_freq);
    free(m);
}
