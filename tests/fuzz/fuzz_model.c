/* fuzz_model.c - libFuzzer target for a model's metadata and tensors and
 * its vocabulary: the input is a GGUF file; when it parses, the model is
 * loaded from it (the architecture table, every hyperparameter, the
 * tensors' presence and shapes; packed, so no f32 copies) and so is its
 * tokenizer, which then encodes the file's last bytes as text (the special
 * token trie, SentencePiece words). Everything must end in a model or an
 * error message, never a crash; an error is one line.
 *
 * Seeds: tests/fuzz/model_corpus (make_model_corpus.py: a one-layer model
 * of each architecture, a two-layer Gated DeltaNet hybrid, a three-layer
 * Gemma 4, a few KB). With -Dfuzz=true:
 *   build-fuzz/tests/fuzz_model tests/fuzz/model_corpus -max_len=16384
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/formats/gguf.h"
#include "backends/engine/model/model.h"
#include "backends/text/tokenizer.h"

static void check_message(const char *err)
{
    if (!err[0] || strchr(err, '\n'))
        abort();                 /* an error must say what, in one line */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256] = "";
    pl_gguf *g = pl_gguf_parse(data, size, err, sizeof err);
    if (!g)
        return 0;
    pl_model_opts mo = {.keep_f32 = false, .keep_packed = pl_keep_packed_all};
    err[0] = 0;
    pl_model *m = pl_model_load(g, &mo, err, sizeof err);
    if (!m)
        check_message(err);
    pl_model_free(m);
    err[0] = 0;
    pl_tokenizer *t = pl_tokenizer_from_gguf(g, err, sizeof err);
    if (t) {
        size_t n = size < 64 ? size : 64;
        int32_t *ids;
        int k;
        if (pl_tokenizer_encode(t, (const char *)data + size - n, n, true, true, &ids, &k) == 0)
            free(ids);
        pl_tokenizer_free(t);
    } else {
        check_message(err);
    }
    pl_gguf_free(g);
    return 0;
}
