/* gguf_meta.c - lookups into a parsed GGUF file (metadata getters, array
 * element accessors, tensor lookup) and the ggml tensor type table.
 *
 * Everything here reads data that gguf.c has already bounds-checked.
 */
#include "backends/formats/gguf.h"

#include "src/base/le.h"

#include <float.h>
#include <math.h>
#include <string.h>

static int str_eq_(const pl_gguf_str *s, const char *z)
{
    size_t n = strlen(z);
    return s->len == n && memcmp(s->ptr, z, n) == 0;
}

const pl_gguf_kv *pl_gguf_find(const pl_gguf *g, const char *key)
{
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (str_eq_(&g->kv[i].key, key))
            return &g->kv[i];
    return NULL;
}

static int is_signed_(pl_gguf_type t)
{
    return t == PL_GGUF_TYPE_INT8 || t == PL_GGUF_TYPE_INT16 ||
           t == PL_GGUF_TYPE_INT32 || t == PL_GGUF_TYPE_INT64;
}

static int is_unsigned_(pl_gguf_type t)
{
    return t == PL_GGUF_TYPE_UINT8 || t == PL_GGUF_TYPE_UINT16 ||
           t == PL_GGUF_TYPE_UINT32 || t == PL_GGUF_TYPE_UINT64;
}

int pl_gguf_get_u64(const pl_gguf *g, const char *key, uint64_t *out)
{
    const pl_gguf_kv *kv = pl_gguf_find(g, key);
    if (!kv)
        return -1;
    if (is_unsigned_(kv->type)) {
        *out = kv->v.u64;
        return 0;
    }
    if (is_signed_(kv->type) && kv->v.i64 >= 0) {
        *out = (uint64_t)kv->v.i64;
        return 0;
    }
    return -1;
}

/* double -> float without undefined behaviour: out of range saturates to
 * infinity (a plain conversion of such a value is undefined in C). */
static float d2f_(double d)
{
    if (d > FLT_MAX)
        return INFINITY;
    if (d < -FLT_MAX)
        return -INFINITY;
    return (float)d;
}

int pl_gguf_get_f32(const pl_gguf *g, const char *key, float *out)
{
    const pl_gguf_kv *kv = pl_gguf_find(g, key);
    if (!kv || (kv->type != PL_GGUF_TYPE_FLOAT32 &&
                kv->type != PL_GGUF_TYPE_FLOAT64))
        return -1;
    *out = d2f_(kv->v.f64);
    return 0;
}

int pl_gguf_get_str(const pl_gguf *g, const char *key, pl_gguf_str *out)
{
    const pl_gguf_kv *kv = pl_gguf_find(g, key);
    if (!kv || kv->type != PL_GGUF_TYPE_STRING)
        return -1;
    *out = kv->v.str;
    return 0;
}

pl_gguf_str pl_gguf_arr_str(const pl_gguf_kv *kv, uint64_t i)
{
    pl_gguf_str s = {"", 0};
    if (kv->type != PL_GGUF_TYPE_ARRAY ||
        kv->v.arr.type != PL_GGUF_TYPE_STRING || i >= kv->v.arr.n)
        return s;
    const uint8_t *p = kv->v.arr.data + kv->v.arr.str_off[i];
    s.len = pl_le_read(p, 8);
    s.ptr = (const char *)p + 8;
    return s;
}

float pl_gguf_arr_f32(const pl_gguf_kv *kv, uint64_t i)
{
    if (kv->type != PL_GGUF_TYPE_ARRAY || i >= kv->v.arr.n)
        return 0.0f;
    if (kv->v.arr.type == PL_GGUF_TYPE_FLOAT32) {
        uint32_t b = (uint32_t)pl_le_read(kv->v.arr.data + 4 * i, 4);
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    if (kv->v.arr.type == PL_GGUF_TYPE_FLOAT64) {
        uint64_t b = pl_le_read(kv->v.arr.data + 8 * i, 8);
        double d;
        memcpy(&d, &b, 8);
        return d2f_(d);
    }
    return (float)pl_gguf_arr_int(kv, i);
}

int64_t pl_gguf_arr_int(const pl_gguf_kv *kv, uint64_t i)
{
    if (kv->type != PL_GGUF_TYPE_ARRAY || i >= kv->v.arr.n)
        return 0;
    const uint8_t *d = kv->v.arr.data;
    switch (kv->v.arr.type) {
    case PL_GGUF_TYPE_UINT8: case PL_GGUF_TYPE_BOOL: return d[i];
    case PL_GGUF_TYPE_INT8: return (int8_t)d[i];
    case PL_GGUF_TYPE_UINT16: return (uint16_t)pl_le_read(d + 2 * i, 2);
    case PL_GGUF_TYPE_INT16: return (int16_t)pl_le_read(d + 2 * i, 2);
    case PL_GGUF_TYPE_UINT32: return (uint32_t)pl_le_read(d + 4 * i, 4);
    case PL_GGUF_TYPE_INT32: return (int32_t)pl_le_read(d + 4 * i, 4);
    case PL_GGUF_TYPE_UINT64: case PL_GGUF_TYPE_INT64:
        return (int64_t)pl_le_read(d + 8 * i, 8);
    default: return 0;
    }
}

const pl_gguf_tensor *pl_gguf_tensor_find(const pl_gguf *g, const char *name)
{
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (str_eq_(&g->tensors[i].name, name))
            return &g->tensors[i];
    return NULL;
}

typedef struct type_info {
    pl_ggml_type type;
    const char *name;
    size_t block_elems;
    size_t block_bytes;
} type_info;

/* Block layouts: see quant.c for the fields of each block. */
static const type_info types_[] = {
    {PL_GGML_TYPE_F32, "F32", 1, 4},
    {PL_GGML_TYPE_F16, "F16", 1, 2},
    {PL_GGML_TYPE_BF16, "BF16", 1, 2},
    {PL_GGML_TYPE_Q4_0, "Q4_0", 32, 2 + 16},
    {PL_GGML_TYPE_Q4_1, "Q4_1", 32, 2 + 2 + 16},
    {PL_GGML_TYPE_Q5_0, "Q5_0", 32, 2 + 4 + 16},
    {PL_GGML_TYPE_Q5_1, "Q5_1", 32, 2 + 2 + 4 + 16},
    {PL_GGML_TYPE_Q8_0, "Q8_0", 32, 2 + 32},
    {PL_GGML_TYPE_Q8_1, "Q8_1", 32, 2 + 2 + 32},
    {PL_GGML_TYPE_Q2_K, "Q2_K", 256, 16 + 64 + 2 + 2},
    {PL_GGML_TYPE_Q3_K, "Q3_K", 256, 32 + 64 + 12 + 2},
    {PL_GGML_TYPE_Q4_K, "Q4_K", 256, 2 + 2 + 12 + 128},
    {PL_GGML_TYPE_Q5_K, "Q5_K", 256, 2 + 2 + 12 + 32 + 128},
    {PL_GGML_TYPE_Q6_K, "Q6_K", 256, 128 + 64 + 16 + 2},
    {PL_GGML_TYPE_Q8_K, "Q8_K", 256, 4 + 256 + 32},
    {PL_GGML_TYPE_MXFP4, "MXFP4", 32, 1 + 16},
};

static const type_info *type_info_(pl_ggml_type t)
{
    for (size_t i = 0; i < sizeof(types_) / sizeof(types_[0]); i++)
        if (types_[i].type == t)
            return &types_[i];
    return NULL;
}

int pl_ggml_type_block(pl_ggml_type t, size_t *block_elems,
                       size_t *block_bytes)
{
    const type_info *ti = type_info_(t);
    if (!ti)
        return 0;
    if (block_elems)
        *block_elems = ti->block_elems;
    if (block_bytes)
        *block_bytes = ti->block_bytes;
    return (int)ti->block_elems;
}

const char *pl_ggml_type_name(pl_ggml_type t)
{
    const type_info *ti = type_info_(t);
    return ti ? ti->name : "unknown";
}
