/* gguf_synth.c - a pl_gguf assembled in memory (gguf_synth.h). */
#include "backends/engine/model/gguf_synth.h"

#include <stdlib.h>
#include <string.h>

struct pl_gguf_synth {
    pl_gguf g;                   /* kv and tensors grow here */
    size_t kv_cap, t_cap;
    char **strs;                 /* every copied key, value and name */
    size_t n_strs, strs_cap;
};

pl_gguf_synth *pl_gguf_synth_new(void)
{
    pl_gguf_synth *s = calloc(1, sizeof *s);
    if (s) {
        s->g.version = 3;
        s->g.alignment = 32;
    }
    return s;
}

static pl_gguf_str keep_(pl_gguf_synth *s, const char *z)
{
    pl_gguf_str r = {NULL, 0};
    if (s->n_strs == s->strs_cap) {
        size_t cap = s->strs_cap ? 2 * s->strs_cap : 64;
        char **v = realloc(s->strs, cap * sizeof *v);
        if (!v)
            return r;
        s->strs = v;
        s->strs_cap = cap;
    }
    char *c = strdup(z);
    if (!c)
        return r;
    s->strs[s->n_strs++] = c;
    r.ptr = c;
    r.len = strlen(c);
    return r;
}

/* The entry for key: the existing one, or a new one. */
static pl_gguf_kv *kv_slot_(pl_gguf_synth *s, const char *key)
{
    for (uint64_t i = 0; i < s->g.n_kv; i++)
        if (s->g.kv[i].key.len == strlen(key) && !memcmp(s->g.kv[i].key.ptr, key, strlen(key)))
            return &s->g.kv[i];
    if (s->g.n_kv == s->kv_cap) {
        size_t cap = s->kv_cap ? 2 * s->kv_cap : 32;
        pl_gguf_kv *v = realloc(s->g.kv, cap * sizeof *v);
        if (!v)
            return NULL;
        s->g.kv = v;
        s->kv_cap = cap;
    }
    pl_gguf_kv *kv = &s->g.kv[s->g.n_kv];
    memset(kv, 0, sizeof *kv);
    kv->key = keep_(s, key);
    if (!kv->key.ptr)
        return NULL;
    s->g.n_kv++;
    return kv;
}

/* The entry for key, typed t (its value is the caller's to set). */
static pl_gguf_kv *scalar_(pl_gguf_synth *s, const char *key, pl_gguf_type t)
{
    pl_gguf_kv *kv = kv_slot_(s, key);
    if (kv)
        kv->type = t;
    return kv;
}

int pl_gguf_synth_u32(pl_gguf_synth *s, const char *key, uint32_t v)
{
    pl_gguf_kv *kv = scalar_(s, key, PL_GGUF_TYPE_UINT32);
    return kv ? (kv->v.u64 = v, 0) : -1;
}

int pl_gguf_synth_f32(pl_gguf_synth *s, const char *key, float v)
{
    pl_gguf_kv *kv = scalar_(s, key, PL_GGUF_TYPE_FLOAT32);
    return kv ? (kv->v.f64 = v, 0) : -1;
}

int pl_gguf_synth_bool(pl_gguf_synth *s, const char *key, int v)
{
    pl_gguf_kv *kv = scalar_(s, key, PL_GGUF_TYPE_BOOL);
    return kv ? (kv->v.b = v != 0, 0) : -1;
}

/* n bytes copied into s's keep list (freed with it), or NULL. */
static void *keep_mem_(pl_gguf_synth *s, const void *p, size_t n)
{
    if (s->n_strs == s->strs_cap) {
        size_t cap = s->strs_cap ? 2 * s->strs_cap : 64;
        char **v = realloc(s->strs, cap * sizeof *v);
        if (!v)
            return NULL;
        s->strs = v;
        s->strs_cap = cap;
    }
    char *c = malloc(n ? n : 1);
    if (!c)
        return NULL;
    memcpy(c, p, n);
    s->strs[s->n_strs++] = c;
    return c;
}

int pl_gguf_synth_arr_i32(pl_gguf_synth *s, const char *key, const int32_t *v, size_t n)
{
    pl_gguf_kv *kv = kv_slot_(s, key);
    const uint8_t *d = kv ? keep_mem_(s, v, n * sizeof *v) : NULL;
    if (!d)
        return -1;
    kv->type = PL_GGUF_TYPE_ARRAY;
    kv->v.arr.type = PL_GGUF_TYPE_INT32;
    kv->v.arr.n = n;
    kv->v.arr.data = d;
    kv->v.arr.str_off = NULL;
    return 0;
}

void *pl_gguf_synth_keep(pl_gguf_synth *s, const void *p, size_t n)
{
    return keep_mem_(s, p, n);
}

int pl_gguf_synth_str(pl_gguf_synth *s, const char *key, const char *v)
{
    pl_gguf_kv *kv = kv_slot_(s, key);
    if (!kv)
        return -1;
    pl_gguf_str str = keep_(s, v);
    if (!str.ptr)
        return -1;
    kv->type = PL_GGUF_TYPE_STRING;
    kv->v.str = str;
    return 0;
}

int pl_gguf_synth_tensor(pl_gguf_synth *s, const char *name, pl_ggml_type t, int n_dims,
                         const uint64_t *ne, const void *data, uint64_t nbytes)
{
    if (n_dims < 1 || n_dims > PL_GGUF_MAX_DIMS)
        return -1;
    if (s->g.n_tensors == s->t_cap) {
        size_t cap = s->t_cap ? 2 * s->t_cap : 64;
        pl_gguf_tensor *v = realloc(s->g.tensors, cap * sizeof *v);
        if (!v)
            return -1;
        s->g.tensors = v;
        s->t_cap = cap;
    }
    pl_gguf_tensor *x = &s->g.tensors[s->g.n_tensors];
    memset(x, 0, sizeof *x);
    x->name = keep_(s, name);
    if (!x->name.ptr)
        return -1;
    x->n_dims = (uint32_t)n_dims;
    for (int d = 0; d < PL_GGUF_MAX_DIMS; d++)
        x->ne[d] = d < n_dims ? ne[d] : 1;
    x->type = t;
    x->data = data;
    x->nbytes = nbytes;
    s->g.n_tensors++;
    return 0;
}

const pl_gguf *pl_gguf_synth_view(const pl_gguf_synth *s)
{
    return &s->g;
}

void pl_gguf_synth_free(pl_gguf_synth *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_strs; i++)
        free(s->strs[i]);
    free(s->strs);
    free(s->g.kv);
    free(s->g.tensors);
    free(s);
}
