/* cpu_features.c - the one CPU feature probe (see cpu_features.h). */
#include "src/base/cpu_features.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

pl_cpu_feature_set pl_cpu_features_table_;
atomic_int pl_cpu_features_ready_;
static pthread_once_t probe_once = PTHREAD_ONCE_INIT;

/* AMX-TILE and AMX-INT8 (CPUID leaf 7, EDX bits 24 and 25), and Linux's
 * leave to use the tile data state: since Linux 5.16 a process asks once
 * with arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); a kernel or
 * CPU without it refuses, and tile instructions would then fault. */
static bool probe_amx(void)
{
#if defined(__linux__) && defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25)))
        return false;
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
    return false;
#endif
}

/* CPUID leaf 7 subleaf 1, EAX: bit 4 AVX-VNNI, bit 5 AVX512-BF16. Read
 * directly (as F16C below) because clang before 15 has no
 * __builtin_cpu_supports names for them; the OS-saves-the-state part is the avx2 / avx512f probe's. */
static unsigned leaf7_1_eax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d))
        return 0;
    return a;
#else
    return 0;
#endif
}

static void probe(void)
{
    pl_cpu_feature_set *f = &pl_cpu_features_table_;
    (void)f;
#if defined(__x86_64__) || defined(__i386__)
    /* GCC's probe checks the OS saves the wider registers (XGETBV) too. */
    __builtin_cpu_init();
    f->avx2 = __builtin_cpu_supports("avx2");
    f->fma = __builtin_cpu_supports("fma");
    unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
    __get_cpuid(1, &a1, &b1, &c1, &d1); /* ECX bit 29: F16C */
    f->f16c = __builtin_cpu_supports("avx") && (c1 & (1u << 29));
    f->avx512f = __builtin_cpu_supports("avx512f");
    f->avx512bw = __builtin_cpu_supports("avx512bw");
    f->avx512vl = __builtin_cpu_supports("avx512vl");
    f->avx512vnni = __builtin_cpu_supports("avx512vnni");
    unsigned l71 = leaf7_1_eax();
    f->avx512bf16 = f->avx512f && (l71 & (1u << 5));
    f->avxvnni = f->avx2 && (l71 & (1u << 4));
    /* PARLEY_CPU_ISA caps what the kernels may use, to run and measure a
     * lesser CPU's path on this one: "avxvnni" (no AVX-512), "avx2" (no
     * VNNI either), "scalar" (no SIMD kernels). Anything else: no cap. */
    const char *cap = getenv("PARLEY_CPU_ISA");
    int lvl = !cap ? 3 : !strcmp(cap, "avxvnni") ? 2 : !strcmp(cap, "avx2") ? 1
                 : !strcmp(cap, "scalar") ? 0 : 3;
    f->amx_int8 = lvl == 3 && f->avx512f && f->avx512bw && f->avx512vl && probe_amx();
    if (lvl < 3)
        f->avx512f = f->avx512bw = f->avx512vl = f->avx512vnni = f->avx512bf16 = false;
    if (lvl < 2)
        f->avxvnni = false;
    if (lvl < 1)
        f->avx2 = f->fma = f->f16c = false;
#endif
    atomic_store_explicit(&pl_cpu_features_ready_, 1, memory_order_release);
}

const pl_cpu_feature_set *pl_cpu_features_probe_(void)
{
    pthread_once(&probe_once, probe);
    return &pl_cpu_features_table_;
}
