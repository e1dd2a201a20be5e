/* models_init.h - create the backends the options or config ask for. */
#ifndef PL_MODELS_INIT_H
#define PL_MODELS_INIT_H

#include "backends/backend.h"
#include "src/options.h"

struct event_base;

/**
 * Create the backend for one model. name: the served name (NULL: derived
 * from the backend/model). Returns NULL with a message in err.
 */
pl_backend *pl_models_open(struct event_base *base, const pl_opts *o, const char *name,
                           char *err, size_t errlen);

#endif
