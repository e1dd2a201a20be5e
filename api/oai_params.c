/* oai_params.c - validation of OpenAI request bodies. */
#include "api/oai_params.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define INVALID(param, ...) \
    pl_err_set(err, 400, "invalid_request_error", param, NULL, __VA_ARGS__)
/* Out of memory on a request path: a 500, never a crash. */
#define OOM() pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory")

/* Parameters OpenAI defines that parley does not implement yet: a request
 * that sets one (to anything but null/false) gets a 400 naming it. */
static const char *unsupported_params[] = {
    "functions", "function_call", "audio", "prediction",
    "web_search_options", "suffix", "guided_grammar", NULL,
};

static json_t *get(json_t *body, const char *key)
{
    json_t *v = json_object_get(body, key);
    return json_is_null(v) ? NULL : v;
}

static int get_number(json_t *body, const char *key, double lo, double hi,
                      bool lo_open, double *out, pl_err *err)
{
    json_t *v = get(body, key);
    if (!v)
        return 0;
    if (!json_is_number(v))
        return INVALID(key, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
        return INVALID(key, "'%s' must be %s %g and <= %g; got %g", key,
                       lo_open ? ">" : ">=", lo, hi, x);
    *out = x;
    return 0;
}

static int get_int(json_t *body, const char *key, long long lo, long long hi, int *out,
                   pl_err *err)
{
    json_t *v = get(body, key);
    if (!v)
        return 0;
    if (!json_is_integer(v))
        return INVALID(key, "'%s' must be an integer", key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return INVALID(key, "'%s' must be between %lld and %lld; got %lld", key, lo, hi, x);
    *out = (int)x;
    return 0;
}

static int get_bool(json_t *body, const char *key, bool *out, pl_err *err)
{
    json_t *v = get(body, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return INVALID(key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

static int check_unsupported(json_t *body, pl_err *err)
{
    for (const char **k = unsupported_params; *k; k++) {
        json_t *v = json_object_get(body, *k);
        if (v && !json_is_null(v) && !json_is_false(v) &&
            !(json_is_array(v) && json_array_size(v) == 0))
            return pl_err_set(err, 400, "invalid_request_error", *k, "unsupported_parameter",
                              "'%s' is not supported by parley yet", *k);
    }
    int best_of = 1;
    if (get_int(body, "best_of", 1, 1, &best_of, err) < 0)
        return pl_err_set(err, 400, "invalid_request_error", "best_of", "unsupported_parameter",
                          "best_of > 1 is not supported");
    return 0;
}

/* "messages[i].key" in buf, for an error's param: built only when one is
 * reported, since a long conversation would pay a snprintf per message. */
static const char *msg_param(char *buf, size_t n, int i, const char *key)
{
    snprintf(buf, n, "messages[%d].%s", i, key);
    return buf;
}

/* content: a string, or an array of {type:"text", text} parts. */
static int parse_content(pl_oai_params *p, json_t *msg, int i, const char **out, pl_err *err)
{
    json_t *c = json_object_get(msg, "content");
    char param[64];
    if (!c || json_is_null(c)) {
        /* OpenAI allows a missing content only on an assistant message
         * that carries tool calls. */
        const char *role = json_string_value(json_object_get(msg, "role"));
        if (role && !strcmp(role, "assistant") && json_object_get(msg, "tool_calls")) {
            *out = "";
            return 0;
        }
        return INVALID(msg_param(param, sizeof param, i, "content"),
                       "'%s' is required: a string or an array of text parts", param);
    }
    if (json_is_string(c)) {
        *out = json_string_value(c);
        return 0;
    }
    msg_param(param, sizeof param, i, "content");
    if (!json_is_array(c))
        return INVALID(param, "'%s' must be a string or an array of text parts", param);
    size_t total = 1, k;
    json_t *part;
    json_array_foreach(c, k, part) {
        json_t *t = json_object_get(part, "type"), *tx = json_object_get(part, "text");
        if (!json_is_string(t) || strcmp(json_string_value(t), "text") || !json_is_string(tx))
            return pl_err_set(err, 400, "invalid_request_error", param, "unsupported_content",
                              "'%s[%zu]': only {\"type\":\"text\",\"text\":...} parts are "
                              "supported", param, k);
        total += json_string_length(tx);
    }
    char **v = realloc(p->owned_strings, (size_t)(p->n_owned + 1) * sizeof(char *));
    if (!v)
        return OOM();
    p->owned_strings = v;
    char *s = malloc(total), *w = s;
    if (!s)
        return OOM();
    json_array_foreach(c, k, part) {
        json_t *tx = json_object_get(part, "text");
        memcpy(w, json_string_value(tx), json_string_length(tx));
        w += json_string_length(tx);
    }
    *w = '\0';
    p->owned_strings[p->n_owned++] = s;
    *out = s;
    return 0;
}

/* An assistant turn's reasoning as vLLM returns it (reasoning_content;
 * "reasoning" as newer servers name it), for templates that render it. */
static int parse_reasoning_content(json_t *msg, int i, const char **out, pl_err *err)
{
    char param[80];
    for (int k = 0; k < 2; k++) {
        const char *key = k ? "reasoning" : "reasoning_content";
        json_t *v = get(msg, key);
        if (!v)
            continue;
        if (!json_is_string(v))
            return INVALID(msg_param(param, sizeof param, i, key), "'%s' must be a string",
                           param);
        *out = json_string_value(v);
        return 0;
    }
    return 0;
}

static int parse_messages(json_t *body, pl_oai_params *p, pl_err *err)
{
    static const char *roles[] = {"system", "user", "assistant", "developer", "tool", NULL};
    json_t *m = get(body, "messages");
    if (!m)
        return INVALID("messages", "'messages' is required");
    if (!json_is_array(m) || json_array_size(m) == 0)
        return INVALID("messages", "'messages' must be a non-empty array");
    p->messages = calloc(json_array_size(m), sizeof *p->messages);
    if (!p->messages)
        return OOM();
    p->n_messages = (int)json_array_size(m);
    for (int i = 0; i < p->n_messages; i++) {
        json_t *msg = json_array_get(m, (size_t)i);
        char param[64];
        json_t *role = json_object_get(msg, "role");
        if (!json_is_object(msg) || !json_is_string(role))
            return INVALID(msg_param(param, sizeof param, i, "role"), "'%s' must be a string",
                           param);
        const char *r = json_string_value(role);
        int ok = 0;
        for (const char **q = roles; *q; q++)
            ok |= !strcmp(*q, r);
        if (!ok)
            return pl_err_set(err, 400, "invalid_request_error",
                              msg_param(param, sizeof param, i, "role"), NULL,
                              "'%s': role '%s' is not supported (system, user, assistant, "
                              "developer, tool)", param, r);
        p->messages[i].role = strcmp(r, "developer") ? r : "system";
        if (parse_content(p, msg, i, &p->messages[i].content, err) < 0 ||
            parse_reasoning_content(msg, i, &p->messages[i].reasoning, err) < 0 ||
            pl_oai_check_tool_message(msg, i, err) < 0)
            return -1;
    }
    return 0;
}

/* One prompt of a batch: a string or a non-empty array of token ids. */
static int parse_one_prompt(json_t *v, const char *param, pl_oai_prompt *out, pl_err *err)
{
    if (json_is_string(v)) {
        out->text = json_string_value(v);
        return 0;
    }
    if (!json_is_array(v) || json_array_size(v) == 0)
        return INVALID("prompt", "'%s' must be a string or a non-empty array of token ids",
                       param);
    size_t n = json_array_size(v), i;
    json_t *t;
    out->tokens = malloc(n * sizeof *out->tokens);
    if (!out->tokens)
        return OOM();
    out->n_tokens = (int)n;
    json_array_foreach(v, i, t) {
        if (!json_is_integer(t) || json_integer_value(t) < 0 ||
            json_integer_value(t) > INT32_MAX)
            return INVALID("prompt", "'%s[%zu]' must be a token id", param, i);
        out->tokens[i] = (int32_t)json_integer_value(t);
    }
    return 0;
}

/* prompt: a string, an array of token ids, or a batch: an array of
 * strings or of token arrays (one choice set per prompt, in order). */
static int parse_prompt(json_t *body, pl_oai_params *p, pl_err *err)
{
    json_t *v = get(body, "prompt");
    if (!v)
        return INVALID("prompt", "'prompt' is required");
    bool batch = json_is_array(v) && json_array_size(v) > 0 &&
                 !json_is_integer(json_array_get(v, 0));
    size_t n = batch ? json_array_size(v) : 1;
    if (n > PL_OAI_MAX_PROMPTS)
        return INVALID("prompt", "a batch holds at most %d prompts", PL_OAI_MAX_PROMPTS);
    p->prompts = calloc(n, sizeof *p->prompts);
    if (!p->prompts)
        return OOM();
    p->n_prompts = (int)n;
    for (size_t i = 0; i < n; i++) {
        char param[32];
        snprintf(param, sizeof param, batch ? "prompt[%zu]" : "prompt", i);
        if (parse_one_prompt(batch ? json_array_get(v, i) : v, param, &p->prompts[i], err) < 0)
            return -1;
    }
    p->prompt = p->prompts[0].text;
    p->prompt_tokens = p->prompts[0].tokens;
    p->n_prompt_tokens = p->prompts[0].n_tokens;
    return 0;
}

static int parse_stop(json_t *body, pl_sampling *s, pl_err *err)
{
    json_t *v = get(body, "stop");
    if (!v)
        return 0;
    if (json_is_string(v)) {
        if (json_string_length(v) == 0)
            return INVALID("stop", "'stop' strings must not be empty");
        if (!(s->stop[s->n_stop] = strdup(json_string_value(v))))
            return OOM();
        s->n_stop++;
        return 0;
    }
    if (!json_is_array(v))
        return INVALID("stop", "'stop' must be a string or an array of strings");
    if (json_array_size(v) > PL_MAX_STOP)
        return INVALID("stop", "'stop' allows at most %d strings; got %zu", PL_MAX_STOP,
                       json_array_size(v));
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) {
        if (!json_is_string(x) || json_string_length(x) == 0)
            return INVALID("stop", "'stop[%zu]' must be a non-empty string", i);
        if (!(s->stop[s->n_stop] = strdup(json_string_value(x))))
            return OOM();
        s->n_stop++;
    }
    return 0;
}

static int parse_logit_bias(json_t *body, pl_sampling *s, pl_err *err)
{
    json_t *v = get(body, "logit_bias");
    if (!v)
        return 0;
    if (!json_is_object(v))
        return INVALID("logit_bias", "'logit_bias' must be an object of token id -> bias");
    if (json_object_size(v) > 1024)
        return INVALID("logit_bias", "'logit_bias' has more than 1024 entries");
    s->logit_bias = calloc(json_object_size(v) + 1, sizeof *s->logit_bias);
    if (!s->logit_bias)
        return OOM();
    const char *k;
    json_t *b;
    json_object_foreach(v, k, b) {
        char *end;
        long id = strtol(k, &end, 10);
        if (*k == '\0' || *end || id < 0 || id > INT32_MAX)
            return INVALID("logit_bias", "'logit_bias' key '%s' is not a token id", k);
        if (!json_is_number(b) || fabs(json_number_value(b)) > 100)
            return INVALID("logit_bias", "'logit_bias[%s]' must be a number in -100..100", k);
        s->logit_bias[s->n_logit_bias].token = (int32_t)id;
        s->logit_bias[s->n_logit_bias++].bias = (float)json_number_value(b);
    }
    return 0;
}

static int parse_logprobs(json_t *body, pl_oai_params *p, pl_err *err)
{
    pl_sampling *s = &p->sampling;
    if (p->chat) {
        if (get_bool(body, "logprobs", &s->logprobs, err) < 0 ||
            get_int(body, "top_logprobs", 0, PL_MAX_TOP_LOGPROBS, &s->top_logprobs, err) < 0)
            return -1;
        if (get(body, "top_logprobs") && !s->logprobs)
            return INVALID("top_logprobs", "'top_logprobs' requires 'logprobs': true");
        p->logprobs_n = s->top_logprobs;
        return 0;
    }
    int n = -1;
    if (get_int(body, "logprobs", 0, 5, &n, err) < 0)
        return -1;
    if (n >= 0) {
        s->logprobs = true;
        s->top_logprobs = n;
        p->logprobs_n = n;
    }
    return 0;
}

static int parse_sampling(json_t *body, pl_oai_params *p, pl_err *err)
{
    pl_sampling *s = &p->sampling;
    if (get_number(body, "temperature", 0, 2, false, &s->temperature, err) < 0 ||
        get_number(body, "top_p", 0, 1, true, &s->top_p, err) < 0 ||
        get_int(body, "top_k", -1, 1000000, &s->top_k, err) < 0 ||
        get_number(body, "min_p", 0, 1, false, &s->min_p, err) < 0 ||
        get_number(body, "presence_penalty", -2, 2, false, &s->presence_penalty, err) < 0 ||
        get_number(body, "frequency_penalty", -2, 2, false, &s->frequency_penalty, err) < 0 ||
        get_number(body, "repetition_penalty", 0, 10, true, &s->repetition_penalty, err) < 0 ||
        get_bool(body, "ignore_eos", &s->ignore_eos, err) < 0)
        return -1;
    const char *mt = get(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (get_int(body, mt, p->echo ? 0 : 1, 1 << 30, &s->max_tokens, err) < 0)
        return -1;
    /* Echo with max_tokens 0 scores the prompt (lm-evaluation-harness). */
    p->score_only = p->echo && get(body, mt) && s->max_tokens == 0;
    json_t *seed = get(body, "seed");
    if (seed) {
        if (!json_is_integer(seed))
            return INVALID("seed", "'seed' must be an integer");
        s->seed = (uint64_t)json_integer_value(seed);
        s->has_seed = true;
    }
    if (parse_stop(body, s, err) < 0 || parse_logit_bias(body, s, err) < 0)
        return -1;
    return parse_logprobs(body, p, err);
}

static int parse_stream(json_t *body, pl_oai_params *p, pl_err *err)
{
    if (get_bool(body, "stream", &p->stream, err) < 0)
        return -1;
    json_t *so = get(body, "stream_options");
    if (!so)
        return 0;
    if (!p->stream)
        return INVALID("stream_options", "'stream_options' is only allowed with 'stream': true");
    if (!json_is_object(so))
        return INVALID("stream_options", "'stream_options' must be an object");
    json_t *iu = json_object_get(so, "include_usage");
    if (iu && !json_is_null(iu) && !json_is_boolean(iu))
        return INVALID("stream_options.include_usage", "'include_usage' must be a boolean");
    p->include_usage = json_is_true(iu);
    return 0;
}

/* ---- structured outputs: response_format, structured_outputs, guided_* ---- */

/* One constraint into s; a second one is an error. */
static int set_constraint(pl_sampling *s, const char *param, pl_constraint_kind k,
                          json_t *text_json, const char *text, pl_err *err)
{
    if (s->constraint != PL_CONSTRAINT_NONE)
        return INVALID(param, "'%s': only one of response_format, structured_outputs and "
                              "guided_* may constrain the output", param);
    char *t = text_json ? json_dumps(text_json, JSON_COMPACT | JSON_ENCODE_ANY)
                        : text ? strdup(text) : NULL;
    if ((text_json || text) && !t)
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    s->constraint = k;
    s->constraint_text = t;
    return 0;
}

/* A schema given as an object (or true) or as JSON text. */
static int set_schema(pl_sampling *s, const char *param, json_t *v, pl_err *err)
{
    if (json_is_object(v) || json_is_true(v))
        return set_constraint(s, param, PL_CONSTRAINT_JSON_SCHEMA, v, NULL, err);
    if (!json_is_string(v))
        return INVALID(param, "'%s' must be a JSON schema (an object)", param);
    json_t *parsed = json_loads(json_string_value(v), JSON_DECODE_ANY, NULL);
    if (!json_is_object(parsed)) {
        json_decref(parsed);
        return INVALID(param, "'%s' is not a JSON schema (an object)", param);
    }
    int rc = set_constraint(s, param, PL_CONSTRAINT_JSON_SCHEMA, parsed, NULL, err);
    json_decref(parsed);
    return rc;
}

static int set_choice(pl_sampling *s, const char *param, json_t *v, pl_err *err)
{
    size_t i;
    json_t *x;
    if (!json_is_array(v) || json_array_size(v) == 0)
        return INVALID(param, "'%s' must be a non-empty array of strings", param);
    json_array_foreach(v, i, x)
        if (!json_is_string(x) || json_string_length(x) == 0)
            return INVALID(param, "'%s[%zu]' must be a non-empty string", param, i);
    return set_constraint(s, param, PL_CONSTRAINT_CHOICE, v, NULL, err);
}

static int set_regex(pl_sampling *s, const char *param, json_t *v, pl_err *err)
{
    if (!json_is_string(v) || json_string_length(v) == 0)
        return INVALID(param, "'%s' must be a non-empty string", param);
    return set_constraint(s, param, PL_CONSTRAINT_REGEX, NULL, json_string_value(v), err);
}

static int parse_response_format(json_t *body, pl_sampling *s, pl_err *err)
{
    json_t *rf = get(body, "response_format");
    if (!rf)
        return 0;
    json_t *t = json_object_get(rf, "type");
    if (!json_is_object(rf) || !json_is_string(t))
        return INVALID("response_format", "'response_format' must be an object with a 'type'");
    const char *type = json_string_value(t);
    if (!strcmp(type, "text"))
        return 0;
    if (!strcmp(type, "json_object"))
        return set_constraint(s, "response_format", PL_CONSTRAINT_JSON_OBJECT, NULL, NULL, err);
    if (strcmp(type, "json_schema"))
        return pl_err_set(err, 400, "invalid_request_error", "response_format.type",
                          "unsupported_parameter", "response_format type '%s' is not "
                          "supported (text, json_object, json_schema)", type);
    json_t *js = json_object_get(rf, "json_schema");
    if (!json_is_object(js))
        return INVALID("response_format.json_schema",
                       "'response_format.json_schema' must be an object");
    json_t *name = json_object_get(js, "name"), *strict = json_object_get(js, "strict");
    if (name && !json_is_string(name))
        return INVALID("response_format.json_schema.name", "'name' must be a string");
    if (strict && !json_is_boolean(strict) && !json_is_null(strict))
        return INVALID("response_format.json_schema.strict", "'strict' must be a boolean");
    json_t *schema = json_object_get(js, "schema");
    if (!schema)
        return set_constraint(s, "response_format", PL_CONSTRAINT_JSON_OBJECT, NULL, NULL, err);
    return set_schema(s, "response_format.json_schema.schema", schema, err);
}

/* vLLM: structured_outputs {choice|regex|json|grammar} and guided_*. */
static int parse_guided(json_t *body, pl_sampling *s, pl_err *err)
{
    json_t *so = get(body, "structured_outputs"), *v;
    if (so) {
        if (!json_is_object(so))
            return INVALID("structured_outputs", "'structured_outputs' must be an object");
        if (get(so, "grammar"))
            return pl_err_set(err, 400, "invalid_request_error", "structured_outputs.grammar",
                              "unsupported_parameter", "'structured_outputs.grammar' is not "
                              "supported; use choice, regex or json");
        if ((v = get(so, "choice")) && set_choice(s, "structured_outputs.choice", v, err) < 0)
            return -1;
        if ((v = get(so, "regex")) && set_regex(s, "structured_outputs.regex", v, err) < 0)
            return -1;
        if ((v = get(so, "json")) && set_schema(s, "structured_outputs.json", v, err) < 0)
            return -1;
    }
    if ((v = get(body, "guided_choice")) && set_choice(s, "guided_choice", v, err) < 0)
        return -1;
    if ((v = get(body, "guided_regex")) && set_regex(s, "guided_regex", v, err) < 0)
        return -1;
    if ((v = get(body, "guided_json")) && set_schema(s, "guided_json", v, err) < 0)
        return -1;
    return 0;
}

/* reasoning_effort (OpenAI's and vLLM's, also a chat_template_kwargs key
 * of gpt-oss's template): low, medium or high. */
static int parse_effort(json_t *v, const char *param, const char **out, pl_err *err)
{
    static const char *const levels[] = {"low", "medium", "high"};
    const char *e = json_string_value(v);
    for (int i = 0; e && i < 3; i++)
        if (!strcmp(e, levels[i])) {
            *out = levels[i];
            return 0;
        }
    return pl_err_set(err, 400, "invalid_request_error", param,
                      json_is_string(v) ? "unsupported_value" : NULL,
                      "'%s' must be \"low\", \"medium\" or \"high\"%s%s%s", param,
                      e ? "; got \"" : "", e ? e : "", e ? "\"" : "");
}

/* vLLM's chat_template_kwargs: an object of the template's variables.
 * enable_thinking (a boolean), reasoning_effort and model_identity (gpt-oss's)
 * are read; builtin_tools (gpt-oss's browser and python, which parley does
 * not run) is refused; other keys are left to the template, which ignores
 * what it does not use (a remote upstream gets them all with the body). */
static int parse_template_kwargs(json_t *body, pl_oai_params *p, pl_err *err)
{
    json_t *kw = get(body, "chat_template_kwargs");
    if (!kw || json_is_null(kw))
        return 0;
    if (!json_is_object(kw))
        return INVALID("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    json_t *t = json_object_get(kw, "enable_thinking");
    if (t && !json_is_boolean(t))
        return INVALID("chat_template_kwargs.enable_thinking",
                       "'chat_template_kwargs.enable_thinking' must be a boolean");
    if (t)
        p->thinking = json_is_true(t) ? PL_THINKING_ON : PL_THINKING_OFF;
    json_t *e = get(kw, "reasoning_effort"), *id = get(kw, "model_identity");
    if (e && parse_effort(e, "chat_template_kwargs.reasoning_effort", &p->reasoning_effort,
                          err) < 0)
        return -1;
    if (id && !json_is_string(id))
        return INVALID("chat_template_kwargs.model_identity",
                       "'chat_template_kwargs.model_identity' must be a string");
    p->model_identity = json_string_value(id);
    json_t *bt = get(kw, "builtin_tools");
    if (bt && !(json_is_array(bt) && json_array_size(bt) == 0))
        return pl_err_set(err, 400, "invalid_request_error",
                          "chat_template_kwargs.builtin_tools", "unsupported_parameter",
                          "'chat_template_kwargs.builtin_tools' is not supported: parley "
                          "runs no built-in tools; give them as function tools");
    return 0;
}

int pl_oai_parse(json_t *body, bool chat, pl_oai_params *p, pl_err *err)
{
    memset(p, 0, sizeof *p);
    p->chat = chat;
    p->n = 1;
    pl_sampling_defaults(&p->sampling);
    json_t *model = get(body, "model");
    if (!model)
        return INVALID("model", "'model' is required");
    if (!json_is_string(model))
        return INVALID("model", "'model' must be a string");
    p->model = json_string_value(model);
    if (chat && pl_oai_legacy_functions(body, p, err) < 0)
        return -1;
    if (check_unsupported(body, err) < 0 || get_bool(body, "echo", &p->echo, err) < 0)
        return -1;
    if (p->echo && chat)
        return pl_err_set(err, 400, "invalid_request_error", "echo", "unsupported_parameter",
                          "'echo' is a /v1/completions parameter");
    if ((chat ? parse_messages(body, p, err) : parse_prompt(body, p, err)) < 0)
        return -1;
    if (parse_stream(body, p, err) < 0 || parse_sampling(body, p, err) < 0 ||
        parse_response_format(body, &p->sampling, err) < 0 ||
        parse_guided(body, &p->sampling, err) < 0 ||
        (chat && pl_oai_parse_tools(body, p, err) < 0) ||
        (chat && parse_template_kwargs(body, p, err) < 0) ||
        (chat && get(body, "reasoning_effort") &&
         parse_effort(get(body, "reasoning_effort"), "reasoning_effort", &p->reasoning_effort,
                      err) < 0) ||
        get_int(body, "n", 1, PL_OAI_MAX_N, &p->n, err) < 0 ||
        get_int(body, "priority", -1000000, 1000000, &p->priority, err) < 0)
        return -1;
    if (pl_oai_n_choices(p) > PL_OAI_MAX_CHOICES)
        return INVALID("n", "prompts x n is %d; at most %d choices per request",
                       pl_oai_n_choices(p), PL_OAI_MAX_CHOICES);
    json_t *user = get(body, "user");
    if (user && !json_is_string(user))
        return INVALID("user", "'user' must be a string");
    return 0;
}

char *pl_oai_params_own(pl_oai_params *p, char *s)
{
    char **n = s ? realloc(p->owned_strings, (size_t)(p->n_owned + 1) * sizeof(char *)) : NULL;
    if (!n) {
        free(s);
        return NULL;
    }
    p->owned_strings = n;
    p->owned_strings[p->n_owned++] = s;
    return s;
}

void pl_oai_params_free(pl_oai_params *p)
{
    for (int i = 0; i < p->n_owned; i++)
        free(p->owned_strings[i]);
    free(p->owned_strings);
    free(p->messages);
    for (int i = 0; i < p->n_prompts; i++)
        free(p->prompts[i].tokens);
    free(p->prompts);
    pl_sampling_free(&p->sampling);
    memset(p, 0, sizeof *p);
}

uint64_t pl_oai_prompt_cache_key(json_t *body)
{
    const char *k = json_string_value(json_object_get(body, "prompt_cache_key"));
    if (!k || !*k)
        return 0;
    uint64_t h = 1469598103934665603ull;   /* FNV-1a */
    for (; *k; k++)
        h = (h ^ (unsigned char)*k) * 0x100000001B3ull;
    return h ? h : 1;
}

void pl_oai_to_request(const pl_oai_params *p, pl_gen_request *r)
{
    memset(r, 0, sizeof *r);
    r->messages = p->messages;
    r->n_messages = p->n_messages;
    r->add_generation_prompt = true;
    r->thinking = p->thinking;
    r->tools = p->tools_native && p->tool_choice != PL_TOOL_CHOICE_NONE ? p->tools : NULL;
    r->reasoning_effort = p->reasoning_effort;
    r->model_identity = p->model_identity;
    pl_oai_request_prompt(p, 0, r);
    r->sampling = p->sampling;
    r->priority = p->priority;
    r->echo = p->echo;
    r->score_only = p->score_only;
    r->max_tokens_must_fit = true;   /* vLLM's 400, not a reply cut at the context */
}

void pl_oai_request_prompt(const pl_oai_params *p, int i, pl_gen_request *r)
{
    if (p->chat || i >= p->n_prompts)
        return;
    r->prompt = p->prompts[i].text;
    r->prompt_tokens = p->prompts[i].tokens;
    r->n_prompt_tokens = p->prompts[i].n_tokens;
}
