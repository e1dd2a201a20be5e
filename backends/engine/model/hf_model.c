/* hf_model.c - a checkpoint folder opened as a GGUF model (hf_model.h):
 * config.json through the architecture table, each tensor the table names
 * found, checked against config.json and converted, and every other tensor
 * in the files refused.
 */
#include "backends/engine/model/hf_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/engine/model/gguf_synth.h"
#include "backends/engine/model/hf_arch.h"
#include "backends/formats/hf_json.h"
#include "backends/engine/model/hf_weights.h"
#include "backends/formats/safetensors.h"
#include "src/base/log.h"

struct pl_hf_model {
    char dir[4096];
    pl_hf_opts o;
    pl_hf_json cfg;
    const pl_hf_arch *arch;
    pl_hf_shape sh;
    pl_safetensors *st;
    bool *used;                  /* per safetensors tensor */
    pl_gguf_synth *synth;
    pl_hf_conv *convs;           /* their dst lie in bufs */
    int n_convs, cap_convs;
    void **bufs;                 /* the converted tensors, owned */
    int n_bufs, cap_bufs;
    int block_rows, block_cols;  /* FP8 block scales */
    pl_hf_load_stats stats;
};

static int oom_(char *err, size_t n)
{
    snprintf(err, n, "out of memory loading the checkpoint");
    return -1;
}

static int read_arch_(pl_hf_model *m, char *err, size_t n)
{
    json_t *a = pl_hf_json_get(&m->cfg, "architectures");
    const char *name = json_string_value(json_array_get(a, 0));
    if (!json_is_array(a) || !name)
        return pl_hf_json_fail(&m->cfg, "architectures", err, n, "missing, or not a list of "
                               "names (e.g. [\"LlamaForCausalLM\"])");
    m->arch = pl_hf_arch_find(name);
    if (!m->arch)
        return pl_hf_json_fail(&m->cfg, "architectures", err, n, "'%s' is not supported "
                               "(supported: %s)", name, pl_hf_arch_names());
    return 0;
}

/* FP8 checkpoints: quant_method fp8 (optionally with weight_block_size) or
 * compressed-tensors with 8-bit float weights. */
static int read_compressed_(pl_hf_model *m, json_t *groups, char *err, size_t n)
{
    const char *k;
    json_t *g;
    json_object_foreach(groups, k, g) {
        json_t *w = json_object_get(g, "weights");
        const char *type = json_string_value(json_object_get(w, "type"));
        json_t *bits = json_object_get(w, "num_bits"), *bs = json_object_get(w, "block_structure");
        char key[300];
        snprintf(key, sizeof key, "quantization_config.config_groups.%s.weights", k);
        if (!type || strcmp(type, "float") || json_integer_value(bits) != 8)
            return pl_hf_json_fail(&m->cfg, key, err, n, "only 8-bit float weights are "
                                   "supported (type \"float\", num_bits 8)");
        if (json_array_size(bs) == 2) {
            m->block_rows = (int)json_integer_value(json_array_get(bs, 0));
            m->block_cols = (int)json_integer_value(json_array_get(bs, 1));
        }
    }
    return 0;
}

static int read_quant_(pl_hf_model *m, char *err, size_t n)
{
    const char *method = NULL;
    if (!pl_hf_json_get(&m->cfg, "quantization_config"))
        return 0;
    if (pl_hf_json_str(&m->cfg, "quantization_config.quant_method", true, &method, err, n) < 0)
        return -1;
    m->stats.fp8 = true;
    if (!strcmp(method, "compressed-tensors")) {
        json_t *g = pl_hf_json_get(&m->cfg, "quantization_config.config_groups");
        if (!json_is_object(g))
            return pl_hf_json_fail(&m->cfg, "quantization_config.config_groups", err, n,
                                   "missing, or not an object");
        return read_compressed_(m, g, err, n);
    }
    if (strcmp(method, "fp8"))
        return pl_hf_json_fail(&m->cfg, "quantization_config.quant_method", err, n,
                               "'%s' is not supported (parley reads f32, f16 and bf16 weights, "
                               "and FP8 as quant_method fp8 or compressed-tensors)", method);
    json_t *bs = pl_hf_json_get(&m->cfg, "quantization_config.weight_block_size");
    if (bs && (json_array_size(bs) != 2 || json_integer_value(json_array_get(bs, 0)) < 1 ||
               json_integer_value(json_array_get(bs, 1)) < 1))
        return pl_hf_json_fail(&m->cfg, "quantization_config.weight_block_size", err, n,
                               "must be [rows, cols]");
    if (bs) {
        m->block_rows = (int)json_integer_value(json_array_get(bs, 0));
        m->block_cols = (int)json_integer_value(json_array_get(bs, 1));
    }
    return 0;
}

/* name, or a composite model's text tensor of that name: under
 * "language_model." (transformers before 4.52), or "model.language_model."
 * for "model.*" (from 4.52). Found tensors are marked used. */
static const pl_st_tensor *find_(pl_hf_model *m, const char *name)
{
    const pl_st_tensor *t = pl_safetensors_find(m->st, name);
    char alt[600];
    if (!t && pl_hf_arch_text_config(m->arch)) {
        snprintf(alt, sizeof alt, "language_model.%s", name);
        t = pl_safetensors_find(m->st, alt);
        if (!t && !strncmp(name, "model.", 6)) {
            snprintf(alt, sizeof alt, "model.language_model.%s", name + 6);
            t = pl_safetensors_find(m->st, alt);
        }
    }
    if (t)
        m->used[t - pl_safetensors_at(m->st, 0)] = true;
    return t;
}

/* A composite model's vision tower and projector: not parley's to run. */
static bool vision_tensor_(const pl_hf_model *m, const char *name)
{
    static const char *const pre[] = {"vision_tower.", "multi_modal_projector.",
                                       "model.vision_tower.", "model.multi_modal_projector."};
    for (size_t i = 0; pl_hf_arch_text_config(m->arch) && i < sizeof pre / sizeof *pre; i++)
        if (!strncmp(name, pre[i], strlen(pre[i])))
            return true;
    return false;
}

/* The FP8 scale of weight "X.weight": X.weight_scale or X.weight_scale_inv
 * (both multiply); X.input_scale (static activation scales) is taken and
 * not needed: activations stay in float. */
static const pl_st_tensor *scale_of_(pl_hf_model *m, const char *name)
{
    char base[512], k[600];
    size_t len = strlen(name);
    if (len < 7 || len >= sizeof base || strcmp(name + len - 7, ".weight"))
        return NULL;
    memcpy(base, name, len - 7);
    base[len - 7] = '\0';
    snprintf(k, sizeof k, "%s.input_scale", base);
    find_(m, k);
    snprintf(k, sizeof k, "%s.weight_scale", base);
    const pl_st_tensor *s = find_(m, k);
    snprintf(k, sizeof k, "%s.weight_scale_inv", base);
    return s ? s : find_(m, k);
}

/* The shape the table's row e expects of a checkpoint tensor: n dims in
 * want[], their config.json names in names. */
static int want_shape_(const pl_hf_model *m, const pl_hf_tmap *e, int layer, uint64_t want[3],
                       char *names, size_t len)
{
    int d0 = pl_hf_dim_size_at(&m->sh, layer, e->d0), d1 = pl_hf_dim_size_at(&m->sh, layer, e->d1);
    int k = e->flags & (PL_HF_T_EVEN | PL_HF_T_ODD) ? 2 : 1;
    const char *n0 = pl_hf_dim_name(e->d0), *n1 = pl_hf_dim_name(e->d1), *x2 = k > 1 ? " x 2" : "";
    if (e->flags & PL_HF_T_FUSED) {
        want[0] = (uint64_t)m->sh.n_expert, want[1] = (uint64_t)d1, want[2] = (uint64_t)d0 * k;
        snprintf(names, len, "%s, %s, %s%s", pl_hf_dim_name(PL_HF_DIM_EXPERTS), n1, n0, x2);
        return 3;
    }
    if (e->flags & PL_HF_T_STACKED) {
        want[0] = (uint64_t)m->sh.n_expert, want[1] = (uint64_t)d0, want[2] = (uint64_t)d1;
        snprintf(names, len, "%s, %s, %s", pl_hf_dim_name(PL_HF_DIM_EXPERTS), n0, n1);
        return 3;
    }
    if (e->flags & PL_HF_T_SQUEEZE) {
        want[0] = (uint64_t)d0, want[1] = 1, want[2] = (uint64_t)d1;
        snprintf(names, len, "%s, 1, %s", n0, n1);
        return 3;
    }
    if (e->flags & PL_HF_T_COLUMN) {
        want[0] = 1, want[1] = (uint64_t)d0;
        snprintf(names, len, "1, %s", n0);
        return 2;
    }
    if (!e->d1) {
        want[0] = (uint64_t)d0 * k;
        snprintf(names, len, "%s%s", n0, x2);
        return 1;
    }
    want[0] = (uint64_t)d0, want[1] = (uint64_t)d1 * k;
    snprintf(names, len, "%s, %s%s", n0, n1, x2);
    return 2;
}

static int check_shape_(const pl_hf_model *m, const pl_st_tensor *t, const pl_hf_tmap *e,
                        int layer, char *err, size_t n)
{
    uint64_t want[3];
    char names[160], have[96] = "", exp[96] = "";
    int nd = want_shape_(m, e, layer, want, names, sizeof names);
    bool ok = t->n_dims == nd;
    for (int d = 0; d < nd; d++) {
        ok = ok && t->shape[d] == want[d];
        snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "%s%llu", d ? ", " : "",
                 (unsigned long long)want[d]);
    }
    if (ok)
        return 0;
    for (int d = 0; d < t->n_dims && d < 4; d++)
        snprintf(have + strlen(have), sizeof have - strlen(have), "%s%llu", d ? ", " : "",
                 (unsigned long long)t->shape[d]);
    snprintf(err, n, "%s: tensor '%s': shape [%s] disagrees with config.json: [%s] (%s)",
             t->file, t->name, have, exp, names);
    return -1;
}

/* The matrix type: its own (own_precision), or the one asked for, else
 * Q8_0, else F16 when the row length is not a whole number of blocks. */
static pl_ggml_type mat_type_(pl_hf_model *m, const pl_st_tensor *t, int cols)
{
    if (m->o.own_precision)
        return t->dtype == PL_ST_F16 ? PL_GGML_TYPE_F16 : t->dtype == PL_ST_F32
               ? PL_GGML_TYPE_F32 : PL_GGML_TYPE_BF16;
    pl_ggml_type c[3] = {m->o.weight_type, PL_GGML_TYPE_Q8_0, PL_GGML_TYPE_F16};
    for (int i = 0; i < 3; i++) {
        size_t be = 0;
        if (pl_ggml_type_block(c[i], &be, NULL) && cols % (int)be == 0) {
            m->stats.n_fallback += i > 0;
            return c[i];
        }
    }
    return PL_GGML_TYPE_F32;
}

/* In place when the checkpoint already holds the bytes the model wants. */
static bool in_place_(const pl_hf_conv *c)
{
    pl_st_dtype want = c->type == PL_GGML_TYPE_F32 ? PL_ST_F32 :
                       c->type == PL_GGML_TYPE_F16 ? PL_ST_F16 :
                       c->type == PL_GGML_TYPE_BF16 ? PL_ST_BF16 : PL_ST_DTYPE_COUNT;
    return c->src->dtype == want && !c->scale && !c->permute_heads && c->shift == 0.0f &&
           !c->offset && !c->row_step && !c->col_step && !c->neg_exp && !c->vh_n_k;
}

static int push_conv_(pl_hf_model *m, const pl_hf_conv *c)
{
    if (m->n_convs == m->cap_convs) {
        int cap = m->cap_convs ? 2 * m->cap_convs : 64;
        pl_hf_conv *v = realloc(m->convs, sizeof *v * (size_t)cap);
        if (!v)
            return -1;
        m->convs = v;
        m->cap_convs = cap;
    }
    m->convs[m->n_convs++] = *c;
    return 0;
}

static int push_buf_(pl_hf_model *m, void *p)
{
    if (m->n_bufs == m->cap_bufs) {
        int cap = m->cap_bufs ? 2 * m->cap_bufs : 64;
        void **v = realloc(m->bufs, sizeof *v * (size_t)cap);
        if (!v)
            return -1;
        m->bufs = v;
        m->cap_bufs = cap;
    }
    m->bufs[m->n_bufs++] = p;
    return 0;
}

/* Matrix x (an expert, or the one) of row e's GGUF tensor: where it lies
 * in the checkpoint's tensor t. */
static void place_(const pl_hf_model *m, const pl_hf_tmap *e, int x, pl_hf_conv *c)
{
    uint64_t k = e->flags & (PL_HF_T_EVEN | PL_HF_T_ODD) ? 2 : 1;
    uint64_t part = e->flags & PL_HF_T_ODD ? 1 : 0;
    if (e->flags & PL_HF_T_FUSED) {    /* [n_expert, cols, rows * k] */
        c->offset = (uint64_t)x * (uint64_t)c->cols * (uint64_t)c->rows * k + part;
        c->row_step = k;
        c->col_step = (uint64_t)c->rows * k;
    } else if (e->flags & PL_HF_T_STACKED) {   /* [n_expert, rows, cols] */
        c->offset = (uint64_t)x * (uint64_t)c->rows * (uint64_t)c->cols;
        c->row_step = (uint64_t)c->cols;
        c->col_step = 1;
    } else if (k > 1) {                /* [rows, cols * k] */
        c->offset = part;
        c->row_step = (uint64_t)c->cols * k;
        c->col_step = k;
    }
    (void)m;
}

/* Row e's value-head reordering (PL_HF_T_VHEADS), where the key heads are
 * fewer than the value heads: along the rows of a matrix (after the q and
 * k rows of the qkv projection and the conv), along a vector's elements
 * or, with PL_HF_T_VHEADS_COLS, a matrix's columns. */
static void vheads_(const pl_hf_model *m, const pl_hf_tmap *e, pl_hf_conv *c)
{
    const pl_hf_shape *sh = &m->sh;
    if (!(e->flags & PL_HF_T_VHEADS) || sh->ssm_n_k <= 0 || sh->ssm_n_v == sh->ssm_n_k)
        return;
    c->vh_cols = (e->flags & PL_HF_T_VHEADS_COLS) || !e->d1;
    pl_hf_dim along = c->vh_cols ? (e->d1 ? e->d1 : e->d0) : e->d0;
    c->vh_n_k = sh->ssm_n_k;
    c->vh_per_k = sh->ssm_n_v / sh->ssm_n_k;
    c->vh_width = along == PL_HF_DIM_SSM_V ? 1 : sh->ssm_d;
    c->vh_start = along == PL_HF_DIM_SSM_CONV ? 2 * sh->ssm_n_k * sh->ssm_d : 0;
}

/* The checkpoint tensor of matrix x of row e (per-expert rows name one
 * tensor per expert), found and checked. */
static int source_(pl_hf_model *m, const pl_hf_tmap *e, int layer, int x,
                   const pl_st_tensor **out, char *hf, size_t hn, char *err, size_t n)
{
    if (e->flags & PL_HF_T_EXPERTS)
        snprintf(hf, hn, e->hf, layer, x);
    else
        snprintf(hf, hn, e->hf, layer);
    const pl_st_tensor *t = *out = find_(m, hf);
    if (!t) {
        if ((e->flags & PL_HF_T_OPTIONAL) && x == 0)
            return 0;
        if (e->flags & PL_HF_T_EXPERTS)
            return snprintf(err, n, "%s: tensor '%s' is missing (config.json: %d experts a "
                            "layer)", m->dir, hf, m->sh.n_expert), -1;
        return snprintf(err, n, "%s: tensor '%s' is missing (config.json: %s with %d layers%s)",
                        m->dir, hf, pl_hf_arch_gguf(m->arch), m->sh.n_layer,
                        e->flags & PL_HF_T_BIAS ? ", q/k/v biases" : ""), -1;
    }
    return check_shape_(m, t, e, layer, err, n);
}

/* Row e of the table for one layer: a GGUF tensor of one matrix (or
 * vector), or of n_expert matrices from one or n_expert checkpoint
 * tensors. */
static int add_tensor_(pl_hf_model *m, const pl_hf_tmap *e, int layer, char *err, size_t n)
{
    char hf[256], gg[128];
    bool exps = e->flags & (PL_HF_T_EXPERTS | PL_HF_T_FUSED | PL_HF_T_STACKED);
    int n_mat = exps ? m->sh.n_expert : 1;
    int rows = e->d1 ? pl_hf_dim_size_at(&m->sh, layer, e->d0) : 1;
    int cols = pl_hf_dim_size_at(&m->sh, layer, e->d1 ? e->d1 : e->d0);
    uint8_t *buf = NULL;
    size_t mat_bytes = 0;
    pl_ggml_type type = PL_GGML_TYPE_F32;
    snprintf(gg, sizeof gg, e->gguf, layer);
    if (n_mat == 0)
        return 0;                /* experts of a dense model (optional rows) */
    for (int x = 0; x < n_mat; x++) {
        const pl_st_tensor *t;
        if (source_(m, e, layer, x, &t, hf, sizeof hf, err, n) < 0)
            return -1;
        if (!t)
            return 0;            /* optional, absent */
        pl_hf_conv c = {.src = t, .scale = e->flags & (PL_HF_T_FUSED | PL_HF_T_STACKED) ? NULL
                                           : scale_of_(m, hf),
                        .block_rows = m->block_rows, .block_cols = m->block_cols,
                        .rows = rows, .cols = cols};
        place_(m, e, x, &c);
        if (e->flags & (PL_HF_T_PERMUTE_Q | PL_HF_T_PERMUTE_K))
            c.permute_heads = e->flags & PL_HF_T_PERMUTE_Q ? m->sh.n_head : m->sh.n_head_kv;
        if (e->flags & PL_HF_T_NORM)
            c.shift = pl_hf_arch_norm_shift(m->arch);
        c.neg_exp = (e->flags & PL_HF_T_NEG_EXP) != 0;
        vheads_(m, e, &c);
        if (x == 0)
            type = e->d1 && !(e->flags & PL_HF_T_F32) ? mat_type_(m, t, c.cols) : PL_GGML_TYPE_F32;
        c.type = type;
        if (pl_hf_conv_check(&c, err, n) < 0)
            return -1;
        mat_bytes = pl_hf_conv_bytes(&c);
        if (!exps && in_place_(&c)) {
            buf = (uint8_t *)t->data;
            break;
        }
        /* 64-byte aligned, as the kernels' loads like it (a GGUF's data is
         * aligned too) */
        if (!buf && (posix_memalign((void **)&buf, 64, mat_bytes * (size_t)n_mat + 64) != 0 ||
                     push_buf_(m, buf) < 0)) {
            free(buf);
            return oom_(err, n);
        }
        c.dst = buf + (size_t)x * mat_bytes;
        if (push_conv_(m, &c) < 0)
            return oom_(err, n);
        m->stats.mib_written += (double)mat_bytes / (1 << 20);
    }
    uint64_t ne[3] = {(uint64_t)cols, (uint64_t)rows, (uint64_t)n_mat};
    if (pl_gguf_synth_tensor(m->synth, gg, type, exps ? 3 : e->d1 ? 2 : 1, ne, buf,
                             mat_bytes * (size_t)n_mat) < 0)
        return oom_(err, n);
    return 0;
}

static int add_tensors_(pl_hf_model *m, char *err, size_t n)
{
    for (const pl_hf_tmap *e = pl_hf_arch_global_tensors(m->arch); e->hf; e++) {
        if (!strcmp(e->gguf, "output.weight") && m->sh.tied) {
            find_(m, e->hf);     /* tied: the embedding is the head */
            continue;
        }
        pl_hf_tmap g = *e;
        if (!strcmp(e->gguf, "output.weight"))
            g.flags &= ~(unsigned)PL_HF_T_OPTIONAL;
        if (add_tensor_(m, &g, 0, err, n) < 0)
            return -1;
    }
    for (int l = 0; l < m->sh.n_layer; l++) {
        bool rec = pl_hf_shape_recurrent(&m->sh, l);
        for (const pl_hf_tmap *e = pl_hf_arch_layer_tensors(m->arch); e->hf; e++) {
            if ((e->flags & PL_HF_T_BIAS && !m->sh.bias) ||
                (e->flags & PL_HF_T_RECURRENT && !rec) || (e->flags & PL_HF_T_ATTN_ONLY && rec))
                continue;
            if (add_tensor_(m, e, l, err, n) < 0)
                return -1;
        }
    }
    return 0;
}

/* Every tensor in the files is one the architecture reads (or rope's
 * cached inverse frequencies, which are recomputed). */
static int check_unused_(pl_hf_model *m, char *err, size_t n)
{
    for (size_t i = 0; i < pl_safetensors_count(m->st); i++) {
        const pl_st_tensor *t = pl_safetensors_at(m->st, i);
        const char *tail = strstr(t->name, "rotary_emb.inv_freq");
        if (m->used[i] || (tail && !tail[19]) || vision_tensor_(m, t->name) ||
            pl_hf_arch_skips(m->arch, t->name))
            continue;
        int l = -1;
        if (sscanf(t->name, "model.layers.%d.", &l) == 1 && l >= m->sh.n_layer)
            return snprintf(err, n, "%s: tensor '%s': layer %d, but config.json has "
                            "num_hidden_layers %d", t->file, t->name, l, m->sh.n_layer), -1;
        return snprintf(err, n, "%s: tensor '%s' is not part of a %s model as parley reads it "
                        "(%s)", t->file, t->name, pl_hf_arch_gguf(m->arch),
                        m->sh.bias ? "with q/k/v biases" : "without q/k/v biases"), -1;
    }
    return 0;
}

static int special_ids_(pl_hf_model *m, char *err, size_t n)
{
    long long bos = -1, eos = -1;
    json_t *e = pl_hf_json_get(&m->cfg, "eos_token_id");
    if (pl_hf_json_int(&m->cfg, "bos_token_id", false, 0, 1 << 30, &bos, err, n) < 0)
        return -1;
    if (json_is_array(e))
        e = json_array_get(e, 0);
    if (json_is_integer(e))
        eos = json_integer_value(e);
    if ((bos >= 0 && pl_gguf_synth_u32(m->synth, "tokenizer.ggml.bos_token_id", (uint32_t)bos)) ||
        (eos >= 0 && eos < (1 << 30) &&
         pl_gguf_synth_u32(m->synth, "tokenizer.ggml.eos_token_id", (uint32_t)eos)))
        return oom_(err, n);
    return 0;
}

static int open_steps_(pl_hf_model *m, char *err, size_t n)
{
    if (pl_hf_json_load(&m->cfg, m->dir, "config.json", true, err, n) < 0 ||
        read_arch_(m, err, n) < 0 || read_quant_(m, err, n) < 0)
        return -1;
    if (pl_hf_arch_text_config(m->arch) &&
        pl_hf_json_narrow(&m->cfg, "text_config", pl_hf_arch_text_config(m->arch), err, n) < 0)
        return -1;
    if (!(m->synth = pl_gguf_synth_new()))
        return oom_(err, n);
    if (pl_hf_arch_hparams(m->arch, &m->cfg, &m->sh, m->synth, err, n) < 0 ||
        special_ids_(m, err, n) < 0)
        return -1;
    if (!(m->st = pl_safetensors_open_dir(m->dir, err, n)))
        return -1;
    m->used = calloc(pl_safetensors_count(m->st) + 1, 1);
    if (!m->used)
        return oom_(err, n);
    if (add_tensors_(m, err, n) < 0 || check_unused_(m, err, n) < 0)
        return -1;
    if (pl_hf_convert_all(m->convs, m->n_convs, m->o.threads, err, n) < 0)
        return -1;
    for (int i = 0; i < m->n_convs; i++)     /* read once: off the resident set */
        pl_safetensors_drop(m->convs[i].src->data, m->convs[i].src->nbytes);
    return 0;
}

pl_hf_model *pl_hf_model_open(const char *dir, const pl_hf_opts *o, char *err, size_t errlen)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pl_hf_model *m = calloc(1, sizeof *m);
    if (!m) {
        oom_(err, errlen);
        return NULL;
    }
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    m->o = *o;
    if (open_steps_(m, err, errlen) < 0) {
        pl_hf_model_free(m);
        return NULL;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    m->stats.n_tensors = (int)pl_safetensors_count(m->st);
    m->stats.n_converted = m->n_convs;
    m->stats.mib_read = (double)pl_safetensors_bytes(m->st) / (1 << 20);
    m->stats.seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    pl_info("%s: %s checkpoint, %d tensors (%.0f MiB%s), %d converted to %s (%.0f MiB, %d "
            "matrices in another type for their row length) in %.2f s", dir,
            pl_hf_arch_gguf(m->arch), m->stats.n_tensors, m->stats.mib_read,
            m->stats.fp8 ? ", FP8" : "", m->n_convs,
            o->own_precision ? "their own precision" : pl_ggml_type_name(o->weight_type),
            m->stats.mib_written, m->stats.n_fallback, m->stats.seconds);
    return m;
}

const pl_gguf *pl_hf_model_gguf(const pl_hf_model *m) { return pl_gguf_synth_view(m->synth); }

const pl_hf_load_stats *pl_hf_model_stats(const pl_hf_model *m) { return &m->stats; }

int pl_hf_model_n_vocab(const pl_hf_model *m) { return m->sh.n_vocab; }

void pl_hf_model_free(pl_hf_model *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_bufs; i++)
        free(m->bufs[i]);
    free(m->bufs);
    free(m->convs);
    free(m->used);
    pl_gguf_synth_free(m->synth);
    pl_safetensors_free(m->st);
    pl_hf_json_free(&m->cfg);
    free(m);
}
