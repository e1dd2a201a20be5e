/* bench_tokenizer.c - encode speed of GGUF vocabularies on one text:
 * tokens per second and MB per second of pl_tokenizer_encode, so the
 * SentencePiece path (Gemma's 262k vocabulary) can be compared with the
 * byte-level BPE path (SmolLM2's) on the same text.
 *
 *   build/bench/bench_tokenizer TEXT_FILE MODEL.gguf [MODEL.gguf ...]
 *
 * Each model: the whole text encoded (with special-token parsing, as chat
 * prompts are) repeatedly for about a second; the best of 3 rounds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/formats/gguf.h"
#include "backends/text/tokenizer.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = sz >= 0 ? malloc((size_t)sz + 1) : NULL;
    *n = buf ? fread(buf, 1, (size_t)sz, f) : 0;
    fclose(f);
    return buf;
}

/* Best-of-3 rounds of about a second each: tokens/s and MB/s. */
static void bench(const pl_tokenizer *t, const char *text, size_t n, double *tps, double *mbs)
{
    *tps = *mbs = 0;
    for (int round = 0; round < 3; round++) {
        double t0 = now_s(), el;
        long toks = 0, reps = 0;
        do {
            int32_t *ids;
            int k;
            if (pl_tokenizer_encode(t, text, n, false, true, &ids, &k) != 0)
                return;
            free(ids);
            toks += k;
            reps++;
        } while ((el = now_s() - t0) < 1.0);
        if (toks / el > *tps) {
            *tps = toks / el;
            *mbs = reps * (double)n / el / 1e6;
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s TEXT_FILE MODEL.gguf [MODEL.gguf ...]\n", argv[0]);
        return 2;
    }
    size_t n;
    char *text = read_file(argv[1], &n);
    if (!text) {
        fprintf(stderr, "%s: cannot read\n", argv[1]);
        return 1;
    }
    printf("text %s: %zu bytes\n", argv[1], n);
    for (int i = 2; i < argc; i++) {
        char err[256];
        pl_gguf *g = pl_gguf_open(argv[i], err, sizeof err);
        pl_tokenizer *t = g ? pl_tokenizer_from_gguf(g, err, sizeof err) : NULL;
        if (!t) {
            fprintf(stderr, "%s: %s\n", argv[i], err);
            pl_gguf_free(g);
            return 1;
        }
        double tps, mbs;
        bench(t, text, n, &tps, &mbs);
        printf("%-60s vocab %7d  %10.0f tokens/s  %6.2f MB/s\n", argv[i],
               (int)pl_tokenizer_n_vocab(t), tps, mbs);
        pl_tokenizer_free(t);
        pl_gguf_free(g);
    }
    free(text);
    return 0;
}
