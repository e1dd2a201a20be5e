/* safetensors.h - a validating, mmap-based reader of Hugging Face
 * safetensors files: one file, or the shards a model.safetensors.index.json
 * names.
 *
 * A file is: a u64 little-endian header length N (at most
 * PL_ST_MAX_HEADER); N bytes of JSON, an object of tensor name ->
 * {"dtype", "shape", "data_offsets": [begin, end]} plus an optional
 * "__metadata__" object of strings; then the data, which the offsets index
 * from its start (byte 8 + N), entirely and without holes or overlaps (the
 * format's rule, checked as the reference library checks it).
 *
 * Every length, offset, shape and name is checked before use; a truncated
 * or hostile file gives an error naming the file and the tensor or key,
 * never a crash. Tensor data points into the mapping and lives as long as
 * the pl_safetensors it came from.
 */
#ifndef PL_SAFETENSORS_H
#define PL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

/** Element types, as the header spells them (pl_st_dtype_name). */
typedef enum pl_st_dtype {
    PL_ST_BOOL = 0,
    PL_ST_U8,
    PL_ST_I8,
    PL_ST_F8_E4M3,               /**< "F8_E4M3": e4m3fn, no infinities */
    PL_ST_F8_E5M2,
    PL_ST_I16,
    PL_ST_U16,
    PL_ST_F16,
    PL_ST_BF16,
    PL_ST_I32,
    PL_ST_U32,
    PL_ST_F32,
    PL_ST_I64,
    PL_ST_U64,
    PL_ST_F64,
    PL_ST_DTYPE_COUNT,
} pl_st_dtype;

#define PL_ST_MAX_DIMS 8
/** The largest JSON header accepted (the reference library's limit). */
#define PL_ST_MAX_HEADER (100u << 20)

typedef struct pl_st_tensor {
    const char *name;            /**< NUL-terminated, owned by the set */
    pl_st_dtype dtype;
    int n_dims;                  /**< 0 for a scalar */
    uint64_t shape[PL_ST_MAX_DIMS]; /**< row-major: the last dim is contiguous */
    uint64_t nelem;
    const uint8_t *data;         /**< into the mapping; any alignment */
    uint64_t nbytes;
    const char *file;            /**< the file holding it, for messages */
} pl_st_tensor;

typedef struct pl_safetensors pl_safetensors;

/** Parse one safetensors image in memory (borrowed: it must outlive the
 *  result). file names it in messages. Returns NULL with
 *  "FILE: tensor 'NAME': why" (or the header problem) in err. */
pl_safetensors *pl_safetensors_parse(const uint8_t *buf, size_t size, const char *file,
                                     char *err, size_t errlen);

/** Map and parse one file. Returns NULL with a message in err. */
pl_safetensors *pl_safetensors_open(const char *path, char *err, size_t errlen);

/** The weights of a checkpoint folder: model.safetensors, else the shards
 *  that model.safetensors.index.json's weight_map names (each shard must
 *  be a file name in dir and hold the tensors mapped to it; a tensor in
 *  two shards is an error naming both). Returns NULL with a message naming
 *  the file and the tensor or key. The caller frees with
 *  pl_safetensors_free. */
pl_safetensors *pl_safetensors_open_dir(const char *dir, char *err, size_t errlen);

/** NULL is a no-op. Unmaps the files it mapped. */
void pl_safetensors_free(pl_safetensors *s);

/** Tell the kernel that n bytes of tensor data at p (inside a mapping)
 *  will not be read again: the whole pages among them leave the process's
 *  resident set (the file stays mapped; reading them later still works).
 *  For tensors converted into memory of their own, as they are. */
void pl_safetensors_drop(const void *p, uint64_t n);

/** A tensor by name, or NULL. */
const pl_st_tensor *pl_safetensors_find(const pl_safetensors *s, const char *name);
/** Tensors in name order: index i < pl_safetensors_count(s). */
size_t pl_safetensors_count(const pl_safetensors *s);
const pl_st_tensor *pl_safetensors_at(const pl_safetensors *s, size_t i);
/** Total bytes mapped (every file), for load statistics. */
uint64_t pl_safetensors_bytes(const pl_safetensors *s);

const char *pl_st_dtype_name(pl_st_dtype t);
/** Bytes per element. */
size_t pl_st_dtype_size(pl_st_dtype t);

#endif
