/* options.h - every option parley takes, declared once in one table.
 *
 * The table (options.c) gives each option's name, type, range, default,
 * environment variable and help. It drives command-line parsing, --help,
 * config-file parsing (top-level keys and per-model keys) and the errors
 * all three give. Precedence: default < environment < config < command line.
 */
#ifndef PL_OPTIONS_H
#define PL_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "backends/engine_config.h"
#include "src/base/yaml_load.h"

/** Values of every option. Strings are owned (free with pl_opts_free). */
typedef struct pl_opts {
    char *host;
    int port;
    char *backend;               /**< auto|cpu|cuda|mock, or a remote kind (vllm, ...) */
    char *config;
    char *model;                 /**< GGUF file, checkpoint folder or ORG/NAME */
    char *model_dir;             /**< where the default model is cached ("" = ~/.cache/parley/models) */
    char *served_model_name;
    int mock_token_delay_ms;
    int mock_capacity;
    int mock_seed;
    char *mock_mode;             /**< random|echo */
    char *mock_reasoning;        /**< none|qwen3|qwen35|harmony */
    long max_body_bytes;
    int max_embed_inputs;
    long stream_buffer_bytes;    /**< per-stream pending output cap */
    int shutdown_timeout;        /**< s for requests in flight to end on SIGTERM */
    /** The in-process engine's options (engine_config.h): the engine,
     *  its runners and the remote and mock backends (max_model_len,
     *  core.max_num_seqs) read them here, not through copies. */
    pl_engine_config engine;
    int interactive_reserve;     /**< -1: 10% of each model's capacity */
    char *log_level;
    /* remote backend (backends/remote) */
    char *base_url;              /**< comma-separated replica URLs (with /v1) */
    char *upstream;              /**< --upstream URLs, comma-separated */
    char *upstream_api_key;      /**< sent upstream as a bearer token */
    char *upstream_api_key_env;  /**< environment variable holding it */
    char *upstream_model;
    int upstream_connect_timeout_ms;
    int upstream_first_token_timeout_ms;
    int upstream_token_timeout_ms;
    int upstream_attempts;
    int upstream_health_interval_ms;
    int upstream_probe_timeout_ms;
    bool upstream_affinity;
    int upstream_embed_dim;
    char *log_format;            /**< text|json */
    bool access_log;             /**< one line per HTTP request */
    char *jobs_dir;              /**< serve: root of the jobs API's output */
    /* hardening (api/server.h, api/conn.h, api/access.h) */
    char *api_key;               /**< keys, '\n'-separated (repeatable option) */
    char *api_key_file;          /**< one key per line */
    char *allowed_origins;       /**< comma-separated */
    char *allowed_hosts;         /**< comma-separated; checked without API keys */
    int rate_limit_rpm, rate_limit_tpm;
    long max_header_bytes;
    int idle_timeout, header_timeout, body_timeout;
    int max_connections;
    int stream_stall_timeout;
    int job_retention;           /**< seconds a finished job stays in memory */
    int max_job_questions;
    long max_job_bytes;
    /* parley run (src/cmd_run.c) */
    char *output;                /**< "" = the job's output_dir, else ./output */
    bool live;                   /**< full-screen pool view */
    double progress_interval;    /**< s between status lines without a TTY */
    char *stats;                 /**< "" = none */
    int strategy;                /**< pl_dispatch_policy */
    int kv_eviction;             /**< 0: next-need (hints), 1: lru (none) */
    bool resume_changed;         /**< resume an experiment made with another spec */
} pl_opts;

typedef enum pl_opt_type {
    PL_OPT_STRING,
    PL_OPT_INT,
    PL_OPT_LONG,
    PL_OPT_DOUBLE,
    PL_OPT_BOOL,
    PL_OPT_URLS,                 /**< http(s) URLs, comma-separated in the field;
                                      repeating the option adds one, a config
                                      list or string replaces them */
    PL_OPT_LIST,                 /**< repeatable string: values joined by '\n' */
    PL_OPT_ENUM,                 /**< one of choices; the int field holds its
                                      index ("a|b|c": a = 0) */
} pl_opt_type;

/* Where an option applies. */
#define PL_OPT_SERVE 1u          /* a server-wide option */
#define PL_OPT_MODEL 2u          /* may also be set per model in config */
#define PL_OPT_RUN 4u            /* taken by `parley run` (model options are too) */

typedef struct pl_option {
    const char *name;            /**< --name; config key with '_' for '-' */
    pl_opt_type type;
    double min, max;             /**< numeric range (inclusive) */
    const char *def;             /**< default, as text */
    const char *env;             /**< environment variable, or NULL */
    const char *choices;         /**< "a|b|c": strings with fixed values, enums */
    size_t offset;               /**< offsetof(pl_opts, field); a field may lie
                                      in a view pl_opts embeds (engine.cuda.graphs) */
    unsigned scope;
    const char *help;
    const char *expect;          /**< the valid values in words for errors
                                      ("seconds in [0, 86400]"); NULL: from
                                      the type, range and choices */
} pl_option;

extern const pl_option pl_options[];
extern const size_t pl_n_options;

/** Fill o with defaults then the environment of `serve`'s options (scopes
 *  SERVE and MODEL). Returns 0, or -1 with err naming the variable. */
int pl_opts_init(pl_opts *o, char *err, size_t errlen);
/** The same for `parley run`: defaults, then the environment of the
 *  options it takes (scopes MODEL and RUN). */
int pl_opts_init_run(pl_opts *o, char *err, size_t errlen);
/** Deep-copy src into dst. */
void pl_opts_copy(pl_opts *dst, const pl_opts *src);
void pl_opts_free(pl_opts *o);

/**
 * Parse --name value / --name=value / --no-name (booleans) from argv
 * starting at argv[first], accepting the options of scope_mask (any bit in
 * common); another option is unknown. Positional arguments are left in
 * positional[] (up to max_pos). Returns 0, 1 for --help, or -1 with
 * "--name: message" in err.
 */
int pl_opts_parse_scope(pl_opts *o, unsigned scope_mask, int argc, char **argv, int first,
                        char **positional, int max_pos, int *n_pos, char *err,
                        size_t errlen);
/** pl_opts_parse_scope for `serve`: server and model options. */
int pl_opts_parse_args(pl_opts *o, int argc, char **argv, int first,
                       char **positional, int max_pos, int *n_pos,
                       char *err, size_t errlen);

/**
 * Set one option from a config value. key uses '_' or '-'; scope_mask
 * restricts which options are accepted. Returns 0, or -1 with err
 * ("unknown key", "must be an integer in 1..512", ...) without location.
 */
int pl_opts_set_json(pl_opts *o, const char *key, json_t *v, unsigned scope_mask,
                     char *err, size_t errlen);

/** Print option help for the given scope. */
void pl_opts_print_help(FILE *f, unsigned scope_mask);

/** Apply --log-level and --log-format to the process's log (log.h). */
void pl_opts_apply_log(const pl_opts *o);

#endif
