/* fuzz_gguf.c - libFuzzer target for the GGUF reader: parses the input
 * and, when it is accepted, walks every metadata entry, array element and
 * tensor (touching the first and last data bytes and dequantising the
 * first row), so that anything the parser let through is really in bounds.
 *
 * Build: CC=clang meson setup build-fuzz -Dfuzz=true
 *        -Db_sanitize=address,undefined -Db_lundef=false
 * Run:   build-fuzz/tests/fuzz_gguf tests/fuzz/gguf_corpus -max_len=4096
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "backends/formats/gguf.h"
#include "backends/engine/model/quant.h"

static volatile uint64_t sink_;
static volatile float fsink_;

static void walk_kv_(const pl_gguf_kv *kv)
{
    sink_ += kv->key.len ? (uint8_t)kv->key.ptr[kv->key.len - 1] : 0;
    if (kv->type == PL_GGUF_TYPE_STRING && kv->v.str.len)
        sink_ += (uint8_t)kv->v.str.ptr[kv->v.str.len - 1];
    if (kv->type != PL_GGUF_TYPE_ARRAY)
        return;
    for (uint64_t i = 0; i < kv->v.arr.n; i++) {
        if (kv->v.arr.type == PL_GGUF_TYPE_STRING) {
            pl_gguf_str s = pl_gguf_arr_str(kv, i);
            sink_ += s.len ? (uint8_t)s.ptr[s.len - 1] : 0;
        } else {
            sink_ += (uint64_t)pl_gguf_arr_int(kv, i);
            fsink_ += pl_gguf_arr_f32(kv, i);
        }
    }
}

static void walk_tensor_(const pl_gguf_tensor *t, float *row, size_t cap)
{
    const uint8_t *d = t->data;
    if (t->nbytes)
        sink_ += d[0] + d[t->nbytes - 1];
    if (t->ne[0] <= cap)
        pl_dequant_row(t->type, t->data, row, (int64_t)t->ne[0]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static float row[4096];
    char err[256];
    pl_gguf *g = pl_gguf_parse(data, size, err, sizeof(err));
    if (!g)
        return 0;
    for (uint64_t i = 0; i < g->n_kv; i++)
        walk_kv_(&g->kv[i]);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        walk_tensor_(&g->tensors[i], row, sizeof(row) / sizeof(row[0]));
    uint64_t u;
    float f;
    pl_gguf_str s;
    sink_ += (uint64_t)pl_gguf_get_u64(g, "general.alignment", &u);
    sink_ += (uint64_t)pl_gguf_get_f32(g, "a.f32", &f);
    sink_ += (uint64_t)pl_gguf_get_str(g, "general.architecture", &s);
    sink_ += pl_gguf_tensor_find(g, "f32") != NULL;
    pl_gguf_free(g);
    return 0;
}
