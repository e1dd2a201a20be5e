/* harmony.h - a gpt-oss reply (OpenAI's harmony format) split by channel,
 * as it streams: the text after the prompt's "<|start|>assistant" is a
 * series of messages
 *
 *     <|channel|>analysis<|message|>...<|end|>
 *     <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}
 *     <|start|>assistant<|channel|>final<|message|>...
 *
 * each a header (role, recipient, channel, content type) up to <|message|>
 * and a body up to <|end|> (or <|call|> / <|return|>, which end the
 * generation, or the next <|start|> / <|channel|> of a model that skips
 * <|end|>). A body goes to the reasoning (channel analysis, or a recipient
 * other than a function), a tool call (recipient functions.NAME, in any
 * channel, as llama.cpp's and vLLM's parsers take it) or the content
 * (final, and commentary to no one: a preamble the user sees).
 *
 * A reply that does not begin as a header (a model that ignores the
 * format) is all content. Pure, no allocation; markers may be cut anywhere
 * between calls (bytes that may begin one are held back).
 */
#ifndef PL_HARMONY_H
#define PL_HARMONY_H

#include <stdbool.h>
#include <stddef.h>

/** Bytes of a body held back while they may begin a marker (the longest,
 *  "<|channel|>", is 11). */
#define PL_HARMONY_HOLD 16
/** A header longer than this is not one: the reply is plain content. */
#define PL_HARMONY_HEADER_MAX 240
/** A function name's longest length (OpenAI's). */
#define PL_HARMONY_NAME_MAX 64
/** What a feed may add to its input's length in out->buf: a header that
 *  turns out to be text, and held bytes. */
#define PL_HARMONY_SLACK (PL_HARMONY_HEADER_MAX + PL_HARMONY_HOLD)

/** Where a message's body goes. */
typedef enum pl_harmony_part {
    PL_HARMONY_NONE = 0,         /**< no body yet (in a header) */
    PL_HARMONY_REASONING,
    PL_HARMONY_CONTENT,
    PL_HARMONY_CALL,             /**< the arguments of a function call */
} pl_harmony_part;

/** A streamed reply's state. */
typedef struct pl_harmony_stream {
    int state;                   /**< header, body, or raw (not harmony) */
    pl_harmony_part part;        /**< the current message's (body state) */
    char name[PL_HARMONY_NAME_MAX + 1];   /**< part CALL: the function */
    int n_calls;                 /**< calls begun so far */
    char head[PL_HARMONY_HEADER_MAX + 1]; /**< the header so far */
    size_t n_head;
    char hold[PL_HARMONY_HOLD];  /**< body bytes that may begin a marker */
    size_t n_hold;
} pl_harmony_stream;

/** What one feed produced. */
typedef struct pl_harmony_out {
    char *buf;                   /**< the caller's, >= len + PL_HARMONY_SLACK
                                      bytes (len: the feed's) */
    size_t n;                    /**< body bytes in buf */
    pl_harmony_part part;        /**< where buf's bytes go */
    /** A new message's header completed (at the end of what this feed
     *  consumed): its part is the stream's part now, and with
     *  PL_HARMONY_CALL its name is s->name, its index s->n_calls - 1. */
    bool began;
} pl_harmony_out;

void pl_harmony_stream_init(pl_harmony_stream *s);

/**
 * Consume from text[0..len): body bytes of the current message into
 * out->buf, through at most one new header. Returns the bytes consumed
 * (all of them unless a header completed first; then call again with the
 * rest): out->n bytes of out->part, then, when out->began, the new
 * message.
 */
size_t pl_harmony_stream_feed(pl_harmony_stream *s, const char *text, size_t len,
                              pl_harmony_out *out);

/** The end of the reply: the bytes held back, where they belong (a
 *  header never completed is content). out->buf: >= PL_HARMONY_SLACK
 *  bytes. */
void pl_harmony_stream_finish(pl_harmony_stream *s, pl_harmony_out *out);

/** Takes one feed's output (its buffer lives only during the call);
 *  false stops the walk. */
typedef bool (*pl_harmony_out_fn)(void *ud, const pl_harmony_out *o);

/** Feed all of text[0..len) a piece at a time (stack buffers), each
 *  output to fn, the empty ones too (a header may complete). False when
 *  fn stopped it. */
bool pl_harmony_stream_feed_all(pl_harmony_stream *s, const char *text, size_t len,
                                pl_harmony_out_fn fn, void *ud);

#endif
