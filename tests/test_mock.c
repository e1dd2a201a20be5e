/* test_mock.c - the mock backend on a real event loop. */
#include <criterion/criterion.h>
#include <event2/event.h>
#include <string.h>

#include "backends/mock/mock.h"

typedef struct got {
    char text[1024];
    int deltas, done;
    pl_finish finish;
    int completion_tokens;
    int started;                 /* order of the first delta, from 1 */
    int tokens, lps;             /* token ids and logprob entries seen */
    int32_t last_tok;
    size_t last_lp_len;
} got;

static int n_started;

static void on_delta(void *ud, const pl_delta *d)
{
    got *g = ud;
    strncat(g->text, d->text, d->len);
    for (int i = 0; i < d->n_tokens; i++) {
        g->tokens++;
        g->last_tok = d->tokens[i];
        if (d->logprobs) {
            g->lps++;
            g->last_lp_len = d->logprobs[i].token_len;
        }
    }
    if (!g->deltas++)
        g->started = ++n_started;
}

static void on_done(void *ud, const pl_result *r)
{
    got *g = ud;
    g->done++;
    g->finish = r->finish;
    g->completion_tokens = r->completion_tokens;
}

static struct event_base *base;
static pl_backend *mb;

static void setup_cap2(void)
{
    base = event_base_new();
    pl_mock_opts o = {.model = "mock", .token_delay_ms = 1, .capacity = 2, .seed = 5};
    mb = pl_mock_new(base, &o);
}

static void teardown(void)
{
    pl_backend_free(mb);
    event_base_free(base);
}

static uint64_t submit_lp(got *g, int max_tokens, const char *stop, uint64_t seed, bool lp)
{
    pl_chat_message m = {"user", "question"};
    pl_gen_request r = {.messages = &m, .n_messages = 1};
    pl_sampling_defaults(&r.sampling);
    r.sampling.max_tokens = max_tokens;
    r.sampling.seed = seed;
    r.sampling.has_seed = true;
    r.sampling.logprobs = lp;
    r.sampling.top_logprobs = lp ? 2 : 0;
    char *stops[1] = {(char *)stop};
    if (stop) {
        r.sampling.stop[0] = stops[0];
        r.sampling.n_stop = 1;
    }
    uint64_t id;
    pl_sink s = {on_delta, on_done, g};
    cr_assert_eq(pl_backend_submit(mb, &r, s, &id, NULL), 0);
    return id;
}

static uint64_t submit(got *g, int max_tokens, const char *stop, uint64_t seed)
{
    return submit_lp(g, max_tokens, stop, seed, false);
}

TestSuite(mock, .init = setup_cap2, .fini = teardown, .timeout = 20);

Test(mock, deterministic_and_max_tokens)
{
    got a = {0}, b = {0}, c = {0};
    submit(&a, 6, NULL, 1);
    submit(&b, 6, NULL, 1);
    submit(&c, 6, NULL, 2);
    event_base_dispatch(base);
    cr_expect_eq(a.done, 1);
    cr_expect_eq(a.finish, PL_FINISH_LENGTH);
    cr_expect_eq(a.completion_tokens, 6);
    cr_expect_str_eq(a.text, b.text);
    cr_expect_str_neq(a.text, c.text);
}

/* Capacity 2: the third, fourth and fifth requests wait, and start in the
 * order they came as slots free up (the short first request frees one
 * early, so a LIFO queue would start the fifth first). */
Test(mock, capacity_queues_in_fifo)
{
    got g[5];
    memset(g, 0, sizeof g);
    n_started = 0;
    static const int len[5] = {1, 12, 3, 3, 3};
    for (int i = 0; i < 5; i++)
        submit(&g[i], len[i], NULL, (uint64_t)i);
    pl_mock_counts k = pl_mock_get_counts(mb);
    cr_expect_eq(k.active, 2);
    cr_expect_eq(k.queued, 3);
    event_base_dispatch(base);
    k = pl_mock_get_counts(mb);
    cr_expect_eq(k.completed, 5u);
    cr_expect_eq(k.active, 0);
    for (int i = 0; i < 5; i++)
        cr_expect_eq(g[i].done, 1);
    cr_expect_lt(g[0].started, 3);
    cr_expect_lt(g[1].started, 3);
    cr_expect_eq(g[2].started, 3, "queued requests start first come, first served");
    cr_expect_eq(g[3].started, 4);
    cr_expect_eq(g[4].started, 5);
}

Test(mock, abort_counts_and_silences)
{
    got g = {0}, h = {0}, q = {0};
    uint64_t id = submit(&g, 50, NULL, 1);
    submit(&h, 2, NULL, 2);
    uint64_t qid = submit(&q, 2, NULL, 3);   /* queued behind capacity 2 */
    pl_backend_abort(mb, id);
    pl_backend_abort(mb, qid);
    pl_backend_abort(mb, id);                /* twice: ignored */
    event_base_dispatch(base);
    pl_mock_counts k = pl_mock_get_counts(mb);
    cr_expect_eq(k.aborted, 2u);
    cr_expect_eq(g.done + g.deltas + q.done, 0);
    cr_expect_eq(h.done, 1);
    cr_expect_eq(k.queued, 0);
}

Test(mock, stop_string_cuts_text)
{
    got full = {0}, cut = {0};
    submit(&full, 10, NULL, 9);
    event_base_dispatch(base);
    const char *w = strchr(full.text, ' ');
    w = strchr(w + 1, ' ');                  /* the third word, with its space */
    char stop[32];
    snprintf(stop, sizeof stop, "%.*s", (int)strcspn(w + 1, " ") + 1, w);
    submit(&cut, 10, stop, 9);
    event_base_dispatch(base);
    cr_expect_eq(cut.finish, PL_FINISH_STOP);
    cr_expect_eq(strlen(cut.text), (size_t)(strstr(full.text, stop) - full.text));
}

/* As the engine (and vLLM): an API request whose prompt + max_tokens does
 * not fit the context is a 400 naming max_tokens; a job's is cut there. */
Test(mock, max_tokens_beyond_the_context)
{
    struct event_base *b2 = event_base_new();
    pl_mock_opts o = {.model = "mock", .token_delay_ms = 1, .capacity = 2, .max_model_len = 20};
    pl_backend *m2 = pl_mock_new(b2, &o);
    pl_chat_message m = {"user", "one two"};      /* 2 words + 3 = 5 tokens */
    pl_gen_request r = {.messages = &m, .n_messages = 1, .max_tokens_must_fit = true};
    pl_sampling_defaults(&r.sampling);
    r.sampling.max_tokens = 16;
    uint64_t id;
    pl_err err = {0};
    got g = {0};
    pl_sink s = {on_delta, on_done, &g};
    cr_assert_eq(pl_backend_submit(m2, &r, s, &id, &err), -1);
    cr_assert_eq(err.status, 400);
    cr_assert_str_eq(err.param, "max_tokens");
    r.sampling.max_tokens = 15;                   /* 5 + 15 = 20: fits */
    cr_assert_eq(pl_backend_submit(m2, &r, s, &id, &err), 0, "%s", err.message);
    r.max_tokens_must_fit = false;
    r.sampling.max_tokens = 1000;
    got g2 = {0};
    pl_sink s2 = {on_delta, on_done, &g2};
    cr_assert_eq(pl_backend_submit(m2, &r, s2, &id, &err), 0, "%s", err.message);
    while (!g.done || !g2.done)
        event_base_loop(b2, EVLOOP_ONCE);
    cr_assert_eq(g.completion_tokens, 15);
    cr_assert_eq(g2.finish, PL_FINISH_LENGTH);
    cr_assert_eq(g2.completion_tokens, 15, "cut where the context ends");
    pl_backend_free(m2);
    event_base_free(b2);
}

/* A reply without max_tokens ends as a model's does, with an EOS token of
 * its own: counted, with a logprobs entry of no text; max_tokens has none. */
Test(mock, natural_stop_ends_with_an_eos_token)
{
    got a = {0}, b = {0};
    submit_lp(&a, 0, NULL, 3, true);
    submit_lp(&b, 5, NULL, 3, true);
    event_base_dispatch(base);
    cr_expect_eq(a.finish, PL_FINISH_STOP);
    cr_expect_eq(a.last_tok, PL_MOCK_EOS);
    cr_expect_eq(a.last_lp_len, 0);
    cr_expect_eq(a.tokens, a.completion_tokens);
    cr_expect_eq(a.lps, a.completion_tokens, "%d logprobs, %d tokens", a.lps,
                 a.completion_tokens);
    cr_expect_eq(b.finish, PL_FINISH_LENGTH);
    cr_expect_eq(b.lps, 5);
    cr_expect_neq(b.last_tok, PL_MOCK_EOS);
}
