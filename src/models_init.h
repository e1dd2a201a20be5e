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

/**
 * Create a remote backend: kind is a pl_remote_kind, urls a comma-separated
 * replica list, upstream_model NULL for o's. Returns NULL with err.
 */
pl_backend *pl_models_open_remote(struct event_base *base, const pl_opts *o, int kind,
                                  const char *name, const char *urls, const char *upstream_model,
                                  char *err, size_t errlen);

/** The API key: api_key, or the variable api_key_env names. -1 if unset. */
int pl_models_api_key(const pl_opts *o, const char **key, char *err, size_t errlen);

/** A model that --upstream URLs serve, and the URLs (comma-separated). */
typedef struct pl_upstream_model {
    char *name;
    char *urls;
} pl_upstream_model;

/**
 * List the models of every --upstream URL (blocking, at start-up) and group
 * the URLs by model id: upstreams serving the same id are replicas. Returns
 * 0 and a malloc'd array (free with pl_upstreams_free), or -1 with err.
 */
int pl_upstreams_discover(const pl_opts *o, pl_upstream_model **out, int *n, char *err,
                          size_t errlen);
void pl_upstreams_free(pl_upstream_model *m, int n);

#endif
