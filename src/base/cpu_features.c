/* cpu_features.c - the one CPU feature probe (see cpu_features.h). */
#include "src/base/cpu_features.h"

#include <pthread.h>

static pl_cpu_feature_set features;
static pthread_once_t probe_once = PTHREAD_ONCE_INIT;

static void probe(void)
{
#if defined(__x86_64__) || defined(__i386__)
    /* GCC's probe checks the OS saves the wider registers (XGETBV) too. */
    __builtin_cpu_init();
    features.avx2 = __builtin_cpu_supports("avx2");
    features.fma = __builtin_cpu_supports("fma");
    features.f16c = __builtin_cpu_supports("f16c");
    features.avx512f = __builtin_cpu_supports("avx512f");
    features.avx512bw = __builtin_cpu_supports("avx512bw");
    features.avx512vl = __builtin_cpu_supports("avx512vl");
    features.avx512vnni = __builtin_cpu_supports("avx512vnni");
    features.avx512bf16 = __builtin_cpu_supports("avx512bf16");
#endif
}

const pl_cpu_feature_set *pl_cpu_features(void)
{
    pthread_once(&probe_once, probe);
    return &features;
}
