/* test_job_save.c - a job's transcripts reach disk when their conversations
 * finish, even while another process holds the experiment lock; only the
 * manifest and index wait for the lock. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include <event2/event.h>

#include "backends/mock/mock.h"
#include "src/jobs/jobs.h"

#define NQ 30

static char root[64];

static void setup(void)
{
    snprintf(root, sizeof root, "/tmp/pl_jsave_XXXXXX");
    cr_assert_not_null(mkdtemp(root));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    cr_assert_eq(system(cmd), 0);
}

static pl_job_spec make_spec(void)
{
    char buf[8192];
    size_t n = (size_t)snprintf(buf, sizeof buf,
        "{\"experiment\":\"held\",\"models\":{\"m\":{\"backend\":\"mock\"}},"
        "\"agents\":[{\"id\":\"a\"},{\"id\":\"b\"}],\"num_rounds\":2,"
        "\"validation\":{\"enabled\":false},\"sampling\":{\"max_tokens\":64},\"questions\":[");
    for (int i = 0; i < NQ; i++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s{\"id\":\"h%02d\",\"text\":\"Q%d\"}",
                              i ? "," : "", i, i);
    snprintf(buf + n, sizeof buf - n, "]}");
    json_t *r = json_loads(buf, 0, NULL);
    pl_job_spec s;
    pl_spec_problems p = {0};
    int rc = pl_job_spec_parse(r, NULL, &s, &p);
    for (int i = 0; i < p.n; i++)
        fprintf(stderr, "%s: %s\n", p.v[i].path, p.v[i].message);
    cr_assert_eq(rc, 0);
    pl_spec_problems_free(&p);
    json_decref(r);
    return s;
}

static int count_transcripts(void)
{
    char path[256];
    snprintf(path, sizeof path, "%s/held/transcripts", root);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strstr(e->d_name, ".json") && !strstr(e->d_name, ".tmp");
    closedir(d);
    return n;
}

static void on_finished(void *ud, pl_job *j)
{
    event_base_loopbreak(ud);
}

/* Run the loop for about ms milliseconds. */
static void spin(struct event_base *base, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
}

Test(job_save, transcripts_reach_disk_while_the_lock_is_held, .init = setup,
     .fini = teardown, .timeout = 60)
{
    struct event_base *base = event_base_new();
    pl_io_pool *io = pl_io_pool_new(base, 2);
    pl_mock_opts mo = {.model = "m", .capacity = 8, .token_delay_ms = 1,
                       .max_model_len = 4096};
    pl_backend *b = pl_mock_new(base, &mo);
    pl_backend *bs[1] = {b};
    pl_job_spec s = make_spec();
    pl_job_opts o = {.base = base, .io = io, .id = "held", .output_root = root,
                     .backends = bs, .on_finished = on_finished, .ud = base};
    char err[256];
    pl_job *j = pl_job_new(&s, &o, err, sizeof err);
    cr_assert_not_null(j, "%s", err);
    cr_assert_eq(pl_job_start(j), 0);
    for (int i = 0; i < 200 && pl_job_get_state(j) == PL_JOB_STARTING; i++)
        spin(base, 5);
    cr_assert_eq(pl_job_get_state(j), PL_JOB_RUNNING);

    /* Another process's lock: a separate open file description. */
    char lock[256];
    snprintf(lock, sizeof lock, "%s/held/.lock", root);
    int fd = open(lock, O_RDWR);
    cr_assert_geq(fd, 0);
    cr_assert_eq(flock(fd, LOCK_EX), 0);
    pl_job_progress p = {0};
    for (int i = 0; i < 1000; i++) {
        pl_job_get_progress(j, &p);
        /* Files renamed into place, and their completions back on the loop. */
        if (p.succeeded + p.failed == NQ && count_transcripts() == NQ && p.saved == NQ)
            break;
        spin(base, 10);
    }
    pl_job_get_progress(j, &p);
    cr_assert_eq(p.succeeded, NQ, "every conversation finished under the held lock");
    cr_assert_eq(count_transcripts(), NQ,
                 "every transcript is on disk while the lock is held (%d)", count_transcripts());
    cr_assert_eq(p.saved, NQ);
    cr_assert_eq(p.persisted, 0, "the manifest step waits for the lock");
    cr_assert_eq(pl_job_get_state(j), PL_JOB_RUNNING);
    /* A finished transcript is served from disk, not kept in memory. */
    json_t *t = pl_job_transcript(j, "h07");
    cr_assert_not_null(t);
    cr_assert_str_eq(json_string_value(json_object_get(t, "status")), "succeeded");
    json_decref(t);

    /* Release: the manifest and index catch up and the job completes. */
    flock(fd, LOCK_UN);
    close(fd);
    event_base_dispatch(base);
    cr_assert_eq(pl_job_get_state(j), PL_JOB_COMPLETED);
    pl_job_get_progress(j, &p);
    cr_assert_eq(p.persisted, NQ);
    char path[256];
    snprintf(path, sizeof path, "%s/held/task_manifest.json", root);
    json_t *m = json_load_file(path, 0, NULL);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(m, "counts"), "succeeded")),
                 NQ);
    json_decref(m);
    pl_job_free(j);
    pl_backend_free(b);
    pl_io_pool_free(io);
    event_base_free(base);
}

Test(job_save, free_while_the_lock_is_held_commits_after_release, .init = setup,
     .fini = teardown, .timeout = 60)
{
    struct event_base *base = event_base_new();
    pl_io_pool *io = pl_io_pool_new(base, 2);
    pl_mock_opts mo = {.model = "m", .capacity = 8, .max_model_len = 4096};
    pl_backend *b = pl_mock_new(base, &mo);
    pl_backend *bs[1] = {b};
    pl_job_spec s = make_spec();
    pl_job_opts o = {.base = base, .io = io, .id = "held", .output_root = root,
                     .backends = bs, .on_finished = on_finished, .ud = base};
    char err[256];
    pl_job *j = pl_job_new(&s, &o, err, sizeof err);
    cr_assert_eq(pl_job_start(j), 0);
    for (int i = 0; i < 200 && pl_job_get_state(j) == PL_JOB_STARTING; i++)
        spin(base, 5);
    char lock[256];
    snprintf(lock, sizeof lock, "%s/held/.lock", root);
    int fd = open(lock, O_RDWR);
    cr_assert_eq(flock(fd, LOCK_EX), 0);
    pl_job_progress p = {0};
    for (int i = 0; i < 500 && p.saved < NQ; i++) {
        spin(base, 10);
        pl_job_get_progress(j, &p);
    }
    cr_assert_eq(p.saved, NQ);
    /* Release from another thread's point of view: after free starts
     * waiting. A child process holds nothing, so unlock first, then free;
     * free must still commit the whole queue. */
    flock(fd, LOCK_UN);
    close(fd);
    pl_job_free(j);
    char path[256];
    snprintf(path, sizeof path, "%s/held/task_manifest.json", root);
    json_t *m = json_load_file(path, 0, NULL);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(m, "counts"), "succeeded")),
                 NQ, "nothing finished is dropped at free");
    json_decref(m);
    pl_backend_free(b);
    pl_io_pool_free(io);
    event_base_free(base);
}
