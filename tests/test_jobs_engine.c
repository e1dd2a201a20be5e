/* test_jobs_engine.c - a small multi-agent job through `parley run` on the
 * real CPU engine and the default model: every question ends (succeeded, or
 * failed after its re-prompts), the transcripts, manifest and index exist,
 * parse and agree, and round-2 prompts are served partly from the prefix
 * cache. Skips when the model file is absent. Under the sanitizers
 * (PARLEY_SANITIZED=1) the job is smaller. */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "tests/helpers/server_proc.h"

static char dir[64];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/pl_jobs_engine_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

static const char *model_path(void)
{
    return pl_test_model_path();
}

static bool sanitized(void)
{
    const char *s = getenv("PARLEY_SANITIZED");
    return s && *s && strcmp(s, "0") != 0;
}

static const char *const questions[] = {
    "{id: q_geo, text: \"What is the capital of France?\", choices: [Berlin, Paris, Rome, Madrid], answer: B}",
    "{id: q_math, text: \"What is 2 plus 3?\", choices: [\"4\", \"5\", \"6\", \"7\"], answer: B}",
    "{id: q_sci, text: \"Which planet is closest to the Sun?\", choices: [Venus, Earth, Mercury, Mars], answer: C}",
};

/* Two participants and a moderator speaking after them; greedy decoding so
 * a run is reproducible. */
static void write_job(const char *path, int n_questions, int max_tokens)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "experiment: engine_job\nnum_rounds: 2\nmax_retries: 1\n"
               "model_definitions:\n  smollm: {backend: cpu}\n"
               "sampling: {temperature: 0, max_tokens: %d}\n"
               "agent_definitions:\n"
               "  - {agent_id: p0, role: participant, model: smollm, system_prompt: \"Answer briefly.\"}\n"
               "  - {agent_id: p1, role: participant, model: smollm, system_prompt: \"Answer carefully.\"}\n"
               "  - agent_id: mod\n    role: moderator\n    model: smollm\n"
               "    system_prompt: \"You moderate. Decide.\"\n"
               "    role_specific_config: {speak_after_within_round: [p0, p1]}\n"
               "validation: {enabled: true}\nquestions:\n", max_tokens);
    for (int i = 0; i < n_questions; i++)
        fprintf(f, "  - %s\n", questions[i]);
    fclose(f);
}

/* Run `parley run` to its end; stderr into err. Returns the exit status, or
 * -1 when it died on a signal (a sanitizer abort, a crash). */
static int run_parley(const char *const *args, char *err, size_t errlen)
{
    char path[128];
    snprintf(path, sizeof path, "%s/stderr", dir);
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
    cr_assert_geq(fd, 0);
    pid_t pid = fork();
    if (pid == 0) {
        const char *argv[32] = {pl_test_bin(), "run"};
        int n = 2;
        for (int i = 0; args[i]; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        dup2(fd, 2);
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    lseek(fd, 0, SEEK_SET);
    ssize_t n = read(fd, err, errlen - 1);
    err[n > 0 ? n : 0] = '\0';
    close(fd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static json_t *load_json(const char *fmt, const char *a)
{
    char path[512];
    snprintf(path, sizeof path, fmt, dir, a);
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    cr_assert_not_null(j, "%s: %s", path, e.text);
    return j;
}

/* The index: one line per question, each a JSON object; returns them keyed
 * by question id. */
static json_t *load_index(void)
{
    char path[256], line[8192];
    snprintf(path, sizeof path, "%s/engine_job/engine_job_index.jsonl", dir);
    FILE *f = fopen(path, "r");
    json_t *by_id = json_object();
    if (!f)
        return by_id;            /* written at the first success: none yet */
    while (fgets(line, sizeof line, f)) {
        json_error_t e;
        json_t *o = json_loads(line, 0, &e);
        cr_assert_not_null(o, "index line does not parse: %s", e.text);
        const char *id = json_string_value(json_object_get(o, "question_id"));
        cr_assert_not_null(id);
        cr_assert_null(json_object_get(by_id, id), "duplicate index line for %s", id);
        json_object_set_new(by_id, id, o);
    }
    fclose(f);
    return by_id;
}

/* Checks one transcript against the manifest and index; adds its round-2
 * attempts' prompt and cached tokens. */
static void check_transcript(const char *qid, const char *status, json_t *index,
                             long *p2, long *c2, int *n2)
{
    json_t *t = load_json("%s/engine_job/transcripts/%s.json", qid);
    cr_assert_str_eq(json_string_value(json_object_get(t, "question_id")), qid);
    cr_assert_str_eq(json_string_value(json_object_get(t, "status")), status);
    /* The index holds one line per succeeded question, none for failed. */
    json_t *ix = json_object_get(index, qid);
    cr_assert_eq(ix != NULL, !strcmp(status, "succeeded"), "%s (%s) in the index: %d", qid,
                 status, ix != NULL);
    if (ix)
        cr_assert_str_eq(json_string_value(json_object_get(ix, "status")), status);
    json_t *attempts = json_object_get(t, "attempts");
    cr_assert(json_array_size(attempts) >= 1, "%s: no attempts", qid);
    size_t i;
    json_t *a;
    json_array_foreach(attempts, i, a) {
        int pt = (int)json_integer_value(json_object_get(a, "prompt_tokens"));
        int ct = (int)json_integer_value(json_object_get(a, "cached_tokens"));
        cr_assert_gt(pt, 0, "%s: attempt %zu has no prompt tokens", qid, i);
        cr_assert(ct >= 0 && ct < pt, "%s: cached %d of %d", qid, ct, pt);
        if (json_integer_value(json_object_get(a, "round")) >= 1) {
            /* An agent's round-2 prompt extends its round-1 prompt and
             * reply (append-only), so its head is in the cache. */
            cr_assert_gt(ct, 0, "%s: round-2 attempt %zu was not served from the cache",
                         qid, i);
            *p2 += pt;
            *c2 += ct;
            (*n2)++;
        }
    }
    if (ix)
        cr_assert_eq(json_integer_value(json_object_get(ix, "rounds_completed")), 2);
    json_decref(t);
}

Test(jobs_engine, small_debate_on_the_default_model, .init = setup, .fini = teardown,
     .timeout = 600)
{
    PL_TEST_MODEL_OR_SKIP();
    int nq = sanitized() ? 2 : 3, max_tokens = sanitized() ? 12 : 24;
    char job[128], stats[128], err[8192];
    snprintf(job, sizeof job, "%s/job.yaml", dir);
    snprintf(stats, sizeof stats, "%s/stats.json", dir);
    write_job(job, nq, max_tokens);
    const char *args[] = {job, "--backend", "cpu", "--model", model_path(), "--threads", "2",
                          "--output", dir, "--stats", stats, NULL};
    int rc = run_parley(args, err, sizeof err);
    /* 0: every question succeeded; 1: some failed after their re-prompts. */
    cr_assert(rc == 0 || rc == 1, "parley run exited %d: %s", rc, err);

    json_t *manifest = load_json("%s/engine_job/%s", "task_manifest.json");
    json_t *qs = json_object_get(manifest, "questions");
    cr_assert_eq(json_object_size(qs), (size_t)nq);
    json_t *index = load_index();
    cr_assert_leq(json_object_size(index), (size_t)nq);
    int succeeded = 0, failed = 0, n2 = 0;
    long p2 = 0, c2 = 0;
    const char *qid;
    json_t *q;
    json_object_foreach(qs, qid, q) {
        const char *st = json_string_value(json_object_get(q, "status"));
        cr_assert_not_null(st);
        cr_assert(!strcmp(st, "succeeded") || !strcmp(st, "failed"),
                  "%s did not reach a final status: %s", qid, st);
        succeeded += !strcmp(st, "succeeded");
        failed += !strcmp(st, "failed");
        check_transcript(qid, st, index, &p2, &c2, &n2);
    }
    json_t *counts = json_object_get(manifest, "counts");
    cr_assert_eq(json_integer_value(json_object_get(counts, "succeeded")), succeeded);
    cr_assert_eq(json_integer_value(json_object_get(counts, "failed")), failed);
    cr_assert_eq(rc, failed ? 1 : 0, "exit status agrees with the manifest");
    cr_assert_eq(json_object_size(index), (size_t)succeeded, "one index line per success");

    json_t *st = load_json("%s/%s", "stats.json");
    cr_assert_eq(json_integer_value(json_object_get(st, "succeeded")), succeeded);
    cr_assert_eq(json_integer_value(json_object_get(st, "failed")), failed);
    json_t *kv = json_object_get(json_array_get(json_object_get(st, "backends"), 0), "kv");
    cr_assert_gt(json_integer_value(json_object_get(kv, "prefix_hits")), 0);
    cr_assert_gt(n2, 0, "no conversation reached round 2 (%d succeeded, %d failed): %s",
                 succeeded, failed, err);
    cr_assert_gt(c2, 0);
    fprintf(stderr, "jobs_engine: %d succeeded, %d failed; round-2 prompts: %ld of %ld "
            "tokens from the prefix cache\n", succeeded, failed, c2, p2);
    json_decref(st);
    json_decref(index);
    json_decref(manifest);
}
