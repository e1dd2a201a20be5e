/* gguf.c - the validating GGUF parser: header, metadata, tensor infos and
 * the data section, plus mmap-based opening.
 *
 * Layout (little-endian): magic "GGUF", u32 version, u64 n_tensors,
 * u64 n_kv, n_kv metadata pairs, n_tensors tensor infos, padding up to
 * general.alignment, then the tensor data. Every read goes through a
 * bounds-checked cursor; every count is capped by what the remaining bytes
 * could possibly hold before anything is allocated for it.
 */
#include "backends/formats/gguf.h"

#include "src/base/le.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_NAME_SHOW 64        /* longest name quoted in an error */
/* Smallest encodings, used to cap counts before allocating:
 * kv = key len (8) + 1 key byte + type (4) + 1 value byte;
 * tensor = name len (8) + 1 name byte + n_dims (4) + one dim (8) +
 * type (4) + offset (8). */
#define GGUF_MIN_KV_BYTES 14
#define GGUF_MIN_TENSOR_BYTES 33

typedef struct cursor {
    const uint8_t *buf;
    size_t size;
    size_t pos;
    char *err;
    size_t errlen;
} cursor;

static int fail_(cursor *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int fail_(cursor *c, const char *fmt, ...)
{
    if (c->err && c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static size_t left_(const cursor *c) { return c->size - c->pos; }

static int need_(cursor *c, uint64_t n, const char *what)
{
    if (n > left_(c))
        return fail_(c, "truncated file: %s needs %llu bytes at offset %zu "
                     "(file size %zu)", what, (unsigned long long)n, c->pos,
                     c->size);
    return 0;
}

static int rd_bytes_(cursor *c, void *out, size_t n, const char *what)
{
    if (need_(c, n, what) < 0)
        return -1;
    memcpy(out, c->buf + c->pos, n);
    c->pos += n;
    return 0;
}

static int rd_u32_(cursor *c, uint32_t *out, const char *what)
{
    uint8_t b[4];
    if (rd_bytes_(c, b, 4, what) < 0)
        return -1;
    *out = pl_le32(b);
    return 0;
}

static int rd_u64_(cursor *c, uint64_t *out, const char *what)
{
    uint8_t b[8];
    if (rd_bytes_(c, b, 8, what) < 0)
        return -1;
    *out = pl_le64(b);
    return 0;
}

static int rd_str_(cursor *c, pl_gguf_str *out, const char *what)
{
    uint64_t len;
    if (rd_u64_(c, &len, what) < 0)
        return -1;
    if (len > left_(c))
        return fail_(c, "%s: string length %llu at offset %zu past end of "
                     "file (size %zu)", what, (unsigned long long)len,
                     c->pos - 8, c->size);
    out->ptr = (const char *)c->buf + c->pos;
    out->len = len;
    c->pos += len;
    return 0;
}

/** Size of one scalar of a metadata type; 0 for strings, arrays, unknown. */
static size_t scalar_size_(uint32_t t)
{
    switch (t) {
    case PL_GGUF_TYPE_UINT8: case PL_GGUF_TYPE_INT8: case PL_GGUF_TYPE_BOOL:
        return 1;
    case PL_GGUF_TYPE_UINT16: case PL_GGUF_TYPE_INT16:
        return 2;
    case PL_GGUF_TYPE_UINT32: case PL_GGUF_TYPE_INT32:
    case PL_GGUF_TYPE_FLOAT32:
        return 4;
    case PL_GGUF_TYPE_UINT64: case PL_GGUF_TYPE_INT64:
    case PL_GGUF_TYPE_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

static int key_show_(const pl_gguf_str *s)
{
    return s->len > GGUF_NAME_SHOW ? GGUF_NAME_SHOW : (int)s->len;
}

/* Decode one scalar into the union; the bytes are known to be in range. */
static void scalar_decode_(pl_gguf_kv *kv, const uint8_t *p)
{
    uint64_t raw = pl_le_read(p, scalar_size_(kv->type));
    uint32_t f32;
    float f;
    switch (kv->type) {
    case PL_GGUF_TYPE_INT8: kv->v.i64 = (int8_t)raw; break;
    case PL_GGUF_TYPE_INT16: kv->v.i64 = (int16_t)raw; break;
    case PL_GGUF_TYPE_INT32: kv->v.i64 = (int32_t)raw; break;
    case PL_GGUF_TYPE_INT64: kv->v.i64 = (int64_t)raw; break;
    case PL_GGUF_TYPE_BOOL: kv->v.b = raw != 0; break;
    case PL_GGUF_TYPE_FLOAT32:
        f32 = (uint32_t)raw;
        memcpy(&f, &f32, 4);
        kv->v.f64 = f;
        break;
    case PL_GGUF_TYPE_FLOAT64: memcpy(&kv->v.f64, &raw, 8); break;
    default: kv->v.u64 = raw; break;
    }
}

static int parse_str_array_(cursor *c, pl_gguf_kv *kv)
{
    uint64_t n = kv->v.arr.n;
    /* each element holds at least its 8-byte length */
    if (n > left_(c) / 8)
        return fail_(c, "key '%.*s': string array of %llu elements cannot "
                     "fit in the %zu bytes left", key_show_(&kv->key),
                     kv->key.ptr, (unsigned long long)n, left_(c));
    uint64_t *off = malloc(n ? n * sizeof(*off) : 1);
    if (!off)
        return fail_(c, "out of memory for string array");
    kv->v.arr.str_off = off;
    size_t start = c->pos;
    for (uint64_t i = 0; i < n; i++) {
        pl_gguf_str s;
        off[i] = c->pos - start;
        if (rd_str_(c, &s, "string array element") < 0)
            return -1;
    }
    return 0;
}

static int parse_array_(cursor *c, pl_gguf_kv *kv)
{
    uint32_t et;
    uint64_t n;
    if (rd_u32_(c, &et, "array element type") < 0 ||
        rd_u64_(c, &n, "array length") < 0)
        return -1;
    kv->v.arr.type = (pl_gguf_type)et;
    kv->v.arr.n = n;
    kv->v.arr.data = c->buf + c->pos;
    if (et == PL_GGUF_TYPE_ARRAY)
        return fail_(c, "key '%.*s': nested arrays are not supported",
                     key_show_(&kv->key), kv->key.ptr);
    if (et == PL_GGUF_TYPE_STRING)
        return parse_str_array_(c, kv);
    size_t es = scalar_size_(et);
    if (es == 0)
        return fail_(c, "key '%.*s': unknown array element type %u",
                     key_show_(&kv->key), kv->key.ptr, et);
    if (n > left_(c) / es)
        return fail_(c, "key '%.*s': array of %llu x %zu bytes past end of "
                     "file (size %zu)", key_show_(&kv->key), kv->key.ptr,
                     (unsigned long long)n, es, c->size);
    c->pos += n * es;
    return 0;
}

static int parse_kv_(cursor *c, pl_gguf_kv *kv)
{
    uint32_t t;
    if (rd_str_(c, &kv->key, "metadata key") < 0)
        return -1;
    if (kv->key.len == 0)
        return fail_(c, "empty metadata key at offset %zu", c->pos - 8);
    if (rd_u32_(c, &t, "metadata value type") < 0)
        return -1;
    kv->type = (pl_gguf_type)t;
    if (t == PL_GGUF_TYPE_STRING)
        return rd_str_(c, &kv->v.str, "metadata string value");
    if (t == PL_GGUF_TYPE_ARRAY)
        return parse_array_(c, kv);
    size_t es = scalar_size_(t);
    if (es == 0)
        return fail_(c, "key '%.*s': unknown value type %u",
                     key_show_(&kv->key), kv->key.ptr, t);
    if (need_(c, es, "metadata value") < 0)
        return -1;
    scalar_decode_(kv, c->buf + c->pos);
    c->pos += es;
    return 0;
}

static int str_cmp_(const pl_gguf_str *a, const pl_gguf_str *b)
{
    size_t n = a->len < b->len ? a->len : b->len;
    int r = n ? memcmp(a->ptr, b->ptr, n) : 0;
    if (r)
        return r;
    return a->len < b->len ? -1 : a->len > b->len;
}

static int str_ptr_cmp_(const void *a, const void *b)
{
    return str_cmp_(*(const pl_gguf_str *const *)a,
                    *(const pl_gguf_str *const *)b);
}

/* Reject duplicate names: sort pointers to them, compare neighbours. */
static int check_unique_(cursor *c, const pl_gguf_str **names, uint64_t n,
                         const char *what)
{
    qsort(names, n, sizeof(*names), str_ptr_cmp_);
    for (uint64_t i = 1; i < n; i++)
        if (str_cmp_(names[i - 1], names[i]) == 0)
            return fail_(c, "duplicate %s '%.*s'", what,
                         key_show_(names[i]), names[i]->ptr);
    return 0;
}

static int parse_kvs_(cursor *c, pl_gguf *g)
{
    if (g->n_kv > left_(c) / GGUF_MIN_KV_BYTES)
        return fail_(c, "metadata count %llu cannot fit in a %zu-byte file",
                     (unsigned long long)g->n_kv, c->size);
    g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof(*g->kv));
    if (!g->kv)
        return fail_(c, "out of memory for %llu metadata entries",
                     (unsigned long long)g->n_kv);
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (parse_kv_(c, &g->kv[i]) < 0)
            return -1;
    const pl_gguf_str **names = malloc((g->n_kv ? g->n_kv : 1) * sizeof(*names));
    if (!names)
        return fail_(c, "out of memory");
    for (uint64_t i = 0; i < g->n_kv; i++)
        names[i] = &g->kv[i].key;
    int rc = check_unique_(c, names, g->n_kv, "metadata key");
    free(names);
    return rc;
}

static int tensor_fail_(cursor *c, const pl_gguf_tensor *t, const char *msg)
{
    return fail_(c, "tensor '%.*s': %s", key_show_(&t->name), t->name.ptr,
                 msg);
}

/* Dimensions: 1..4, each >= 1 and their product within int64. */
static int parse_dims_(cursor *c, pl_gguf_tensor *t, uint64_t *nelem)
{
    if (rd_u32_(c, &t->n_dims, "tensor dimension count") < 0)
        return -1;
    if (t->n_dims == 0 || t->n_dims > PL_GGUF_MAX_DIMS) {
        char m[64];
        snprintf(m, sizeof(m), "%u dimensions (must be 1..%d)", t->n_dims,
                 PL_GGUF_MAX_DIMS);
        return tensor_fail_(c, t, m);
    }
    *nelem = 1;
    for (uint32_t d = 0; d < PL_GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if (d >= t->n_dims)
            continue;
        if (rd_u64_(c, &t->ne[d], "tensor dimension") < 0)
            return -1;
        if (t->ne[d] == 0 || t->ne[d] > (uint64_t)INT64_MAX)
            return tensor_fail_(c, t, "dimension is zero or negative");
        if (*nelem > (uint64_t)INT64_MAX / t->ne[d])
            return tensor_fail_(c, t, "element count overflows");
        *nelem *= t->ne[d];
    }
    return 0;
}

static int parse_tensor_(cursor *c, pl_gguf_tensor *t)
{
    uint64_t nelem = 0;
    uint32_t type;
    size_t be, bb;
    char m[96];
    if (rd_str_(c, &t->name, "tensor name") < 0)
        return -1;
    if (parse_dims_(c, t, &nelem) < 0 ||
        rd_u32_(c, &type, "tensor type") < 0 ||
        rd_u64_(c, &t->offset, "tensor offset") < 0)
        return -1;
    t->type = (pl_ggml_type)type;
    if (!pl_ggml_type_block(t->type, &be, &bb)) {
        snprintf(m, sizeof(m), "unknown or unsupported type %u", type);
        return tensor_fail_(c, t, m);
    }
    if (t->ne[0] % be) {
        snprintf(m, sizeof(m), "row of %llu elements is not a multiple of "
                 "the %s block (%zu)", (unsigned long long)t->ne[0],
                 pl_ggml_type_name(t->type), be);
        return tensor_fail_(c, t, m);
    }
    if (nelem / be > UINT64_MAX / bb)
        return tensor_fail_(c, t, "byte size overflows");
    t->nbytes = nelem / be * bb;
    return 0;
}

static int parse_tensors_(cursor *c, pl_gguf *g)
{
    if (g->n_tensors > left_(c) / GGUF_MIN_TENSOR_BYTES)
        return fail_(c, "tensor count %llu cannot fit in a %zu-byte file",
                     (unsigned long long)g->n_tensors, c->size);
    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof(*g->tensors));
    if (!g->tensors)
        return fail_(c, "out of memory for %llu tensors",
                     (unsigned long long)g->n_tensors);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (parse_tensor_(c, &g->tensors[i]) < 0)
            return -1;
    const pl_gguf_str **names =
        malloc((g->n_tensors ? g->n_tensors : 1) * sizeof(*names));
    if (!names)
        return fail_(c, "out of memory");
    for (uint64_t i = 0; i < g->n_tensors; i++)
        names[i] = &g->tensors[i].name;
    int rc = check_unique_(c, names, g->n_tensors, "tensor name");
    free(names);
    return rc;
}

static int parse_alignment_(cursor *c, pl_gguf *g)
{
    const pl_gguf_kv *kv = pl_gguf_find(g, "general.alignment");
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (!kv)
        return 0;
    if (pl_gguf_get_u64(g, "general.alignment", &g->alignment) < 0)
        return fail_(c, "general.alignment is not a non-negative integer");
    if (g->alignment == 0 || (g->alignment & (g->alignment - 1)))
        return fail_(c, "general.alignment %llu is not a power of two",
                     (unsigned long long)g->alignment);
    return 0;
}

/* Place the data section and bound every tensor inside the file. */
static int place_data_(cursor *c, pl_gguf *g)
{
    uint64_t a = g->alignment, pad = (a - c->pos % a) % a;
    if (pad > left_(c) && g->n_tensors > 0)
        return fail_(c, "data section offset %zu + padding %llu past end of "
                     "file (size %zu)", c->pos, (unsigned long long)pad,
                     c->size);
    uint64_t data_off = c->pos + (pad > left_(c) ? left_(c) : pad);
    uint64_t data_size = c->size - data_off;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        pl_gguf_tensor *t = &g->tensors[i];
        char m[160];
        if (t->offset % a) {
            snprintf(m, sizeof(m), "data offset %llu is not aligned to %llu",
                     (unsigned long long)t->offset, (unsigned long long)a);
            return tensor_fail_(c, t, m);
        }
        if (t->offset > data_size || t->nbytes > data_size - t->offset) {
            snprintf(m, sizeof(m), "data [%llu, %llu+%llu) past end of file "
                     "(size %zu)", (unsigned long long)(data_off + t->offset),
                     (unsigned long long)(data_off + t->offset),
                     (unsigned long long)t->nbytes, c->size);
            return tensor_fail_(c, t, m);
        }
        t->data = c->buf + data_off + t->offset;
    }
    return 0;
}

static int parse_header_(cursor *c, pl_gguf *g)
{
    uint8_t magic[4];
    if (rd_bytes_(c, magic, 4, "magic") < 0)
        return -1;
    if (memcmp(magic, "GGUF", 4) != 0)
        return fail_(c, "bad magic %02x %02x %02x %02x (not a GGUF file)",
                     magic[0], magic[1], magic[2], magic[3]);
    if (rd_u32_(c, &g->version, "version") < 0)
        return -1;
    if (g->version == 1)
        return fail_(c, "GGUF version 1 is not supported (only 2 and 3)");
    if (g->version == 0x02000000u || g->version == 0x03000000u)
        return fail_(c, "big-endian GGUF files are not supported");
    if (g->version != 2 && g->version != 3)
        return fail_(c, "unsupported GGUF version %u (only 2 and 3)",
                     g->version);
    if (rd_u64_(c, &g->n_tensors, "tensor count") < 0 ||
        rd_u64_(c, &g->n_kv, "metadata count") < 0)
        return -1;
    return 0;
}

pl_gguf *pl_gguf_parse(const uint8_t *buf, size_t size, char *err,
                       size_t errlen)
{
    cursor c = {.buf = buf, .size = size, .err = err, .errlen = errlen};
    pl_gguf *g = calloc(1, sizeof(*g));
    if (err && errlen)
        err[0] = '\0';
    if (!g) {
        fail_(&c, "out of memory");
        return NULL;
    }
    g->map = buf;
    g->size = size;
    if (!buf && size) {
        fail_(&c, "NULL buffer");
        goto fail;
    }
    if (parse_header_(&c, g) < 0 || parse_kvs_(&c, g) < 0 ||
        parse_alignment_(&c, g) < 0 || parse_tensors_(&c, g) < 0 ||
        place_data_(&c, g) < 0)
        goto fail;
    return g;
fail:
    pl_gguf_free(g);
    return NULL;
}

pl_gguf *pl_gguf_open(const char *path, char *err, size_t errlen)
{
    pl_gguf *g = NULL;
    void *map = MAP_FAILED;
    struct stat st;
    char scratch[8];
    if (!err || !errlen) {       /* callers may ignore the message */
        err = scratch;
        errlen = sizeof(scratch);
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        goto done;
    }
    if (st.st_size < 24) {
        snprintf(err, errlen, "%s: file too small for a GGUF header "
                 "(%lld bytes)", path, (long long)st.st_size);
        goto done;
    }
    map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        snprintf(err, errlen, "%s: mmap: %s", path, strerror(errno));
        goto done;
    }
    g = pl_gguf_parse(map, (size_t)st.st_size, err, errlen);
    if (g)
        g->owns_map = 1;
    else
        munmap(map, (size_t)st.st_size);
done:
    close(fd);
    return g;
}

void pl_gguf_free(pl_gguf *g)
{
    if (!g)
        return;
    for (uint64_t i = 0; g->kv && i < g->n_kv; i++)
        if (g->kv[i].type == PL_GGUF_TYPE_ARRAY)
            free((void *)g->kv[i].v.arr.str_off);
    free(g->kv);
    free(g->tensors);
    if (g->owns_map)
        munmap((void *)g->map, g->size);
    free(g);
}
