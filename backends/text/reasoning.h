/* reasoning.h - a reply split into its reasoning and its content, as
 * vLLM's `qwen3` reasoning parser splits it (OpenAI's reasoning_content
 * beside content): the text between <think> and </think> is reasoning.
 *
 * Pure functions over text, no allocation: the whole reply at once
 * (pl_reasoning_split, non-streamed replies) or as it streams
 * (pl_reasoning_stream_*, the deltas of delta.reasoning_content and
 * delta.content). The two follow vLLM where vLLM's two differ: a reply
 * that opens <think> and never closes it is all content when whole, and
 * reasoning from <think> on when streamed.
 */
#ifndef PL_REASONING_H
#define PL_REASONING_H

#include <stdbool.h>
#include <stddef.h>

/** The tags' longest length: a stream holds back at most this many bytes
 *  that may begin a tag. */
#define PL_REASONING_HOLD 8

/** A part of a text: [off, off + len). */
typedef struct pl_text_span {
    size_t off, len;
} pl_text_span;

/**
 * Split a whole reply. Returns true when it holds reasoning: with
 * <think> ... </think> in it (or only </think> when inside, for a prompt
 * that opened the block), *reasoning is the text between the tags and
 * *content what follows the closing tag (len 0: none; text before <think>
 * is dropped, as vLLM drops it). False: no reasoning, *content is the
 * whole text.
 */
bool pl_reasoning_split(const char *text, size_t len, bool inside, pl_text_span *reasoning,
                        pl_text_span *content);

/** Where a stream is (pl_reasoning_stream.state). */
enum { PL_REASONING_BEFORE, PL_REASONING_INSIDE, PL_REASONING_AFTER };

/** A streamed reply's state. */
typedef struct pl_reasoning_stream {
    int state;                   /**< PL_REASONING_*: before <think>, inside,
                                      after </think> */
    size_t matched;              /**< bytes of the awaited tag seen last, held
                                      back until the tag completes or fails */
} pl_reasoning_stream;

/** The parts of one delta. The caller gives both buffers, each of at least
 *  len + PL_REASONING_HOLD bytes (len: the delta's); the lengths are set. */
typedef struct pl_reasoning_delta {
    char *reasoning;
    size_t n_reasoning;
    char *content;
    size_t n_content;
} pl_reasoning_delta;

/** Start a stream: inside, when the prompt opened the think block. */
void pl_reasoning_stream_init(pl_reasoning_stream *s, bool inside);

/** The next len bytes of the reply into out's reasoning and content; a
 *  tag's bytes go to neither, a possible tag's beginning waits for the
 *  next call. */
void pl_reasoning_stream_feed(pl_reasoning_stream *s, const char *text, size_t len,
                              pl_reasoning_delta *out);

/** The end of the reply: the bytes held back, where they belong. */
void pl_reasoning_stream_finish(pl_reasoning_stream *s, pl_reasoning_delta *out);

#endif
