/* test_engine_prep.c - nothing heavy on the event loop (issue 33): a new
 * constraint compiles on a prepare worker while other requests are served,
 * two requests with one new schema compile it once, a bad
 * schema is still a 400 from submit, what a worker finds (a DFA too large,
 * a prompt too long) is the request's result before any token, and abort
 * or pause while preparing work.
 *
 * Event-driven, never a timing bound: the cache's compile hook holds the
 * compiling worker until the main loop has served another request whole.
 * Were compilation back on the event loop, the hook would run on the main
 * thread (counted, not held) and the tests fail at once. The engine runs
 * tests/fixtures/tiny_qwen2.gguf (random weights, 265 tokens) on the CPU. */
#include <criterion/criterion.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/engine/engine_internal.h"
#include "backends/engine_open.h"
#include "src/base/io_pool.h"

#define DEADLINE_S 60            /* only a broken build waits this long */

typedef struct collect {
    char text[4096];
    size_t len;
    int n, n_deltas;
    bool done;
    pl_finish finish;
    pl_err err;
} collect;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t main;
    int calls, on_main;
    bool entered, release, held_too_long;
} H = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

/* The compile hook: counts, and holds a worker until released (the main
 * thread is never held: that would hang the loop the test drives). */
static void hook(void *ud, pl_constraint_kind kind, const char *text)
{
    (void)ud;
    (void)kind;
    (void)text;
    pthread_mutex_lock(&H.mu);
    H.calls++;
    if (pthread_equal(pthread_self(), H.main)) {
        H.on_main++;
        pthread_mutex_unlock(&H.mu);
        return;
    }
    H.entered = true;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += DEADLINE_S;
    while (!H.release && pthread_cond_timedwait(&H.cv, &H.mu, &dl) == 0)
        ;
    H.held_too_long |= !H.release;
    pthread_mutex_unlock(&H.mu);
}

static void hook_reset(bool release)
{
    pthread_mutex_lock(&H.mu);
    H.main = pthread_self();
    H.calls = H.on_main = 0;
    H.entered = H.held_too_long = false;
    H.release = release;
    pthread_mutex_unlock(&H.mu);
}

static void hook_release(void)
{
    pthread_mutex_lock(&H.mu);
    H.release = true;
    pthread_cond_broadcast(&H.cv);
    pthread_mutex_unlock(&H.mu);
}

static bool hook_entered(void *ud)
{
    (void)ud;
    pthread_mutex_lock(&H.mu);
    bool e = H.entered;
    pthread_mutex_unlock(&H.mu);
    return e;
}

static void on_delta(void *ud, const pl_delta *d)
{
    collect *c = ud;
    cr_assert(!c->done, "delta after done");
    if (c->len + d->len < sizeof c->text) {
        memcpy(c->text + c->len, d->text, d->len);
        c->len += d->len;
        c->text[c->len] = '\0';
    }
    c->n += d->n_tokens;
    c->n_deltas++;
}

static void on_done(void *ud, const pl_result *r)
{
    collect *c = ud;
    cr_assert(!c->done, "two results");
    c->done = true;
    c->finish = r->finish;
    if (r->error)
        c->err = *r->error;
}

static void tick(evutil_socket_t fd, short w, void *arg)
{
    (void)fd;
    (void)w;
    (void)arg;
}

/* Run the loop until pred(ud) (a tick keeps it from sleeping forever). */
static void loop_until(struct event_base *base, bool (*pred)(void *), void *ud,
                       const char *what)
{
    struct event *t = event_new(base, -1, EV_PERSIST, tick, NULL);
    struct timeval tv = {0, 10000};
    event_add(t, &tv);
    time_t t0 = time(NULL);
    while (!pred(ud) && time(NULL) - t0 < DEADLINE_S)
        event_base_loop(base, EVLOOP_ONCE);
    event_free(t);
    cr_assert(pred(ud), "never happened: %s", what);
}

static bool is_done(void *ud)
{
    return ((collect *)ud)->done;
}

static struct event_base *g_base;

static pl_backend *open_engine(void)
{
    static char path[512];
    const char *src = getenv("PARLEY_SRC");
    snprintf(path, sizeof path, "%s/tests/fixtures/tiny_qwen2.gguf", src ? src : ".");
    pl_engine_config ec = {
        .kv_cache_mb = 8, .max_model_len = 256,
        .core = {.max_num_seqs = 8, .max_num_batched_tokens = 256, .block_size = 16,
                 .async = true, .prefix_caching = true, .prepare_threads = 2},
        .cpu = {.threads = 1, .kv_f16 = true, .batch_invariant = true},
    };
    pl_engine_open_opts o = {.model_path = path, .device = "cpu", .cfg = &ec};
    char err[512];
    g_base = event_base_new();
    pl_backend *b = pl_engine_open(g_base, &o, err, sizeof err);
    cr_assert_not_null(b, "%s", err);
    pl_constraint_cache_set_hook(((pl_engine *)b)->constraints, hook, NULL);
    return b;
}

static void close_engine(pl_backend *b)
{
    hook_release();
    pl_backend_free(b);
    event_base_free(g_base);
}

static int submit(pl_backend *b, const char *schema, pl_constraint_kind kind, int max_tokens,
                  collect *c, uint64_t *id, pl_err *e)
{
    /* Borrowed for the call only, as backend.h says: spoilt and freed
     * after it, so a worker that read them would fail (or ASan would). */
    int32_t *ids = malloc(8 * sizeof *ids);
    for (int i = 0; i < 8; i++)
        ids[i] = 10 * (i + 1);
    pl_gen_request r = {.prompt_tokens = ids, .n_prompt_tokens = 8};
    pl_sampling_defaults(&r.sampling);
    r.sampling.temperature = 0;
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = !schema;
    r.sampling.constraint = schema ? kind : PL_CONSTRAINT_NONE;
    r.sampling.constraint_text = (char *)schema;
    int rc = pl_backend_submit(b, &r, (pl_sink){on_delta, on_done, c}, id, e);
    memset(ids, 0xff, 8 * sizeof *ids);
    free(ids);
    return rc;
}

static uint64_t submit_ok(pl_backend *b, const char *schema, int max_tokens, collect *c)
{
    uint64_t id;
    pl_err e;
    cr_assert_eq(submit(b, schema, PL_CONSTRAINT_JSON_SCHEMA, max_tokens, c, &id, &e), 0,
                 "%s", e.message);
    return id;
}

#define SCHEMA(name) "{\"type\":\"object\",\"properties\":{\"" name "\":{\"type\":\"boolean\"}}," \
                     "\"required\":[\"" name "\"],\"additionalProperties\":false}"

Test(engine_prep, new_schema_compiles_off_the_loop_while_streams_flow, .timeout = 240)
{
    hook_reset(false);
    pl_backend *b = open_engine();
    collect js = {0}, other = {0};
    submit_ok(b, SCHEMA("ok"), 64, &js);
    cr_assert_eq(H.on_main, 0, "the constraint was compiled on the event loop");
    loop_until(g_base, hook_entered, NULL, "a worker compiling the schema");
    /* While the compile is held, another request is served start to end. */
    submit_ok(b, NULL, 16, &other);
    loop_until(g_base, is_done, &other, "a stream while the schema compiles");
    cr_assert_eq(other.n, 16);
    cr_assert(!js.done && js.n_deltas == 0);
    hook_release();
    loop_until(g_base, is_done, &js, "the constrained request");
    cr_expect(!H.held_too_long);
    cr_expect_eq(H.calls, 1);
    cr_assert_neq(js.finish, PL_FINISH_ERROR, "%s", js.err.message);
    json_t *j = json_loads(js.text, 0, NULL);
    cr_expect(json_is_boolean(json_object_get(j, "ok")) && json_object_size(j) == 1, "%s",
              js.text);
    json_decref(j);
    close_engine(b);
}

Test(engine_prep, one_new_schema_compiles_once, .timeout = 240)
{
    hook_reset(false);
    pl_backend *b = open_engine();
    collect c[3] = {0};
    submit_ok(b, SCHEMA("same"), 64, &c[0]);
    submit_ok(b, SCHEMA("same"), 64, &c[1]);
    loop_until(g_base, hook_entered, NULL, "a worker compiling the schema");
    hook_release();
    loop_until(g_base, is_done, &c[0], "request 1");
    loop_until(g_base, is_done, &c[1], "request 2");
    submit_ok(b, SCHEMA("same"), 64, &c[2]);       /* now a cache hit, inline */
    loop_until(g_base, is_done, &c[2], "request 3");
    json_t *st = b->ops->stats(b), *cs = json_object_get(st, "constraints");
    cr_expect_eq(json_integer_value(json_object_get(cs, "compiles")), 1);
    cr_expect_eq(json_integer_value(json_object_get(cs, "hits")), 2);
    cr_expect_eq(json_integer_value(json_object_get(st, "preparing")), 0);
    json_decref(st);
    cr_expect_eq(H.calls, 1);
    for (int i = 0; i < 3; i++) {
        cr_expect_neq(c[i].finish, PL_FINISH_ERROR, "%s", c[i].err.message);
        cr_expect_str_eq(c[i].text, c[0].text);
    }
    close_engine(b);
}

Test(engine_prep, errors_keep_their_status, .timeout = 240)
{
    hook_reset(true);
    pl_backend *b = open_engine();
    collect c = {0};
    uint64_t id;
    pl_err e;
    /* A schema parley cannot write as a regex: a 400 from submit. */
    cr_expect_eq(submit(b, "{\"type\":\"string\",\"format\":\"uri\"}", PL_CONSTRAINT_JSON_SCHEMA,
                        8, &c, &id, &e), -1);
    cr_expect_eq(e.status, 400);
    cr_expect(strstr(e.message, "format"), "%s", e.message);
    cr_expect_eq(H.calls, 0, "refused before any compile");
    /* A regex whose DFA is too large: found on the worker, the request's
     * result with its 400 before any token; then cached, so the same
     * pattern is a 400 from submit. */
    const char *big = "(a|b)*a(a|b){14}";
    cr_assert_eq(submit(b, big, PL_CONSTRAINT_REGEX, 8, &c, &id, &e), 0, "%s", e.message);
    loop_until(g_base, is_done, &c, "the compile error");
    cr_expect_eq(c.finish, PL_FINISH_ERROR);
    cr_expect_eq(c.err.status, 400);
    cr_expect(strstr(c.err.message, "states"), "%s", c.err.message);
    cr_expect_eq(c.n_deltas, 0);
    collect c2 = {0};
    cr_expect_eq(submit(b, big, PL_CONSTRAINT_REGEX, 8, &c2, &id, &e), -1);
    cr_expect_eq(e.status, 400);
    cr_expect(!c2.done);
    /* A text prompt past PREP_INLINE_BYTES is tokenised on a worker; too
     * long for the context, it is a 400 before any token. */
    char *text = malloc(20000);
    for (int i = 0; i < 19999; i++)
        text[i] = "word "[i % 5];
    text[19999] = '\0';
    pl_gen_request r = {.prompt = text};
    pl_sampling_defaults(&r.sampling);
    collect c3 = {0};
    cr_assert_eq(pl_backend_submit(b, &r, (pl_sink){on_delta, on_done, &c3}, &id, &e), 0, "%s",
                 e.message);
    loop_until(g_base, is_done, &c3, "the length error");
    cr_expect_eq(c3.finish, PL_FINISH_ERROR);
    cr_expect_eq(c3.err.status, 400);
    cr_expect_str_eq(c3.err.code, "context_length_exceeded");
    cr_expect_eq(c3.n_deltas, 0);
    free(text);
    cr_expect(b->ops->late_errors, "the API must wait for the first token to commit a stream");
    close_engine(b);
}

static bool prep_idle(void *ud)
{
    return pl_io_pool_outstanding(((pl_engine *)ud)->prep) == 0;
}

static bool paused_applied(void *ud)
{
    json_t *s = ((pl_backend *)ud)->ops->stats(ud);
    bool ok = json_integer_value(json_object_get(s, "pause_msgs")) >= 1;
    json_decref(s);
    return ok;
}

Test(engine_prep, abort_and_pause_while_preparing, .timeout = 240)
{
    hook_reset(false);
    pl_backend *b = open_engine();
    collect aborted = {0}, paused = {0}, other = {0};
    uint64_t a = submit_ok(b, SCHEMA("gone"), 64, &aborted);
    loop_until(g_base, hook_entered, NULL, "a worker compiling the schema");
    pl_backend_abort(b, a);
    uint64_t p = submit_ok(b, SCHEMA("gone"), 64, &paused);   /* waits for that compile */
    b->ops->set_paused(b, p, true);
    hook_release();
    loop_until(g_base, prep_idle, b, "the workers done");
    loop_until(g_base, paused_applied, b, "the pause reaching the engine");
    submit_ok(b, NULL, 16, &other);
    loop_until(g_base, is_done, &other, "another request");
    cr_expect(!aborted.done && aborted.n_deltas == 0, "an aborted request's sink was called");
    cr_expect(!paused.done && paused.n_deltas == 0, "a request paused while preparing ran");
    b->ops->set_paused(b, p, false);
    loop_until(g_base, is_done, &paused, "the resumed request");
    cr_expect_neq(paused.finish, PL_FINISH_ERROR, "%s", paused.err.message);
    cr_expect(!aborted.done);
    close_engine(b);
}

/* Freed with requests still on the workers: nothing is called, nothing
 * leaks (ASan), the free waits for the compile. */
Test(engine_prep, free_while_preparing, .timeout = 240)
{
    hook_reset(false);
    pl_backend *b = open_engine();
    collect c = {0};
    submit_ok(b, SCHEMA("late"), 64, &c);
    loop_until(g_base, hook_entered, NULL, "a worker compiling the schema");
    close_engine(b);
    cr_expect(!c.done && c.n_deltas == 0);
}

/* Issue 41: a request on a prepare worker is in the engine's KV view for
 * admission at once (by the running estimates: its prompt is not
 * tokenised yet), and not at all once it ended, aborted while preparing
 * or not. Without it, dispatch would admit past the free blocks while
 * schemas compile. */
Test(engine_prep, preparing_requests_count_in_the_kv_view, .timeout = 240)
{
    hook_reset(false);
    pl_backend *b = open_engine();
    pl_dispatch_kv kv;
    cr_assert(b->ops->kv(b, &kv));
    int free0 = kv.free;
    cr_assert_eq(kv.reserved, 0);
    cr_assert_eq(kv.prompt_tokens + kv.reply_tokens, 0, "no estimates yet");
    collect c = {0}, gone = {0};
    submit_ok(b, SCHEMA("kv"), 64, &c);
    uint64_t a = submit_ok(b, SCHEMA("kv_gone"), 64, &gone);
    cr_assert(b->ops->kv(b, &kv));
    cr_assert_eq(kv.reserved, 2 * 4, "(0 + 64) / 16 blocks each: %d", kv.reserved);
    loop_until(g_base, hook_entered, NULL, "a worker compiling a schema");
    pl_backend_abort(b, a);
    hook_release();
    loop_until(g_base, is_done, &c, "the constrained request");
    loop_until(g_base, prep_idle, b, "the workers done");
    cr_assert(b->ops->kv(b, &kv));
    cr_expect_eq(kv.reserved, 0, "%d", kv.reserved);
    cr_expect_eq(kv.free, free0);
    cr_expect(!gone.done);
    close_engine(b);
}

/* Issue 52: a text prompt on a prepare worker is counted in the KV view by
 * an upper bound of its tokens (its bytes), not by the running estimate
 * (0 before any request: a burst of long prompts was admitted past the
 * cache); the worker's real count replaces it. Read right after submit,
 * before the loop runs the worker's completion. */
Test(engine_prep, a_text_prompt_counts_its_size_while_preparing, .timeout = 240)
{
    hook_reset(false);
    pl_backend *b = open_engine();
    static char text[12000];
    for (size_t i = 0; i + 8 < sizeof text; i += 8)
        memcpy(text + i, "abc def ", 8);
    text[sizeof text - 9] = '\0';
    pl_gen_request r = {.prompt = text};
    pl_sampling_defaults(&r.sampling);
    r.sampling.max_tokens = 16;
    int32_t *ids;
    int n;
    pl_err e;
    cr_assert_eq(b->ops->tokenize(b, &r, true, &ids, &n, &e), 0, "%s", e.message);
    free(ids);
    pl_dispatch_kv kv;
    cr_assert(b->ops->kv(b, &kv));
    cr_assert_eq(kv.reserved, 0);
    collect c = {0};
    uint64_t id;
    cr_assert_eq(pl_backend_submit(b, &r, (pl_sink){on_delta, on_done, &c}, &id, &e), 0, "%s",
                 e.message);
    cr_assert(b->ops->kv(b, &kv));
    int real = (n + 16 + 15) / 16;
    cr_assert_geq(kv.reserved, real, "%d blocks counted for a prompt of %d tokens (%d blocks)",
                  kv.reserved, n, real);
    loop_until(g_base, is_done, &c, "the request (too long for the context: a 400)");
    loop_until(g_base, prep_idle, b, "the workers done");
    cr_assert(b->ops->kv(b, &kv));
    cr_expect_eq(kv.reserved, 0, "%d", kv.reserved);
    close_engine(b);
}
