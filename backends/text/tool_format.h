/* tool_format.h - how a model is told about tools and how it writes its
 * calls, as a small vtable, one file per format:
 *
 *   - pl_tool_hermes (tool_hermes.c): Qwen 2.5 / Hermes <tool_call> tags
 *     (the template wraps "tool" turns itself);
 *   - pl_tool_generic (tool_hermes.c too): the same tags for a template
 *     that knows no tools (results as user turns in <tool_response>);
 *   - pl_tool_llama3 (tool_llama3.c): Llama 3.1's bare JSON calls;
 *   - pl_tool_mistral (tool_mistral.c): [AVAILABLE_TOOLS] / [TOOL_CALLS];
 *   - pl_tool_qwen3_coder (tool_qwen35.c): Qwen3.5's XML calls,
 *     <function=NAME> with a <parameter=KEY> block per argument;
 *   - pl_tool_gemma4 (tool_gemma4.c): Gemma 4, native like harmony:
 *     <|tool_call>call:NAME{key:value}<tool_call|>, read by
 *     reasoning_gemma4.c;
 *   - pl_tool_harmony (tool_harmony.c): gpt-oss, whose template renders
 *     tools, calls and results itself (native) and whose calls come back in
 *     the reply's channels (reasoning_format.h).
 *
 * A backend hands out its format (backend.h, tool_format); the API uses
 * nothing but this vtable, never the format's name. What the API keeps is
 * OpenAI's side: the tools array, tool_choice, the call objects and their
 * stream chunks.
 */
#ifndef PL_TOOL_FORMAT_H
#define PL_TOOL_FORMAT_H

#include <stdbool.h>
#include <stddef.h>

#include <event2/buffer.h>
#include <jansson.h>

/** A tool format. Fields for the prompt and the parser are unused (NULL)
 *  in a native format. */
typedef struct pl_tool_format {
    const char *name;            /**< for logs and /status */
    /** The chat template renders the tools (pl_gen_request.tools), history
     *  calls (pl_chat_message.tool_calls) and results itself; calls come
     *  back as CALL pieces of the reasoning split. */
    bool native;
    /** The tool list goes before the first user turn's text (else into the
     *  system turn, a new one when there is none). */
    bool tools_in_user;
    /** In the system turn, the tool list goes before its text (else
     *  after it), the text's leading white space dropped (the template
     *  trims it). */
    bool tools_first;
    /** A tool result's role: NULL keeps "tool" (the template has one). */
    const char *result_role;
    /** A tool result's text as a printf format of one %s (NULL: as is). */
    const char *result_wrap;
    /** Runs of user turns are merged once results are rendered (strict
     *  templates want alternation). */
    bool merge_user_runs;
    /** The text a call starts with ("<tool_call>", "{", ...). */
    const char *opener;
    /** The tool list in the format's words (tools: OpenAI's array);
     *  malloc'd, NULL on OOM. */
    char *(*render_tools)(json_t *tools);
    /** An assistant turn's calls (OpenAI's tool_calls array) to b, after
     *  its content. 0, -1 on OOM. */
    int (*render_calls)(struct evbuffer *b, json_t *calls);
    /** To b: the regex of one call of the function whose JSON-quoted name,
     *  regex-escaped, is name, its arguments matching args_re. */
    void (*call_regex)(struct evbuffer *b, const char *name, const char *args_re);
    /** Instead of call_regex, for a format whose arguments are not one
     *  JSON object (qwen3_coder's <parameter=KEY> blocks): to b, the regex
     *  of one call from the function's parameters schema (NULL: none) and
     *  the JSON whitespace ws. 0, or -1 with a reason in msg. */
    int (*call_regex_params)(struct evbuffer *b, const char *name, json_t *params, int ws,
                             char *msg, size_t msglen);
    /** The regex of a whole forced reply from one ("one call of any
     *  allowed function"): one call, or when many up to max (malloc'd,
     *  NULL on OOM). A native format's is already after the reasoning. */
    char *(*reply_regex)(const char *one, bool many, int max);
    /** The calls in a reply's text t[0..n) (after white space is trimmed
     *  and a cut opener dropped) into calls (pl_tool_call_add), the text
     *  outside them to content. cut: the reply ended at max_tokens (the
     *  last call may be unfinished: dropped unless its JSON is whole).
     *  False when the text is not well-formed calls of known tools. */
    bool (*parse)(json_t *tools, const char *t, size_t n, bool cut, json_t *calls,
                  struct evbuffer *content);
} pl_tool_format;

extern const pl_tool_format pl_tool_hermes;
extern const pl_tool_format pl_tool_generic;
extern const pl_tool_format pl_tool_llama3;
extern const pl_tool_format pl_tool_mistral;
extern const pl_tool_format pl_tool_harmony;
extern const pl_tool_format pl_tool_qwen3_coder;
extern const pl_tool_format pl_tool_gemma4;

/** The format of this name (an option, a test), NULL for none. The only
 *  place a name is compared. */
const pl_tool_format *pl_tool_format_find(const char *name);

/** What a streamed reply's start is (pl_tool_format_classify). */
enum {
    PL_TOOL_FORMAT_UNDECIDED = 0,
    PL_TOOL_FORMAT_TEXT = 1,     /**< it cannot be a call */
    PL_TOOL_FORMAT_HOLD = 2,     /**< it is a call (or one is forced) */
};

/** For a reply's first n bytes t (leading white space skipped): HOLD when
 *  forced or t begins with the format's opener, TEXT when it cannot,
 *  else UNDECIDED. */
int pl_tool_format_classify(const pl_tool_format *f, bool forced, const char *t, size_t n);

/** The calls in a whole reply (a new array of {"name", "arguments"} with
 *  the arguments as compact JSON text), or NULL when the text is not
 *  well-formed calls of tools (OpenAI's tools array). *content gets the
 *  text outside the calls (malloc'd, NULL when empty). cut: the reply
 *  ended at max_tokens: a last call left unfinished is dropped (its text
 *  is not content, nor is an opener cut short), so the array may be
 *  empty; NULL still means no call was begun. */
json_t *pl_tool_format_parse(const pl_tool_format *f, json_t *tools, const char *text,
                             size_t len, bool cut, char **content);

/* ---- for the format files ---- */

/** Append {"name", "arguments"} from o ({"name", "arguments"|"parameters"})
 *  to calls; false when o is no call of a known tool, or on OOM. */
bool pl_tool_call_add(json_t *tools, json_t *calls, json_t *o);
/** pl_tool_call_add of the JSON text s[0..n). */
bool pl_tool_call_add_text(json_t *tools, json_t *calls, const char *s, size_t n);
/** The complete JSON objects from t on (separated by white space or
 *  commas, as in an array), up to the first unfinished one, as calls. */
bool pl_tool_call_add_complete(json_t *tools, json_t *calls, const char *t, size_t n);
/** To b: {"name": NAME, "KEY": ARGS} for an OpenAI tool_call object c. */
void pl_tool_put_call_json(struct evbuffer *b, json_t *c, const char *key);
/** To b: the tools as JSON, each after before, joined by sep. */
void pl_tool_put_tools_json(struct evbuffer *b, json_t *tools, const char *before,
                            const char *sep);
/** The regex of calls one, as a list: open, one, up to max - 1 more after
 *  sep when many, close (malloc'd, NULL on OOM). */
char *pl_tool_list_regex(const char *open, const char *sep, const char *close,
                         const char *one, bool many, int max);

#endif
