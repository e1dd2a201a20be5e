/* test_jobs_share_http.c - HTTP jobs on one served model share its slots:
 * /status shows each job's share, the backend never queues, the jobs get
 * slots at the ratio of their weights, and an OpenAI request finds its
 * reserved slot while the jobs keep the model busy. */
#include <criterion/criterion.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/helpers/server_proc.h"

static pl_test_server srv;
static char jobs_dir[64];

static void start(void)
{
    snprintf(jobs_dir, sizeof jobs_dir, "/tmp/pl_share_http_XXXXXX");
    cr_assert_not_null(mkdtemp(jobs_dir));
    setenv("PARLEY_JOBS_DIR", jobs_dir, 1);
    const char *args[] = {"--backend", "mock", "--served-model-name", "smol",
                          "--mock-token-delay-ms", "4", "--mock-capacity", "8",
                          "--log-level", "warn", NULL};
    cr_assert_eq(pl_test_server_start(&srv, args), 0);
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

static json_t *http_json(const char *method, const char *path, const char *body, long *status)
{
    char url[256];
    snprintf(url, sizeof url, "%s%s", srv.url, path);
    pl_test_resp r;
    cr_assert_eq(pl_test_http(method, url, body, body ? strlen(body) : 0, &r), 0);
    if (status)
        *status = r.status;
    json_t *j = json_loads(r.body, 0, NULL);
    cr_assert_not_null(j, "not JSON: %s", r.body);
    pl_test_resp_free(&r);
    return j;
}

static void submit(const char *exp, double weight)
{
    char b[16384];
    int n = snprintf(b, sizeof b,
        "{\"experiment\":\"%s\",\"weight\":%g,\"models\":{\"smol\":{}},"
        "\"agents\":[{\"id\":\"a\"},{\"id\":\"b\"}],\"num_rounds\":2,"
        "\"validation\":{\"enabled\":false},\"sampling\":{\"max_tokens\":12},"
        "\"questions\":[", exp, weight);
    for (int i = 0; i < 60; i++)
        n += snprintf(b + n, sizeof b - (size_t)n, "%s{\"id\":\"q%d\",\"text\":\"Q%d?\"}",
                      i ? "," : "", i, i);
    snprintf(b + n, sizeof b - (size_t)n, "]}");
    long st;
    json_t *j = http_json("POST", "/v1/jobs", b, &st);
    cr_assert_eq(st, 201, "%s", json_dumps(j, 0));
    json_decref(j);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

Test(jobs_share_http, weights_reserve_and_status, .init = start, .fini = stop,
     .timeout = 120)
{
    submit("light", 1);
    submit("heavy", 2);
    double ratio = 0;
    int polls = 0, max_jobs_in_flight = 0;
    bool chatted = false;
    for (int i = 0; i < 400; i++, polls++) {
        json_t *st = http_json("GET", "/status", NULL, NULL);
        json_t *slots = json_array_get(json_object_get(st, "model_slots"), 0);
        cr_assert_not_null(slots, "/status has model_slots");
        cr_assert_eq(json_integer_value(json_object_get(slots, "capacity")), 8);
        cr_assert_eq(json_integer_value(json_object_get(slots, "interactive_reserve")), 1);
        int in = (int)json_integer_value(json_object_get(slots, "jobs_in_flight"));
        if (in > max_jobs_in_flight)
            max_jobs_in_flight = in;
        json_t *model = json_object_get(json_object_get(st, "models"), "smol");
        cr_assert(json_is_integer(json_object_get(model, "waiting")));
        cr_assert_eq(json_integer_value(json_object_get(model, "waiting")), 0,
                     "the backend never queues: %s", json_dumps(model, 0));
        json_t *jobs = json_object_get(slots, "jobs");
        if (json_array_size(jobs) == 2) {
            json_int_t d[2];
            for (int k = 0; k < 2; k++) {
                json_t *e = json_array_get(jobs, (size_t)k);
                int w = (int)json_number_value(json_object_get(e, "weight"));
                d[w - 1] = json_integer_value(json_object_get(e, "dispatched"));
                cr_assert(json_is_number(json_object_get(e, "share")));
            }
            if (d[0] + d[1] >= 90)
                ratio = (double)d[1] / (double)d[0];
            if (!chatted && d[0] + d[1] >= 30) {
                /* The model is full of job requests: this one takes the
                 * reserved slot at once. */
                long cs;
                json_t *c = http_json("POST", "/v1/chat/completions",
                    "{\"model\":\"smol\",\"max_tokens\":3,\"messages\":"
                    "[{\"role\":\"user\",\"content\":\"hi\"}]}", &cs);
                cr_assert_eq(cs, 200, "%s", json_dumps(c, 0));
                json_decref(c);
                chatted = true;
            }
        }
        json_decref(st);
        if (ratio > 0)
            break;
        sleep_ms(20);
    }
    fprintf(stderr, "heavy/light dispatched ratio %.2f after %d polls; jobs in flight <= %d\n",
            ratio, polls, max_jobs_in_flight);
    cr_assert(chatted);
    cr_assert(ratio > 1.7 && ratio < 2.3, "weights 2:1 -> ratio %.2f", ratio);
    cr_assert_leq(max_jobs_in_flight, 7, "jobs leave the interactive reserve");
    int rc = pl_test_server_stop(&srv);
    srv.pid = 0;
    cr_assert_eq(rc, 0);
}
