/* oai_reasoning.h - a reply's reasoning apart from its content, for the
 * OpenAI request core (api/oai_request.c), by the model's reasoning format
 * (backend.h, reasoning_format):
 *
 *   - "qwen3": <think> ... </think> (backends/text/reasoning.h);
 *   - "harmony": gpt-oss's channels (backends/text/harmony.h),
 *     whose calls to functions.NAME come out as tool-call fragments.
 *
 * Each delta of a reply is split into pieces (reasoning text, content
 * text, a call's start and its argument bytes) in order; tokens inside the
 * reasoning are counted as vLLM counts reasoning_tokens (between the tags,
 * or in analysis bodies). A non-streamed qwen3 reply is then settled as
 * vLLM's parser splits a whole reply (an unclosed <think> is content).
 *
 * Before the request goes out, a constraint (structured outputs, a
 * required tool call) is moved after the reasoning, as vLLM applies its
 * grammar once the reasoning ends: the regex becomes "an optional think
 * block (or analysis message), then the constraint", so the model thinks
 * freely (any text without the closing tag) and the content still matches.
 * Pure: no I/O; per-reply state is fixed-size, the hot path allocates
 * nothing.
 */
#ifndef PL_API_OAI_REASONING_H
#define PL_API_OAI_REASONING_H

#include <stdbool.h>
#include <stddef.h>

#include "api/oai_params.h"
#include "backends/text/harmony.h"
#include "backends/text/reasoning.h"

typedef enum pl_oai_reasoning_fmt {
    PL_OAI_REASONING_NONE = 0,
    PL_OAI_REASONING_QWEN3,
    PL_OAI_REASONING_HARMONY,
} pl_oai_reasoning_fmt;

/** The format of backend b's replies (NONE for a backend without one). */
pl_oai_reasoning_fmt pl_oai_reasoning_format(pl_backend *b);

/** After tools are prepared: the format into p, and p's constraint moved
 *  after the reasoning (not for qwen3 with enable_thinking false, whose
 *  prompt closes the think block). 0, or -1 with *err (500 on OOM, 400
 *  when the constraint cannot be compiled). */
int pl_oai_reasoning_prepare(pl_oai_params *p, pl_backend *b, pl_err *err);

/** The regex of "reasoning first, then re" for a format (malloc'd), NULL
 *  on OOM. re is a whole-output pattern (backends/constrain). */
char *pl_oai_reasoning_wrap(pl_oai_reasoning_fmt fmt, const char *re);

/** A piece of a reply. */
typedef enum pl_oai_piece_kind {
    PL_OAI_PIECE_REASONING,
    PL_OAI_PIECE_CONTENT,
    PL_OAI_PIECE_CALL_BEGIN,     /**< a call starts: index, name */
    PL_OAI_PIECE_CALL_ARGS,      /**< bytes of the arguments of call index */
} pl_oai_piece_kind;

typedef struct pl_oai_piece {
    pl_oai_piece_kind kind;
    const char *text;            /**< valid during the callback */
    size_t len;
    int index;                   /**< CALL_*: the call's index in the reply */
    const char *name;            /**< CALL_BEGIN: the function */
} pl_oai_piece;

/** Where pieces go: false stops the split (the caller is gone). */
typedef bool (*pl_oai_piece_fn)(void *ud, const pl_oai_piece *p);

/** The split state of one reply. */
typedef struct pl_oai_split {
    pl_oai_reasoning_fmt fmt;
    bool calls;                  /**< harmony: calls become CALL pieces (else
                                      their text is content) */
    pl_reasoning_stream think;
    pl_harmony_stream harmony;
    int reasoning_tokens;
    int n_calls;                 /**< CALL_BEGIN pieces given */
    size_t n_before;             /**< qwen3: content bytes before <think> */
    bool saw_open;               /**< <think> came in the reply (qwen3), an
                                      analysis message began (harmony) */
} pl_oai_split;

void pl_oai_split_init(pl_oai_split *s, pl_oai_reasoning_fmt fmt, bool calls);

/** The next len bytes of the reply (n_tokens tokens) as pieces to fn.
 *  Returns false when fn stopped it. */
bool pl_oai_split_feed(pl_oai_split *s, const char *text, size_t len, int n_tokens,
                       pl_oai_piece_fn fn, void *ud);

/** The end of the reply: what was held back. False when fn stopped it. */
bool pl_oai_split_finish(pl_oai_split *s, pl_oai_piece_fn fn, void *ud);

/** How a whole (non-streamed) qwen3 reply is returned, as vLLM's parser
 *  splits a whole reply, from what the split gave (content C, reasoning
 *  R): a closed block gives R and C without its first n_before bytes (text
 *  before <think> is dropped); an unclosed one is no reasoning and the
 *  reply as written, C + "<think>" + R; no block, C alone. */
typedef struct pl_oai_settled {
    bool has_reasoning;          /**< reasoning_content is R */
    size_t content_skip;         /**< leading bytes of C dropped */
    bool rejoin;                 /**< content is C + "<think>" + R */
} pl_oai_settled;

/** qwen3's settling (harmony: the parts as split, and reasoning when an
 *  analysis message came, even an empty one). */
pl_oai_settled pl_oai_split_settle(const pl_oai_split *s);

/** The call id of a harmony call (OpenAI's "call_" + 24 hex digits) into
 *  id (>= 32 bytes). */
void pl_oai_call_id(char *id, size_t cap);

#endif
