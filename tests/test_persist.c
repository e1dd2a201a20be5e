/* test_persist.c - job output on disk: atomic writes, repair on open,
 * resume without duplicate index lines. The crash test (SIGKILL at random
 * points) is in test_persist_crash.c. */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/jobs/persist.h"

static char root[64];

static void setup(void)
{
    snprintf(root, sizeof root, "/tmp/pl_persist_XXXXXX");
    cr_assert_not_null(mkdtemp(root));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    cr_assert_eq(system(cmd), 0);
}

static json_t *transcript(const char *qid, const char *status)
{
    return json_pack("{s:s, s:s, s:{s:s}}", "question_id", qid, "status", status,
                     "summary", "final_answer", "B");
}

static int count_lines(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        cr_assert(strchr(line, '\n'), "every index line is complete");
        json_t *o = json_loads(line, 0, NULL);
        cr_assert_not_null(o, "index line parses: %s", line);
        if (!needle || strstr(line, needle))
            n++;
        json_decref(o);
    }
    fclose(f);
    return n;
}

static void write_one(pl_persist *p, const char *qid, bool ok)
{
    json_t *t = transcript(qid, ok ? "succeeded" : "failed");
    pl_persist_record r = {qid, ok, ok ? NULL : "max retries", t};
    cr_assert_eq(pl_persist_write(p, &r, 1), 0);
    json_decref(t);
}

Test(persist, layout_and_resume, .init = setup, .fini = teardown)
{
    char err[256];
    pl_persist *p = pl_persist_open(root, "exp", err, sizeof err);
    cr_assert_not_null(p, "%s", err);
    const char *ids[] = {"q1", "q2", "q3"};
    cr_assert_eq(pl_persist_register(p, ids, 3, NULL, err, sizeof err), 0);
    write_one(p, "q1", true);
    write_one(p, "q2", false);
    write_one(p, "q1", true);               /* again: no duplicate line */
    pl_persist_close(p);

    char path[256];
    snprintf(path, sizeof path, "%s/exp/exp_index.jsonl", root);
    cr_assert_eq(count_lines(path, NULL), 1);
    snprintf(path, sizeof path, "%s/exp/transcripts/q2.json", root);
    cr_assert_eq(access(path, R_OK), 0);
    snprintf(path, sizeof path, "%s/exp/task_manifest.json", root);
    json_t *m = json_load_file(path, 0, NULL);
    cr_assert_not_null(m);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(
        json_object_get(m, "questions"), "q2"), "status")), "failed");
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(m, "counts"), "pending")), 1);
    json_decref(m);

    p = pl_persist_open(root, "exp", err, sizeof err);
    cr_assert(pl_persist_succeeded(p, "q1"));
    cr_assert_not(pl_persist_succeeded(p, "q2"));
    write_one(p, "q2", true);
    write_one(p, "q1", false);              /* never downgrades */
    cr_assert(pl_persist_succeeded(p, "q1"));
    pl_persist_close(p);
    snprintf(path, sizeof path, "%s/exp/exp_index.jsonl", root);
    cr_assert_eq(count_lines(path, NULL), 2);
    json_t *t = pl_persist_read_transcript(
        (snprintf(path, sizeof path, "%s/exp", root), path), "q1");
    cr_assert_str_eq(json_string_value(json_object_get(t, "status")), "succeeded");
    json_decref(t);
}

Test(persist, repairs_torn_line_and_duplicates, .init = setup, .fini = teardown)
{
    char err[256], path[256];
    pl_persist *p = pl_persist_open(root, "e", err, sizeof err);
    write_one(p, "a", true);
    write_one(p, "b", true);
    pl_persist_close(p);
    snprintf(path, sizeof path, "%s/e/e_index.jsonl", root);
    FILE *f = fopen(path, "a");
    fputs("{\"question_id\": \"a\", \"status\": \"succeeded\"}\n{\"question_id\": \"c\", \"sta", f);
    fclose(f);
    p = pl_persist_open(root, "e", err, sizeof err);
    cr_assert_not_null(p, "%s", err);
    cr_assert_eq(pl_persist_n_succeeded(p), 2);
    cr_assert_not(pl_persist_succeeded(p, "c"), "torn line is not a completion");
    pl_persist_close(p);
    cr_assert_eq(count_lines(path, NULL), 2);
    cr_assert_eq(count_lines(path, "\"a\""), 1);
}

Test(persist, reconciles_manifest_and_index, .init = setup, .fini = teardown)
{
    char err[256], path[256];
    pl_persist *p = pl_persist_open(root, "e", err, sizeof err);
    write_one(p, "a", true);
    write_one(p, "b", true);
    pl_persist_close(p);
    /* Crash between index and manifest: drop b's index line. */
    snprintf(path, sizeof path, "%s/e/e_index.jsonl", root);
    FILE *f = fopen(path, "r");
    char l1[1024];
    cr_assert_not_null(fgets(l1, sizeof l1, f));
    fclose(f);
    f = fopen(path, "w");
    fputs(l1, f);
    fclose(f);
    p = pl_persist_open(root, "e", err, sizeof err);
    cr_assert(pl_persist_succeeded(p, "b"), "re-indexed from manifest + transcript");
    pl_persist_close(p);
    cr_assert_eq(count_lines(path, NULL), 2);
}

Test(persist, atomic_write_leaves_no_temp, .init = setup, .fini = teardown)
{
    char path[256];
    snprintf(path, sizeof path, "%s/f.json", root);
    cr_assert_eq(pl_persist_atomic_write(path, "{}", 2), 0);
    cr_assert_eq(pl_persist_atomic_write(path, "[1]", 3), 0);
    json_t *j = json_load_file(path, 0, NULL);
    cr_assert(json_is_array(j));
    json_decref(j);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "test $(ls %s | wc -l) -eq 1", root);
    cr_assert_eq(system(cmd), 0);
}

/* ---- SIGKILL at random points ---- */

#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include <event2/event.h>

#include "backends/mock/mock.h"
#include "src/jobs/jobs.h"

#define CRASH_Q 30

static void crash_on_finished(void *ud, pl_job *j)
{
    event_base_loopbreak(ud);
}

/* Run the crash-test job to completion under dir; returns its exit code. */
static int run_crash_job(const char *dir, int delay_ms)
{
    char buf[16384];
    size_t n = (size_t)snprintf(buf, sizeof buf,
        "{\"experiment\":\"crash\",\"models\":{\"m\":{\"backend\":\"mock\"}},"
        "\"agents\":[{\"id\":\"a\"},{\"id\":\"b\"},{\"id\":\"mod\","
        "\"speak_after_within_round\":[\"a\",\"b\"]}],\"num_rounds\":2,"
        "\"sampling\":{\"max_tokens\":4096},\"questions\":[");
    for (int i = 0; i < CRASH_Q; i++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s{\"id\":\"c%02d\",\"text\":\"Q%d\","
                              "\"choices\":[\"p\",\"q\",\"r\"]}", i ? "," : "", i, i);
    snprintf(buf + n, sizeof buf - n, "]}");
    json_t *root_j = json_loads(buf, 0, NULL);
    pl_job_spec s;
    pl_spec_problems p = {0};
    if (!root_j || pl_job_spec_parse(root_j, NULL, &s, &p) < 0)
        return 3;
    json_decref(root_j);
    struct event_base *base = event_base_new();
    pl_io_pool *io = pl_io_pool_new(base, 2);
    pl_mock_opts mo = {.model = "m", .capacity = 16, .echo = 1,
                       .token_delay_ms = delay_ms, .max_model_len = 8192};
    pl_backend *b = pl_mock_new(base, &mo);
    pl_backend *bs[1] = {b};
    pl_job_opts o = {.base = base, .io = io, .id = "crash-job", .output_root = dir,
                     .backends = bs, .on_finished = crash_on_finished, .ud = base};
    char err[256];
    pl_job *j = pl_job_new(&s, &o, err, sizeof err);
    if (!j || pl_job_start(j) < 0)
        return 4;
    event_base_dispatch(base);
    int rc = pl_job_get_state(j) == PL_JOB_COMPLETED ? 0 : 5;
    pl_job_free(j);
    pl_backend_free(b);
    pl_io_pool_free(io);
    event_base_free(base);
    return rc;
}

/* Check the files as a crash left them (before any repair): the manifest
 * parses, index lines are unique and complete (but the last may be torn),
 * every indexed question has a succeeded transcript and the manifest never
 * says succeeded without a transcript. Returns the indexed count. */
static int check_crash_state(const char *dir)
{
    char path[256];
    snprintf(path, sizeof path, "%s/crash/task_manifest.json", dir);
    json_t *m = json_load_file(path, 0, NULL);
    if (access(path, F_OK) == 0)
        cr_assert_not_null(m, "manifest parses after SIGKILL");
    snprintf(path, sizeof path, "%s/crash/crash_index.jsonl", dir);
    FILE *f = fopen(path, "r");
    json_t *seen = json_object();
    char line[8192];
    while (f && fgets(line, sizeof line, f)) {
        if (!strchr(line, '\n'))
            break;                                  /* a torn last line */
        json_t *o = json_loads(line, 0, NULL);
        cr_assert_not_null(o, "complete index line parses");
        const char *id = json_string_value(json_object_get(o, "question_id"));
        cr_assert_null(json_object_get(seen, id), "duplicate index line for %s", id);
        json_object_set_new(seen, id, json_true());
        snprintf(path, sizeof path, "%s/crash", dir);
        json_t *t = pl_persist_read_transcript(path, id);
        cr_assert_not_null(t, "indexed %s has its transcript", id);
        cr_assert_str_eq(json_string_value(json_object_get(t, "status")), "succeeded");
        json_decref(t);
        json_decref(o);
    }
    if (f)
        fclose(f);
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(m, "questions"), k, v) {
        const char *st = json_string_value(json_object_get(v, "status"));
        if (st && !strcmp(st, "succeeded")) {
            snprintf(path, sizeof path, "%s/crash/transcripts/%s.json", dir, k);
            cr_assert_eq(access(path, R_OK), 0, "manifest-succeeded %s has a transcript", k);
        }
    }
    int n = (int)json_object_size(seen);
    json_decref(seen);
    json_decref(m);
    return n;
}

static int succeeded_after_repair(const char *dir)
{
    char err[256];
    pl_persist *p = pl_persist_open(dir, "crash", err, sizeof err);
    cr_assert_not_null(p, "%s", err);
    int n = pl_persist_n_succeeded(p);
    pl_persist_close(p);
    return n;
}

static void compare_transcripts(const char *a, const char *b)
{
    char pa[256], pb[256];
    snprintf(pa, sizeof pa, "%s/crash", a);
    snprintf(pb, sizeof pb, "%s/crash", b);
    for (int i = 0; i < CRASH_Q; i++) {
        char id[16];
        snprintf(id, sizeof id, "c%02d", i);
        json_t *x = pl_persist_read_transcript(pa, id), *y = pl_persist_read_transcript(pb, id);
        cr_assert(x && y, "%s present in both runs", id);
        cr_assert(json_equal(json_object_get(x, "rounds"), json_object_get(y, "rounds")),
                  "%s: same messages as the uninterrupted run", id);
        cr_assert(json_equal(json_object_get(x, "summary"), json_object_get(y, "summary")));
        json_decref(x);
        json_decref(y);
    }
}

Test(persist, sigkill_at_random_points, .init = setup, .fini = teardown, .timeout = 240)
{
    char crashed[128], clean[128];
    snprintf(crashed, sizeof crashed, "%s/crashed", root);
    snprintf(clean, sizeof clean, "%s/clean", root);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert_eq(run_crash_job(clean, 0), 0, "uninterrupted run");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    /* Kill points spread over the length of an uninterrupted run. */
    long span_us = (t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000;
    if (span_us < 20000)
        span_us = 20000;
    /* PARLEY_KILL_SEED=N reproduces a run: every run prints its seed. */
    const char *env_seed = getenv("PARLEY_KILL_SEED");
    unsigned seed = env_seed && *env_seed ? (unsigned)strtoul(env_seed, NULL, 10)
                                          : (unsigned)time(NULL);
    fprintf(stderr, "persist: kill points from seed %u (PARLEY_KILL_SEED=%u to repeat)\n",
            seed, seed);
    const unsigned seed0 = seed;
    int before = 0, kills = 0;
    for (int round = 0; round < 8; round++) {
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0)
            _exit(run_crash_job(crashed, 0));
        long us = 2000 + (long)(rand_r(&seed) % (unsigned)(span_us / 2));
        struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
        nanosleep(&ts, NULL);
        int st;
        if (kill(pid, SIGKILL) == 0)
            kills++;
        waitpid(pid, &st, 0);
        int indexed = check_crash_state(crashed);
        int now = succeeded_after_repair(crashed);
        cr_assert_geq(now, before, "nothing completed is lost (PARLEY_KILL_SEED=%u)", seed0);
        cr_assert_geq(now, indexed, "PARLEY_KILL_SEED=%u", seed0);
        fprintf(stderr, "kill %d after %ld us: indexed %d, succeeded %d (run: %ld us)\n",
                round, us, indexed, now, span_us);
        before = now;
        if (now == CRASH_Q)
            break;
    }
    cr_assert_gt(kills, 0);
    cr_assert_eq(run_crash_job(crashed, 0), 0, "final resumed run (PARLEY_KILL_SEED=%u)", seed0);
    cr_assert_eq(check_crash_state(crashed), CRASH_Q, "PARLEY_KILL_SEED=%u", seed0);
    char path[256];
    snprintf(path, sizeof path, "%s/crash/task_manifest.json", crashed);
    json_t *m = json_load_file(path, 0, NULL);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(m, "counts"), "succeeded")),
                 CRASH_Q, "manifest and index agree");
    json_decref(m);
    compare_transcripts(crashed, clean);
}

/* ---- persistence errors ---- */

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return strdup(buf);
}

/* A manifest that does not parse is refused with a message naming it, and
 * left as it was: it may hold the only record of failed questions. */
Test(persist, unparseable_manifest_is_refused_not_replaced, .init = setup, .fini = teardown)
{
    char err[512] = "";
    pl_persist *p = pl_persist_open(root, "bad", err, sizeof err);
    cr_assert_not_null(p, "%s", err);
    write_one(p, "q1", false);
    pl_persist_close(p);
    char path[256];
    snprintf(path, sizeof path, "%s/bad/task_manifest.json", root);
    FILE *f = fopen(path, "w");
    fputs("{\"experiment\": \"bad\",\n \"questions\": {\"q1\": {\"status\": \"failed\"", f);
    fclose(f);
    char *before = slurp(path);
    err[0] = '\0';
    cr_assert_null(pl_persist_open(root, "bad", err, sizeof err), "a torn manifest was accepted");
    cr_expect(strstr(err, path) && strstr(err, "not a valid task manifest") &&
              strstr(err, "will not replace it"), "%s", err);
    char *after = slurp(path);
    cr_expect_str_eq(after, before, "the manifest was left untouched");
    free(after);
    /* Valid JSON that is not an object: refused too. */
    f = fopen(path, "w");
    fputs("[1, 2]\n", f);
    fclose(f);
    cr_assert_null(pl_persist_open(root, "bad", err, sizeof err));
    cr_expect(strstr(err, "not a JSON object"), "%s", err);
    free(before);
}

/* An output directory that cannot be created is a clear error. */
Test(persist, unwritable_output_directory, .init = setup, .fini = teardown)
{
    char file[128], err[512] = "";
    snprintf(file, sizeof file, "%s/plain_file", root);
    FILE *f = fopen(file, "w");
    fputs("x", f);
    fclose(f);
    cr_assert_null(pl_persist_open(file, "exp", err, sizeof err));
    cr_expect(strstr(err, "cannot create") && strstr(err, file) &&
              strstr(err, "Not a directory"), "%s", err);
}

/* Another holder of the experiment lock: a non-waiting commit says busy and
 * writes nothing; after the release it commits. */
Test(persist, lock_contention, .init = setup, .fini = teardown)
{
    char err[512] = "", path[256];
    pl_persist *p = pl_persist_open(root, "held", err, sizeof err);
    cr_assert_not_null(p, "%s", err);
    snprintf(path, sizeof path, "%s/held/.lock", root);
    int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0);
    cr_assert_eq(flock(fd, LOCK_EX), 0);
    json_t *t = transcript("q1", "succeeded");
    pl_persist_record r = {"q1", true, NULL, t, NULL};
    r.staged = pl_persist_stage(p, &r, err, sizeof err);
    cr_assert_not_null(r.staged, "transcripts are staged without the lock: %s", err);
    cr_assert_eq(pl_persist_commit(p, &r, 1, false), PL_PERSIST_BUSY);
    snprintf(path, sizeof path, "%s/held/held_index.jsonl", root);
    cr_expect_leq(count_lines(path, NULL), 0, "nothing indexed while the lock is held");
    flock(fd, LOCK_UN);
    close(fd);
    cr_assert_eq(pl_persist_commit(p, &r, 1, false), 0);
    cr_expect_eq(count_lines(path, "\"q1\""), 1);
    cr_expect(pl_persist_succeeded(p, "q1"));
    free((char *)r.staged);
    json_decref(t);
    pl_persist_close(p);
}
