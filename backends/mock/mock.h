/* mock.h - a deterministic backend for tests and benchmarks.
 *
 * It produces words from a seeded generator (or echoes the prompt),
 * delivers them on the main loop through timers, never blocks, and honours
 * max_tokens, stop strings, a per-token delay and a capacity (requests past
 * it wait in FIFO order). It counts aborted requests.
 */
#ifndef PL_MOCK_H
#define PL_MOCK_H

#include <stdint.h>

#include "backends/backend.h"

typedef struct pl_mock_opts {
    const char *model;           /**< served name, e.g. "mock" */
    int token_delay_ms;
    int capacity;
    uint64_t seed;
    int echo;                    /**< 1: echo the prompt's words */
    /** The reasoning format its replies are read in (backend.h,
     *  reasoning_format), so that echoed text tests the API's splitting;
     *  NULL: none. Static. */
    const struct pl_reasoning_format *reasoning;
    /** Its tool format (backend.h, tool_format); NULL: generic. Static. */
    const struct pl_tool_format *tools;
    int max_model_len;
    pl_json_ws json_ws;          /**< whitespace of constrained JSON */
} pl_mock_opts;

/** The id of the mock's end-of-sequence token: a reply of random words
 *  without max_tokens ends with it (text "", counted in completion_tokens,
 *  with logprobs when asked); word tokens are hashes below it. */
#define PL_MOCK_EOS 0x8000

/** The mock's vocabulary: word ids [0, PL_MOCK_EOS) and the end token.
 *  Token ids a client names past it are a 400, as the engine answers. */
#define PL_MOCK_VOCAB (PL_MOCK_EOS + 1)

/** Create a mock backend on the given loop. Free with pl_backend_free. */
pl_backend *pl_mock_new(struct event_base *base, const pl_mock_opts *o);

typedef struct pl_mock_counts {
    uint64_t submitted, completed, aborted;
    int active, queued, paused;
    int queued_peak;             /**< most requests ever waiting for capacity */
} pl_mock_counts;

/** Counters, for tests (b must be a mock backend). */
pl_mock_counts pl_mock_get_counts(pl_backend *b);

/** Script failures for tests: the next n requests fail with an error. */
void pl_mock_fail_next(pl_backend *b, int n);

#endif
