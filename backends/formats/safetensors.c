/* safetensors.c - the safetensors reader (safetensors.h): one image's
 * header and tensors, the checks the format asks for, and a checkpoint's
 * shards through model.safetensors.index.json.
 */
#include "backends/formats/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/base/le.h"

typedef struct st_file {
    char *path;
    const uint8_t *map;
    size_t size;
    bool owns;                   /* mapped by us */
} st_file;

struct pl_safetensors {
    st_file *files;
    int n_files;
    pl_st_tensor *t;             /* sorted by name once complete */
    size_t n, cap;
};

static const struct {
    const char *name;
    size_t size;
} dtypes_[PL_ST_DTYPE_COUNT] = {
    [PL_ST_BOOL] = {"BOOL", 1}, [PL_ST_U8] = {"U8", 1},   [PL_ST_I8] = {"I8", 1},
    [PL_ST_F8_E4M3] = {"F8_E4M3", 1}, [PL_ST_F8_E5M2] = {"F8_E5M2", 1},
    [PL_ST_I16] = {"I16", 2}, [PL_ST_U16] = {"U16", 2},   [PL_ST_F16] = {"F16", 2},
    [PL_ST_BF16] = {"BF16", 2}, [PL_ST_I32] = {"I32", 4}, [PL_ST_U32] = {"U32", 4},
    [PL_ST_F32] = {"F32", 4}, [PL_ST_I64] = {"I64", 8},   [PL_ST_U64] = {"U64", 8},
    [PL_ST_F64] = {"F64", 8},
};

const char *pl_st_dtype_name(pl_st_dtype t)
{
    return (unsigned)t < PL_ST_DTYPE_COUNT ? dtypes_[t].name : "?";
}

size_t pl_st_dtype_size(pl_st_dtype t)
{
    return (unsigned)t < PL_ST_DTYPE_COUNT ? dtypes_[t].size : 0;
}

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

/* ---- the header ---- */

typedef struct key_span {
    const char *p;
    size_t n;
} key_span;

static int span_cmp_(const void *a, const void *b)
{
    const key_span *x = a, *y = b;
    size_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->p, y->p, n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

/* The raw text of each key of the top-level object (escapes as written),
 * so a name given twice can be named: jansson keeps the last silently, or
 * with JSON_REJECT_DUPLICATES says only where. Malformed JSON is left to
 * jansson; this only has to stay inside the text. */
static int top_keys_(const char *s, size_t n, key_span **out, size_t *count)
{
    size_t cap = 64, k = 0;
    key_span *v = malloc(cap * sizeof *v);
    int depth = 0;
    bool expect_key = false;
    if (!v)
        return -1;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '"') {
            size_t j = i + 1;
            while (j < n && s[j] != '"')
                j += s[j] == '\\' ? 2 : 1;
            if (j > n)
                j = n;
            if (depth == 1 && expect_key) {
                if (k == cap) {
                    key_span *w = realloc(v, 2 * cap * sizeof *v);
                    if (!w) {
                        free(v);
                        return -1;
                    }
                    v = w;
                    cap *= 2;
                }
                v[k++] = (key_span){s + i + 1, j - i - 1};
                expect_key = false;
            }
            i = j;
        } else if (c == '{' || c == '[') {
            depth++;
            expect_key = depth == 1 && c == '{';
        } else if (c == '}' || c == ']') {
            depth--;
        } else if (c == ',' && depth == 1) {
            expect_key = true;
        }
    }
    *out = v;
    *count = k;
    return 0;
}

static int check_dup_names_(const char *file, const char *hdr, size_t n, char *err, size_t len)
{
    key_span *v;
    size_t k;
    if (top_keys_(hdr, n, &v, &k) < 0)
        return fail_(err, len, "%s: out of memory", file);
    qsort(v, k, sizeof *v, span_cmp_);
    for (size_t i = 1; i < k; i++) {
        if (span_cmp_(&v[i - 1], &v[i]) == 0) {
            int show = v[i].n > 200 ? 200 : (int)v[i].n;
            fail_(err, len, "%s: tensor '%.*s': the name appears twice in the header", file,
                  show, v[i].p);
            free(v);
            return -1;
        }
    }
    free(v);
    return 0;
}

/* A JSON error, naming the tensor whose entry it is in when it is in one
 * (jansson cannot hold an offset past 2^63, for one). */
static int header_fail_(const char *file, const char *hdr, size_t n, const json_error_t *je,
                        char *err, size_t len)
{
    key_span *v;
    size_t k;
    const key_span *in = NULL;
    if (je->position >= 0 && top_keys_(hdr, n, &v, &k) == 0) {
        for (size_t i = 0; i < k; i++)
            if (v[i].p < hdr + je->position)
                in = &v[i];
        if (in) {
            int show = in->n > 200 ? 200 : (int)in->n;
            fail_(err, len, "%s: tensor '%.*s': JSON header: %s (at byte %d)", file, show,
                  in->p, je->text, je->position);
        }
        free(v);
    }
    return in ? -1 : fail_(err, len, "%s: JSON header: %s (at byte %d)", file, je->text,
                           je->position);
}

static int dtype_parse_(const char *s, pl_st_dtype *out)
{
    for (int i = 0; i < PL_ST_DTYPE_COUNT; i++) {
        if (!strcmp(s, dtypes_[i].name)) {
            *out = (pl_st_dtype)i;
            return 0;
        }
    }
    return -1;
}

/* A JSON integer >= 0, into *out. */
static int json_u64_(json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int parse_shape_(json_t *shape, pl_st_tensor *t)
{
    if (!json_is_array(shape) || json_array_size(shape) > PL_ST_MAX_DIMS)
        return -1;
    t->n_dims = (int)json_array_size(shape);
    t->nelem = 1;
    for (int d = 0; d < t->n_dims; d++) {
        uint64_t x;
        if (json_u64_(json_array_get(shape, (size_t)d), &x) < 0)
            return -1;
        if (x && t->nelem > UINT64_MAX / x)
            return -2;
        t->shape[d] = x;
        t->nelem *= x;
    }
    return 0;
}

/* One "name": {dtype, shape, data_offsets} entry; begin/end returned for
 * the coverage check. */
static int parse_entry_(const char *file, const char *name, json_t *e, const uint8_t *data,
                        uint64_t data_size, pl_st_tensor *t, uint64_t *begin, char *err,
                        size_t len)
{
    if (!json_is_object(e))
        return fail_(err, len, "%s: tensor '%s': not an object", file, name);
    json_t *dt = json_object_get(e, "dtype"), *off = json_object_get(e, "data_offsets");
    if (!json_is_string(dt) || dtype_parse_(json_string_value(dt), &t->dtype) < 0)
        return fail_(err, len, "%s: tensor '%s': key 'dtype': %s%s", file, name,
                     json_is_string(dt) ? "unsupported dtype " : "missing or not a string",
                     json_is_string(dt) ? json_string_value(dt) : "");
    int rc = parse_shape_(json_object_get(e, "shape"), t);
    if (rc == -2)
        return fail_(err, len, "%s: tensor '%s': key 'shape': element count overflows", file,
                     name);
    if (rc < 0)
        return fail_(err, len, "%s: tensor '%s': key 'shape': must be a list of at most %d "
                     "integers >= 0", file, name, PL_ST_MAX_DIMS);
    uint64_t b, x;
    if (!json_is_array(off) || json_array_size(off) != 2 ||
        json_u64_(json_array_get(off, 0), &b) < 0 || json_u64_(json_array_get(off, 1), &x) < 0 ||
        b > x)
        return fail_(err, len, "%s: tensor '%s': key 'data_offsets': must be [begin, end] "
                     "with 0 <= begin <= end", file, name);
    size_t es = pl_st_dtype_size(t->dtype);
    if (t->nelem > UINT64_MAX / es)
        return fail_(err, len, "%s: tensor '%s': key 'shape': the byte count overflows", file,
                     name);
    if (t->nelem * es != x - b)
        return fail_(err, len, "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes; "
                     "shape and dtype %s need %llu", file, name, (unsigned long long)b,
                     (unsigned long long)x, (unsigned long long)(x - b), dtypes_[t->dtype].name,
                     (unsigned long long)(t->nelem * es));
    if (x > data_size)
        return fail_(err, len, "%s: tensor '%s': data_offsets end %llu is past the data "
                     "(%llu bytes)", file, name, (unsigned long long)x,
                     (unsigned long long)data_size);
    t->data = data + b;
    t->nbytes = x - b;
    *begin = b;
    return 0;
}

typedef struct range {
    uint64_t begin, end;
    size_t idx;                  /* into the set's tensors */
} range;

static int range_cmp_(const void *a, const void *b)
{
    const range *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* The data must be indexed entirely, without holes or overlaps. */
static int check_cover_(const pl_safetensors *s, const char *file, range *r, size_t k,
                        uint64_t data_size, char *err, size_t len)
{
    qsort(r, k, sizeof *r, range_cmp_);
    uint64_t at = 0;
    for (size_t i = 0; i < k; i++) {
        if (r[i].begin != at)
            return fail_(err, len, "%s: tensor '%s': data_offsets begin %llu %s (the previous "
                         "tensor ends at %llu)", file, s->t[r[i].idx].name,
                         (unsigned long long)r[i].begin,
                         r[i].begin < at ? "overlaps another tensor" : "leaves a hole",
                         (unsigned long long)at);
        at = r[i].end;
    }
    if (at != data_size)
        return fail_(err, len, "%s: the tensors index %llu of the %llu data bytes (the format "
                     "allows no trailing bytes)", file, (unsigned long long)at,
                     (unsigned long long)data_size);
    return 0;
}

static int push_tensor_(pl_safetensors *s, const pl_st_tensor *t, const char *name)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        pl_st_tensor *v = realloc(s->t, cap * sizeof *v);
        if (!v)
            return -1;
        s->t = v;
        s->cap = cap;
    }
    s->t[s->n] = *t;
    s->t[s->n].name = strdup(name);
    if (!s->t[s->n].name)
        return -1;
    s->n++;
    return 0;
}

static int parse_tensors_(pl_safetensors *s, const st_file *f, json_t *root, const uint8_t *data,
                          uint64_t data_size, char *err, size_t len)
{
    size_t first = s->n, k = 0;
    range *r = malloc((json_object_size(root) + 1) * sizeof *r);
    const char *name;
    json_t *e;
    if (!r)
        return fail_(err, len, "%s: out of memory", f->path);
    json_object_foreach(root, name, e) {
        if (!strcmp(name, "__metadata__")) {
            if (!json_is_object(e))
                goto bad_meta;
            continue;
        }
        pl_st_tensor t = {.file = f->path};
        uint64_t b = 0;
        if (parse_entry_(f->path, name, e, data, data_size, &t, &b, err, len) < 0)
            goto fail;
        if (push_tensor_(s, &t, name) < 0) {
            fail_(err, len, "%s: out of memory", f->path);
            goto fail;
        }
        r[k] = (range){b, b + t.nbytes, first + k};
        k++;
    }
    if (check_cover_(s, f->path, r, k, data_size, err, len) < 0)
        goto fail;
    free(r);
    return 0;
bad_meta:
    fail_(err, len, "%s: key '__metadata__': must be an object of strings", f->path);
fail:
    free(r);
    return -1;
}

/* Parse the image of f into s (tensors appended). */
static int parse_image_(pl_safetensors *s, const st_file *f, char *err, size_t len)
{
    if (f->size < 8)
        return fail_(err, len, "%s: %zu bytes: too short for a safetensors header", f->path,
                     f->size);
    uint64_t n = pl_le64(f->map);
    if (n > PL_ST_MAX_HEADER)
        return fail_(err, len, "%s: JSON header length %llu exceeds the %u-byte limit (not a "
                     "safetensors file?)", f->path, (unsigned long long)n, PL_ST_MAX_HEADER);
    if (n > f->size - 8)
        return fail_(err, len, "%s: JSON header length %llu runs past the end of the file "
                     "(%zu bytes)", f->path, (unsigned long long)n, f->size);
    const char *hdr = (const char *)f->map + 8;
    json_error_t je;
    json_t *root = json_loadb(hdr, (size_t)n, JSON_REJECT_DUPLICATES, &je);
    if (!root && strstr(je.text, "duplicate") &&
        check_dup_names_(f->path, hdr, (size_t)n, err, len) < 0)
        return -1;
    if (!root)
        return header_fail_(f->path, hdr, (size_t)n, &je, err, len);
    int rc = json_is_object(root)
                 ? parse_tensors_(s, f, root, f->map + 8 + n, f->size - 8 - n, err, len)
                 : fail_(err, len, "%s: JSON header: not an object", f->path);
    json_decref(root);
    return rc;
}

/* ---- sets of files ---- */

static st_file *add_file_(pl_safetensors *s, const char *path)
{
    st_file *v = realloc(s->files, (size_t)(s->n_files + 1) * sizeof *v);
    if (!v)
        return NULL;
    s->files = v;
    st_file *f = &v[s->n_files];
    *f = (st_file){.path = strdup(path)};
    if (!f->path)
        return NULL;
    s->n_files++;
    return f;
}

static int map_file_(st_file *f, char *err, size_t len)
{
    struct stat st;
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail_(err, len, "%s: %s", f->path, strerror(errno));
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return fail_(err, len, "%s: not a regular file", f->path);
    }
    f->size = (size_t)st.st_size;
    if (f->size == 0) {
        close(fd);
        return fail_(err, len, "%s: empty file", f->path);
    }
    void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return fail_(err, len, "%s: mmap: %s", f->path, strerror(errno));
    f->map = m;
    f->owns = true;
    return 0;
}

static int name_cmp_(const void *a, const void *b)
{
    return strcmp(((const pl_st_tensor *)a)->name, ((const pl_st_tensor *)b)->name);
}

/* Sort by name; a name in two files is an error naming both. */
static int finish_(pl_safetensors *s, char *err, size_t len)
{
    qsort(s->t, s->n, sizeof *s->t, name_cmp_);
    for (size_t i = 1; i < s->n; i++)
        if (!strcmp(s->t[i - 1].name, s->t[i].name))
            return fail_(err, len, "tensor '%s' is in both %s and %s", s->t[i].name,
                         s->t[i - 1].file, s->t[i].file);
    return 0;
}

pl_safetensors *pl_safetensors_parse(const uint8_t *buf, size_t size, const char *file,
                                     char *err, size_t errlen)
{
    pl_safetensors *s = calloc(1, sizeof *s);
    st_file *f = s ? add_file_(s, file ? file : "safetensors") : NULL;
    if (!f) {
        fail_(err, errlen, "out of memory");
        goto fail;
    }
    f->map = buf;
    f->size = size;
    if (parse_image_(s, f, err, errlen) < 0 || finish_(s, err, errlen) < 0)
        goto fail;
    return s;
fail:
    pl_safetensors_free(s);
    return NULL;
}

static int open_into_(pl_safetensors *s, const char *path, char *err, size_t len)
{
    st_file *f = add_file_(s, path);
    if (!f)
        return fail_(err, len, "out of memory");
    if (map_file_(f, err, len) < 0)
        return -1;
    return parse_image_(s, f, err, len);
}

pl_safetensors *pl_safetensors_open(const char *path, char *err, size_t errlen)
{
    pl_safetensors *s = calloc(1, sizeof *s);
    if (!s) {
        fail_(err, errlen, "out of memory");
        return NULL;
    }
    if (open_into_(s, path, err, errlen) < 0 || finish_(s, err, errlen) < 0) {
        pl_safetensors_free(s);
        return NULL;
    }
    return s;
}

/* A shard name from the index: a plain file name in the folder. */
static bool shard_name_ok_(const char *f)
{
    return f[0] && strcmp(f, ".") && strcmp(f, "..") && !strchr(f, '/') && strlen(f) < 1024;
}

static int open_shards_(pl_safetensors *s, const char *dir, const char *index, json_t *map,
                        char *err, size_t len)
{
    const char *name;
    json_t *v;
    json_object_foreach(map, name, v) {
        const char *f = json_string_value(v);
        if (!f || !shard_name_ok_(f))
            return fail_(err, len, "%s: key 'weight_map.%s': must be a file name in the "
                         "checkpoint folder", index, name);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, f);
        bool seen = false;
        for (int i = 0; i < s->n_files && !seen; i++)
            seen = !strcmp(s->files[i].path, path);
        if (!seen && open_into_(s, path, err, len) < 0)
            return -1;
    }
    return 0;
}

/* Every tensor the index maps is in the shard it names. */
static int check_index_(pl_safetensors *s, const char *dir, const char *index, json_t *map,
                        char *err, size_t len)
{
    const char *name;
    json_t *v;
    json_object_foreach(map, name, v) {
        const pl_st_tensor *t = pl_safetensors_find(s, name);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, json_string_value(v));
        if (!t || strcmp(t->file, path))
            return fail_(err, len, "%s: key 'weight_map.%s': the tensor is not in %s%s%s",
                         index, name, json_string_value(v), t ? " (it is in " : "",
                         t ? t->file : "");
    }
    return 0;
}

static int open_index_(pl_safetensors *s, const char *dir, const char *index, char *err,
                       size_t len)
{
    json_error_t je;
    json_t *root = json_load_file(index, JSON_REJECT_DUPLICATES, &je);
    int rc = -1;
    if (!root)
        return fail_(err, len, "%s:%d: %s", index, je.line, je.text);
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map) || json_object_size(map) == 0)
        fail_(err, len, "%s: key 'weight_map': missing, or not a non-empty object", index);
    else if (open_shards_(s, dir, index, map, err, len) == 0 && finish_(s, err, len) == 0)
        rc = check_index_(s, dir, index, map, err, len);
    json_decref(root);
    return rc;
}

pl_safetensors *pl_safetensors_open_dir(const char *dir, char *err, size_t errlen)
{
    char one[4096], index[4096];
    snprintf(one, sizeof one, "%s/model.safetensors", dir);
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    if (access(one, F_OK) == 0)
        return pl_safetensors_open(one, err, errlen);
    if (access(index, F_OK) != 0) {
        fail_(err, errlen, "%s: no model.safetensors or model.safetensors.index.json (parley "
              "reads safetensors weights; convert .bin checkpoints first)", dir);
        return NULL;
    }
    pl_safetensors *s = calloc(1, sizeof *s);
    if (!s) {
        fail_(err, errlen, "out of memory");
        return NULL;
    }
    if (open_index_(s, dir, index, err, errlen) < 0) {
        pl_safetensors_free(s);
        return NULL;
    }
    return s;
}

void pl_safetensors_free(pl_safetensors *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        free((char *)s->t[i].name);
    for (int i = 0; i < s->n_files; i++) {
        if (s->files[i].owns)
            munmap((void *)s->files[i].map, s->files[i].size);
        free(s->files[i].path);
    }
    free(s->files);
    free(s->t);
    free(s);
}

void pl_safetensors_drop(const void *p, uint64_t n)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p, e = a + n;
    uintptr_t lo = (a + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    uintptr_t hi = e & ~((uintptr_t)page - 1);
    if (page > 0 && hi > lo)          /* whole pages inside the tensor only */
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

const pl_st_tensor *pl_safetensors_find(const pl_safetensors *s, const char *name)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, s->t[mid].name);
        if (c == 0)
            return &s->t[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

size_t pl_safetensors_count(const pl_safetensors *s) { return s->n; }

const pl_st_tensor *pl_safetensors_at(const pl_safetensors *s, size_t i)
{
    return i < s->n ? &s->t[i] : NULL;
}

uint64_t pl_safetensors_bytes(const pl_safetensors *s)
{
    uint64_t b = 0;
    for (int i = 0; i < s->n_files; i++)
        b += s->files[i].size;
    return b;
}
