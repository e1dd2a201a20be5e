/* engine_harness.c - see engine_harness.h. */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/engine_harness.h"
#include "tests/fake_runner.h"

#define VOCAB 64
#define EOS 2
#define MAXLEN 256
#define BS 16

/* ---- fake text hooks: id i is the letter 'a' + i % 26 ---- */

static const char letters[] = "abcdefghijklmnopqrstuvwxyz";

static const char *fake_bytes(void *ud, int32_t id, size_t *len)
{
    (void)ud;
    if (id < 3 || id >= VOCAB) {
        *len = 0;
        return NULL;
    }
    *len = 1;
    return &letters[id % 26];
}

static bool fake_eog(void *ud, int32_t id)
{
    (void)ud;
    return id == EOS;
}

/* Prompt text -> ids: letter c -> 3 + (c - 'a'). */
static int fake_encode(void *ud, const pl_gen_request *req, bool add_special,
                       int32_t **ids, int *n, pl_err *err)
{
    const char *t = req->prompt ? req->prompt
                    : req->n_messages ? req->messages[req->n_messages - 1].content : "";
    int len = (int)strlen(t);
    *ids = malloc((size_t)(len + 1) * sizeof **ids);
    *n = 0;
    if (add_special)
        (*ids)[(*n)++] = 1;                        /* a BOS */
    for (int i = 0; i < len; i++)
        (*ids)[(*n)++] = 3 + (t[i] - 'a') % 26;
    return 0;
}

const pl_engine_text fake_text = {NULL, fake_encode, fake_bytes, fake_eog, NULL};

/* ---- harness ---- */

void on_delta(void *ud, const pl_delta *d)
{
    collect *c = ud;
    cr_assert(!c->done, "delta after done");
    for (int i = 0; i < d->n_tokens && c->n < MAXLEN; i++) {
        c->toks[c->n++] = d->tokens[i];
        if (d->logprobs && c->n_lp < MAXLEN) {
            c->lp_len[c->n_lp] = d->logprobs[i].token_len;
            c->lp[c->n_lp++] = d->logprobs[i].logprob;
        }
    }
    memcpy(c->text + c->len, d->text, d->len);
    c->len += d->len;
    c->text[c->len] = '\0';
    c->n_deltas++;
}

void on_done(void *ud, const pl_result *r)
{
    collect *c = ud;
    cr_assert(!c->done, "two results");
    c->done = true;
    c->res = *r;
    if (r->finish == PL_FINISH_STOP && c->n > 0 && c->toks[c->n - 1] == EOS) {
        c->eos = true;        /* the end's own delta; toks keeps the reply */
        c->n--;
    }
}

const eng_cfg base_cfg = {true, true, 32, 512, 256, 0, 0};

pl_runner *g_runner;
uint64_t g_placeholders;
int g_max_inflight;

pl_backend *make_engine(struct event_base *base, eng_cfg c)
{
    pl_fake_runner_opts ro = {
        .info = {.n_vocab = VOCAB, .max_model_len = MAXLEN, .block_size = BS,
                 .num_blocks = c.num_blocks, .max_seqs = c.max_seqs,
                 .max_rows = c.budget, .eos_id = EOS},
        .step_sleep_us = c.sleep_us,
        .no_token_at_ctx = c.no_token_at_ctx,
    };
    g_runner = pl_fake_runner_new(&ro);
    cr_assert_not_null(g_runner);
    pl_engine_options o;
    pl_engine_options_defaults(&o);
    o.async = c.async;
    o.prefix_caching = c.prefix;
    o.no_partial_prefix = c.no_partial;
    o.capacity_rule = c.worst_case ? PL_CAPACITY_WORST_CASE : PL_CAPACITY_KV;
    pl_err err;
    pl_backend *b = pl_engine_backend_new(base, "fake-model", g_runner, &fake_text,
                                          &o, &err);
    cr_assert_not_null(b, "%s", err.message);
    return b;
}

static void tick_cb(evutil_socket_t fd, short w, void *arg)
{
    (void)fd; (void)w; (void)arg;
}

/* Run the loop until all n collectors are done (or 30 s pass). */
void run_until_done(struct event_base *base, collect *c, int n)
{
    struct event *tick = event_new(base, -1, EV_PERSIST, tick_cb, NULL);
    struct timeval tv = {0, 20000};
    event_add(tick, &tv);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (t1.tv_sec - t0.tv_sec > 30)
            break;
        int left = 0;
        for (int i = 0; i < n; i++)
            left += !c[i].done;
        if (!left)
            break;
        event_base_loop(base, EVLOOP_ONCE);
    }
    event_free(tick);
    for (int i = 0; i < n; i++)
        cr_assert(c[i].done, "request %d finished", i);
}

static uint64_t submit_(pl_backend *b, const int32_t *ids, int n, int max_tokens,
                        bool ignore_eos, int top, collect *c)
{
    pl_gen_request req = {0};
    pl_sampling_defaults(&req.sampling);
    req.sampling.temperature = 0;
    req.sampling.ignore_eos = ignore_eos;
    req.sampling.logprobs = top >= 0;
    req.sampling.top_logprobs = top > 0 ? top : 0;
    req.sampling.max_tokens = max_tokens;
    req.prompt_tokens = ids;
    req.n_prompt_tokens = n;
    pl_sink sink = {on_delta, on_done, c};
    uint64_t id = 0;
    pl_err err;
    cr_assert_eq(pl_backend_submit(b, &req, sink, &id, &err), 0, "%s", err.message);
    return id;
}

uint64_t submit_ids(pl_backend *b, const int32_t *ids, int n, int max_tokens, collect *c)
{
    return submit_(b, ids, n, max_tokens, false, -1, c);
}

uint64_t submit_ids_lp(pl_backend *b, const int32_t *ids, int n, int max_tokens, int top,
                       collect *c)
{
    return submit_(b, ids, n, max_tokens, false, top, c);
}

uint64_t submit_ids_no_eos(pl_backend *b, const int32_t *ids, int n, int max_tokens,
                           collect *c)
{
    return submit_(b, ids, n, max_tokens, true, -1, c);
}

/* The fake model's greedy continuation (EOS ends it, not included). */
int reference(const int32_t *prompt, int n, int max_tokens, int32_t *out,
                     bool *eos)
{
    int32_t ctx[MAXLEN];
    memcpy(ctx, prompt, (size_t)n * sizeof *ctx);
    int m = 0;
    *eos = false;
    while (m < max_tokens && n + m < MAXLEN) {
        int32_t t = pl_fake_runner_next(ctx, n + m, VOCAB);
        if (t == EOS) {
            *eos = true;
            break;
        }
        ctx[n + m] = t;
        out[m++] = t;
    }
    return m;
}

void make_prompt(int32_t *p, int n, int seed)
{
    for (int i = 0; i < n; i++)
        p[i] = 3 + (int32_t)((seed * 7 + i * 13 + (i * seed) % 5) % (VOCAB - 3));
}

void check_against_reference(const int32_t *p, int n, int max_tokens,
                                    const collect *c)
{
    int32_t ref[MAXLEN];
    bool eos;
    int m = reference(p, n, max_tokens, ref, &eos);
    cr_assert_eq(c->n, m, "token count %d vs reference %d", c->n, m);
    for (int i = 0; i < m; i++)
        cr_assert_eq(c->toks[i], ref[i], "token %d", i);
    cr_assert_eq(c->res.finish, eos ? PL_FINISH_STOP : PL_FINISH_LENGTH);
    cr_assert_eq(c->eos, eos, "the EOS comes in a delta of its own");
    cr_assert_eq(c->res.prompt_tokens, n);
    cr_assert_eq(c->res.completion_tokens, m + (eos ? 1 : 0));
    size_t letters_n = 0;
    for (int i = 0; i < m; i++)
        letters_n += ref[i] >= 3;
    cr_assert_eq(c->len, letters_n, "one letter per token from id 3");
}

double wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

json_t *stats(pl_backend *b)
{
    json_t *s = b->ops->stats(b);
    cr_assert_not_null(s);
    return s;
}

json_int_t stat_int(json_t *s, const char *k1, const char *k2)
{
    json_t *v = json_object_get(s, k1);
    if (k2)
        v = json_object_get(v, k2);
    cr_assert(json_is_integer(v), "stat %s.%s", k1, k2 ? k2 : "");
    return json_integer_value(v);
}

/* Run n requests (prompt length plen, seeds 0..n-1) concurrently through
 * an engine with config c and compare each with the reference. */
void run_batch(eng_cfg c, int n, int plen, int max_tokens, json_t **st_out)
{
    struct event_base *base = event_base_new();
    pl_backend *b = make_engine(base, c);
    collect *col = calloc((size_t)n, sizeof *col);
    int32_t (*p)[MAXLEN] = calloc((size_t)n, sizeof *p);
    for (int i = 0; i < n; i++) {
        make_prompt(p[i], plen, i);
        submit_ids(b, p[i], plen, max_tokens, &col[i]);
    }
    run_until_done(base, col, n);
    for (int i = 0; i < n; i++)
        check_against_reference(p[i], plen, max_tokens, &col[i]);
    cr_assert_eq(pl_fake_runner_errors(g_runner), 0);
    g_placeholders = pl_fake_runner_placeholders(g_runner);
    g_max_inflight = pl_fake_runner_max_inflight(g_runner);
    if (st_out)
        *st_out = stats(b);
    pl_backend_free(b);
    event_base_free(base);
    free(col);
    free(p);
}
