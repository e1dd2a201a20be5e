/* backend.h - the one interface every backend implements.
 *
 * A backend serves one model. It accepts a generation request together with
 * a sink and later calls the sink, always on the main (libevent) thread, with
 * text deltas and exactly one final result. The engine, remote and mock
 * backends are interchangeable behind this table of function pointers; the
 * OpenAI endpoints and the jobs use nothing else, and they submit only what
 * the model's admission point (schedulers/dispatch.h) admits.
 *
 * Threading: every function here is called on the main thread, and every
 * sink callback runs on the main thread.
 */
#ifndef PL_BACKEND_H
#define PL_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct event_base;

#define PL_MAX_STOP 4        /* OpenAI allows up to 4 stop strings */
#define PL_MAX_TOP_LOGPROBS 20

typedef enum pl_finish {
    PL_FINISH_NONE = 0,
    PL_FINISH_STOP,    /* EOS token or a stop string */
    PL_FINISH_LENGTH,  /* max_tokens or the context length */
    PL_FINISH_ABORT,   /* aborted by the backend itself (e.g. shutdown) */
    PL_FINISH_ERROR,   /* see pl_result.error */
} pl_finish;

/** OpenAI name of a finish reason ("stop", "length", ...). */
const char *pl_finish_name(pl_finish f);

/** An error that becomes OpenAI error JSON {"error":{message,type,param,code}}. */
typedef struct pl_err {
    int status;          /**< HTTP status (400, 404, 413, 500, 503, ...) */
    char type[48];       /**< "invalid_request_error", "server_error", ... */
    char param[64];      /**< offending parameter, "" when none */
    char code[48];       /**< "model_not_found", ... "" when none */
    char message[512];
    int retry_after_s;   /**< > 0: the client should wait this long (Retry-After) */
} pl_err;

/** Fill *e (which may be NULL) and return -1, for `return pl_err_set(...)`. */
int pl_err_set(pl_err *e, int status, const char *type, const char *param,
               const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

typedef struct pl_logit_bias {
    int32_t token;
    float bias;          /**< -100..100 */
} pl_logit_bias;

/** What the output must match (DESIGN.md, "Constrained decoding"). */
typedef enum pl_constraint_kind {
    PL_CONSTRAINT_NONE = 0,
    PL_CONSTRAINT_JSON_OBJECT,   /**< any JSON object; text unused */
    PL_CONSTRAINT_JSON_SCHEMA,   /**< text: the schema as JSON */
    PL_CONSTRAINT_REGEX,         /**< text: the pattern (whole output) */
    PL_CONSTRAINT_CHOICE,        /**< text: a JSON array of strings */
} pl_constraint_kind;

/** Name of a constraint kind ("json_schema", ...). */
const char *pl_constraint_name(pl_constraint_kind k);

/** The whitespace constrained JSON may hold between its tokens
 *  (--structured-whitespace; json_schema.h says where and how much). */
typedef enum pl_json_ws {
    PL_JSON_WS_FLEXIBLE = 0,     /**< bounded line breaks and indentation */
    PL_JSON_WS_COMPACT,          /**< only ", " and ": " */
} pl_json_ws;

/** Sampling parameters; pl_sampling_defaults() gives OpenAI's defaults. */
typedef struct pl_sampling {
    double temperature;          /**< 0..2; 0 = greedy */
    double top_p;                /**< (0,1] */
    int top_k;                   /**< <= 0: off */
    double min_p;                /**< 0..1; 0: off */
    double presence_penalty;     /**< -2..2 */
    double frequency_penalty;    /**< -2..2 */
    double repetition_penalty;   /**< > 0; 1: off */
    uint64_t seed;
    bool has_seed;
    int max_tokens;              /**< >= 1; 0 = up to the context length */
    int n_stop;
    char *stop[PL_MAX_STOP];     /**< owned by whoever owns the struct */
    bool ignore_eos;
    bool logprobs;
    int top_logprobs;            /**< 0..PL_MAX_TOP_LOGPROBS */
    int n_logit_bias;
    pl_logit_bias *logit_bias;   /**< n_logit_bias entries */
    pl_constraint_kind constraint;
    char *constraint_text;       /**< owned like stop; NULL for none */
} pl_sampling;

void pl_sampling_defaults(pl_sampling *s);

/** A model's own sampling defaults, as vLLM takes them from its
 *  generation_config.json: each field in `set` applies to a request that
 *  leaves it out. */
typedef struct pl_sampling_model_defaults {
    unsigned set;                /**< PL_SAMPLING_SET_* of the fields given */
    double temperature, top_p, min_p, repetition_penalty;
    int top_k;
    int max_tokens;              /**< generation_config's max_new_tokens */
} pl_sampling_model_defaults;

enum {
    PL_SAMPLING_SET_TEMPERATURE = 1,
    PL_SAMPLING_SET_TOP_P = 2,
    PL_SAMPLING_SET_TOP_K = 4,
    PL_SAMPLING_SET_MIN_P = 8,
    PL_SAMPLING_SET_REPETITION_PENALTY = 16,
    PL_SAMPLING_SET_MAX_TOKENS = 32,
};

/** Apply d's fields onto s where the OpenAI request body leaves them out
 *  (max_tokens: neither max_tokens nor max_completion_tokens given). d or
 *  body NULL: nothing. */
void pl_sampling_apply_model_defaults(pl_sampling *s, const json_t *body,
                                      const pl_sampling_model_defaults *d);
/** Deep-copy src into dst (stop strings, logit_bias, constraint text).
 *  Returns 0, -1 on OOM. */
int pl_sampling_copy(pl_sampling *dst, const pl_sampling *src);
/** Free what pl_sampling_copy allocated. */
void pl_sampling_free(pl_sampling *s);

/** chat_template_kwargs.enable_thinking (vLLM's): whether a template that
 *  has the switch (Qwen3) lets the model think. Templates without it
 *  ignore it, as Jinja ignores an unused variable. */
typedef enum pl_thinking {
    PL_THINKING_DEFAULT = 0,     /**< not given: the template's default */
    PL_THINKING_ON,
    PL_THINKING_OFF,
} pl_thinking;

typedef struct pl_chat_message {
    const char *role;            /**< "system", "user", "assistant", ... */
    const char *content;         /**< UTF-8 text */
    /** assistant: the turn's reasoning (vLLM's reasoning_content), for
     *  templates that render it (Qwen3's, gpt-oss's "thinking"); NULL:
     *  none. */
    const char *reasoning;
    /** assistant: OpenAI's tool_calls array (borrowed), for templates that
     *  render calls themselves (gpt-oss's); NULL: none (other templates
     *  get calls rendered into content by the API). */
    json_t *tool_calls;
} pl_chat_message;

/**
 * A generation request. Everything is borrowed for the duration of submit();
 * a backend copies what it keeps.
 * Exactly one of messages (chat), prompt (completion text) or prompt_tokens
 * is set.
 */
typedef struct pl_gen_request {
    const pl_chat_message *messages;
    int n_messages;
    bool add_generation_prompt;  /**< chat: end with the assistant header */
    pl_thinking thinking;        /**< chat: chat_template_kwargs.enable_thinking */
    /** chat: the request's tools (OpenAI's "tools" array, borrowed) for a
     *  template that renders them itself (a native tool_format); NULL:
     *  none. */
    json_t *tools;
    /** chat: reasoning_effort ("low", "medium", "high") for a template
     *  that reads it (gpt-oss's); NULL: the template's default. */
    const char *reasoning_effort;
    /** chat: chat_template_kwargs.model_identity (gpt-oss's); NULL: the
     *  template's default. */
    const char *model_identity;
    const char *prompt;
    const int32_t *prompt_tokens;
    int n_prompt_tokens;
    pl_sampling sampling;
    int priority;                /**< lower runs sooner (vLLM's convention) */
    uint64_t conversation_key;   /**< affinity hint; 0 = none */
    /** A remote backend's routing key when it differs from conversation_key:
     *  requests with one key share a prompt prefix (in jobs under the seed
     *  layout, one agent's thread of a conversation). 0 = conversation_key. */
    uint64_t affinity_key;
    /** A retention hint: no later request reuses this one's reply (only
     *  quotes it, or the conversation ends), so when it ends the blocks from
     *  the one holding its last prompt position on are evicted first (they
     *  stay reusable until then). Jobs set it when they send hints. */
    bool reply_private;
    /** Completions echo: the deltas start with one prompt delta
     *  (pl_delta.prompt) holding the prompt's tokens, their text and, when
     *  sampling.logprobs, their logprobs (the first token's is NaN: it has
     *  no context) with sampling.top_logprobs alternatives each. A backend
     *  that cannot compute prompt logprobs refuses the request (400). */
    bool echo;
    /** With echo: score the prompt only; no token is generated (finish
     *  "length", completion_tokens 0). sampling.max_tokens is ignored. */
    bool score_only;
    /** The client's OpenAI request body when the request came through the
     *  OpenAI API (NULL from jobs), so a remote backend can pass on fields
     *  parley does not interpret. Borrowed for the duration of submit(). */
    json_t *oai_body;
    /** Refuse (400 naming max_tokens) a max_tokens that does not fit the
     *  context beside the prompt, as vLLM does: set for OpenAI API
     *  requests. Jobs leave it false: their replies stop where the context
     *  ends (finish "length"). */
    bool max_tokens_must_fit;
} pl_gen_request;

/** One top-logprob alternative. */
typedef struct pl_top_logprob {
    const char *token;           /**< token text (may be partial UTF-8) */
    size_t token_len;
    float logprob;
} pl_top_logprob;

/** Logprob information for one token. A prompt's first token has
 *  logprob NaN and no alternatives (JSON null). */
typedef struct pl_token_logprob {
    const char *token;
    size_t token_len;
    float logprob;
    int n_top;
    const pl_top_logprob *top;
} pl_token_logprob;

/** A fragment of a tool call an upstream streamed (OpenAI's
 *  delta.tool_calls[i]): the first fragment of a call carries its id and
 *  name, the following ones pieces of its arguments. */
typedef struct pl_tool_call_delta {
    int index;                   /**< which call of the reply */
    const char *id;              /**< NULL when this fragment has none */
    const char *name;            /**< NULL when this fragment has none */
    const char *arguments;       /**< a piece of the JSON arguments, or NULL */
    size_t arguments_len;
} pl_tool_call_delta;

/**
 * A delta: new text, always whole UTF-8 sequences, never a prefix of a stop
 * string that could still complete. All pointers are valid only during the
 * callback.
 */
typedef struct pl_delta {
    const char *text;
    size_t len;
    const int32_t *tokens;       /**< the token ids this delta covers */
    int n_tokens;
    const pl_token_logprob *logprobs;  /**< n_tokens entries, or NULL */
    /** Tool-call fragments, from a backend whose ops->upstream_tools is
     *  set (the remote backend passes on its upstream's calls). */
    const pl_tool_call_delta *tool_calls;
    int n_tool_calls;
    bool prompt;                 /**< the echoed prompt (pl_gen_request.echo):
                                      the first delta, at most once */
} pl_delta;

typedef struct pl_result {
    pl_finish finish;
    int prompt_tokens;
    int completion_tokens;
    int cached_tokens;           /**< prompt tokens served from prefix cache */
    double queue_ms;             /**< submit -> first scheduled */
    double ttft_ms;              /**< submit -> first token */
    const pl_err *error;         /**< set when finish == PL_FINISH_ERROR */
    bool tool_calls;             /**< finish_reason "tool_calls" (upstream tools) */
    /** A stop string ended the reply: sampling.stop[stop_index - 1]; 0:
     *  none (the model's end, a constraint's), or the backend cannot tell
     *  (remote). */
    int stop_index;
} pl_result;

/**
 * The sink. on_delta may be called any number of times, then on_done exactly
 * once; neither is called again after on_done, or after the request was
 * aborted by the caller.
 */
typedef struct pl_sink {
    void (*on_delta)(void *ud, const pl_delta *d);
    void (*on_done)(void *ud, const pl_result *r);
    void *ud;
} pl_sink;

/** One input of an embedding request: a text (tokenised with the model's
 *  special tokens, as sentence-transformers does) or token ids (used as
 *  given). Borrowed for the duration of embed(). */
typedef struct pl_embed_input {
    const char *text;            /**< UTF-8, len bytes; NULL: ids */
    size_t len;
    const int32_t *ids;
    int n_ids;
} pl_embed_input;

/** An embedding request (POST /v1/embeddings), borrowed during embed(). */
typedef struct pl_embed_request {
    const pl_embed_input *inputs;
    int n;
    /** 0: an input longer than the model's limit (pl_embed_info.max_len) is
     *  a 400 naming it; k > 0: inputs are cut to their first k tokens
     *  (k <= max_len; a text keeps its closing special token, as the
     *  tokenizers library truncates); -1: cut to max_len (vLLM's
     *  truncate_prompt_tokens). */
    int truncate;
} pl_embed_request;

/** What an embedding model is. */
typedef struct pl_embed_info {
    int dim;                     /**< the vectors' length */
    int max_len;                 /**< the longest input, in tokens */
    bool normalized;             /**< vectors come at unit L2 norm */
    const char *pooling;         /**< "mean", "cls", "last" (static) */
    /** A Matryoshka model (config.json's is_matryoshka or
     *  matryoshka_dimensions): a request may ask for fewer dimensions, the
     *  vectors' first ones (renormalised when normalized); dims (n_dims,
     *  owned by the backend) lists the lengths allowed, none: any. */
    bool matryoshka;
    const int *dims;
    int n_dims;
} pl_embed_info;

/** An embedding request's end; pointers valid during the callback. */
typedef struct pl_embed_result {
    const float *vectors;        /**< (n, dim), input order; NULL on error */
    int n, dim;
    int prompt_tokens;           /**< tokens embedded, over all inputs */
    const pl_err *error;         /**< set when it failed */
} pl_embed_result;

/** Called once, on the main thread, unless the request was aborted. */
typedef struct pl_embed_sink {
    void (*on_done)(void *ud, const pl_embed_result *r);
    void *ud;
} pl_embed_sink;

typedef struct pl_backend pl_backend;
struct pl_dispatch_kv;
struct pl_tool_format;
struct pl_reasoning_format;

/** The table of functions a backend implements. */
typedef struct pl_backend_ops {
    const char *kind;            /**< "mock", "cpu", "cuda", "remote" */
    /** Errors may come after submit() and before the first token (a remote
     *  upstream's 4xx, or its retries running out): the API then waits for
     *  the first token before it commits a stream to status 200, so such an
     *  error keeps its own status. */
    bool late_errors;
    /** Tools are the backend's business: it forwards the client's tools and
     *  tool_choice (oai_body) and returns calls as pl_delta.tool_calls, so
     *  the API neither renders tools into the prompt nor parses replies. */
    bool upstream_tools;
    /** Queue a request. Returns 0 and *id, or -1 with *err set (nothing
     *  will be called on the sink then). Never blocks. */
    int (*submit)(pl_backend *b, const pl_gen_request *req, pl_sink sink,
                  uint64_t *id, pl_err *err);
    /** Abort a request: its blocks are freed; the sink is never called
     *  again. Unknown or finished ids are ignored. */
    void (*abort)(pl_backend *b, uint64_t id);
    /** Pause or resume delivery for a slow reader (backpressure). A paused
     *  request stops producing tokens until resumed. */
    void (*set_paused)(pl_backend *b, uint64_t id, bool paused);
    /** Concurrent sequences it takes at most: its upper bound (a backend
     *  that reports kv() is admitted by the blocks requests need within
     *  it), or what it holds when it reports no KV (under --capacity
     *  worst-case the seed's min(upper bound, KV tokens / max_model_len)). */
    int (*capacity)(pl_backend *b);
    /** Its KV cache as admission counts it (schedulers/dispatch.h): false
     *  when it reports none (then capacity() alone bounds admission, as
     *  under --capacity worst-case). The figures hold every request
     *  submitted so far. May be NULL. */
    bool (*kv)(pl_backend *b, struct pl_dispatch_kv *out);
    /** Statistics as a new JSON object (caller owns the reference). */
    json_t *(*stats)(pl_backend *b);
    /** Tokenize text or chat messages. Returns 0 and a malloc'd array the
     *  caller frees, or -1 with *err set. */
    int (*tokenize)(pl_backend *b, const pl_gen_request *req,
                    bool add_special, int32_t **ids, int *n, pl_err *err);
    /** Detokenize ids into a malloc'd NUL-terminated string. */
    int (*detokenize)(pl_backend *b, const int32_t *ids, int n, char **text,
                      pl_err *err);
    /** Context length in tokens (max_model_len). */
    int (*max_model_len)(pl_backend *b);
    /** The tokenizer's configuration, as vLLM's GET /tokenizer_info gives
     *  it (tokenizer_config.json's fields): tokenizer_class; bos_token,
     *  eos_token, pad_token, unk_token (their text, or null when the
     *  vocabulary has none); add_bos_token, add_eos_token; chat_template
     *  (the model's Jinja text, or null); model_max_length. A new object
     *  the caller owns, or NULL with *err set (a remote backend: 501,
     *  ask the upstream). May be NULL: the API answers 501. */
    json_t *(*tokenizer_info)(pl_backend *b, pl_err *err);
    /** Stop producing, abort everything, join threads, free. */
    void (*free)(pl_backend *b);
    /** How the model writes tool calls (backends/text/tool_format.h),
     *  from its chat-template family: Qwen 2.5 / Hermes <tool_call>, Llama
     *  3.1 JSON, Mistral [TOOL_CALLS], gpt-oss's harmony (native: the
     *  template renders tools, calls and results itself from
     *  pl_gen_request.tools and pl_chat_message.tool_calls; calls come
     *  back in the reply's channels) or generic. Static. May be NULL:
     *  generic (pl_backend_tool_format). */
    const struct pl_tool_format *(*tool_format)(pl_backend *b);
    /** How the model marks its reasoning in a reply
     *  (backends/text/reasoning_format.h): qwen3's <think> ... </think>,
     *  gpt-oss's harmony channels (reasoning, content and tool calls), or
     *  NULL: none. Static. May be NULL itself: none. */
    const struct pl_reasoning_format *(*reasoning_format)(pl_backend *b);
    /** Retention hint (DESIGN.md, "Conversation-aware KV"): how soon the
     *  conversation with this key (a request's conversation_key) needs its
     *  cached prefix again: 0 = now, larger = later (its place in the
     *  dispatch order, in waves of the backend's capacity), PL_NEED_DONE =
     *  finished: its cached blocks may go at once. May be NULL (the
     *  backend keeps no cache of its own to steer). */
    void (*retain)(pl_backend *b, uint64_t conversation_key, int next_need);
    /** Whether chat requests with a constraint of kind k are enforced: 0,
     *  or -1 with a 400 in *err naming what cannot enforce it (a remote
     *  upstream that ignores or refuses it, or has no field for it). May
     *  be NULL: every kind is enforced. */
    int (*check_constraint)(pl_backend *b, pl_constraint_kind k, pl_err *err);
    /** The ids its vocabulary has: every token id a client names (a prompt
     *  of ids, logit_bias, /detokenize) is in [0, vocab_size), or the
     *  request is a 400 (pl_backend_check_ids). May be NULL: unknown (a
     *  remote upstream checks its own). */
    int (*vocab_size)(pl_backend *b);
    /** Whether the model embeds: 0 and *out, or -1 (it generates). May be
     *  NULL: it does not embed. */
    int (*embed_info)(pl_backend *b, pl_embed_info *out);
    /** Queue an embedding request (never blocks; tokenising and the
     *  forward pass run off the main thread): 0 and *id (abort() cancels
     *  it), or -1 with *err (the sink is never called then). Present
     *  whenever embed_info is. */
    int (*embed)(pl_backend *b, const pl_embed_request *req, pl_embed_sink sink,
                 uint64_t *id, pl_err *err);
} pl_backend_ops;

/** ops->embed_info: 0 and *out when b embeds, else -1. */
int pl_backend_embed_info(pl_backend *b, pl_embed_info *out);

/** ops->vocab_size, or 0 when the backend does not know it. */
int pl_backend_vocab_size(pl_backend *b);

/** Token ids named by a client (param: "prompt", "logit_bias", "tokens")
 *  against a vocabulary of n_vocab ids: 0, or -1 with a 400 naming the
 *  first id out of [0, n_vocab), as OpenAI and vLLM answer (never ignored).
 *  The engine and the mock answer the same. */
int pl_backend_check_ids(const int32_t *ids, int n, int n_vocab, const char *param,
                         pl_err *err);

/** ops->check_constraint, or 0 when the backend has none. */
int pl_backend_check_constraint(pl_backend *b, pl_constraint_kind k, pl_err *err);

/** ops->reasoning_format, or NULL when the backend has none. */
const struct pl_reasoning_format *pl_backend_reasoning_format(pl_backend *b);

/** ops->tool_format, or the generic format when the backend has none. */
const struct pl_tool_format *pl_backend_tool_format(pl_backend *b);

/** The next need of a finished conversation (pl_backend_ops.retain). */
#define PL_NEED_DONE (-1)

struct pl_req_metrics;

/** Common header; each backend embeds it first in its own struct, zeroed. */
struct pl_backend {
    const pl_backend_ops *ops;
    char *model;                 /**< the served model name (owned) */
    struct event_base *base;     /**< the main loop (borrowed) */
    struct pl_req_metrics *metrics;  /**< request metrics (req_metrics.h),
                                      created by the first submit; owned,
                                      freed by pl_backend_free */
    /** The model's sampling defaults (a Hugging Face checkpoint's
     *  generation_config.json), applied by the API to what a request leaves
     *  out; NULL: OpenAI's. Borrowed from the backend, lives as long as it. */
    const pl_sampling_model_defaults *sampling_defaults;
    /** The JSON whitespace its constraints allow; the API builds tool-call
     *  grammars with it too. Set by the backend (zero: flexible). */
    pl_json_ws json_ws;
};

/** Submit through the request metrics (req_metrics.h): same contract as
 *  ops->submit; the sink is wrapped to time and count the request. */
int pl_backend_submit(pl_backend *b, const pl_gen_request *r, pl_sink s,
                      uint64_t *id, pl_err *e);
/** Abort through the request metrics (counted as finished_reason abort). */
void pl_backend_abort(pl_backend *b, uint64_t id);
static inline int pl_backend_capacity(pl_backend *b)
{
    return b->ops->capacity(b);
}

/** The length checks of a backend that knows its context (max_len tokens)
 *  and the prompt's length n: a prompt of 1 to max_len - 1 tokens, and,
 *  when req->max_tokens_must_fit, n + max_tokens <= max_len. 0, or -1
 *  with a 400 in *err (OpenAI's context_length_exceeded). */
int pl_backend_check_length(const pl_gen_request *req, int n, int max_len, pl_err *err);

/** Free a backend (NULL is ignored). */
void pl_backend_free(pl_backend *b);

struct pl_dispatch;

/** The admission point of b's model (schedulers/dispatch.h): its capacity
 *  and KV view are read from b before each admission; reserve as
 *  pl_dispatch_opts. The caller frees it with pl_dispatch_free, before b.
 *  NULL on OOM. */
struct pl_dispatch *pl_backend_dispatch_new(pl_backend *b, int reserve);

/** How the model's capacity is decided now, as /status and `run --stats`
 *  show it (a new object; NULL on OOM): rule ("kv": by the KV blocks
 *  requests need; "slots": the backend's capacity), capacity (the bound
 *  now: min(upper_bound, what fits now)), upper_bound, interactive_reserve,
 *  in_flight, peak_in_flight, and with the KV rule block_size,
 *  blocks_total, blocks_free (free or evictable, but those kept),
 *  blocks_kept (cached prefixes of conversations running now), blocks_reserved
 *  (promised to requests already admitted), need_blocks (what one more
 *  request is counted for), prompt_tokens_estimate, reply_tokens_estimate
 *  and fits (more requests of need_blocks the room holds). Reads the
 *  backend's figures again first. */
json_t *pl_backend_admission_json(struct pl_dispatch *d);

#endif
