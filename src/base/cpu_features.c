/* cpu_features.c - the one CPU feature probe (see cpu_features.h). */
#include "src/base/cpu_features.h"

#include <pthread.h>

pl_cpu_feature_set pl_cpu_features_table_;
atomic_int pl_cpu_features_ready_;
static pthread_once_t probe_once = PTHREAD_ONCE_INIT;

static void probe(void)
{
    pl_cpu_feature_set *f = &pl_cpu_features_table_;
    (void)f;
#if defined(__x86_64__) || defined(__i386__)
    /* GCC's probe checks the OS saves the wider registers (XGETBV) too. */
    __builtin_cpu_init();
    f->avx2 = __builtin_cpu_supports("avx2");
    f->fma = __builtin_cpu_supports("fma");
    f->f16c = __builtin_cpu_supports("f16c");
    f->avx512f = __builtin_cpu_supports("avx512f");
    f->avx512bw = __builtin_cpu_supports("avx512bw");
    f->avx512vl = __builtin_cpu_supports("avx512vl");
    f->avx512vnni = __builtin_cpu_supports("avx512vnni");
    f->avx512bf16 = __builtin_cpu_supports("avx512bf16");
    f->avxvnni = __builtin_cpu_supports("avxvnni");
#endif
    atomic_store_explicit(&pl_cpu_features_ready_, 1, memory_order_release);
}

const pl_cpu_feature_set *pl_cpu_features_probe_(void)
{
    pthread_once(&probe_once, probe);
    return &pl_cpu_features_table_;
}
