/* failalloc.h - allocation failures on demand, for the out-of-memory tests.
 *
 * A test executable linked with -Wl,--wrap=malloc,--wrap=calloc,
 * --wrap=realloc (tests/meson.build) sends the allocations of parley's own
 * code (the static libraries) through here; shared libraries (libc's
 * strdup, jansson, libevent) are not affected. Disarmed, every call goes
 * to the real allocator.
 */
#ifndef PL_TEST_FAILALLOC_H
#define PL_TEST_FAILALLOC_H

#include <stddef.h>

/** Fail every allocation of at least min_bytes made on any thread but the
 *  calling one. */
void pl_failalloc_other_threads(size_t min_bytes);
/** Fail the next allocation of at least min_bytes on the calling thread
 *  (once). */
void pl_failalloc_next(size_t min_bytes);
/** Every allocation succeeds again. */
void pl_failalloc_off(void);
/** Allocations failed so far. */
int pl_failalloc_count(void);

#endif
