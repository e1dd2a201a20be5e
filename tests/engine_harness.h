/* engine_harness.h - the engine backend over the fake runner on a real
 * event_base, shared by test_engine.c (outputs against the fake model's
 * reference) and test_engine_control.c (abort, pause, limits, stress). */
#ifndef PL_TEST_ENGINE_HARNESS_H
#define PL_TEST_ENGINE_HARNESS_H

#include <stdbool.h>
#include <stdint.h>

#include <event2/event.h>
#include <jansson.h>

#include "backends/engine/engine.h"

#define VOCAB 64
#define EOS 2
#define MAXLEN 256
#define BS 16

/* Deadlines for waiting on the engine thread: generous, so that a loaded
 * machine only makes a test slower, never makes it fail. */
#define DEADLINE_MS 20000.0

typedef struct collect {
    int32_t toks[MAXLEN];
    int n;
    char text[MAXLEN * 2];
    size_t len;
    int n_deltas;
    bool done;
    bool eos;                    /* the reply ended with an EOS delta (not in toks) */
    int n_lp;                    /* logprob entries received */
    float lp[MAXLEN];
    size_t lp_len[MAXLEN];       /* their token text's length */
    pl_result res;
} collect;

typedef struct eng_cfg {
    bool async, prefix;
    int max_seqs, budget, num_blocks, sleep_us;
    int no_token_at_ctx;
    bool no_partial;             /* full-block prefix reuse only */
    bool worst_case;             /* --capacity worst-case */
} eng_cfg;

extern const pl_engine_text fake_text;  /* id i is the letter 'a' + i % 26 */
extern const eng_cfg base_cfg;
extern pl_runner *g_runner;             /* the last engine's runner */
extern uint64_t g_placeholders;         /* run_batch: the runner's counters */
extern int g_max_inflight;

void on_delta(void *ud, const pl_delta *d);
void on_done(void *ud, const pl_result *r);
pl_backend *make_engine(struct event_base *base, eng_cfg c);
/** Run the loop until all n collectors are done (or 30 s pass). */
void run_until_done(struct event_base *base, collect *c, int n);
/** Submit a greedy request of ids; asserts it is accepted. */
uint64_t submit_ids(pl_backend *b, const int32_t *ids, int n, int max_tokens,
                    collect *c);
/** The same with logprobs and top (0..PL_MAX_TOP_LOGPROBS) alternatives. */
uint64_t submit_ids_lp(pl_backend *b, const int32_t *ids, int n, int max_tokens, int top,
                       collect *c);
/** The same with ignore_eos: exactly max_tokens come back. */
uint64_t submit_ids_no_eos(pl_backend *b, const int32_t *ids, int n, int max_tokens,
                           collect *c);
/** The fake model's greedy continuation (EOS ends it, not included). */
int reference(const int32_t *prompt, int n, int max_tokens, int32_t *out, bool *eos);
void make_prompt(int32_t *p, int n, int seed);
void check_against_reference(const int32_t *p, int n, int max_tokens,
                             const collect *c);
double wall_ms(void);
json_t *stats(pl_backend *b);
json_int_t stat_int(json_t *s, const char *k1, const char *k2);
/** n concurrent requests (prompt length plen, seeds 0..n-1) through an
 * engine with config c, each compared with the reference. */
void run_batch(eng_cfg c, int n, int plen, int max_tokens, json_t **st_out);

#endif
