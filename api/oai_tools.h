/* oai_tools.h - OpenAI tool calling over any backend: tools go into the
 * prompt in the model's tool format (backend.h, tool_format; the formats
 * themselves are backends/text/tool_format.h's: Qwen 2.5 / Hermes
 * <tool_call> tags, Llama 3.1 JSON, Mistral [TOOL_CALLS], a generic
 * Hermes-like format otherwise, gpt-oss's native harmony), history turns
 * with tool_calls and tool results are rendered the same way, and the
 * reply text is parsed back into message.tool_calls. This file keeps
 * OpenAI's side: the tools array, tool_choice, call objects and chunks.
 *
 * tool_choice "required" or a named function constrains decoding to the
 * call's grammar with the arguments' JSON schema (a regex constraint), so
 * the call always parses. In "auto" the text is parsed after the fact:
 * what does not parse as a call is returned as content, never an error.
 */
#ifndef PL_API_OAI_TOOLS_H
#define PL_API_OAI_TOOLS_H

#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "api/oai_params.h"
#include "backends/text/tool_format.h"

/** Render tools and tool history (body's messages) into p's messages for backend b's
 *  format, and add the call constraint for required/named. 0, or -1 with
 *  *err (400 naming the parameter that cannot be compiled). */
int pl_oai_tools_prepare(pl_oai_params *p, json_t *body, pl_backend *b, pl_err *err);

/** A function name OpenAI accepts: [a-zA-Z0-9_-]{1,64}. */
bool pl_oai_tool_name_valid(const char *s);

/** Whether replies of p are parsed for tool calls. */
static inline bool pl_oai_tools_active(const pl_oai_params *p)
{
    return p->chat && p->tools && p->tool_choice != PL_TOOL_CHOICE_NONE && !p->tools_upstream &&
           !p->tools_native;
}

/** The regex of one call of an allowed function (all of p->tools, or the
 *  named one) in p's format, each with its parameters' schema (malloc'd),
 *  or NULL with *err (400 naming the parameters that cannot be compiled). */
char *pl_oai_tools_one_call_regex(const pl_oai_params *p, pl_err *err);

/** A native tool format (p->tool_format, set): tools and history calls
 *  stay structured for the template; required/named constrain the reply
 *  to one call in the model's form, after its reasoning. 0 or -1 with
 *  *err. */
int pl_oai_tools_prepare_native(pl_oai_params *p, json_t *body, pl_err *err);

/** Whether p forces a call (tool_choice "required" or a named function):
 *  its reply's text is then never content. */
static inline bool pl_oai_tools_forced(const pl_oai_params *p)
{
    return p->tool_choice == PL_TOOL_CHOICE_REQUIRED || p->tool_choice == PL_TOOL_CHOICE_NAMED;
}

/** Tool calls in text (a new array of OpenAI tool_call objects), or NULL
 *  when the text is not a well-formed call of a known tool. *content gets
 *  the text outside the calls (malloc'd, NULL when empty). cut: the reply
 *  ended at max_tokens: a last call left unfinished is dropped (its text
 *  is not content, nor is an opener cut short), so the array may be
 *  empty; NULL still means no call was begun. */
json_t *pl_oai_tools_parse_reply(const pl_oai_params *p, const char *text, size_t len,
                                 bool cut, char **content);

/** What a reply with tools becomes (chat completions). */
typedef struct pl_oai_tool_reply {
    bool text_is_content;        /**< no call: the text is the content */
    json_t *calls;               /**< the complete calls (owned), NULL: none */
    char *content;               /**< else: the text outside calls (malloc'd) or NULL */
    const char *finish;          /**< finish_reason: "length" when cut (calls
                                      or not), "stop" for a named function
                                      (as OpenAI and vLLM), "tool_calls",
                                      "function_call" (legacy functions) */
} pl_oai_tool_reply;

/** Read a reply's text [len] (p with tools active) that ended with finish
 *  (STOP or LENGTH; others leave the text as content). A cut call is
 *  dropped: complete calls come back as calls with finish "length". With a
 *  forced call, text is never content. Free with pl_oai_tool_reply_free. */
void pl_oai_tools_reply(const pl_oai_params *p, const char *text, size_t len,
                        pl_finish finish, pl_oai_tool_reply *r);
void pl_oai_tool_reply_free(pl_oai_tool_reply *r);
/** Set a non-streamed chat choice's message and finish_reason from r. */
void pl_oai_tools_set_message(const pl_oai_params *p, json_t *choice,
                              const pl_oai_tool_reply *r);
/** The end of a streamed choice that held its text (text[len]): content,
 *  call chunks and the finish chunk, as r says. */
void pl_oai_tools_put_end(const pl_oai_params *p, struct evbuffer *b, const char *prefix,
                          int index, const pl_oai_tool_reply *r, const char *text,
                          size_t len, size_t *text_offset);
/** Legacy functions: a message's tool_calls (the first) as function_call,
 *  finish_reason "tool_calls" as "function_call". */
void pl_oai_tools_legacy_message(json_t *choice);

/** A stream with tools holds its text back while it may be a call. */
enum {
    PL_TOOLS_UNDECIDED = PL_TOOL_FORMAT_UNDECIDED,
    PL_TOOLS_TEXT = PL_TOOL_FORMAT_TEXT,
    PL_TOOLS_HOLD = PL_TOOL_FORMAT_HOLD,
};
/** For the reply's first n bytes t (after leading white space): HOLD when
 *  it is a call (or a call is required), TEXT when it cannot be one, else
 *  UNDECIDED. */
int pl_oai_tools_classify(const pl_oai_params *p, const char *t, size_t n);

/** Stream chunks for calls of choice index: for each call its id, type and
 *  name with empty arguments, then argument fragments (legacy: the first
 *  call as delta.function_call). No finish chunk. */
void pl_oai_put_tool_chunks(struct evbuffer *b, const char *prefix, int index, json_t *calls,
                            bool legacy);

/* Upstream tool calls (a backend with ops->upstream_tools): */
/** A stream chunk of choice index with the upstream's tool-call fragments,
 *  as OpenAI streams them (index, id, type, function name, arguments);
 *  legacy: the first call's fragments as delta.function_call. */
void pl_oai_put_tool_delta_chunk(struct evbuffer *b, const char *prefix, int index,
                                 const pl_tool_call_delta *t, int n, bool legacy);
/** The finish chunk of choice index (delta {}) with this finish_reason. */
void pl_oai_put_tool_finish_chunk(struct evbuffer *b, const char *prefix, int index,
                                  const char *finish);
/** Merge fragments into *calls (created on first use): one OpenAI
 *  tool_call object per index, the arguments concatenated. -1 on OOM. */
int pl_oai_merge_tool_deltas(json_t **calls, const pl_tool_call_delta *t, int n);

#endif
