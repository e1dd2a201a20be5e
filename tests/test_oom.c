/* test_oom.c - out of memory on a request or job path ends that request or
 * conversation with an error its client sees: never a hang, never text
 * silently missing. Allocations fail on demand (tests/helpers/failalloc.h:
 * this executable wraps malloc, calloc and realloc). */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "backends/mock/mock.h"
#include "schedulers/conversation.h"
#include "src/jobs/jobs.h"
#include "tests/engine_harness.h"
#include "tests/helpers/failalloc.h"

/* ---- the engine ---- */

static char last_error[512];

static void on_done_keep(void *ud, const pl_result *r)
{
    on_done(ud, r);
    snprintf(last_error, sizeof last_error, "%s", r->error ? r->error->message : "");
}

/* A greedy request of prompt ids p[0..n). */
static pl_gen_request greedy(const int32_t *p, int n, int max_tokens)
{
    pl_gen_request req = {0};
    pl_sampling_defaults(&req.sampling);
    req.sampling.temperature = 0;
    req.sampling.max_tokens = max_tokens;
    req.prompt_tokens = p;
    req.n_prompt_tokens = n;
    return req;
}

/* Submit req, run the loop until it ends and check it failed with a 500
 * saying msg, after exactly one failure armed by arm (before the submit
 * when arm_first: the engine thread's; else after: the main thread's). */
static void expect_oom(struct event_base *base, pl_backend *b, const pl_gen_request *req,
                       collect *c, void (*arm)(void), bool arm_first, const char *msg)
{
    uint64_t id;
    pl_err err;
    if (arm_first)
        arm();
    cr_assert_eq(pl_backend_submit(b, req, (pl_sink){on_delta, on_done_keep, c}, &id, &err), 0,
                 "%s", err.message);
    if (!arm_first)
        arm();
    run_until_done(base, c, 1);
    pl_failalloc_off();
    cr_assert_eq(pl_failalloc_count(), 1);
    cr_assert_eq(c->res.finish, PL_FINISH_ERROR);
    cr_assert_str_eq(last_error, msg);
}

/* Only the echo's logprob table (200 x 20 ids) is this large. */
static void arm_echo(void)
{
    pl_failalloc_other_threads(200 * 20 * sizeof(int32_t));
}

/* The logprobs scratch of the first delta (21 entries). */
static void arm_logprobs(void)
{
    pl_failalloc_next(20 * sizeof(double));
}

/* Every allocation of the engine thread fails: the request still ends,
 * with a 500 (before, a DONE that could not be allocated never came). */
Test(oom, engine_thread_failures_end_the_request)
{
    struct event_base *base = event_base_new();
    pl_backend *b = make_engine(base, base_cfg);
    int32_t p[20];
    make_prompt(p, 20, 5);
    pl_failalloc_other_threads(0);
    collect c = {0};
    submit_ids_no_eos(b, p, 20, 40, &c);
    run_until_done(base, &c, 1);
    pl_failalloc_off();
    cr_assert_gt(pl_failalloc_count(), 0, "an allocation failed");
    cr_assert_eq(c.res.finish, PL_FINISH_ERROR, "finish %d after %d tokens", c.res.finish, c.n);
    cr_assert_not_null(c.res.error);
    cr_assert_eq(c.res.error->status, 500);
    fprintf(stderr, "engine thread out of memory: \"%s\" after %d tokens\n",
            c.res.error->message, c.n);
    /* The engine goes on serving. */
    collect ok = {0};
    submit_ids(b, p, 20, 8, &ok);
    run_until_done(base, &ok, 1);
    check_against_reference(p, 20, 8, &ok);
    pl_backend_free(b);
    event_base_free(base);
}

/* The echoed prompt's delta cannot grow on the engine thread: the request
 * ends with a 500 (before, the echo went missing and the reply went on). */
Test(oom, echo_that_cannot_be_built_ends_the_request)
{
    struct event_base *base = event_base_new();
    pl_backend *b = make_engine(base, base_cfg);
    int32_t p[200];
    make_prompt(p, 200, 7);
    pl_gen_request req = greedy(p, 200, 4);
    req.echo = true;
    collect c = {0};
    expect_oom(base, b, &req, &c, arm_echo, true, "out of memory producing the reply");
    pl_backend_free(b);
    event_base_free(base);
}

/* No memory for a delta's logprobs on the main thread: the request ends
 * with a 500 (before, that delta came without its logprobs). */
Test(oom, logprobs_delivery_failure_ends_the_request)
{
    struct event_base *base = event_base_new();
    pl_backend *b = make_engine(base, base_cfg);
    int32_t p[12];
    make_prompt(p, 12, 2);
    pl_gen_request req = greedy(p, 12, 16);
    req.sampling.ignore_eos = true;
    req.sampling.logprobs = true;
    req.sampling.top_logprobs = 20;       /* scratch of 21 entries a token */
    collect c = {0};
    expect_oom(base, b, &req, &c, arm_logprobs, false, "out of memory delivering the reply");
    cr_assert_eq(c.n_deltas, 0, "no delta without its logprobs");
    pl_backend_free(b);
    event_base_free(base);
}

/* ---- a job's conversations ---- */

static void record(void *ud, pl_conv_req *r)
{
    *(pl_conv_req **)ud = r;
}

/* The moderator's dispatch cannot queue it when the participant is done:
 * the conversation fails and says why (before, the moderator stayed
 * pending for ever and the conversation never ended). */
Test(oom, releasing_a_pending_request_fails_its_conversation)
{
    pl_dispatch *d[2] = {pl_dispatch_new(&(pl_dispatch_opts){.capacity = 4}),
                         pl_dispatch_new(&(pl_dispatch_opts){.capacity = 4})};
    int model[2] = {0, 1};
    uint64_t deps[2] = {0, 1};
    pl_conv_req *got = NULL;
    pl_convs_config cfg = {.n_agents = 2, .n_models = 2, .num_rounds = 1,
                           .n_conversations = 1, .agent_model = model, .agent_deps = deps,
                           .dispatch = d, .submit = record, .ud = &got};
    pl_convs *c = pl_convs_new(&cfg);
    cr_assert_eq(pl_convs_start(c, 0), 0);
    pl_dispatch_pump(d[0]);
    cr_assert_not_null(got);
    pl_failalloc_next(1);                 /* model 1's first queue */
    unsigned ev = pl_convs_complete(c, got, PL_CONV_OK, 1);
    pl_failalloc_off();
    cr_assert_eq(pl_failalloc_count(), 1);
    cr_assert_eq(ev, PL_CONV_EV_FAILED | PL_CONV_EV_NOMEM);
    cr_assert_eq(pl_convs_status(c, 0), PL_CONV_STATUS_FAILED);
    pl_conv_counts k;
    pl_convs_counts(c, &k);
    cr_assert_eq(k.pending + k.ready + k.inflight, 0);
    pl_convs_free(c);
    pl_dispatch_free(d[0]);
    pl_dispatch_free(d[1]);
}

/* ---- a job ---- */

typedef struct job_run {
    struct event_base *base;
    int failed, completed, tokens;
    bool armed;
    char error[256];
} job_run;

static void on_event(void *ud, const pl_job_event *ev)
{
    job_run *r = ud;
    if (ev->kind == PL_JOB_EV_TOKEN && !r->armed) {
        r->armed = true;                  /* the reply's buffer grows later */
        pl_failalloc_next(512);
    }
    r->tokens += ev->kind == PL_JOB_EV_TOKEN;
    r->completed += ev->kind == PL_JOB_EV_CONVERSATION_COMPLETED;
    if (ev->kind == PL_JOB_EV_CONVERSATION_FAILED) {
        r->failed++;
        snprintf(r->error, sizeof r->error, "%s", ev->error ? ev->error : "");
    }
}

static void on_finished(void *ud, pl_job *j)
{
    event_base_loopbreak(((job_run *)ud)->base);
}

/* The reply outgrows its buffer and the buffer cannot grow: the
 * conversation fails with that error (before, the text was dropped and the
 * conversation went on with a reply missing its middle). */
Test(oom, a_reply_that_cannot_be_kept_fails_its_conversation, .timeout = 60)
{
    char root[64];
    snprintf(root, sizeof root, "/tmp/pl_oom_XXXXXX");
    cr_assert_not_null(mkdtemp(root));
    json_t *js = json_loads(
        "{\"experiment\":\"oom\",\"models\":{\"m\":{}},\"agents\":[{\"id\":\"a\"}],"
        "\"num_rounds\":1,\"validation\":{\"enabled\":false},"
        "\"sampling\":{\"max_tokens\":400},"
        "\"questions\":[{\"id\":\"q0\",\"text\":\"Say a lot.\"}]}", 0, NULL);
    cr_assert_not_null(js);
    pl_job_spec s;
    pl_spec_problems pr = {0};
    cr_assert_eq(pl_job_spec_parse(js, NULL, &s, &pr), 0);
    json_decref(js);
    job_run r = {.base = event_base_new()};
    pl_io_pool *io = pl_io_pool_new(r.base, 1);
    pl_mock_opts mo = {.model = "m", .capacity = 2, .seed = 3, .max_model_len = 4096};
    pl_backend *b = pl_mock_new(r.base, &mo);
    pl_backend *bs[1] = {b};
    pl_job_opts o = {.base = r.base, .io = io, .id = "job-oom", .output_root = root,
                     .backends = bs, .on_finished = on_finished, .ud = &r};
    char err[256];
    pl_job *j = pl_job_new(&s, &o, err, sizeof err);
    cr_assert_not_null(j, "%s", err);
    pl_job_subscribe(j, on_event, &r, true);
    cr_assert_eq(pl_job_start(j), 0);
    event_base_dispatch(r.base);
    pl_failalloc_off();
    fprintf(stderr, "job: %d tokens, failed %d: %s\n", r.tokens, r.failed, r.error);
    cr_assert_eq(pl_failalloc_count(), 1, "the reply's buffer could not grow");
    cr_assert_eq(r.failed, 1);
    cr_assert_eq(r.completed, 0);
    cr_assert(strstr(r.error, "out of memory keeping the reply"), "%s", r.error);
    pl_job_free(j);
    pl_backend_free(b);
    pl_io_pool_free(io);
    event_base_free(r.base);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    cr_assert_eq(system(cmd), 0);
}
