/* fuzz_safetensors.c - libFuzzer target for the safetensors reader: parses
 * the input and, when it is accepted, walks every tensor (its name, shape,
 * first and last data bytes, a lookup by name), so that anything the
 * parser let through is really in bounds.
 *
 * Build: CC=clang meson setup build-fuzz -Dfuzz=true
 *        -Db_sanitize=address,undefined -Db_lundef=false
 * Run:   build-fuzz/tests/fuzz_safetensors tests/fuzz/safetensors_corpus -max_len=4096
 * (tests/fuzz/safetensors.dict helps it find the header's keys.)
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backends/formats/safetensors.h"

static volatile uint64_t sink_;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    pl_safetensors *s = pl_safetensors_parse(data, size, "fuzz.safetensors", err, sizeof err);
    if (!s) {
        sink_ += strlen(err);
        return 0;
    }
    for (size_t i = 0; i < pl_safetensors_count(s); i++) {
        const pl_st_tensor *t = pl_safetensors_at(s, i);
        sink_ += strlen(t->name) + (uint64_t)t->n_dims + t->nelem;
        for (int d = 0; d < t->n_dims; d++)
            sink_ += t->shape[d];
        if (t->nbytes)
            sink_ += t->data[0] + t->data[t->nbytes - 1];
        sink_ += pl_safetensors_find(s, t->name) == t;
        sink_ += pl_st_dtype_size(t->dtype);
    }
    pl_safetensors_free(s);
    return 0;
}
