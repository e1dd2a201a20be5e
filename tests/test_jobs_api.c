/* test_jobs_api.c - the jobs API over HTTP against `parley serve` on the
 * mock backend: submit, follow SSE (late-join state, token deltas that add
 * up to each message), transcripts, errors, 409, cancel, /status. */
#include <criterion/criterion.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/helpers/server_proc.h"

static pl_test_server srv;
static char jobs_dir[64];

static void start(void)
{
    snprintf(jobs_dir, sizeof jobs_dir, "/tmp/pl_jobs_api_XXXXXX");
    cr_assert_not_null(mkdtemp(jobs_dir));
    setenv("PARLEY_JOBS_DIR", jobs_dir, 1);
    const char *args[] = {"--backend", "mock", "--mock-mode", "echo", "--served-model-name",
                          "smol", "--mock-token-delay-ms", "1", "--mock-capacity", "8", NULL};
    cr_assert_eq(pl_test_server_start(&srv, args), 0);
}

static void stop(void)
{
    pl_test_server_stop(&srv);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", jobs_dir);
    cr_assert_eq(system(cmd), 0);
}

static char *job_body(const char *experiment, int n_q)
{
    char *b = malloc(8192);
    int n = snprintf(b, 8192,
        "{\"experiment\":\"%s\",\"models\":{\"smol\":{}},\"agents\":[{\"id\":\"a\"},{\"id\":\"b\"},"
        "{\"id\":\"mod\",\"role\":\"moderator\",\"speak_after_within_round\":[\"a\",\"b\"]}],"
        "\"num_rounds\":2,\"sampling\":{\"max_tokens\":4096},\"questions\":[", experiment);
    for (int i = 0; i < n_q; i++)
        n += snprintf(b + n, (size_t)(8192 - n), "%s{\"id\":\"q%d\",\"text\":\"Question %d?\","
                      "\"choices\":[\"yes\",\"no\"],\"answer\":\"B\"}", i ? "," : "", i, i);
    snprintf(b + n, (size_t)(8192 - n), "]}");
    return b;
}

static json_t *http_json(const char *method, const char *path, const char *body, long *status)
{
    char url[512];
    snprintf(url, sizeof url, "%s%s", srv.url, path);
    pl_test_resp r;
    cr_assert_eq(pl_test_http(method, url, body, body ? strlen(body) : 0, &r), 0);
    *status = r.status;
    json_t *j = json_loads(r.body, 0, NULL);
    pl_test_resp_free(&r);
    cr_assert_not_null(j, "%s %s: JSON reply", method, path);
    return j;
}

static char *submit(const char *experiment, int n_q)
{
    char *body = job_body(experiment, n_q);
    long st;
    json_t *j = http_json("POST", "/v1/jobs", body, &st);
    cr_assert_eq(st, 201);
    char *id = strdup(json_string_value(json_object_get(j, "id")));
    json_decref(j);
    free(body);
    return id;
}

typedef struct sse_ev {
    char name[32];
    json_t *data;
} sse_ev;

/* Parse "event: X\ndata: {...}\n\n" blocks. */
static int parse_sse(char *body, sse_ev *out, int max)
{
    int n = 0;
    for (char *blk = body; blk && *blk && n < max;) {
        char *end = strstr(blk, "\n\n");
        cr_assert_not_null(end, "every event ends with a blank line");
        *end = '\0';
        cr_assert_eq(strncmp(blk, "event: ", 7), 0, "event line: %.40s", blk);
        char *nl = strchr(blk, '\n');
        cr_assert_not_null(nl);
        snprintf(out[n].name, sizeof out[n].name, "%.*s", (int)(nl - blk - 7), blk + 7);
        cr_assert_eq(strncmp(nl + 1, "data: ", 6), 0);
        out[n].data = json_loads(nl + 7, 0, NULL);
        cr_assert_not_null(out[n].data, "data is JSON");
        n++;
        blk = end + 2;
    }
    return n;
}

Test(jobs_api, submit_follow_and_fetch, .init = start, .fini = stop, .timeout = 120)
{
    char *id = submit("follow", 4);
    char url[512];
    snprintf(url, sizeof url, "%s/v1/jobs/%s/events?tokens=1", srv.url, id);
    pl_test_resp r;
    cr_assert_eq(pl_test_http("GET", url, NULL, 0, &r), 0);
    cr_assert_eq(r.status, 200);
    cr_assert(strstr(r.content_type, "text/event-stream"));
    static sse_ev ev[20000];
    int n = parse_sse(r.body, ev, 20000);
    cr_assert_gt(n, 2);
    cr_assert_str_eq(ev[0].name, "state", "late joiners get the state first");
    cr_assert_str_eq(ev[n - 1].name, "job_completed");
    int completed = 0, convs = 0, tokens = 0;
    json_t *acc = json_object();             /* key -> accumulated deltas */
    for (int i = 1; i < n; i++) {
        json_t *d = ev[i].data;
        char key[128];
        snprintf(key, sizeof key, "%s/%lld/%s/%lld",
                 json_string_value(json_object_get(d, "question_id")),
                 json_integer_value(json_object_get(d, "round")),
                 json_string_value(json_object_get(d, "agent_id")),
                 json_integer_value(json_object_get(d, "attempt")));
        if (!strcmp(ev[i].name, "token")) {
            tokens++;
            json_t *s = json_object_get(acc, key);
            char *cat = malloc((s ? json_string_length(s) : 0) +
                               strlen(json_string_value(json_object_get(d, "delta"))) + 1);
            sprintf(cat, "%s%s", s ? json_string_value(s) : "",
                    json_string_value(json_object_get(d, "delta")));
            json_object_set_new(acc, key, json_string(cat));
            free(cat);
        } else if (!strcmp(ev[i].name, "message_completed")) {
            completed++;
            cr_assert(json_is_true(json_object_get(d, "valid")));
            cr_assert_str_eq(json_string_value(json_object_get(acc, key)),
                             json_string_value(json_object_get(d, "content")),
                             "token deltas add up to the message (%s)", key);
        } else if (!strcmp(ev[i].name, "conversation_completed")) {
            convs++;
            cr_assert_str_eq(json_string_value(json_object_get(d, "answer")), "B");
        }
    }
    cr_assert_eq(completed, 4 * 2 * 3);
    cr_assert_eq(convs, 4);
    cr_assert_gt(tokens, completed);
    json_decref(acc);
    for (int i = 0; i < n; i++)
        json_decref(ev[i].data);
    pl_test_resp_free(&r);

    long st;
    char path[256];
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    json_t *j = http_json("GET", path, NULL, &st);
    cr_assert_eq(st, 200);
    cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "completed");
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(j, "progress"),
                                                    "succeeded")), 4);
    json_decref(j);
    snprintf(path, sizeof path, "/v1/jobs/%s/transcripts/q2", id);
    j = http_json("GET", path, NULL, &st);
    cr_assert_eq(st, 200);
    cr_assert_str_eq(json_string_value(json_object_get(j, "status")), "succeeded");
    cr_assert_eq(json_array_size(json_object_get(j, "rounds")), 2);
    json_decref(j);
    snprintf(path, sizeof path, "/v1/jobs/%s/transcripts/nope", id);
    json_decref(http_json("GET", path, NULL, &st));
    cr_assert_eq(st, 404);
    json_decref(http_json("GET", "/v1/jobs/job-unknown", NULL, &st));
    cr_assert_eq(st, 404);
    /* Late joiner after the end: state, then job_completed at once. */
    cr_assert_eq(pl_test_http("GET", url, NULL, 0, &r), 0);
    n = parse_sse(r.body, ev, 10);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(ev[1].name, "job_completed");
    for (int i = 0; i < n; i++)
        json_decref(ev[i].data);
    pl_test_resp_free(&r);
    j = http_json("GET", "/v1/jobs", NULL, &st);
    cr_assert_eq(json_array_size(json_object_get(j, "data")), 1);
    json_decref(j);
    free(id);
}

Test(jobs_api, every_spec_problem_is_listed, .init = start, .fini = stop)
{
    long st;
    json_t *j = http_json("POST", "/v1/jobs",
        "{\"experiment\":\"e\",\"models\":{\"smol\":{}},\"num_rounds\":0,"
        "\"agents\":[{\"id\":\"a\",\"model\":\"ghost\"},{\"id\":\"a\"}],"
        "\"questions\":[{\"text\":\"t\"}],\"output_dir\":\"/etc\"}", &st);
    cr_assert_eq(st, 400);
    json_t *err = json_object_get(j, "error");
    cr_assert_str_eq(json_string_value(json_object_get(err, "code")), "invalid_job_spec");
    cr_assert_eq(json_array_size(json_object_get(err, "problems")), 5);
    json_decref(j);
    j = http_json("POST", "/v1/jobs", "{\"experiment\":\"e\",\"models\":{\"gpt9\":{}},"
                  "\"agents\":[{\"id\":\"a\"}],\"questions\":[{\"text\":\"t\","
                  "\"choices\":[\"x\",\"y\"]}]}", &st);
    cr_assert_eq(st, 400, "model not served");
    json_decref(j);
}

Test(jobs_api, conflict_cancel_and_status, .init = start, .fini = stop, .timeout = 120)
{
    char *id = submit("slow", 40);
    long st;
    char *body = job_body("slow", 2);
    json_decref(http_json("POST", "/v1/jobs", body, &st));
    cr_assert_eq(st, 409, "one running job per experiment");
    free(body);
    json_t *s = http_json("GET", "/status", NULL, &st);
    json_t *jobs = json_object_get(s, "jobs");
    cr_assert_eq(json_array_size(jobs), 1);
    json_t *pools = json_object_get(json_array_get(jobs, 0), "pools");
    cr_assert_not_null(json_object_get(pools, "models"));
    cr_assert_leq(json_integer_value(json_object_get(pools, "in_flight")), 8);
    json_decref(s);
    char path[256];
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    json_t *j = http_json("DELETE", path, NULL, &st);
    cr_assert_eq(st, 200);
    cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "cancelled");
    json_decref(j);
    /* Resubmitting resumes the experiment. */
    char *id2 = submit("slow", 40);
    cr_assert_str_neq(id, id2);
    snprintf(path, sizeof path, "/v1/jobs/%s", id2);
    json_decref(http_json("DELETE", path, NULL, &st));
    free(id);
    free(id2);
}
