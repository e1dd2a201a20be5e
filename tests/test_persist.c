/* test_persist.c - job output on disk: atomic writes, repair on open,
 * resume without duplicate index lines. The crash test (SIGKILL at random
 * points) is in test_persist_crash.c. */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/persist.h"

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
    cr_assert_eq(pl_persist_register(p, ids, 3), 0);
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
