/* oai_wire.h - the OpenAI wire encoding of chat/completions and completions
 * replies: response and chunk JSON, usage, and the two logprobs shapes
 * (chat: {"content":[entry...]}, completions: four parallel arrays).
 *
 * No request state lives here: the request core (api/oai_request.c) owns
 * the lifecycle (admission, sinks, streaming, disconnect) and
 * api/oai_chat.c calls these to encode.
 * Functions that allocate return NULL / -1 on out-of-memory.
 */
#ifndef PL_API_OAI_WIRE_H
#define PL_API_OAI_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "backends/backend.h"

/** Token counts of a reply. */
typedef struct pl_oai_usage {
    int prompt_tokens;
    int completion_tokens;
    int cached_tokens;
    int reasoning_tokens;        /**< of completion_tokens, inside the reasoning */
} pl_oai_usage;

/**
 * Non-streamed logprobs of one choice, kept as JSON array bodies (entries
 * comma-joined) and turned into one object when the reply is built: each
 * delta appends, nothing is re-parsed. Chat uses arr[0] ("content");
 * completions use all four (tokens, token_logprobs, top_logprobs,
 * text_offset).
 */
typedef struct pl_oai_logprobs {
    bool chat;
    struct evbuffer *arr[4];
    size_t n;                    /**< tokens appended so far */
} pl_oai_logprobs;

/** Allocate the buffers. Returns 0, or -1 on out-of-memory (free anyway). */
int pl_oai_logprobs_init(pl_oai_logprobs *lp, bool chat);
void pl_oai_logprobs_free(pl_oai_logprobs *lp);
/** Append d's logprobs. *offset: the completions text_offset, advanced. */
void pl_oai_logprobs_add(pl_oai_logprobs *lp, const pl_delta *d, size_t *offset);
/** The accumulated object (a new reference; "null" when no token had
 *  logprobs), or NULL on out-of-memory. Call once: it consumes the bodies. */
json_t *pl_oai_logprobs_json(pl_oai_logprobs *lp);

/** Append s[0..len) as a quoted JSON string. */
void pl_oai_put_string(struct evbuffer *b, const char *s, size_t len);

/**
 * The constant start of every stream chunk of one reply, up to and
 * including "choices":[ (with the "data: " SSE field); usage_null adds
 * "usage":null (stream_options.include_usage: the chunks before the usage
 * chunk carry it). Caller frees; NULL on out-of-memory.
 */
char *pl_oai_chunk_prefix(const char *id, bool chat, int64_t created, const char *model,
                          bool usage_null);

/** The chat role chunk of choice index. */
void pl_oai_put_role_chunk(struct evbuffer *b, const char *prefix, int index);
/** A content chunk for delta d of choice index (with its logprobs). */
void pl_oai_put_delta_chunk(struct evbuffer *b, const char *prefix, bool chat, int index,
                            const pl_delta *d, size_t *offset);
/** A chat chunk of reasoning: delta.reasoning_content is d's text (with
 *  its logprobs, if any). */
void pl_oai_put_reasoning_chunk(struct evbuffer *b, const char *prefix, int index,
                                const pl_delta *d);
/** The last chunk of choice index, carrying its finish_reason. */
void pl_oai_put_finish_chunk(struct evbuffer *b, const char *prefix, bool chat, int index,
                             pl_finish finish);

/** {"prompt_tokens",...,"prompt_tokens_details":{"cached_tokens"},
 *  "completion_tokens_details":{"reasoning_tokens"}}; NULL on OOM. */
json_t *pl_oai_usage_json(const pl_oai_usage *u);
/**
 * One non-streamed choice. text[0..len) is the whole text; lp is stolen
 * (NULL means "logprobs": null). Returns NULL on out-of-memory.
 */
json_t *pl_oai_choice_json(bool chat, int index, const char *text, size_t len, json_t *lp,
                           pl_finish finish);
/**
 * The whole non-streamed reply (chat.completion / text_completion), or
 * with choices NULL the final usage chunk of a stream. Steals choices.
 * Returns NULL on out-of-memory.
 */
json_t *pl_oai_reply_json(const char *id, bool chat, int64_t created, const char *model,
                          json_t *choices, const pl_oai_usage *u);

#endif
