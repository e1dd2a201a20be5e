/* test_engine_open.c - opening a model as an engine: the CPU's default
 * context (pl_engine_cpu_context) as a rule, then on the default model
 * opened with `parley serve`'s default options: its own 8,192-token
 * context, a capacity no lower than with the former 2,048 default, and a
 * prompt longer than 2,048 tokens taken. Skips without the model. */
#include <criterion/criterion.h>
#include <event2/event.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine_open.h"
#include "src/options.h"
#include "tests/helpers/model_path.h"

Test(engine_open, cpu_context_rule)
{
    char why[160];
    int count;
    /* The default model and cache: 5,825 blocks of 16 hold 11 sequences of
     * 8,192 tokens: its own context, counted as 2,048 in the capacity. */
    cr_expect_eq(pl_engine_cpu_context(8192, 5825, 16, &count, why, sizeof why), 8192);
    cr_expect_eq(count, 2048);
    cr_expect(strstr(why, "the model's") && strstr(why, "11"), "%s", why);
    /* 1,456 blocks (23,296 tokens) hold 2 of 8,192: the longest 4 fit. */
    cr_expect_eq(pl_engine_cpu_context(8192, 1456, 16, &count, why, sizeof why), 5824);
    cr_expect_eq(count, 2048);
    cr_expect(strstr(why, "longest"), "%s", why);
    /* A small cache keeps the former default rather than shrink below it. */
    cr_expect_eq(pl_engine_cpu_context(8192, 136, 16, &count, why, sizeof why), 2048);
    cr_expect(strstr(why, "2048"), "%s", why);
    cr_expect_eq(pl_engine_cpu_context(1024, 128, 16, &count, why, sizeof why), 1024);
    cr_expect_eq(count, 1024);
    /* Exactly 4 sequences is enough. */
    cr_expect_eq(pl_engine_cpu_context(4096, 1024, 16, &count, why, sizeof why), 4096);
}

typedef struct done_rec {
    int done, prompt_tokens, completion_tokens;
    pl_finish finish;
    char error[512];
} done_rec;

static void on_delta(void *ud, const pl_delta *d)
{
    (void)ud;
    (void)d;
}

static void on_done(void *ud, const pl_result *r)
{
    done_rec *o = ud;
    o->done = 1;
    o->finish = r->finish;
    o->prompt_tokens = r->prompt_tokens;
    o->completion_tokens = r->completion_tokens;
    if (r->error)
        snprintf(o->error, sizeof o->error, "%s", r->error->message);
}

static pl_backend *open_default(struct event_base *base, int max_model_len)
{
    pl_opts o;
    char err[512];
    cr_assert_eq(pl_opts_init(&o, err, sizeof err), 0, "%s", err);
    o.engine.cpu.threads = 2;
    o.engine.max_model_len = max_model_len;
    cr_assert_eq(o.engine.core.max_num_seqs, 256);
    cr_assert_eq(o.engine.core.capacity_rule, PL_CAPACITY_KV, "the default");
    pl_engine_open_opts eo = {.model_path = pl_test_model_path(), .device = "cpu",
                              .cfg = &o.engine};
    pl_backend *b = pl_engine_open(base, &eo, err, sizeof err);
    pl_opts_free(&o);
    cr_assert_not_null(b, "%s", err);
    return b;
}

/* What --capacity worst-case would make the capacity (the engine's stats). */
static int worst_case_of(pl_backend *b)
{
    json_t *st = b->ops->stats(b);
    int n = (int)json_integer_value(json_object_get(st, "worst_case_capacity"));
    json_decref(st);
    cr_assert_gt(n, 0);
    return n;
}

Test(engine_open, default_model_gets_its_own_context, .timeout = 240)
{
    PL_TEST_MODEL_OR_SKIP();
    struct event_base *base = event_base_new();
    /* The capacity is max_num_seqs whatever the context (admission counts
     * the blocks requests need, issue 41). Seed 000's rule (--capacity
     * worst-case) divides the cache by the context when it is asked for
     * explicitly, by at most 2048 tokens when it is the default. */
    pl_backend *b = open_default(base, 8192);
    cr_expect_eq(pl_backend_capacity(b), 256, "max_num_seqs, not KV tokens / 8192");
    int asked_capacity = worst_case_of(b);
    pl_backend_free(b);
    b = open_default(base, 2048);
    int old_capacity = worst_case_of(b);
    pl_backend_free(b);

    b = open_default(base, 0);
    cr_expect_eq(b->ops->max_model_len(b), 8192, "the model's own context");
    cr_expect_eq(pl_backend_capacity(b), 256);
    cr_expect_eq(worst_case_of(b), old_capacity,
                 "worst case %d, with the former 2048 default %d", worst_case_of(b),
                 old_capacity);
    cr_expect_gt(old_capacity, asked_capacity);
    /* A prompt past the former default is taken (then aborted: its prefill
     * is not what this checks); one past the model's context is a 400. */
    enum { LONG = 2100, TOO_LONG = 8192 };
    int32_t *ids = malloc(sizeof *ids * TOO_LONG);
    for (int i = 0; i < TOO_LONG; i++)
        ids[i] = 100 + i % 1000;
    pl_gen_request r = {.prompt_tokens = ids, .n_prompt_tokens = LONG};
    pl_sampling_defaults(&r.sampling);
    r.sampling.max_tokens = 1;
    done_rec d = {0};
    uint64_t id;
    pl_err e;
    cr_expect_eq(pl_backend_submit(b, &r, (pl_sink){on_delta, on_done, &d}, &id, &e), 0, "%s",
                 e.message);
    pl_backend_abort(b, id);
    r.n_prompt_tokens = TOO_LONG;
    cr_expect_eq(pl_backend_submit(b, &r, (pl_sink){on_delta, on_done, &d}, &id, &e), -1);
    cr_expect_eq(e.status, 400);
    cr_expect(strstr(e.message, "8191"), "%s", e.message);
    cr_expect_not(d.done, "an aborted or refused request's sink is not called");
    free(ids);
    pl_backend_free(b);
    event_base_free(base);
}

/* --backend auto on a GPU machine (device "cuda", cpu_fallback): a model
 * the CUDA runner does not run (the qwen35 hybrid here) is served by the
 * CPU runner instead of refused; asked for explicitly (no fallback), the
 * same open fails naming why (here: no GPU, or the runner's refusal). */
Test(engine_open, auto_serves_on_the_cpu_what_cuda_does_not_run, .timeout = 120)
{
    static char path[4096];
    const char *src = getenv("PARLEY_SRC");
    snprintf(path, sizeof path, "%s/tests/fixtures/tiny_qwen35.gguf", src ? src : ".");
    pl_opts o;
    char err[512];
    cr_assert_eq(pl_opts_init(&o, err, sizeof err), 0, "%s", err);
    o.engine.cpu.threads = 1;
    o.engine.kv_cache_mb = 64;
    struct event_base *base = event_base_new();
    pl_engine_open_opts eo = {.model_path = path, .device = "cuda", .cfg = &o.engine};
    cr_assert_null(pl_engine_open(base, &eo, err, sizeof err), "cuda asked for: refused");
    cr_assert(err[0], "with a reason");
    eo.cpu_fallback = true;
    pl_backend *b = pl_engine_open(base, &eo, err, sizeof err);
    cr_assert_not_null(b, "%s", err);
    json_t *st = b->ops->stats(b);
    cr_assert_str_eq(json_string_value(json_object_get(st, "kind")), "cpu");
    json_decref(st);
    pl_backend_free(b);
    event_base_free(base);
    pl_opts_free(&o);
}
