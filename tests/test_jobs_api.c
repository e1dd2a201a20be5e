/* test_jobs_api.c - the jobs API over HTTP against `parley serve` on the
 * mock backend: submit, follow SSE (late-join state, token deltas that add
 * up to each message), transcripts, errors, 409, cancel, /status. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/helpers/server_proc.h"

static pl_test_server srv;
static char jobs_dir[64];

static void start_with(const char *delay_ms, const char *capacity)
{
    snprintf(jobs_dir, sizeof jobs_dir, "/tmp/pl_jobs_api_XXXXXX");
    cr_assert_not_null(mkdtemp(jobs_dir));
    setenv("PARLEY_JOBS_DIR", jobs_dir, 1);
    const char *args[] = {"--backend", "mock", "--mock-mode", "echo", "--served-model-name",
                          "smol", "--mock-token-delay-ms", delay_ms, "--mock-capacity",
                          capacity, NULL};
    cr_assert_eq(pl_test_server_start(&srv, args), 0);
}

static void start(void)
{
    start_with("1", "8");
}

/* Slow enough that a job outlives the requests a test makes while it runs. */
static void start_slow(void)
{
    start_with("20", "1");
}

/* Criterion ignores failed assertions (and crashes) in .fini, so the
 * server's exit status is checked at the end of each test body. */
static void stop_server(void)
{
    int rc = pl_test_server_stop(&srv);
    srv.pid = 0;
    cr_assert_eq(rc, 0, "the server exits 0 on SIGTERM (got %d)", rc);
}

static void stop(void)
{
    if (srv.pid)
        pl_test_server_stop(&srv);
    srv.pid = 0;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", jobs_dir);
    cr_assert_eq(system(cmd), 0);
}

/* A debate (2 rounds: a, b, then a moderator) or, when single, one agent
 * answering once: one message per question. */
static char *job_body_of(const char *experiment, int n_q, bool single)
{
    char *b = malloc(8192);
    int n = snprintf(b, 8192,
        "{\"experiment\":\"%s\",\"models\":{\"smol\":{}},\"agents\":[{\"id\":\"a\"}%s],"
        "\"num_rounds\":%d,\"sampling\":{\"max_tokens\":4096},\"questions\":[", experiment,
        single ? "" : ",{\"id\":\"b\"},{\"id\":\"mod\",\"role\":\"moderator\","
                      "\"speak_after_within_round\":[\"a\",\"b\"]}",
        single ? 1 : 2);
    for (int i = 0; i < n_q; i++)
        n += snprintf(b + n, (size_t)(8192 - n), "%s{\"id\":\"q%d\",\"text\":\"Question %d?\","
                      "\"choices\":[\"yes\",\"no\"],\"answer\":\"B\"}", i ? "," : "", i, i);
    snprintf(b + n, (size_t)(8192 - n), "]}");
    return b;
}

static char *job_body(const char *experiment, int n_q)
{
    return job_body_of(experiment, n_q, false);
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

static char *submit_of(const char *experiment, int n_q, bool single)
{
    char *body = job_body_of(experiment, n_q, single);
    long st;
    json_t *j = http_json("POST", "/v1/jobs", body, &st);
    cr_assert_eq(st, 201);
    char *id = strdup(json_string_value(json_object_get(j, "id")));
    json_decref(j);
    free(body);
    return id;
}

static char *submit(const char *experiment, int n_q)
{
    return submit_of(experiment, n_q, false);
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
    stop_server();
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
    stop_server();
}

static json_t *job_get(const char *id)
{
    char path[256];
    long st;
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    json_t *j = http_json("GET", path, NULL, &st);
    cr_assert_eq(st, 200);
    return j;
}

static json_int_t progress_of(json_t *job, const char *key)
{
    return json_integer_value(json_object_get(json_object_get(job, "progress"), key));
}

/* Poll the job until progress[key] >= want or its state is final; returns
 * the job (the caller decrefs). Deadline 120 s. */
static json_t *job_wait(const char *id, const char *key, json_int_t want)
{
    json_t *j = NULL;
    for (int i = 0; i < 12000; i++) {
        json_decref(j);
        j = job_get(id);
        const char *state = json_string_value(json_object_get(j, "state"));
        if (progress_of(j, key) >= want ||
            (strcmp(state, "running") != 0 && strcmp(state, "starting") != 0))
            break;
        usleep(10000);
    }
    return j;
}

/* Question ids in the experiment's index; fails on a duplicate. */
static int index_ids(const char *experiment, int n_q)
{
    char path[256], line[8192];
    snprintf(path, sizeof path, "%s/%s/%s_index.jsonl", jobs_dir, experiment, experiment);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    bool seen[64] = {false};
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        json_t *o = json_loads(line, 0, NULL);
        cr_assert_not_null(o, "index line: %s", line);
        int q = atoi(json_string_value(json_object_get(o, "question_id")) + 1);
        cr_assert(q >= 0 && q < n_q && !seen[q], "index: %s", line);
        seen[q] = true;
        n++;
        json_decref(o);
    }
    fclose(f);
    return n;
}

Test(jobs_api, conflict_cancel_and_status, .init = start_slow, .fini = stop, .timeout = 240)
{
    enum { NQ = 6 };                 /* one at a time, ~0.6 s each */
    char *id = submit_of("slow", NQ, true);
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
    cr_assert_leq(json_integer_value(json_object_get(pools, "in_flight")), 1);
    json_decref(s);
    /* Cancel once some questions are saved (the event, not a delay). */
    json_t *j = job_wait(id, "persisted", 1);
    cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "running",
                     "the job outlived its first saved question");
    json_decref(j);
    char path[256];
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    j = http_json("DELETE", path, NULL, &st);
    cr_assert_eq(st, 200);
    cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "cancelled");
    json_decref(j);
    j = job_get(id);
    json_int_t saved = progress_of(j, "persisted");
    json_decref(j);
    cr_assert(saved > 0 && saved < NQ, "saved %lld of %d", (long long)saved, NQ);
    cr_assert_eq(index_ids("slow", NQ), saved, "the index holds what was saved");
    /* Resubmitting resumes the experiment: the saved questions are skipped,
     * the others run, and each is indexed once. */
    char *id2 = submit_of("slow", NQ, true);
    cr_assert_str_neq(id, id2);
    j = job_wait(id2, "persisted", NQ);
    cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "completed");
    cr_assert_eq(progress_of(j, "skipped"), saved);
    cr_assert_eq(progress_of(j, "succeeded"), NQ);
    json_decref(j);
    cr_assert_eq(index_ids("slow", NQ), NQ);
    free(id);
    free(id2);
    stop_server();
}

static json_int_t followers(const char *id, const char *key)
{
    json_t *j = job_get(id);
    json_int_t n = json_integer_value(json_object_get(json_object_get(j, "followers"), key));
    json_decref(j);
    return n;
}

/* A client following a job's events over SSE goes away mid-job: its
 * subscription is dropped (token deltas stop being produced for it), the
 * job runs on to the end, and a new follower gets the final state. */
Test(jobs_api, events_client_disconnect, .init = start_slow, .fini = stop, .timeout = 240)
{
    char *id = submit_of("gone", 4, true);
    json_int_t ev0 = followers(id, "events"), tok0 = followers(id, "tokens");
    int port = atoi(strrchr(srv.url, ':') + 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    char req[512], buf[16384] = "";
    int n = snprintf(req, sizeof req, "GET /v1/jobs/%s/events?tokens=1 HTTP/1.1\r\nHost: localhost\r\n\r\n",
                     id);
    cr_assert_eq(write(fd, req, (size_t)n), n);
    size_t len = 0;
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    for (int waited = 0; waited < 60000 && !strstr(buf, "event: token") &&
                         len + 1 < sizeof buf; waited += 50) {
        if (poll(&pf, 1, 50) <= 0)
            continue;
        ssize_t k = read(fd, buf + len, sizeof buf - 1 - len);
        cr_assert_gt(k, 0);
        len += (size_t)k;
        buf[len] = '\0';
    }
    cr_assert(strstr(buf, "event: state") && strstr(buf, "event: token"), "%s", buf);
    cr_assert_eq(followers(id, "events"), ev0 + 1);
    cr_assert_eq(followers(id, "tokens"), tok0 + 1);
    close(fd);
    json_int_t ev = -1, tok = -1;
    for (int i = 0; i < 2000 && (ev != ev0 || tok != tok0); i++) {
        usleep(10000);
        ev = followers(id, "events");
        tok = followers(id, "tokens");
    }
    cr_assert_eq(ev, ev0, "the gone client's subscription is dropped");
    cr_assert_eq(tok, tok0);
    json_t *j = job_wait(id, "persisted", 4);
    cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "completed");
    json_decref(j);
    char url[512];
    snprintf(url, sizeof url, "%s/v1/jobs/%s/events", srv.url, id);
    pl_test_resp r;
    cr_assert_eq(pl_test_http("GET", url, NULL, 0, &r), 0);
    cr_assert_eq(r.status, 200);
    cr_assert(strstr(r.body, "event: state") && strstr(r.body, "event: job_completed"), "%s",
              r.body);
    pl_test_resp_free(&r);
    free(id);
    stop_server();
}

/* ---- SIGTERM with requests in flight ---- */

static void start_for_sigterm(void)
{
    start_with("20", "8");
}

/* Random words, 20 ms each: a 200-token reply takes 4 s. */
static void start_random_slow(void)
{
    snprintf(jobs_dir, sizeof jobs_dir, "/tmp/pl_jobs_api_XXXXXX");
    cr_assert_not_null(mkdtemp(jobs_dir));
    const char *args[] = {"--backend", "mock", "--served-model-name", "smol",
                          "--mock-token-delay-ms", "20", NULL};
    cr_assert_eq(pl_test_server_start(&srv, args), 0);
}

/* In a child: POST body to path, write "STATUS\nBODY" to out. */
static pid_t post_in_child(const char *path, const char *body, const char *out)
{
    pid_t pid = fork();
    if (pid == 0) {
        char url[512];
        snprintf(url, sizeof url, "%s%s", srv.url, path);
        pl_test_resp r;
        int rc = pl_test_http("POST", url, body, strlen(body), &r);
        FILE *f = fopen(out, "w");
        fprintf(f, "%ld\n%s", rc == 0 ? r.status : -1L, r.body);
        fclose(f);
        _exit(0);
    }
    return pid;
}

static long read_child(pid_t pid, const char *out, char **body)
{
    int st;
    waitpid(pid, &st, 0);
    FILE *f = fopen(out, "r");
    cr_assert_not_null(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    char *nl = strchr(buf, '\n');
    cr_assert_not_null(nl);
    *body = nl + 1;
    return atol(buf);
}

static void sigterm_and_wait(void)
{
    kill(srv.pid, SIGTERM);
    int status = -1;
    waitpid(srv.pid, &status, 0);
    srv.pid = 0;
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the server exits 0 (%d)", status);
}

/* SIGTERM while a chat completion and a stream are running: both clients
 * get whole replies (the server stops accepting, lets them finish, writes
 * their replies out, then exits 0). Both end on the same mock tick; the
 * server used to leave as soon as they had ended, before the loop wrote
 * the last reply, so about one run in three a client got nothing. */
Test(jobs_api, sigterm_with_requests_in_flight, .init = start_random_slow, .fini = stop,
     .timeout = 120)
{
    static const char *words = "one two three four five six seven eight nine ten eleven twelve "
                               "thirteen fourteen fifteen sixteen seventeen eighteen nineteen";
    char body[1024], out1[128], out2[128];
    snprintf(out1, sizeof out1, "%s/plain.out", jobs_dir);
    snprintf(out2, sizeof out2, "%s/stream.out", jobs_dir);
    snprintf(body, sizeof body, "{\"model\":\"smol\",\"max_tokens\":200,\"messages\":[{\"role\":\"user\","
             "\"content\":\"%s\"}]}", words);
    pid_t c1 = post_in_child("/v1/chat/completions", body, out1);
    snprintf(body, sizeof body, "{\"model\":\"smol\",\"max_tokens\":200,\"stream\":true,\"messages\":[{\"role\":"
             "\"user\",\"content\":\"%s\"}]}", words);
    pid_t c2 = post_in_child("/v1/chat/completions", body, out2);
    /* SIGTERM only once the mock runs both requests (its in_flight). */
    long st;
    json_int_t active = 0;
    for (int i = 0; i < 3000 && active < 2; i++) {
        json_t *s = http_json("GET", "/status", NULL, &st);
        active = json_integer_value(json_object_get(
            json_object_get(json_object_get(s, "models"), "smol"), "in_flight"));
        json_decref(s);
        if (active < 2)
            usleep(10000);
    }
    cr_assert_eq(active, 2, "both requests were admitted before SIGTERM");
    sigterm_and_wait();
    char *b;
    long st1 = read_child(c1, out1, &b);
    cr_expect_eq(st1, 200, "the plain request got HTTP %ld (-1: no reply at all)", st1);
    json_t *j = json_loads(b, 0, NULL);
    cr_assert_not_null(j, "a whole JSON reply: %s", b);
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    cr_expect_str_eq(json_string_value(json_object_get(c0, "finish_reason")), "length");
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(j, "usage"),
                                                    "completion_tokens")), 200);
    json_decref(j);
    cr_expect_eq(read_child(c2, out2, &b), 200);
    char **ev;
    int n;
    cr_expect_eq(pl_test_sse_split(b, &ev, &n), 0, "SSE framing: %s", b);
    cr_expect_gt(n, 2);
    if (n > 0)
        cr_expect_str_eq(ev[n - 1], "[DONE]", "the stream ends with [DONE]");
    pl_test_sse_free(ev, n);
}

/* SIGTERM with a job running: the server exits 0 and the job's files on
 * disk (manifest, index, transcripts) all parse: nothing torn. */
Test(jobs_api, sigterm_with_a_job_running, .init = start_for_sigterm, .fini = stop,
     .timeout = 120)
{
    char *id = submit_of("term", 6, true);
    json_t *j = job_wait(id, "persisted", 1);
    json_decref(j);
    sigterm_and_wait();
    char path[256];
    snprintf(path, sizeof path, "%s/term/task_manifest.json", jobs_dir);
    json_t *m = json_load_file(path, 0, NULL);
    cr_assert(json_is_object(m), "manifest parses");
    json_decref(m);
    int indexed = index_ids("term", 6);
    DIR *d;
    snprintf(path, sizeof path, "%s/term/transcripts", jobs_dir);
    cr_assert_not_null(d = opendir(path));
    struct dirent *e;
    int transcripts = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char tp[512];
        snprintf(tp, sizeof tp, "%s/%s", path, e->d_name);
        json_t *t = json_load_file(tp, 0, NULL);
        cr_expect(json_is_object(t), "%s parses", e->d_name);
        json_decref(t);
        transcripts++;
    }
    closedir(d);
    cr_expect_geq(transcripts, indexed);
    free(id);
}
