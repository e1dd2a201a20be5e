/* test_safetensors.c - the safetensors reader (backends/engine/model/
 * safetensors.c): a valid image read back; every malformed header (absurd
 * or overrunning length, bad JSON, duplicate names, offsets that overflow,
 * overlap, leave holes or point past the data, shapes that disagree with
 * the bytes, unknown dtypes) an error naming the file and the tensor or
 * key; shards through model.safetensors.index.json.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/formats/safetensors.h"

/* An image: the u64 header length, the header, data_len bytes 0, 1, 2... */
static uint8_t *image(const char *header, size_t data_len, size_t *size)
{
    size_t h = strlen(header);
    *size = 8 + h + data_len;
    uint8_t *b = malloc(*size);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    for (size_t i = 0; i < data_len; i++)
        b[8 + h + i] = (uint8_t)i;
    return b;
}

/* Parsing fails with a message holding each of want1 and want2. */
static void bad(const char *header, size_t data_len, const char *want1, const char *want2)
{
    size_t size;
    uint8_t *b = image(header, data_len, &size);
    char err[512] = "";
    pl_safetensors *s = pl_safetensors_parse(b, size, "w.safetensors", err, sizeof err);
    cr_expect_null(s, "accepted: %s", header);
    cr_expect(strstr(err, "w.safetensors"), "no file name in: %s", err);
    cr_expect(strstr(err, want1), "'%s' not in: %s", want1, err);
    if (want2)
        cr_expect(strstr(err, want2), "'%s' not in: %s", want2, err);
    pl_safetensors_free(s);
    free(b);
}

Test(safetensors, reads_tensors_and_scalars)
{
    size_t size;
    uint8_t *b = image("{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[4,16]},"
                       "\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
                       "\"e\":{\"dtype\":\"F8_E4M3\",\"shape\":[0],\"data_offsets\":[16,16]}}",
                       16, &size);
    char err[256];
    pl_safetensors *s = pl_safetensors_parse(b, size, "x", err, sizeof err);
    cr_assert(s, "%s", err);
    cr_assert_eq(pl_safetensors_count(s), 3);
    cr_expect_str_eq(pl_safetensors_at(s, 0)->name, "a");  /* name order */
    const pl_st_tensor *t = pl_safetensors_find(s, "b");
    cr_assert(t);
    cr_expect_eq(t->dtype, PL_ST_BF16);
    cr_expect_eq(t->n_dims, 2);
    cr_expect_eq(t->shape[0], 2);
    cr_expect_eq(t->shape[1], 3);
    cr_expect_eq(t->nelem, 6);
    cr_expect_eq(t->nbytes, 12);
    cr_expect_eq(t->data[0], 4);           /* the data's byte 4 */
    const pl_st_tensor *a = pl_safetensors_find(s, "a");
    cr_expect_eq(a->n_dims, 0);
    cr_expect_eq(a->nelem, 1);
    cr_expect_eq(pl_safetensors_find(s, "e")->nbytes, 0);
    cr_expect_null(pl_safetensors_find(s, "c"));
    pl_safetensors_free(s);
    free(b);
}

Test(safetensors, refuses_bad_lengths)
{
    char err[256] = "";
    uint8_t small[5] = {0};
    cr_expect_null(pl_safetensors_parse(small, sizeof small, "w.safetensors", err, sizeof err));
    cr_expect(strstr(err, "w.safetensors") && strstr(err, "too short"), "%s", err);
    uint8_t huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    cr_expect_null(pl_safetensors_parse(huge, sizeof huge, "w.safetensors", err, sizeof err));
    cr_expect(strstr(err, "exceeds"), "%s", err);
    uint8_t over[16] = {100};   /* 100 bytes of header in a 16-byte file */
    cr_expect_null(pl_safetensors_parse(over, sizeof over, "w.safetensors", err, sizeof err));
    cr_expect(strstr(err, "runs past the end"), "%s", err);
}

Test(safetensors, refuses_bad_headers)
{
    bad("{\"a\":", 0, "JSON header", NULL);
    bad("[1,2]", 0, "not an object", NULL);
    bad("{\"__metadata__\":[1]}", 0, "__metadata__", NULL);
    bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
        "tensor 'a'", "twice");
    bad("{\"a\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "tensor 'a'",
        "dtype");
    bad("{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "tensor 'a'", "dtype");
    bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "tensor 'a'",
        "shape");
    bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,2,3,4,5,6,7,8,9],\"data_offsets\":[0,4]}}", 4,
        "tensor 'a'", "shape");
    bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "tensor 'a'",
        "data_offsets");
    bad("{\"a\":3}", 0, "tensor 'a'", "not an object");
}

Test(safetensors, refuses_bad_offsets)
{
    /* past the data, overflowing, reversed */
    bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, "tensor 'a'",
        "past the data");
    bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[9223372036854775806,"
        "9223372036854775807]}}", 8, "tensor 'a'", "data_offsets");
    bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[4,2]}}", 8, "tensor 'a'",
        "data_offsets");
    bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,18446744073709551615]}}", 8,
        "tensor 'a'", "too big");
    /* the element count overflows 64 bits, or disagrees with the bytes */
    bad("{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296,16],"
        "\"data_offsets\":[0,8]}}", 8, "tensor 'a'", "overflow");
    bad("{\"a\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,8]}}", 8,
        "tensor 'a'", "overflow");
    bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "tensor 'a'",
        "need 12");
    /* overlaps, holes, trailing bytes */
    bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "tensor '",
        "overlaps");
    bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "tensor 'a'",
        "hole");
    bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "4 of the 8",
        NULL);
}

/* ---- shards ---- */

static char dir_[256];

static void write_file(const char *name, const void *b, size_t n)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir_, name);
    FILE *f = fopen(p, "wb");
    cr_assert(f);
    fwrite(b, 1, n, f);
    fclose(f);
}

static void write_shard(const char *name, const char *tensor)
{
    char h[256];
    size_t size;
    snprintf(h, sizeof h, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
             tensor);
    uint8_t *b = image(h, 8, &size);
    write_file(name, b, size);
    free(b);
}

static void write_index(const char *json) { write_file("model.safetensors.index.json", json,
                                                       strlen(json)); }

static void setup(void)
{
    snprintf(dir_, sizeof dir_, "/tmp/parley_st_%d_XXXXXX", (int)getpid());
    cr_assert(mkdtemp(dir_));
    write_shard("s1.safetensors", "x");
    write_shard("s2.safetensors", "y");
}

static void teardown(void)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_);
    cr_expect_eq(system(cmd), 0);
}

static void bad_dir(const char *want1, const char *want2)
{
    char err[512] = "";
    pl_safetensors *s = pl_safetensors_open_dir(dir_, err, sizeof err);
    cr_expect_null(s);
    cr_expect(strstr(err, want1), "'%s' not in: %s", want1, err);
    if (want2)
        cr_expect(strstr(err, want2), "'%s' not in: %s", want2, err);
    pl_safetensors_free(s);
}

Test(safetensors_dir, reads_shards_through_the_index, .init = setup, .fini = teardown)
{
    write_index("{\"metadata\":{},\"weight_map\":{\"x\":\"s1.safetensors\","
                "\"y\":\"s2.safetensors\"}}");
    char err[512];
    pl_safetensors *s = pl_safetensors_open_dir(dir_, err, sizeof err);
    cr_assert(s, "%s", err);
    cr_expect_eq(pl_safetensors_count(s), 2);
    cr_expect(strstr(pl_safetensors_find(s, "y")->file, "s2.safetensors"));
    pl_safetensors_free(s);
}

Test(safetensors_dir, refuses_bad_indexes, .init = setup, .fini = teardown)
{
    bad_dir("no model.safetensors", NULL);
    write_index("{\"weight_map\":{\"x\":\"s2.safetensors\",\"y\":\"s2.safetensors\"}}");
    bad_dir("weight_map.x", "not in s2.safetensors");
    write_index("{\"weight_map\":{\"x\":\"../s1.safetensors\"}}");
    bad_dir("weight_map.x", "file name");
    write_index("{\"weight_map\":{\"x\":\"gone.safetensors\"}}");
    bad_dir("gone.safetensors", NULL);
    write_index("{\"weights\":{}}");
    bad_dir("model.safetensors.index.json", "weight_map");
    write_index("{\"weight_map\":{\"x\":\"s1.safetensors\"");
    bad_dir("model.safetensors.index.json", NULL);
    write_shard("s3.safetensors", "x");
    write_index("{\"weight_map\":{\"x\":\"s1.safetensors\",\"z\":\"s3.safetensors\"}}");
    bad_dir("tensor 'x' is in both", "s3.safetensors");
}
