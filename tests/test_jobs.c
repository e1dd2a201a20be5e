/* test_jobs.c - a job on the mock backend: events, transcripts on disk,
 * append-only prompts, validation failures, resume and cancel. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "backends/mock/mock.h"
#include "backends/req_metrics.h"
#include "backends/text/reasoning_format.h"
#include "src/jobs/jobs.h"
#include "src/jobs/prompt.h"

static char root[64];

static void setup(void)
{
    snprintf(root, sizeof root, "/tmp/pl_jobs_XXXXXX");
    cr_assert_not_null(mkdtemp(root));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    cr_assert_eq(system(cmd), 0);
}

static pl_job_spec parse(const char *fmt, int n_q)
{
    char *qs = calloc(1, (size_t)n_q * 120 + 16);
    strcat(qs, "[");
    for (int i = 0; i < n_q; i++)
        sprintf(qs + strlen(qs), "%s{\"id\":\"q%d\",\"text\":\"Question %d?\","
                "\"choices\":[\"x\",\"y\",\"z\",\"w\"],\"answer\":\"D\"}", i ? "," : "", i, i);
    strcat(qs, "]");
    char *js = malloc(strlen(fmt) + strlen(qs) + 1);
    sprintf(js, fmt, qs);
    json_error_t je;
    json_t *root_j = json_loads(js, 0, &je);
    cr_assert_not_null(root_j, "%s", je.text);
    pl_job_spec s;
    pl_spec_problems p = {0};
    int rc = pl_job_spec_parse(root_j, NULL, &s, &p);
    for (int i = 0; i < p.n; i++)
        fprintf(stderr, "%s: %s\n", p.v[i].path, p.v[i].message);
    cr_assert_eq(rc, 0);
    pl_spec_problems_free(&p);
    json_decref(root_j);
    free(js);
    free(qs);
    return s;
}

static const char *debate =
    "{\"experiment\":\"deb\",\"models\":{\"m\":{\"backend\":\"mock\"}},"
    "\"agents\":[{\"id\":\"a\",\"system_prompt\":\"You are A.\"},{\"id\":\"b\"},"
    "{\"id\":\"mod\",\"role\":\"moderator\",\"speak_after_within_round\":[\"a\",\"b\"]}],"
    "\"sampling\":{\"max_tokens\":2048},\"num_rounds\":3,\"max_retries\":1,\"questions\":%s}";

typedef struct counts {
    int ev[8];
    int finished;
    struct event_base *base;
    pl_job *cancel_job;          /* cancel it after cancel_after conversations */
    int cancel_after;
} counts;

static void cancel_soon(evutil_socket_t fd, short w, void *ud)
{
    pl_job_cancel(ud);
}

static void on_event(void *ud, const pl_job_event *ev)
{
    counts *c = ud;
    c->ev[ev->kind]++;
    if (c->cancel_job && ev->kind == PL_JOB_EV_CONVERSATION_COMPLETED &&
        c->ev[ev->kind] == c->cancel_after) {
        struct timeval now = {0, 0};
        event_base_once(c->base, -1, EV_TIMEOUT, cancel_soon, c->cancel_job, &now);
    }
}

static void on_finished(void *ud, pl_job *j)
{
    counts *c = ud;
    c->finished++;
    event_base_loopbreak(c->base);
}

static pl_job *make_job(struct event_base *base, pl_io_pool *io, pl_backend *b,
                        pl_job_spec *s, counts *c)
{
    pl_backend *bs[1] = {b};
    pl_job_opts o = {.base = base, .io = io, .id = "job-1", .output_root = root,
                     .backends = bs, .on_finished = on_finished, .ud = c};
    char err[256];
    pl_job *j = pl_job_new(s, &o, err, sizeof err);
    cr_assert_not_null(j, "%s", err);
    pl_job_subscribe(j, on_event, c, true);
    return j;
}

static int count_index_lines(const char *exp)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s/%s_index.jsonl", root, exp, exp);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int n = 0, ch;
    while ((ch = fgetc(f)) != EOF)
        n += ch == '\n';
    fclose(f);
    return n;
}

Test(jobs, debate_on_mock_echo, .init = setup, .fini = teardown)
{
    struct event_base *base = event_base_new();
    pl_io_pool *io = pl_io_pool_new(base, 2);
    pl_mock_opts mo = {.model = "m", .capacity = 4, .echo = 1, .max_model_len = 4096};
    pl_backend *b = pl_mock_new(base, &mo);
    pl_job_spec s = parse(debate, 5);
    counts c = {.base = base};
    pl_job *j = make_job(base, io, b, &s, &c);
    cr_assert_eq(pl_job_start(j), 0);
    event_base_dispatch(base);
    cr_assert_eq(c.finished, 1);
    cr_assert_eq(pl_job_get_state(j), PL_JOB_COMPLETED);
    cr_assert_eq(c.ev[PL_JOB_EV_CONVERSATION_COMPLETED], 5);
    cr_assert_eq(c.ev[PL_JOB_EV_MESSAGE_COMPLETED], 5 * 3 * 3);
    cr_assert_eq(c.ev[PL_JOB_EV_MESSAGE_STARTED], 5 * 3 * 3);
    cr_assert_gt(c.ev[PL_JOB_EV_TOKEN], 0);
    cr_assert_eq(c.ev[PL_JOB_EV_JOB_COMPLETED], 1);
    cr_assert_eq(count_index_lines("deb"), 5);
    json_t *t = pl_job_transcript(j, "q3");
    cr_assert_not_null(t);
    cr_assert_str_eq(json_string_value(json_object_get(t, "status")), "succeeded");
    json_t *sum = json_object_get(t, "summary");
    cr_assert_str_eq(json_string_value(json_object_get(sum, "final_answer")), "D");
    cr_assert(json_is_true(json_object_get(sum, "correct")));
    cr_assert_eq(json_array_size(json_object_get(t, "rounds")), 3);
    json_decref(t);
    pl_job_progress p;
    pl_job_get_progress(j, &p);
    cr_assert_eq(p.succeeded, 5);
    cr_assert_eq(p.persisted, 5);
    pl_job_free(j);

    /* Re-run: everything is skipped, nothing is appended. */
    s = parse(debate, 5);
    memset(c.ev, 0, sizeof c.ev);
    c.finished = 0;
    j = make_job(base, io, b, &s, &c);
    pl_job_start(j);
    event_base_dispatch(base);
    cr_assert_eq(c.finished, 1);
    cr_assert_eq(c.ev[PL_JOB_EV_MESSAGE_STARTED], 0);
    pl_job_get_progress(j, &p);
    cr_assert_eq(p.skipped, 5);
    cr_assert_eq(count_index_lines("deb"), 5);
    pl_job_free(j);
    pl_backend_free(b);
    pl_io_pool_free(io);
    event_base_free(base);
}

Test(jobs, random_mock_fails_validation_after_retries, .init = setup, .fini = teardown)
{
    struct event_base *base = event_base_new();
    pl_io_pool *io = pl_io_pool_new(base, 1);
    pl_mock_opts mo = {.model = "m", .capacity = 8, .seed = 3, .max_model_len = 4096};
    pl_backend *b = pl_mock_new(base, &mo);
    pl_job_spec s = parse(debate, 3);
    counts c = {.base = base};
    pl_job *j = make_job(base, io, b, &s, &c);
    pl_job_start(j);
    event_base_dispatch(base);
    cr_assert_eq(pl_job_get_state(j), PL_JOB_COMPLETED);
    cr_assert_eq(c.ev[PL_JOB_EV_CONVERSATION_FAILED], 3);
    cr_assert_gt(c.ev[PL_JOB_EV_REPROMPT], 0);
    cr_assert_eq(count_index_lines("deb"), 0);
    json_t *t = pl_job_transcript(j, "q0");
    cr_assert_str_eq(json_string_value(json_object_get(t, "status")), "failed");
    cr_assert(strstr(json_string_value(json_object_get(t, "error")), "re-prompts"));
    json_decref(t);
    pl_job_free(j);
    pl_backend_free(b);
    pl_io_pool_free(io);
    event_base_free(base);
}

Test(jobs, cancel_aborts_in_flight_and_resumes, .init = setup, .fini = teardown)
{
    struct event_base *base = event_base_new();
    pl_io_pool *io = pl_io_pool_new(base, 1);
    pl_mock_opts mo = {.model = "m", .capacity = 4, .echo = 1, .max_model_len = 4096};
    pl_backend *b = pl_mock_new(base, &mo);
    pl_job_spec s = parse(debate, 20);
    counts c = {.base = base};
    pl_job *j = make_job(base, io, b, &s, &c);
    c.cancel_job = j;
    c.cancel_after = 5;
    pl_job_start(j);
    event_base_dispatch(base);
    cr_assert_eq(pl_job_get_state(j), PL_JOB_CANCELLED);
    cr_assert_gt(pl_mock_get_counts(b).aborted, 0);
    int done = c.ev[PL_JOB_EV_CONVERSATION_COMPLETED];
    cr_assert_geq(done, 5);
    cr_assert_lt(done, 20);
    cr_assert_eq(count_index_lines("deb"), done, "finished transcripts kept");
    pl_job_progress pr;
    pl_job_get_progress(j, &pr);
    cr_assert_eq(pr.failed, 0, "cancelled is not failed");
    cr_assert_gt(pr.cancelled, 0);
    cr_assert_eq(pr.succeeded + pr.cancelled + pr.waiting, 20);
    pl_job_free(j);

    s = parse(debate, 20);
    memset(c.ev, 0, sizeof c.ev);
    c.cancel_job = NULL;
    j = make_job(base, io, b, &s, &c);
    pl_job_start(j);
    event_base_dispatch(base);
    cr_assert_eq(pl_job_get_state(j), PL_JOB_COMPLETED);
    cr_assert_eq(c.ev[PL_JOB_EV_CONVERSATION_COMPLETED], 20 - done);
    cr_assert_eq(count_index_lines("deb"), 20);
    pl_job_free(j);
    pl_backend_free(b);
    pl_io_pool_free(io);
    event_base_free(base);
}

Test(jobs, prompts_are_append_only)
{
    pl_job_spec s = parse(debate, 1);
    const char *finals[9] = {"A0 Answer: B", "B0 Answer: C", "M0 Answer: B",
                             "A1", "B1", NULL, NULL, NULL, NULL};
    /* The moderator speaks after a and b: it sees their round-0 replies
     * in round 0, and in round 1 only what it has not seen. */
    char *m0 = pl_prompt_round_user(&s, &s.questions[0], 2, 0, finals);
    cr_assert(strstr(m0, "Question 0?"));
    cr_assert(strstr(m0, "A0 Answer: B") && strstr(m0, "B0 Answer: C"));
    char *m1 = pl_prompt_round_user(&s, &s.questions[0], 2, 1, finals);
    cr_assert_null(strstr(m1, "A0"), "already seen in round 0");
    cr_assert(strstr(m1, "A1") && strstr(m1, "B1"));
    char *a1 = pl_prompt_round_user(&s, &s.questions[0], 0, 1, finals);
    cr_assert(strstr(a1, "B0 Answer: C") && strstr(a1, "M0"));
    cr_assert_null(strstr(a1, "A0"), "its own reply is in its history already");
    cr_assert_null(strstr(a1, "Question 0?"), "the question is in round 0's message");
    free(m0);
    free(m1);
    free(a1);
    pl_job_spec_free(&s);
}

/* ---- a recording backend: checks that every agent's prompts only grow ---- */

typedef struct rec_backend {
    pl_backend base;
    json_t *last;                /* "conv/agent" -> last message list */
    int requests, violations, n_invalid_left;
} rec_backend;

typedef struct rec_call {
    pl_sink sink;
    bool invalid;
} rec_call;

static void rec_fire(evutil_socket_t fd, short w, void *ud)
{
    rec_call *c = ud;
    const char *text = c->invalid ? "I am not sure." : "Thinking. Answer: B";
    pl_delta d = {.text = text, .len = strlen(text)};
    c->sink.on_delta(c->sink.ud, &d);
    pl_result r = {.finish = PL_FINISH_STOP, .completion_tokens = 3};
    c->sink.on_done(c->sink.ud, &r);
    free(c);
}

static int rec_submit(pl_backend *b, const pl_gen_request *req, pl_sink sink,
                      uint64_t *id, pl_err *err)
{
    rec_backend *rb = (rec_backend *)b;
    /* The round's user message names the question; the agent is known by
     * its system prompt ("You are X."). */
    char key[256];
    snprintf(key, sizeof key, "%s|%s", req->messages[0].content,
             strstr(req->messages[1].content, "Question") ?
             strstr(req->messages[1].content, "Question") : "?");
    json_t *msgs = json_array();
    for (int i = 0; i < req->n_messages; i++)
        json_array_append_new(msgs, json_pack("[s,s]", req->messages[i].role,
                                              req->messages[i].content));
    json_t *prev = json_object_get(rb->last, key);
    if (prev) {
        if (json_array_size(prev) >= json_array_size(msgs))
            rb->violations++;
        for (size_t i = 0; i < json_array_size(prev) && i < json_array_size(msgs); i++)
            if (!json_equal(json_array_get(prev, i), json_array_get(msgs, i)))
                rb->violations++;
    }
    json_object_set_new(rb->last, key, msgs);
    rec_call *c = calloc(1, sizeof *c);
    c->sink = sink;
    c->invalid = rb->n_invalid_left-- > 0;
    *id = (uint64_t)++rb->requests;
    struct timeval now = {0, 0};
    event_base_once(b->base, -1, EV_TIMEOUT, rec_fire, c, &now);
    return 0;
}

static void rec_abort(pl_backend *b, uint64_t id) {}
static int rec_capacity(pl_backend *b) { return 3; }
static void rec_free(pl_backend *b) {}

static const pl_backend_ops rec_ops = {
    .kind = "rec", .submit = rec_submit, .abort = rec_abort, .capacity = rec_capacity,
    .free = rec_free,
};

Test(jobs, every_request_extends_the_agents_previous_prompt, .init = setup, .fini = teardown)
{
    struct event_base *base = event_base_new();
    pl_io_pool *io = pl_io_pool_new(base, 1);
    rec_backend rb = {.base = {.ops = &rec_ops, .base = base}, .last = json_object(),
                      .n_invalid_left = 4};
    const char *fmt =
        "{\"experiment\":\"grow\",\"models\":{\"m\":{}},"
        "\"agents\":[{\"id\":\"a\",\"system_prompt\":\"You are a.\"},"
        "{\"id\":\"b\",\"system_prompt\":\"You are b.\",\"visible_to\":[\"mod\"]},"
        "{\"id\":\"mod\",\"system_prompt\":\"You are mod.\","
        "\"speak_after_within_round\":[\"a\",\"b\"]}],"
        "\"num_rounds\":4,\"max_retries\":2,\"questions\":%s}";
    pl_job_spec s = parse(fmt, 6);
    counts c = {.base = base};
    pl_job *j = make_job(base, io, &rb.base, &s, &c);
    pl_job_start(j);
    event_base_dispatch(base);
    cr_assert_eq(pl_job_get_state(j), PL_JOB_COMPLETED);
    cr_assert_eq(c.ev[PL_JOB_EV_CONVERSATION_COMPLETED], 6);
    cr_assert_eq(c.ev[PL_JOB_EV_REPROMPT], 4);
    cr_assert_eq(rb.requests, 6 * 4 * 3 + 4);
    cr_assert_eq(rb.violations, 0, "prompts are append-only across rounds and re-prompts");
    /* b's messages are visible to mod only: a never sees them, mod does. */
    const char *k;
    json_t *msgs;
    int a_lists = 0, mod_saw_b = 0;
    json_object_foreach(rb.last, k, msgs) {
        size_t i;
        json_t *m;
        json_array_foreach(msgs, i, m) {
            const char *text = json_string_value(json_array_get(m, 1));
            if (!strncmp(k, "You are a.", 10))
                cr_assert_null(strstr(text, "[b]:"), "a sees b: %s", text);
            if (!strncmp(k, "You are mod.", 12) && strstr(text, "[b]:"))
                mod_saw_b++;
        }
        a_lists += !strncmp(k, "You are a.", 10);
    }
    cr_assert_eq(a_lists, 6);
    cr_assert_gt(mod_saw_b, 0);
    pl_job_free(j);
    json_decref(rb.last);
    pl_req_metrics_free(rb.base.metrics);
    pl_io_pool_free(io);
    event_base_free(base);
}

Test(jobs, backend_error_fails_only_its_conversation, .init = setup, .fini = teardown)
{
    struct event_base *base = event_base_new();
    pl_io_pool *io = pl_io_pool_new(base, 1);
    pl_mock_opts mo = {.model = "m", .capacity = 1, .echo = 1, .max_model_len = 4096};
    pl_backend *b = pl_mock_new(base, &mo);
    pl_mock_fail_next(b, 1);                 /* q0's first request fails */
    pl_job_spec s = parse(debate, 4);
    counts c = {.base = base};
    pl_job *j = make_job(base, io, b, &s, &c);
    pl_job_start(j);
    event_base_dispatch(base);
    cr_assert_eq(pl_job_get_state(j), PL_JOB_COMPLETED);
    cr_assert_eq(c.ev[PL_JOB_EV_CONVERSATION_FAILED], 1);
    cr_assert_eq(c.ev[PL_JOB_EV_CONVERSATION_COMPLETED], 3);
    cr_assert_eq(count_index_lines("deb"), 3);
    char path[256];
    snprintf(path, sizeof path, "%s/deb/task_manifest.json", root);
    json_t *m = json_load_file(path, 0, NULL);
    json_t *q0 = json_object_get(json_object_get(m, "questions"), "q0");
    cr_assert_str_eq(json_string_value(json_object_get(q0, "status")), "failed");
    cr_assert(strstr(json_string_value(json_object_get(q0, "error")), "scripted failure"));
    json_decref(m);
    pl_job_free(j);
    pl_backend_free(b);
    pl_io_pool_free(io);
    event_base_free(base);
}

/* ---- a backend whose model emits bytes that are not valid UTF-8 ---- */

/* A reply cut inside a character (max_tokens), a lone 0xFF and a bad
 * sequence in the reasoning, sent in two deltas that split "é" between
 * them (a character split across deltas is valid once joined). */
static const char *const bad_deltas[] = {
    "<think>\xE2\x80 ok\xFF</think>caf\xC3", "\xA9 \xFF Answer: B \xE2\x82",
};
/* The same as python3 -c 'print(b"...".decode("utf-8", "replace"))'
 * writes it: one U+FFFD per maximal ill-formed subpart. */
#define U_FFFD "\xEF\xBF\xBD"
static const char *const want_content = "caf\xC3\xA9 " U_FFFD " Answer: B " U_FFFD;
static const char *const want_reasoning = U_FFFD " ok" U_FFFD;

static void bytes_fire(evutil_socket_t fd, short w, void *ud)
{
    pl_sink *sink = ud;
    for (size_t i = 0; i < sizeof bad_deltas / sizeof bad_deltas[0]; i++) {
        pl_delta d = {.text = bad_deltas[i], .len = strlen(bad_deltas[i])};
        sink->on_delta(sink->ud, &d);
    }
    pl_result r = {.finish = PL_FINISH_LENGTH, .completion_tokens = 9};
    sink->on_done(sink->ud, &r);
    free(sink);
}

static int bytes_submit(pl_backend *b, const pl_gen_request *req, pl_sink sink,
                        uint64_t *id, pl_err *err)
{
    pl_sink *s = malloc(sizeof *s);
    cr_assert_not_null(s);
    *s = sink;
    *id = 1;
    struct timeval now = {0, 0};
    event_base_once(b->base, -1, EV_TIMEOUT, bytes_fire, s, &now);
    return 0;
}

static const struct pl_reasoning_format *bytes_reasoning(pl_backend *b)
{
    return pl_reasoning_format_find("qwen3");
}

static const pl_backend_ops bytes_ops = {
    .kind = "bytes", .submit = bytes_submit, .abort = rec_abort, .capacity = rec_capacity,
    .free = rec_free, .reasoning_format = bytes_reasoning,
};

Test(jobs, invalid_utf8_reply_is_kept_with_replacement_characters, .init = setup,
     .fini = teardown)
{
    struct event_base *base = event_base_new();
    pl_io_pool *io = pl_io_pool_new(base, 1);
    pl_backend b = {.ops = &bytes_ops, .base = base};
    const char *fmt = "{\"experiment\":\"u8\",\"models\":{\"m\":{}},"
                      "\"agents\":[{\"id\":\"a\"}],\"num_rounds\":1,\"questions\":%s}";
    pl_job_spec s = parse(fmt, 1);
    counts c = {.base = base};
    pl_job *j = make_job(base, io, &b, &s, &c);
    pl_job_start(j);
    event_base_dispatch(base);
    cr_assert_eq(pl_job_get_state(j), PL_JOB_COMPLETED);
    cr_assert_eq(c.ev[PL_JOB_EV_CONVERSATION_COMPLETED], 1);
    cr_assert_eq(c.ev[PL_JOB_EV_CONVERSATION_FAILED], 0);
    json_t *t = pl_job_transcript(j, "q0");
    cr_assert_not_null(t);
    cr_assert_str_eq(json_string_value(json_object_get(t, "status")), "succeeded");
    json_t *a0 = json_array_get(json_object_get(t, "attempts"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(a0, "content")), want_content);
    cr_assert_str_eq(json_string_value(json_object_get(a0, "reasoning")), want_reasoning);
    cr_assert_str_eq(json_string_value(json_object_get(a0, "answer")), "B");
    json_t *r0 = json_array_get(json_object_get(t, "rounds"), 0);
    json_t *m0 = json_array_get(json_object_get(r0, "messages"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(m0, "content")), want_content);
    json_decref(t);
    cr_assert_eq(count_index_lines("u8"), 1);
    pl_job_free(j);
    pl_req_metrics_free(b.metrics);
    pl_io_pool_free(io);
    event_base_free(base);
}
