/* job_spec.h - the job schema: a multi-agent conversation job read from a
 * jansson tree (the same for the jobs API's JSON and `parley run`'s YAML).
 *
 *   experiment: debate              # or experiment_name
 *   models:                         # or model_definitions (seed 000)
 *     m1: {backend: mock, vllm_config: {max_num_seqs_upper_bound: 64}}
 *   agents:                         # or agent_definitions (seed 000)
 *     - id: spkr_000                # or agent_id
 *       role: participant
 *       model: m1
 *       system_prompt: "..."        # or persona
 *       visible_to: [mod_001]       # who reads it in later rounds (default all)
 *       temperature: 0.7            # sampling keys, flat or under `sampling`
 *     - id: mod_001
 *       speak_after_within_round: [spkr_000]  # also under role_specific_config
 *                                   # (so is visible_to); quoted in its prompt
 *   num_rounds: 3
 *   max_retries: 2
 *   weight: 1                       # share of a model against other jobs
 *   prompt_layout: seed             # or shared_prefix (prompt.h)
 *   questions: [{id, text, choices: [...], answer, metadata}]
 *   questions_file: q.jsonl         # CLI only, relative to the job file
 *   validation: {enabled: true, extract_regex: "...", mode: constrained}
 *   output_dir: out                 # CLI only
 *
 * Parsing collects EVERY problem as {path, message}; paths use the same
 * syntax as pl_linemap ("agents[2].model") so the CLI can add FILE:LINE.
 * No key is ignored: an unknown key anywhere is a problem (a question's
 * extra keys are its metadata; model definitions are read by the CLI's
 * option reader, or checked by pl_job_spec_check_served over HTTP).
 */
#ifndef PL_JOB_SPEC_H
#define PL_JOB_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "backends/backend.h"

#define PL_JOB_MAX_CHOICES 26

typedef struct pl_job_model {
    char *name;
    char *backend;               /**< "mock", "cpu", "cuda", "remote", ... */
    json_t *options;             /**< the model's mapping as given (owned ref) */
    int max_num_seqs;            /**< upper bound on in-flight; 0 = backend's */
} pl_job_model;

typedef struct pl_job_agent {
    char *id;
    char *role;                  /**< "participant", "moderator", ... */
    int model;                   /**< index into models */
    char *system_prompt;         /**< may be NULL */
    uint64_t deps;               /**< bit j: speaks after agent j in a round,
                                      and its prompt quotes j's reply of the
                                      round (seed 000) */
    uint64_t visible_to;         /**< bit j: agent j reads its replies in
                                      later rounds (not this round's quotes:
                                      those follow deps) */
    bool validate;               /**< its answers are validated */
    pl_sampling sampling;        /**< owned (stop strings) */
} pl_job_agent;

typedef struct pl_job_question {
    char *id;                    /**< safe as a file name */
    char *text;
    int n_choices;
    char **choices;
    int answer;                  /**< choice index, -1 when not given */
    json_t *metadata;            /**< owned ref; NULL when empty */
} pl_job_question;

typedef struct pl_job_spec {
    char *experiment;            /**< safe as a file name */
    int n_models;
    pl_job_model *models;
    int n_agents;
    pl_job_agent *agents;
    int num_rounds;
    int max_retries;
    double weight;               /**< share of each model across jobs (> 0,
                                      default 1) */
    int n_questions;
    pl_job_question *questions;
    bool validation;             /**< answers must be one of the choices */
    char *extract_regex;         /**< group 1 (or the match) is the answer */
    /** validation.mode: constrained: a validated agent's reply is decoded
     *  under pl_job_answer_regex (one line of reasoning, then exactly one
     *  "Answer: X" line of the question's choices); re-prompts stay for
     *  what still fails (a reply cut by max_tokens). Default: reprompt. */
    bool constrained;
    /** prompt_layout: shared_prefix: every prompt of a conversation's round
     *  opens with the same shared part (prompt.h); default: seed. */
    bool shared_prefix;
    void *re_;                   /**< compiled pcre2_code */
    void *md_;                   /**< pcre2_match_data */
    char *output_dir;            /**< NULL: the caller's default */
    json_t *source;              /**< the spec as given (owned ref); the job
                                      drops it (pl_job_new): NULL there */
} pl_job_spec;

typedef struct pl_spec_problem {
    char path[160];
    char message[256];
} pl_spec_problem;

typedef struct pl_spec_problems {
    int n, cap;
    pl_spec_problem *v;
} pl_spec_problems;

/** Append a problem (printf-style message). */
void pl_spec_problems_add(pl_spec_problems *p, const char *path,
                          const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void pl_spec_problems_free(pl_spec_problems *p);
/** The problems as a JSON array of {path, message} (new reference). */
json_t *pl_spec_problems_json(const pl_spec_problems *p);

/** Where the spec comes from: the CLI may read files, the API may not. */
typedef struct pl_job_spec_source {
    const char *base_dir;        /**< directory of the job file; NULL = API */
} pl_job_spec_source;

/**
 * Parse and validate root into *spec. Returns 0 when there is no problem;
 * otherwise -1 with every problem appended to *probs (spec is then freed
 * and zeroed). Borrows root (keeps a reference in spec->source).
 */
int pl_job_spec_parse(json_t *root, const pl_job_spec_source *src,
                      pl_job_spec *spec, pl_spec_problems *probs);
void pl_job_spec_free(pl_job_spec *spec);

int pl_job_spec_find_agent(const pl_job_spec *s, const char *id);

/**
 * Over HTTP a job runs on a model the server already serves: its model
 * definition is applied or refused, never dropped. Applied: max_num_seqs
 * and vllm_config.max_num_seqs_upper_bound (the job's own cap on the
 * model), backend when it names how the model is served (kind: the served
 * backend's, "mock", "cpu", "cuda" or "remote"; "auto" and seed 000's
 * "vllm" name parley's engine or an upstream). Every other key is a
 * problem naming its path. Needs s->source (before pl_job_new). Returns 0
 * or -1 with problems appended.
 */
int pl_job_spec_check_served(const pl_job_spec *s, int m, const char *kind,
                             pl_spec_problems *p);
int pl_job_spec_find_model(const pl_job_spec *s, const char *name);

/**
 * Extract the answer from a response: the last match of the extraction
 * regex, normalised to a choice index (letter label or choice text,
 * case-insensitive). With the default regex, a reply that is nothing but
 * one choice ("B", "(B)", "B) Paris", "Paris") counts too. Returns the
 * index, or -1 when no valid choice.
 */
int pl_job_spec_extract(pl_job_spec *s, const pl_job_question *q,
                        const char *text, size_t len);

/** The constrained-mode reply for n_choices choices: at most
 *  PL_JOB_REASONING_CHARS printable ASCII characters on one line, a
 *  newline, then "Answer: " and one label. malloc'd, NULL on OOM. */
#define PL_JOB_REASONING_CHARS 400
char *pl_job_answer_regex(int n_choices);

/**
 * The spec's canonical JSON (new reference, NULL on OOM): what changes its
 * results, aliases resolved and defaults filled in: agents in order (id,
 * role, model, system prompt, speak_after_within_round, visible_to,
 * validate, effective sampling), models (their options without the keys
 * that only change speed or place, e.g. max_num_seqs, threads, base_url;
 * and served[m], what serves model m, when served is not NULL),
 * num_rounds, max_retries, validation, prompt_layout. Not the questions
 * (pl_job_question_fingerprint), the experiment name, output_dir, weight
 * or descriptions.
 */
json_t *pl_job_spec_canonical(const pl_job_spec *s, const char *const *served);
/** SHA-256 of the canonical JSON dumped compact, keys sorted, ASCII-only:
 *  64 hex digits. Returns 0, -1 on OOM. */
int pl_job_spec_fingerprint(json_t *canonical, char out[65]);
/** The first 16 hex digits of the SHA-256 of a question's text, choices
 *  and answer (its metadata is not part of it). Returns 0, -1 on OOM. */
int pl_job_question_fingerprint(const pl_job_question *q, char out[17]);

/** A question's choice label: 'A' + i. */
static inline char pl_job_choice_label(int i) { return (char)('A' + i); }

/** true when name is safe as a file name: [A-Za-z0-9_.-], 1..128 chars,
 *  not starting with '.'. */
bool pl_job_safe_name(const char *name);

#endif
