/* cpu_features.h - what the CPU can run, probed once per process.
 *
 * One pthread_once probe fills a read-only table, so any thread may ask at
 * any time without a race (the kernels used to cache the answer in a plain
 * static int each). Kernels choose their variant from it; more fields
 * (AMX with its Linux permission request) live here, next to the others,
 * so that every dispatch reads the same answer.
 * The environment variable PARLEY_CPU_ISA=avxvnni|avx2|scalar caps the
 * table at that level (to run a lesser CPU's kernels on this one); any cap
 * turns AMX off.
 */
#ifndef PL_BASE_CPU_FEATURES_H
#define PL_BASE_CPU_FEATURES_H

#include <stdatomic.h>
#include <stdbool.h>

typedef struct pl_cpu_feature_set {
    bool avx2;                   /**< AVX2 */
    bool fma;                    /**< FMA3 */
    bool f16c;                   /**< half <-> float conversion instructions */
    bool avx512f;                /**< AVX-512 Foundation (OS state enabled) */
    bool avx512bw;               /**< AVX-512 byte/word */
    bool avx512vl;               /**< AVX-512 on 128/256-bit registers */
    bool avx512vnni;             /**< AVX-512 VNNI (int8 dot products) */
    bool avx512bf16;             /**< AVX-512 BF16 */
    bool avxvnni;                /**< AVX-VNNI (VEX int8 dot products) */
    bool amx_int8;               /**< AMX tiles with int8 dot products, and
                                      Linux's leave to use them (the probe
                                      asks for it with arch_prctl) */
} pl_cpu_feature_set;

/* Internals of the inline fast path below: the table, published by a
 * release store of the flag once the pthread_once probe has filled it. */
extern pl_cpu_feature_set pl_cpu_features_table_;
extern atomic_int pl_cpu_features_ready_;
const pl_cpu_feature_set *pl_cpu_features_probe_(void);

/** The features of this CPU, probed on first use (thread-safe; never NULL;
 *  all false off x86). After the first call it is one acquire load, cheap
 *  enough for per-call kernel dispatch. */
static inline const pl_cpu_feature_set *pl_cpu_features(void)
{
    if (atomic_load_explicit(&pl_cpu_features_ready_, memory_order_acquire))
        return &pl_cpu_features_table_;
    return pl_cpu_features_probe_();
}

/** True when the AVX2 kernels may run: AVX2, FMA and F16C together. */
static inline bool pl_cpu_has_avx2(void)
{
    const pl_cpu_feature_set *f = pl_cpu_features();
    return f->avx2 && f->fma && f->f16c;
}

#endif
