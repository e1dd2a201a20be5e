/* mock_internal.h - pieces of the mock backend shared between its files. */
#ifndef PL_MOCK_INTERNAL_H
#define PL_MOCK_INTERNAL_H

#include <stdint.h>

#include "backends/backend.h"

/**
 * The text the mock answers a constrained request with (malloc'd): one of
 * the choices, or a random shortest text the constraint accepts. NULL when
 * sp has no constraint; (char *)-1 with *err (400 for a constraint that
 * does not compile). rnd draws from *rng.
 */
char *pl_mock_constrained_text(const pl_sampling *sp, uint64_t (*rnd)(uint64_t *),
                               uint64_t *rng, pl_err *err);

#endif
