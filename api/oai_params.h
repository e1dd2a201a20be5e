/* oai_params.h - OpenAI request bodies (chat/completions, completions) into
 * validated parameters. Errors name the offending parameter. */
#ifndef PL_API_OAI_PARAMS_H
#define PL_API_OAI_PARAMS_H

#include <stdbool.h>

#include <jansson.h>

#include "backends/backend.h"

#define PL_OAI_MAX_N 128
/** Most prompts in one batched completions request. */
#define PL_OAI_MAX_PROMPTS 1024
/** Most choices (prompts x n) in one request. */
#define PL_OAI_MAX_CHOICES 4096

/** One completions prompt: text, or token ids (owned). */
typedef struct pl_oai_prompt {
    const char *text;            /**< borrowed from the body */
    int32_t *tokens;
    int n_tokens;
} pl_oai_prompt;

typedef struct pl_oai_params {
    bool chat;                   /**< /v1/chat/completions */
    const char *model;           /**< borrowed from the body */
    pl_chat_message *messages;   /**< owned array; strings borrowed/owned below */
    int n_messages;
    char **owned_strings;        /**< joined content parts, freed with params */
    int n_owned;
    const char *prompt;          /**< completions: prompts[0]'s text */
    int32_t *prompt_tokens;      /**< completions: prompts[0]'s ids (borrowed) */
    int n_prompt_tokens;
    pl_oai_prompt *prompts;      /**< completions: the batch (owned) */
    int n_prompts;               /**< completions: >= 1; chat: 0 */
    bool stream;
    bool include_usage;
    bool echo;                   /**< completions: the prompt comes first */
    bool score_only;             /**< echo with max_tokens 0: no generation */
    int n;                       /**< choices */
    int logprobs_n;              /**< completions: logprobs=N; chat: top_logprobs */
    pl_sampling sampling;        /**< owned (stop strings, logit_bias) */
    int priority;
    /* tools (api/oai_tools.c) */
    json_t *tools;               /**< borrowed "tools" array, NULL: none */
    int tool_choice;             /**< PL_TOOL_CHOICE_* */
    const char *tool_name;       /**< the named function (borrowed) */
    bool parallel_tool_calls;    /**< default true */
    const struct pl_tool_format *tool_format; /**< set once the model is known */
    pl_json_ws json_ws;          /**< the backend's, for the call grammar */
    bool tools_upstream;         /**< the backend's upstream handles tools */
    /** The request used the legacy functions / function_call fields
     *  (mapped onto tools / tool_choice): replies carry message
     *  .function_call and finish_reason "function_call". */
    bool legacy_functions;
    pl_thinking thinking;        /**< chat_template_kwargs.enable_thinking */
    /* reasoning (api/oai_reasoning.c) */
    const char *reasoning_effort;  /**< "low", "medium", "high" or NULL */
    const char *model_identity;  /**< chat_template_kwargs.model_identity */
    const struct pl_reasoning_format *reasoning_fmt; /**< once the model is known;
                                      NULL: none */
    bool constraint_after_reasoning; /**< the constraint lets the model
                                      reason first (already wrapped) */
    bool tools_native;           /**< the template renders tools and history
                                      calls; calls come back parsed from the
                                      reply's channels (a native tool_format) */
} pl_oai_params;

enum {
    PL_TOOL_CHOICE_NONE = 0,
    PL_TOOL_CHOICE_AUTO,
    PL_TOOL_CHOICE_REQUIRED,
    PL_TOOL_CHOICE_NAMED,
};

/** Keep s (malloc'd) until the params are freed. Returns s, NULL on OOM
 *  (s is freed then). */
char *pl_oai_params_own(pl_oai_params *p, char *s);

/* api/oai_tools.c: tool fields of a message (role "tool", assistant
 * "tool_calls"); 0 or -1 with a 400 naming messages[i]... */
int pl_oai_check_tool_message(json_t *msg, int i, pl_err *err);
/* api/oai_tools.c: tools, tool_choice, parallel_tool_calls into p. */
int pl_oai_parse_tools(json_t *body, pl_oai_params *p, pl_err *err);
/* api/oai_tools.c: the legacy chat fields rewritten in body as tools do it
 * (older LangChain, instructor's FUNCTIONS mode): functions -> tools (one
 * call per reply), function_call -> tool_choice, assistant function_call
 * history -> tool_calls, "function" messages -> "tool" results; sets
 * p->legacy_functions when functions were given. 0, or -1 with a 400. */
int pl_oai_legacy_functions(json_t *body, pl_oai_params *p, pl_err *err);

/**
 * Validate body into p (p borrows strings from body, which must outlive
 * it). Returns 0, or -1 with a 400 pl_err naming the parameter.
 */
int pl_oai_parse(json_t *body, bool chat, pl_oai_params *p, pl_err *err);
void pl_oai_params_free(pl_oai_params *p);

/** The affinity key of OpenAI's prompt_cache_key field (0 when absent). */
uint64_t pl_oai_prompt_cache_key(json_t *body);

/** Fill a backend request from parsed params (borrows from p); a
 *  completions request gets prompts[0]. */
void pl_oai_to_request(const pl_oai_params *p, pl_gen_request *r);
/** Point r at completions prompt i (no-op for chat). */
void pl_oai_request_prompt(const pl_oai_params *p, int i, pl_gen_request *r);

/** Choices of a request: n per prompt (chat: n). */
static inline int pl_oai_n_choices(const pl_oai_params *p)
{
    return p->chat ? p->n : p->n * p->n_prompts;
}

#endif
