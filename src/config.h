/* config.h - the config file: server options and the models section.
 *
 * A YAML (or JSON) file:
 *
 *   port: 8000
 *   models:                     # or seed 000's `model_definitions`
 *     mock:
 *       backend: mock
 *       mock_capacity: 64       # any per-model option, flat or under `options:`
 *       vllm_config:
 *         max_num_seqs_upper_bound: 256   # alias of max_num_seqs
 *
 * Errors name the file, the line and the key.
 */
#ifndef PL_CONFIG_H
#define PL_CONFIG_H

#include "src/options.h"

typedef struct pl_model_cfg {
    char *name;                  /**< the name clients use */
    pl_opts opts;                /**< global options overridden per model */
} pl_model_cfg;

typedef struct pl_config {
    int n_models;
    pl_model_cfg *models;
} pl_config;

/**
 * Apply the config file's server options onto *o and read its models
 * (each starting from a copy of *o). Returns 0, or -1 with
 * "FILE:LINE: key 'models.x.backend': message" in err.
 */
int pl_config_load(const char *path, pl_opts *o, pl_config *cfg, char *err,
                   size_t errlen);
void pl_config_free(pl_config *cfg);

/**
 * The one reader of a model definition, for `serve`'s config and `run`'s
 * job file alike: apply mapping m (flat option keys, `options:`, `path` or
 * seed 000's `model_name` for the model, `vllm_config`) onto *o. vllm_config: max_num_seqs_upper_bound sets the
 * engine's max_num_seqs (capacity min(bound, KV capacity)),
 * gpu_memory_utilization sizes the CUDA KV cache, a few more map to their
 * options; other vLLM engine arguments (attention_backend, ...) are
 * accepted with one warning line on stderr naming them; any other key is an
 * error. base is the key path of m ("models.x"), lines maps key paths to
 * lines of path. skip: "|k1|k2|" keys left to another reader (may be
 * NULL). Returns 0, or -1 with "FILE:LINE: key 'models.x.k': message".
 */
int pl_config_model(const char *path, const pl_linemap *lines, const char *base,
                    json_t *m, const char *skip, pl_opts *o, char *err, size_t errlen);

/**
 * After every source of options is applied (o), check what model
 * definition m at base needs of its backend: a remote one its base_url;
 * seed 000's `backend: vllm` its base_url or a model for parley's engine
 * (model_name in m, or the command line's when cli_model), the error naming
 * both ways. A model named for a backend that ignores it (mock, a remote
 * upstream) is one warning line on stderr naming the backend. Returns 0,
 * or -1 with "FILE:LINE: key 'models.x.backend': message" in err.
 */
int pl_config_model_check(const char *path, const pl_linemap *lines, const char *base,
                          json_t *m, const pl_opts *o, bool cli_model, char *err, size_t errlen);

#endif
