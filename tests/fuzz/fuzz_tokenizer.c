/* fuzz_tokenizer.c - libFuzzer target for the tokenizer and detokeniser.
 *
 * Input: byte 0 picks a vocabulary (the fixture GGUFs) and flags, the rest
 * is text. Checks: encode never fails or crashes and gives ids in range;
 * for byte-level BPE without special parsing, decode(encode(x)) == x when
 * x is valid UTF-8; streaming the ids through the detokeniser with a stop
 * string gives valid UTF-8 that is a prefix of the decoded text.
 *
 * Build and run from the repository root:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. \
 *     tests/fuzz/fuzz_tokenizer.c backends/text/tokenizer*.c \
 *     backends/text/pretokenize.c backends/text/detok.c \
 *     backends/formats/gguf.c -lpcre2-8 -o fuzz_tokenizer
 *   ./fuzz_tokenizer -max_total_time=60
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/text/detok.h"
#include "backends/formats/gguf.h"
#include "backends/text/tokenizer.h"

static const char *const vocabs[] = {
    "tests/fixtures/bpe_gpt2.gguf", "tests/fixtures/bpe_llama3.gguf",
    "tests/fixtures/bpe_qwen2.gguf", "tests/fixtures/bpe_default.gguf",
    "tests/fixtures/tiny_spm.gguf", "tests/fixtures/tiny_gemma4_e2b.gguf",
};
#define N_VOCABS (sizeof vocabs / sizeof vocabs[0])

static pl_tokenizer *toks[N_VOCABS];

static void load_all(void)
{
    char err[256];
    for (size_t i = 0; i < N_VOCABS; i++) {
        pl_gguf *g = pl_gguf_open(vocabs[i], err, sizeof err);
        if (!g || !(toks[i] = pl_tokenizer_from_gguf(g, err, sizeof err))) {
            fprintf(stderr, "%s: %s\n", vocabs[i], err);
            abort();
        }
        pl_gguf_free(g);
    }
}

static int utf8_strict_valid(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t b = s[i];
        size_t k = b < 0x80 ? 1 : b >= 0xc2 && b <= 0xdf ? 2 :
                   b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
        if (!k || k > n - i)
            return 0;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xc0) != 0x80)
                return 0;
        if ((b == 0xe0 && s[i + 1] < 0xa0) || (b == 0xed && s[i + 1] > 0x9f) ||
            (b == 0xf0 && s[i + 1] < 0x90) || (b == 0xf4 && s[i + 1] > 0x8f))
            return 0;
        i += k;
    }
    return 1;
}

/* Whether some byte has no byte-level token: SmolLM2's vocabulary lacks
 * e.g. 0x04 and 0xF1, which llama.cpp then drops as well. */
static int has_untokenizable_bytes(const pl_tokenizer *t, const uint8_t *s,
                                   size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int b = s[i];
        uint32_t cp = (uint32_t)b;
        if (!((b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae))
            cp = 256u + (b <= 0x20 ? (uint32_t)b :
                         b <= 0xa0 ? 33u + (uint32_t)(b - 0x7f) : 67u);
        char u[2] = {(char)(cp < 0x80 ? cp : 0xc0 | cp >> 6),
                     (char)(0x80 | (cp & 0x3f))};
        if (pl_tokenizer_find(t, u, cp < 0x80 ? 1 : 2) < 0)
            return 1;
    }
    return 0;
}

/* Stream ids through the detokeniser: every piece is valid UTF-8 and,
 * when the decoded text is valid UTF-8, the pieces form a prefix of it. */
static void check_detok(const pl_tokenizer *t, const int32_t *ids, int n)
{
    static const char *stops[] = {"\n\n", "the"};
    size_t need = pl_tokenizer_decode(t, ids, n, false, NULL, 0);
    char *dec = malloc(need + 1), *got = malloc(3 * need + 4);
    pl_tokenizer_decode(t, ids, n, false, dec, need + 1);
    pl_detok d;
    if (!dec || !got || pl_detok_init(&d, t, stops, 2, false))
        abort();
    size_t o = 0;
    pl_detok_out out;
    int rc = 0;
    for (int i = 0; i <= n && rc == 0; i++) {
        rc = i < n ? pl_detok_feed(&d, ids[i], &out) : pl_detok_flush(&d, &out);
        if (rc < 0 || !utf8_strict_valid((const uint8_t *)out.text, out.len) ||
            o + out.len > 3 * need + 4)
            abort();
        memcpy(got + o, out.text, out.len);
        o += out.len;
    }
    if (utf8_strict_valid((const uint8_t *)dec, need) &&
        (o > need || memcmp(got, dec, o)))
        abort();
    pl_detok_free(&d);
    free(dec);
    free(got);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!toks[0])
        load_all();
    if (size < 1)
        return 0;
    const pl_tokenizer *t = toks[data[0] % N_VOCABS];
    bool add = data[0] & 0x10, special = data[0] & 0x20;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t *ids;
    int n;
    if (pl_tokenizer_encode(t, text, len, add, special, &ids, &n))
        abort();
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= pl_tokenizer_n_vocab(t))
            abort();
    size_t need = pl_tokenizer_decode(t, ids, n, true, NULL, 0);
    char *buf = malloc(need + 1);
    pl_tokenizer_decode(t, ids, n, true, buf, need + 1);
    bool bpe = data[0] % N_VOCABS < 4;
    if (bpe && !special && !add && utf8_strict_valid(data + 1, len) &&
        !has_untokenizable_bytes(t, data + 1, len) &&
        (need != len || memcmp(buf, text, len)))
        abort();
    check_detok(t, ids, n);
    free(buf);
    free(ids);
    return 0;
}
