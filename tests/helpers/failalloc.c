/* failalloc.c - see failalloc.h. */
#include "tests/helpers/failalloc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);

enum { MODE_OFF = 0, MODE_OTHER_THREADS, MODE_NEXT };

static _Atomic int mode;
static _Atomic int failed;
static pthread_t owner;
static size_t min_bytes;

void pl_failalloc_other_threads(size_t n)
{
    owner = pthread_self();
    min_bytes = n;
    atomic_store(&mode, MODE_OTHER_THREADS);
}

void pl_failalloc_next(size_t n)
{
    owner = pthread_self();
    min_bytes = n;
    atomic_store(&mode, MODE_NEXT);
}

void pl_failalloc_off(void)
{
    atomic_store(&mode, MODE_OFF);
}

int pl_failalloc_count(void)
{
    return atomic_load(&failed);
}

static bool should_fail(size_t n)
{
    switch (atomic_load(&mode)) {
    case MODE_OTHER_THREADS:
        if (pthread_equal(pthread_self(), owner) || n < min_bytes)
            return false;
        break;
    case MODE_NEXT:
        if (!pthread_equal(pthread_self(), owner) || n < min_bytes)
            return false;
        int expect = MODE_NEXT;
        if (!atomic_compare_exchange_strong(&mode, &expect, MODE_OFF))
            return false;
        break;
    default:
        return false;
    }
    atomic_fetch_add(&failed, 1);
    return true;
}

void *__wrap_malloc(size_t n)
{
    return should_fail(n) ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
    return should_fail(n * size) ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
    return should_fail(n) ? NULL : __real_realloc(p, n);
}
