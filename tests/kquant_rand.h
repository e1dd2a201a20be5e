/* kquant_rand.h - what the K-quant kernel tests share: a seeded byte
 * stream, random K-quant rows with sane fp16 scales, and the int8 dot
 * levels this CPU runs. Include once per test file (static state). */
#ifndef PL_TEST_KQUANT_RAND_H
#define PL_TEST_KQUANT_RAND_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backends/engine/cpu/qdot_k.h"
#include "backends/engine/cpu/qdot_vnni.h"
#include "src/base/cpu_features.h"
#include "src/base/half.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;  /* a test may reseed it */

static uint8_t rbyte(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint8_t)(rng_state >> 56);
}

static float frand(void)         /* uniform in [-1, 1) */
{
    return (float)(rbyte() << 8 | rbyte()) / 32768.0f - 1.0f;
}

/* Random K-quant rows: random bytes, each super-block's fp16 scales set to
 * sane values (every other byte pattern is a valid block). */
static void random_k(pl_ggml_type t, uint8_t *dst, int n_sb)
{
    size_t bb = pl_qdot_k_block_bytes(t);
    for (size_t i = 0; i < (size_t)n_sb * bb; i++)
        dst[i] = rbyte();
    for (int b = 0; b < n_sb; b++) {
        uint8_t *p = dst + (size_t)b * bb;
        uint16_t d = pl_fp32_to_fp16(0.002f + 0.02f * fabsf(frand()));
        uint16_t m = pl_fp32_to_fp16(0.01f * frand());
        if (t == PL_GGML_TYPE_Q6_K) {
            memcpy(p + 208, &d, 2);
            continue;
        }
        memcpy(p, &d, 2);
        memcpy(p + 2, &m, 2);
    }
}

/* The levels of int8 dot this CPU runs (NONE: AVX2's). */
static int levels(pl_vnni_level *lv)
{
    const pl_cpu_feature_set *f = pl_cpu_features();
    int n = 0;
    lv[n++] = PL_VNNI_NONE;
    if (pl_qdot_vnni_level() == PL_VNNI_AVX512)
        lv[n++] = PL_VNNI_AVX512;
    if (f->avxvnni)
        lv[n++] = PL_VNNI_AVX;
    return n;
}

#endif
