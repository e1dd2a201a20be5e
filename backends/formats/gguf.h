/* gguf.h - a validating, mmap-based GGUF reader (versions 2 and 3).
 *
 * Every count, offset and size is checked against the file before use; a
 * truncated or hostile file gives an error message, never a crash.
 * All strings and arrays point into the mapping and live as long as the
 * pl_gguf they came from.
 */
#ifndef PL_GGUF_H
#define PL_GGUF_H

#include <stddef.h>
#include <stdint.h>

typedef enum pl_gguf_type {
    PL_GGUF_TYPE_UINT8 = 0,
    PL_GGUF_TYPE_INT8 = 1,
    PL_GGUF_TYPE_UINT16 = 2,
    PL_GGUF_TYPE_INT16 = 3,
    PL_GGUF_TYPE_UINT32 = 4,
    PL_GGUF_TYPE_INT32 = 5,
    PL_GGUF_TYPE_FLOAT32 = 6,
    PL_GGUF_TYPE_BOOL = 7,
    PL_GGUF_TYPE_STRING = 8,
    PL_GGUF_TYPE_ARRAY = 9,
    PL_GGUF_TYPE_UINT64 = 10,
    PL_GGUF_TYPE_INT64 = 11,
    PL_GGUF_TYPE_FLOAT64 = 12,
} pl_gguf_type;

/** ggml tensor types (the numbering of the GGUF format). */
typedef enum pl_ggml_type {
    PL_GGML_TYPE_F32 = 0,
    PL_GGML_TYPE_F16 = 1,
    PL_GGML_TYPE_Q4_0 = 2,
    PL_GGML_TYPE_Q4_1 = 3,
    PL_GGML_TYPE_Q5_0 = 6,
    PL_GGML_TYPE_Q5_1 = 7,
    PL_GGML_TYPE_Q8_0 = 8,
    PL_GGML_TYPE_Q8_1 = 9,
    PL_GGML_TYPE_Q2_K = 10,
    PL_GGML_TYPE_Q3_K = 11,
    PL_GGML_TYPE_Q4_K = 12,
    PL_GGML_TYPE_Q5_K = 13,
    PL_GGML_TYPE_Q6_K = 14,
    PL_GGML_TYPE_Q8_K = 15,
    PL_GGML_TYPE_BF16 = 30,
    PL_GGML_TYPE_MXFP4 = 39,     /**< OCP microscaling FP4 (gpt-oss experts) */
} pl_ggml_type;

typedef struct pl_gguf_str {
    const char *ptr;             /**< not NUL-terminated */
    uint64_t len;
} pl_gguf_str;

/** One metadata value. Unsigned integers are in v.u64, signed ones in
 *  v.i64, FLOAT32/FLOAT64 in v.f64, BOOL in v.b, strings in v.str.
 *  Arrays of arrays are rejected by the parser; array elements are read
 *  with the pl_gguf_arr_* accessors. */
typedef struct pl_gguf_kv {
    pl_gguf_str key;
    pl_gguf_type type;
    union {
        uint64_t u64;
        int64_t i64;
        double f64;
        int b;
        pl_gguf_str str;
        struct {
            pl_gguf_type type;   /**< element type */
            uint64_t n;          /**< element count */
            const uint8_t *data; /**< raw elements (strings: len-prefixed) */
            const uint64_t *str_off; /**< string arrays: offset of element i's
                                          u64 length prefix from data,
                                          validated; else NULL */
        } arr;
    } v;
} pl_gguf_kv;

#define PL_GGUF_MAX_DIMS 4

typedef struct pl_gguf_tensor {
    pl_gguf_str name;
    uint32_t n_dims;
    uint64_t ne[PL_GGUF_MAX_DIMS]; /**< ne[0] is the contiguous dimension */
    pl_ggml_type type;
    uint64_t offset;             /**< from the start of the data section */
    uint64_t nbytes;
    const void *data;            /**< into the mapping, bounds checked */
} pl_gguf_tensor;

typedef struct pl_gguf {
    uint32_t version;
    uint64_t n_kv;
    pl_gguf_kv *kv;
    uint64_t n_tensors;
    pl_gguf_tensor *tensors;
    uint64_t alignment;
    const uint8_t *map;          /**< the whole file */
    size_t size;
    int owns_map;
} pl_gguf;

/** Map (read-only) and validate a GGUF file. Returns NULL with a message
 *  in err (which may be NULL); the caller frees with pl_gguf_free. */
pl_gguf *pl_gguf_open(const char *path, char *err, size_t errlen);
/** Parse a GGUF image in memory (borrowed; must outlive the result).
 *  Returns NULL with a message in err (which may be NULL). */
pl_gguf *pl_gguf_parse(const uint8_t *buf, size_t size, char *err, size_t errlen);
/** Frees g and, when it came from pl_gguf_open, unmaps the file. NULL is
 *  a no-op. */
void pl_gguf_free(pl_gguf *g);

/** Look up metadata by key; NULL when absent. */
const pl_gguf_kv *pl_gguf_find(const pl_gguf *g, const char *key);
/** Typed getters: return 0 and set *out, or -1 when absent or mistyped
 *  (integers of any width convert when the value fits). */
int pl_gguf_get_u64(const pl_gguf *g, const char *key, uint64_t *out);
int pl_gguf_get_f32(const pl_gguf *g, const char *key, float *out);
int pl_gguf_get_str(const pl_gguf *g, const char *key, pl_gguf_str *out);
/** Array element accessors; i must be < arr.n. */
pl_gguf_str pl_gguf_arr_str(const pl_gguf_kv *kv, uint64_t i);
float pl_gguf_arr_f32(const pl_gguf_kv *kv, uint64_t i);
int64_t pl_gguf_arr_int(const pl_gguf_kv *kv, uint64_t i);

const pl_gguf_tensor *pl_gguf_tensor_find(const pl_gguf *g, const char *name);

/** Block size in elements and bytes per block of a tensor type (either
 *  out pointer may be NULL). Returns the block size in elements, or 0 when
 *  the type is unknown or unsupported. */
int pl_ggml_type_block(pl_ggml_type t, size_t *block_elems, size_t *block_bytes);
const char *pl_ggml_type_name(pl_ggml_type t);

#endif
