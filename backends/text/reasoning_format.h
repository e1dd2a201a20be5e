/* reasoning_format.h - how a model marks its reasoning in a reply, as a
 * small vtable, one file per format (named as vLLM names its reasoning
 * parsers):
 *
 *   - pl_reasoning_qwen3 (reasoning_qwen3.c): <think> ... </think>
 *     (backends/text/reasoning.h);
 *   - pl_reasoning_gemma4 (reasoning_gemma4.c): Gemma 4's thought channel
 *     and its <|tool_call> calls, as tool-call pieces;
 *   - pl_reasoning_harmony (reasoning_harmony.c): gpt-oss's channels
 *     (backends/text/harmony.h), whose calls to functions.NAME come out as
 *     tool-call pieces.
 *
 * A backend hands out its format (backend.h, reasoning_format); the API
 * and the jobs use nothing but this vtable, never the format's name.
 *
 * A format gives:
 *   - the constraint after the reasoning: a regex "an optional think block
 *     (or analysis message), then re", as vLLM applies its grammar once the
 *     reasoning ends, so the model thinks freely and the rest still
 *     matches;
 *   - the streaming split of a reply into ordered pieces (reasoning text,
 *     content text, a call's start and its argument bytes), counting the
 *     tokens inside the reasoning as vLLM counts reasoning_tokens, and how
 *     a whole reply is then settled (as vLLM's parser splits a whole
 *     reply);
 *   - the whole-reply split a job uses (its answer apart from its
 *     reasoning).
 * Pure: no I/O; the split's state is fixed-size, the hot path allocates
 * nothing.
 */
#ifndef PL_REASONING_FORMAT_H
#define PL_REASONING_FORMAT_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/backend.h"
#include "backends/text/harmony.h"
#include "backends/text/reasoning.h"

/** A piece of a reply. */
typedef enum pl_reply_piece_kind {
    PL_REPLY_PIECE_REASONING,
    PL_REPLY_PIECE_CONTENT,
    PL_REPLY_PIECE_CALL_BEGIN,   /**< a call starts: index, name */
    PL_REPLY_PIECE_CALL_ARGS,    /**< bytes of the arguments of call index */
} pl_reply_piece_kind;

typedef struct pl_reply_piece {
    pl_reply_piece_kind kind;
    const char *text;            /**< valid during the callback */
    size_t len;
    int index;                   /**< CALL_*: the call's index in the reply */
    const char *name;            /**< CALL_BEGIN: the function */
} pl_reply_piece;

/** Where pieces go: false stops the split (the caller is gone). */
typedef bool (*pl_reply_piece_fn)(void *ud, const pl_reply_piece *p);

/** How a whole (non-streamed) reply is returned, from what the split gave
 *  (content C, reasoning R). qwen3, as vLLM's parser splits a whole
 *  reply: a closed block gives R and C without its first content_skip
 *  bytes (text before <think> is dropped); an unclosed one is no
 *  reasoning and the reply as written, C + "<think>" + R; no block, C
 *  alone. harmony: the parts as split, and reasoning when an analysis
 *  message came, even an empty one. */
typedef struct pl_reply_settled {
    bool has_reasoning;          /**< reasoning_content is R */
    size_t content_skip;         /**< leading bytes of C dropped */
    bool rejoin;                 /**< content is C + "<think>" + R */
} pl_reply_settled;

struct pl_reasoning_format;

/** gemma4's split state (reasoning_gemma4.c). */
typedef struct pl_gemma4_stream {
    int state;                   /**< content, channel name, thought, call name,
                                      arguments, call end */
    int a;                       /**< where the arguments' reader is */
    int depth;                   /**< open brackets of the arguments */
    char stack[32];              /**< their kinds ('{', '['), the first 32 */
    bool quoted_key, key_closed; /**< a key in <|"|> quotes */
    char hold[24];               /**< bytes that may begin a marker */
    size_t n_hold;
    char name[128];              /**< "call:NAME" so far */
    size_t n_name;
    size_t n_reasoning;          /**< reasoning bytes given */
} pl_gemma4_stream;

/** The split state of one reply (pl_reply_split_*). */
typedef struct pl_reply_split {
    const struct pl_reasoning_format *fmt;
    bool calls;                  /**< calls become CALL pieces (else their
                                      text is content) */
    int reasoning_tokens;
    int n_calls;                 /**< CALL_BEGIN pieces given */
    size_t n_before;             /**< content bytes before the reasoning */
    bool saw_open;               /**< the reasoning began (<think>, an
                                      analysis message) */
    bool opened_by_prompt;       /**< the prompt opened the reasoning: the
                                      reply starts inside it (qwen35) */
    bool in_call;                /**< the reply is inside a call's arguments */
    union {                      /**< the format's own state */
        pl_reasoning_stream think;
        pl_harmony_stream harmony;
        pl_gemma4_stream gemma4;
    } u;
} pl_reply_split;

/** A reasoning format. */
typedef struct pl_reasoning_format {
    const char *name;            /**< vLLM's parser name, for logs and /status */
    /** With enable_thinking false the prompt closes the reasoning: a
     *  constraint is not moved after it. */
    bool thinking_off_closes;
    /** The regex of "reasoning first, then re" (malloc'd), NULL on OOM.
     *  re is a whole-output pattern (backends/constrain). */
    char *(*wrap)(const char *re);
    /** The same for a content constraint (structured outputs): the
     *  content's own marker (harmony's final channel) goes before re. */
    char *(*wrap_content)(const char *re);
    /** thinking: the request's enable_thinking (a prompt that opens the
     *  reasoning does so unless it is off). */
    void (*init)(pl_reply_split *s, pl_thinking thinking);
    bool (*feed)(pl_reply_split *s, const char *text, size_t len, int n_tokens,
                 pl_reply_piece_fn fn, void *ud);
    bool (*finish)(pl_reply_split *s, pl_reply_piece_fn fn, void *ud);
    pl_reply_settled (*settle)(const pl_reply_split *s);
    /** A job's whole reply: *text (malloc'd, NUL-terminated, *len bytes)
     *  becomes its answer, *reasoning the reasoning (malloc'd, NULL: none).
     *  0, or -1 on OOM (*text untouched). */
    int (*split_whole)(char **text, size_t *len, char **reasoning);
} pl_reasoning_format;

extern const pl_reasoning_format pl_reasoning_qwen3;
/** Qwen3.5's: qwen3's tags, but the generation prompt opens the block
 *  (unless enable_thinking is false), so a reply starts inside it; one
 *  cut before </think> is all reasoning. */
extern const pl_reasoning_format pl_reasoning_qwen35;
extern const pl_reasoning_format pl_reasoning_harmony;
/** Gemma 4's: <|channel>thought\n ... <channel|> anywhere in the reply,
 *  calls <|tool_call>call:NAME{...}<tool_call|> as CALL pieces whose
 *  arguments are read into JSON (reasoning_gemma4.c). */
extern const pl_reasoning_format pl_reasoning_gemma4;

/** The format of this vLLM parser name (an option such as
 *  --mock-reasoning), NULL for none. The only place a name is compared. */
const pl_reasoning_format *pl_reasoning_format_find(const char *name);

/** Start the split of one reply in format fmt (not NULL), for a request
 *  whose enable_thinking is thinking. */
void pl_reply_split_init(pl_reply_split *s, const pl_reasoning_format *fmt, bool calls,
                         pl_thinking thinking);

/** The next len bytes of the reply (n_tokens tokens) as pieces to fn.
 *  Returns false when fn stopped it. */
static inline bool pl_reply_split_feed(pl_reply_split *s, const char *text, size_t len,
                                       int n_tokens, pl_reply_piece_fn fn, void *ud)
{
    return s->fmt->feed(s, text, len, n_tokens, fn, ud);
}

/** The end of the reply: what was held back. False when fn stopped it. */
static inline bool pl_reply_split_finish(pl_reply_split *s, pl_reply_piece_fn fn, void *ud)
{
    return s->fmt->finish(s, fn, ud);
}

/** How the whole reply is returned (pl_reply_settled). */
static inline pl_reply_settled pl_reply_split_settle(const pl_reply_split *s)
{
    return s->fmt->settle(s);
}

/** For the format files: the regex "(?:pre body post)?(?:re)", an
 *  optional reasoning block (pre, a body that cannot close it, post) and
 *  then re (malloc'd; NULL on OOM). */
char *pl_reasoning_wrap_parts(const char *pre, const char *body, const char *post,
                              const char *re);

#endif
