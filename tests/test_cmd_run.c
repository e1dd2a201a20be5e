/* test_cmd_run.c - `parley run JOB.yaml`: exit statuses, spec errors with
 * FILE:LINE, Ctrl-C then resume. */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <pty.h>
#include <unistd.h>

#include <jansson.h>

#include "tests/helpers/model_path.h"
#include "tests/helpers/server_proc.h"

static char dir[64];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/pl_cmd_run_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

static pid_t spawn(const char *const *args, int err_fd)
{
    pid_t pid = fork();
    if (pid == 0) {
        const char *argv[32] = {pl_test_bin(), "run"};
        int n = 2;
        for (int i = 0; args[i]; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        dup2(err_fd, 2);
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* Run to the end; stderr into err. */
static int run(const char *const *args, char *err, size_t errlen)
{
    char path[128];
    snprintf(path, sizeof path, "%s/stderr", dir);
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
    pid_t pid = spawn(args, fd);
    int st;
    waitpid(pid, &st, 0);
    lseek(fd, 0, SEEK_SET);
    ssize_t n = read(fd, err, errlen - 1);
    err[n > 0 ? n : 0] = '\0';
    close(fd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int index_lines(void)
{
    char path[256];
    snprintf(path, sizeof path, "%s/debate_demo/debate_demo_index.jsonl", dir);
    FILE *f = fopen(path, "r");
    int n = 0, c;
    while (f && (c = fgetc(f)) != EOF)
        n += c == '\n';
    if (f)
        fclose(f);
    return n;
}

static const char *example(void)
{
    static char p[512];
    const char *src = getenv("PARLEY_SRC");
    snprintf(p, sizeof p, "%s/examples/debate.yaml", src ? src : ".");
    return p;
}

Test(cmd_run, debate_example_succeeds, .init = setup, .fini = teardown, .timeout = 120)
{
    char err[4096];
    const char *args[] = {example(), "--backend", "mock", "--mock-token-delay-ms", "0",
                          "--output", dir, NULL};
    int rc = run(args, err, sizeof err);
    cr_assert_eq(rc, 0, "stderr: %s", err);
    cr_assert(strstr(err, "20/20 succeeded"), "%s", err);
    cr_assert_eq(index_lines(), 20);
    const char *acc = strstr(err, "accuracy ");
    int c1 = -1, a1 = -1, rc1 = -1, ra1 = -1;
    cr_assert(acc && sscanf(acc, "accuracy %d/%d correct/answered over the experiment "
                                 "(this run %d/%d)", &c1, &a1, &rc1, &ra1) == 4, "%s", err);
    cr_assert_eq(a1, 20, "every question has a truth and a final answer: %s", err);
    cr_assert(c1 == rc1 && a1 == ra1, "a first run is the whole experiment: %s", err);
    /* Again: everything resumes as done, and the summary's accuracy is the
     * experiment's, not this run's empty share (issue 35.2). */
    rc = run(args, err, sizeof err);
    cr_assert_eq(rc, 0);
    cr_assert(strstr(err, "20 from an earlier run"), "%s", err);
    cr_assert_eq(index_lines(), 20);
    char want[128];
    snprintf(want, sizeof want, "accuracy %d/%d correct/answered over the experiment "
             "(this run 0/0)", c1, a1);
    cr_assert(strstr(err, want), "want '%s' in: %s", want, err);
}

Test(cmd_run, spec_errors_have_file_and_line, .init = setup, .fini = teardown)
{
    char path[128], err[4096];
    snprintf(path, sizeof path, "%s/bad.yaml", dir);
    FILE *f = fopen(path, "w");
    fputs("experiment: bad\nmodels:\n  m: {backend: mock}\nagents:\n  - id: a\n"
          "    speak_after_within_round: [ghost]\nnum_rounds: 0\nquestions:\n"
          "  - {id: q, text: t}\n", f);
    fclose(f);
    const char *args[] = {path, NULL};
    cr_assert_eq(run(args, err, sizeof err), 2);
    cr_assert(strstr(err, "bad.yaml:6: agents[0].speak_after_within_round[0]: unknown agent"),
              "%s", err);
    cr_assert(strstr(err, "bad.yaml:7: num_rounds:"), "%s", err);
    cr_assert(strstr(err, "bad.yaml:9: questions[0].choices:"), "%s", err);
    cr_assert(strstr(err, "3 problems"), "%s", err);
    const char *none[] = {NULL};
    cr_assert_eq(run(none, err, sizeof err), 2, "no job file");
}

/* A job whose questions finish one after another (capacity 1), so that an
 * interrupt can land after some of them are saved. */
#define SEQ_Q 12

static const char *write_seq_job(void)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/seq.yaml", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("experiment: seq\nmodels:\n  m: {backend: mock, mock_mode: echo}\n"
          "agents:\n  - id: a\nnum_rounds: 1\nsampling: {max_tokens: 1024}\nquestions:\n", f);
    for (int i = 0; i < SEQ_Q; i++)
        fprintf(f, "  - {id: q%02d, text: \"Question %d?\", choices: [yes, no]}\n", i, i);
    fclose(f);
    return path;
}

/* Question ids of OUT/seq/seq_index.jsonl; fails on a duplicate. */
static int seq_index_ids(void)
{
    char path[256], line[4096];
    snprintf(path, sizeof path, "%s/seq/seq_index.jsonl", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    bool seen[SEQ_Q] = {false};
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        const char *q = strstr(line, "\"question_id\":\"q");
        cr_assert_not_null(q, "index line without a question id: %s", line);
        int k = atoi(q + 16);
        cr_assert(k >= 0 && k < SEQ_Q, "%s", line);
        cr_assert_not(seen[k], "q%02d indexed twice", k);
        seen[k] = true;
        n++;
    }
    fclose(f);
    return n;
}

/* SIGINT once some questions are saved: the run stops gracefully (exit 130,
 * nothing torn), and the next run resumes: it skips exactly those and
 * indexes each question once. */
Test(cmd_run, ctrl_c_is_graceful_and_resumable, .init = setup, .fini = teardown,
     .timeout = 240)
{
    char path[128];
    snprintf(path, sizeof path, "%s/stderr", dir);
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
    const char *job = write_seq_job();
    const char *args[] = {job, "--backend", "mock", "--mock-token-delay-ms", "5",
                          "--mock-capacity", "1", "--output", dir, NULL};
    pid_t pid = spawn(args, fd);
    struct timespec ts = {0, 5000000};
    for (int i = 0; i < 24000 && seq_index_ids() == 0; i++)
        nanosleep(&ts, NULL);                   /* deadline: 120 s */
    kill(pid, SIGINT);
    int st;
    waitpid(pid, &st, 0);
    close(fd);
    cr_assert(WIFEXITED(st));
    cr_assert_eq(WEXITSTATUS(st), 130, "interrupted: 130, as a shell reports Ctrl-C");
    int before = seq_index_ids();
    cr_assert_gt(before, 0, "the interrupt came after a question was saved");
    cr_assert_lt(before, SEQ_Q, "the interrupt came before the end");
    char err[4096], want[64];
    const char *fast[] = {job, "--backend", "mock", "--mock-token-delay-ms", "0",
                          "--output", dir, NULL};
    cr_assert_eq(run(fast, err, sizeof err), 0, "%s", err);
    snprintf(want, sizeof want, "%d/%d succeeded (%d from an earlier run)", SEQ_Q, SEQ_Q,
             before);
    cr_assert(strstr(err, want), "want '%s' in: %s", want, err);
    cr_assert_eq(seq_index_ids(), SEQ_Q);
}

Test(cmd_run, strategies_run_the_example_and_write_stats, .init = setup, .fini = teardown,
     .timeout = 120)
{
    static const char *const strategies[] = {"naive", "fcfs", "parley"};
    char err[4096], stats[128], out[128];
    for (int i = 0; i < 3; i++) {
        snprintf(stats, sizeof stats, "%s/%s.json", dir, strategies[i]);
        snprintf(out, sizeof out, "%s/%s", dir, strategies[i]);
        const char *args[] = {example(), "--backend", "mock", "--mock-token-delay-ms", "0",
                              "--strategy", strategies[i], "--output", out,
                              "--stats", stats, NULL};
        cr_assert_eq(run(args, err, sizeof err), 0, "%s: %s", strategies[i], err);
        cr_assert(strstr(err, "20/20 succeeded"), "%s", err);
        FILE *f = fopen(stats, "r");
        cr_assert_not_null(f, "no --stats file");
        char buf[8192];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = '\0';
        fclose(f);
        char want[64];
        snprintf(want, sizeof want, "\"strategy\": \"%s\"", strategies[i]);
        cr_assert(strstr(buf, want), "%s", buf);
        cr_assert(strstr(buf, "\"makespan_ms\""), "%s", buf);
        cr_assert(strstr(buf, "\"succeeded\": 20"), "%s", buf);
    }
    const char *bad[] = {example(), "--backend", "mock", "--strategy", "lifo", NULL};
    cr_assert_eq(run(bad, err, sizeof err), 2);
    cr_assert(strstr(err, "--strategy: expected parley, fcfs or naive, got 'lifo'"), "%s", err);
}

/* Without a terminal, a status line every --progress-interval seconds. */
Test(cmd_run, progress_lines_without_a_tty, .init = setup, .fini = teardown, .timeout = 120)
{
    char err[16384];
    /* Constrained answers are 2 tokens: at 100 ms a token the 6 sequential
     * phases (3 rounds x participants, then the moderator) take >= 1.2 s,
     * several 0.2 s intervals whatever the machine's load. */
    const char *args[] = {example(), "--backend", "mock", "--mock-token-delay-ms", "100",
                          "--output", dir, "--progress-interval", "0.2", NULL};
    cr_assert_eq(run(args, err, sizeof err), 0, "%s", err);
    int lines = 0;
    for (const char *p = err; (p = strstr(p, "progress: ")); p++)
        lines++;
    cr_assert_geq(lines, 2, "status lines on a non-terminal stderr: %s", err);
    cr_assert(strstr(err, "/20 conversations | ok "), "%s", err);
    cr_assert(strstr(err, "| in-flight "), "%s", err);
    /* what the counts count (issue 35.6: a bare "saved" did not say) */
    cr_assert(strstr(err, "| transcripts on disk "), "%s", err);
    cr_assert(strstr(err, ", in manifest "), "%s", err);
    cr_assert_null(strstr(err, "saved"), "%s", err);
    cr_assert_null(strstr(err, "\033["), "no terminal escapes in a log: %s", err);
    const char *bad[] = {example(), "--progress-interval", "soon", NULL};
    cr_assert_eq(run(bad, err, sizeof err), 2);
    cr_assert(strstr(err, "--progress-interval: expected seconds"), "%s", err);
}

/* MAC_FAIRNESS_LIVE_STATUS=1 turns the live view on (seed 000's switch). */
Test(cmd_run, live_status_env_turns_the_live_view_on, .init = setup, .fini = teardown,
     .timeout = 120)
{
    int master, slave;
    cr_assert_eq(openpty(&master, &slave, NULL, NULL, NULL), 0);
    setenv("MAC_FAIRNESS_LIVE_STATUS", "1", 1);
    /* >= 1.2 s of run (2-token constrained answers at 100 ms a token, 6
     * sequential phases), so the view redraws its pools several times. */
    const char *args[] = {example(), "--backend", "mock", "--mock-token-delay-ms", "100",
                          "--output", dir, NULL};
    pid_t pid = spawn(args, slave);
    unsetenv("MAC_FAIRNESS_LIVE_STATUS");
    close(slave);
    static char out[1 << 20];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof out - 1 && (r = read(master, out + n, sizeof out - 1 - n)) > 0)
        n += (size_t)r;
    out[n] = '\0';
    int st;
    waitpid(pid, &st, 0);
    close(master);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    cr_assert(strstr(out, "\033[?1049h"), "the alternate screen is used");
    cr_assert(strstr(out, "PRE-DEPARTURE"), "the pools are shown");
    cr_assert(strstr(out, "| transcripts on disk ") && strstr(out, ", in manifest "),
              "the live view says what it counts");
    cr_assert_null(strstr(out, "| saved "));
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static char *read_text(const char *path)
{
    static char buf[65536];
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* The job file's model definition is read like serve's config: vLLM-only
 * keys warn in one line, a misspelt key is an error with FILE:LINE:key. */
Test(cmd_run, model_definition_read_like_serve, .init = setup, .fini = teardown,
     .timeout = 120)
{
    char path[128], err[8192];
    snprintf(path, sizeof path, "%s/job.yaml", dir);
    write_text(path, "experiment: vc\nmodels:\n  m:\n    backend: mock\n    vllm_config:\n"
                     "      max_num_seqs_upper_bound: 32\n      attention_backend: FLASHINFER\n"
                     "      enforce_eager: true\nagents:\n  - id: a\n"
                     "validation: {enabled: false}\nquestions:\n  - {id: q, text: t}\n");
    const char *args[] = {path, "--mock-token-delay-ms", "0", "--output", dir, NULL};
    cr_assert_eq(run(args, err, sizeof err), 0, "%s", err);
    cr_assert(strstr(err, "job.yaml:5: models.m.vllm_config: vLLM-only keys ignored"), "%s", err);
    cr_assert(strstr(err, "attention_backend, enforce_eager"), "%s", err);
    write_text(path, "experiment: vc\nmodels:\n  m:\n    backend: mock\n    vllm_config:\n"
                     "      max_num_seqs_upper_bonud: 32\nagents:\n  - id: a\n"
                     "validation: {enabled: false}\nquestions:\n  - {id: q, text: t}\n");
    cr_assert_eq(run(args, err, sizeof err), 2, "%s", err);
    cr_assert(strstr(err, "job.yaml:6: key 'models.m.vllm_config.max_num_seqs_upper_bonud': "
                          "unknown vllm_config key"), "%s", err);
    write_text(path, "experiment: vc\nmodels:\n  m:\n    backend: mock\n    mock_capacty: 3\n"
                     "agents:\n  - id: a\nvalidation: {enabled: false}\n"
                     "questions:\n  - {id: q, text: t}\n");
    cr_assert_eq(run(args, err, sizeof err), 2, "%s", err);
    cr_assert(strstr(err, "job.yaml:5: key 'models.m.mock_capacty'"), "%s", err);
}

/* Seed 000's model definition as the seed writes it (backend vllm,
 * vllm_config, no model_name, no base_url) stops with FILE:LINE naming
 * both ways to run it, also when PARLEY_MODEL is set (the environment's
 * model is not silently served under the seed's name); a model_name on the
 * mock, which loads nothing, is a warning naming the backend. */
Test(cmd_run, seed_model_definition_names_both_ways, .init = setup, .fini = teardown,
     .timeout = 60)
{
    char path[128], err[8192];
    snprintf(path, sizeof path, "%s/job.yaml", dir);
    write_text(path, "experiment: seed\nmodel_definitions:\n  llama31_8b:\n    backend: vllm\n"
                     "    vllm_config:\n      max_num_seqs_upper_bound: 256\nagents:\n"
                     "  - id: a\n    model: llama31_8b\nvalidation: {enabled: false}\n"
                     "questions:\n  - {id: q, text: t}\n");
    const char *args[] = {path, "--output", dir, NULL};
    for (int env = 0; env < 2; env++) {
        if (env)
            setenv("PARLEY_MODEL", "/nonexistent/model.gguf", 1);
        else
            unsetenv("PARLEY_MODEL");
        cr_assert_eq(run(args, err, sizeof err), 2, "%s", err);
        cr_assert(strstr(err, "job.yaml:4: key 'model_definitions.llama31_8b.backend': backend "
                              "vllm needs model_name or base_url: model_name (a GGUF file, a "
                              "Hugging Face checkpoint folder, or ORG/NAME in the local Hugging "
                              "Face cache) runs it on parley's own engine; base_url (a vLLM "
                              "server's URL with /v1) sends its requests to that server"),
                  "%s", err);
    }
    write_text(path, "experiment: m\nmodels:\n  m:\n    backend: mock\n"
                     "    model_name: meta-llama/Llama-3.1-8B-Instruct\nagents:\n  - id: a\n"
                     "validation: {enabled: false}\nquestions:\n  - {id: q, text: t}\n");
    const char *margs[] = {path, "--mock-token-delay-ms", "0", "--output", dir, NULL};
    cr_assert_eq(run(margs, err, sizeof err), 0, "%s", err);
    cr_assert(strstr(err, "warning: ") && strstr(err, "job.yaml:5: models.m.model_name: ignored: "
                                                      "backend mock loads no model"), "%s", err);
}

/* max_num_seqs_upper_bound reaches the engine: its max_num_seqs is the
 * bound. The capacity rule (issue 41): admission is bounded by the upper
 * bound and the KV blocks requests need (--stats "admission"), and the
 * seed's min(bound, KV tokens / max_model_len) stays the engine's
 * worst_case_capacity (--capacity worst-case makes it the capacity). */
/* Run the job text in dir; its --stats (the caller frees them). */
static json_t *run_for_stats(const char *job)
{
    char path[128], stats[128], err[8192];
    snprintf(path, sizeof path, "%s/job.yaml", dir);
    snprintf(stats, sizeof stats, "%s/stats.json", dir);
    write_text(path, job);
    const char *args[] = {path, "--output", dir, "--stats", stats, NULL};
    cr_assert_eq(run(args, err, sizeof err), 0, "%s", err);
    json_t *st = json_loads(read_text(stats), 0, NULL);
    cr_assert_not_null(st);
    return st;
}

Test(cmd_run, upper_bound_reaches_the_engine, .init = setup, .fini = teardown,
     .timeout = 240)
{
    PL_TEST_MODEL_OR_SKIP();
    char job[1024];
    static const int bounds[] = {512, 3};
    json_int_t cap[2];
    for (int i = 0; i < 2; i++) {
        snprintf(job, sizeof job,
                 "experiment: ub%d\nmodels:\n  m:\n    backend: cpu\n    model: %s\n"
                 "    kv_cache_mb: 64\n    max_model_len: 256\n    vllm_config:\n"
                 "      max_num_seqs_upper_bound: %d\nagents:\n  - id: a\n"
                 "sampling: {temperature: 0, max_tokens: 2}\n"
                 "validation: {enabled: false}\nquestions:\n  - {id: q, text: Hi}\n",
                 i, pl_test_model_path(), bounds[i]);
        json_t *st = run_for_stats(job);
        json_t *b = json_array_get(json_object_get(st, "backends"), 0);
        cr_assert_eq(json_integer_value(json_object_get(b, "max_num_seqs")), bounds[i],
                     "the engine's max_num_seqs is the bound %d", bounds[i]);
        cap[i] = json_integer_value(json_object_get(b, "worst_case_capacity"));
        cr_assert_str_eq(json_string_value(json_object_get(b, "capacity_rule")), "kv");
        cr_assert_eq(json_integer_value(json_object_get(b, "capacity")), bounds[i]);
        json_t *adm = json_array_get(json_object_get(st, "admission"), 0);
        cr_assert_str_eq(json_string_value(json_object_get(adm, "rule")), "kv");
        cr_assert_eq(json_integer_value(json_object_get(adm, "upper_bound")), bounds[i]);
        cr_assert_eq(json_integer_value(json_object_get(adm, "peak_in_flight")), 1);
        json_decref(st);
    }
    /* 64 MB of KV holds a few 256-token sequences: the seed's KV capacity
     * binds under 512, the bound binds at 3. */
    cr_assert(cap[0] >= 3 && cap[0] < 512, "capacity %lld", (long long)cap[0]);
    cr_assert_eq(cap[1], 3);
}

/* A model's `capacity: worst-case` (the option table, per model in a job
 * file) brings back seed 000's figure as the engine's capacity and the
 * admission bound: no KV view. */
Test(cmd_run, capacity_worst_case_is_the_seeds_rule, .init = setup, .fini = teardown,
     .timeout = 240)
{
    PL_TEST_MODEL_OR_SKIP();
    char job[1024];
    snprintf(job, sizeof job,
             "experiment: wc\nmodels:\n  m:\n    backend: cpu\n    model: %s\n"
             "    kv_cache_mb: 64\n    max_model_len: 256\n    capacity: worst-case\n"
             "agents:\n  - id: a\nsampling: {temperature: 0, max_tokens: 2}\n"
             "validation: {enabled: false}\nquestions:\n  - {id: q, text: Hi}\n",
             pl_test_model_path());
    json_t *st = run_for_stats(job);
    json_t *b = json_array_get(json_object_get(st, "backends"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(b, "capacity_rule")), "worst-case");
    json_int_t wc = json_integer_value(json_object_get(b, "worst_case_capacity"));
    cr_assert(wc >= 3 && wc < 256, "64 MB over 256 tokens: %lld", (long long)wc);
    cr_assert_eq(json_integer_value(json_object_get(b, "capacity")), wc);
    json_t *adm = json_array_get(json_object_get(st, "admission"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(adm, "rule")), "slots");
    cr_assert_eq(json_integer_value(json_object_get(adm, "capacity")), wc);
    json_decref(st);
}

/* ---- a re-run must match the experiment's spec (issue 35.2) ---- */

static void write_chg(const char *path, int rounds, const char *persona, const char *q1,
                      bool extra_question, const char *neutral)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "experiment: chg\n%smodels:\n  m: {backend: mock, mock_mode: echo}\n"
               "agents:\n  - id: a\n    system_prompt: Be brief.\n"
               "  - id: b\n    system_prompt: %s\n"
               "num_rounds: %d\nsampling: {max_tokens: 1024}\nquestions:\n"
               "  - {id: q1, text: \"%s\", choices: [x, y, z], answer: C, category: geo}\n"
               "  - {id: q2, text: \"Two?\", choices: [x, y, z], answer: A, category: sci}\n%s",
            neutral, persona, rounds, q1,
            extra_question ? "  - {id: q3, text: \"Three?\", choices: [x, y], answer: B}\n" : "");
    fclose(f);
}

static json_t *chg_index(void)
{
    char path[256], line[8192];
    snprintf(path, sizeof path, "%s/chg/chg_index.jsonl", dir);
    FILE *f = fopen(path, "r");
    json_t *out = json_object();
    while (f && fgets(line, sizeof line, f)) {
        json_t *o = json_loads(line, 0, NULL);
        cr_assert_not_null(o, "%s", line);
        json_object_set_new(out, json_string_value(json_object_get(o, "question_id")), o);
    }
    if (f)
        fclose(f);
    return out;
}

Test(cmd_run, changed_spec_is_refused_naming_the_keys, .init = setup, .fini = teardown,
     .timeout = 120)
{
    char job[128], err[8192];
    snprintf(job, sizeof job, "%s/chg.yaml", dir);
    const char *args[] = {job, "--mock-token-delay-ms", "0", "--output", dir, NULL};
    write_chg(job, 2, "Doubt everything.", "One?", false, "");
    cr_assert_eq(run(args, err, sizeof err), 0, "%s", err);
    json_t *idx = chg_index();
    cr_assert_eq(json_object_size(idx), 2);
    json_t *l1 = json_object_get(idx, "q1");
    const char *fp = json_string_value(json_object_get(l1, "spec_fingerprint"));
    cr_assert(fp && strlen(fp) == 64, "index lines carry the spec's fingerprint");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(l1, "metadata"),
                                                       "category")), "geo",
                     "index lines carry the question's own metadata");
    cr_assert(json_string_value(json_object_get(l1, "run_id")));
    char *fp0 = strdup(fp);
    json_decref(idx);

    /* Rounds and a persona changed: refused, the keys named, nothing run. */
    write_chg(job, 3, "Trust everything.", "One?", true, "");
    cr_assert_eq(run(args, err, sizeof err), 2, "%s", err);
    cr_assert(strstr(err, "was run with a different job spec"), "%s", err);
    cr_assert(strstr(err, "num_rounds (2 -> 3)"), "%s", err);
    cr_assert(strstr(err, "agents.b.system_prompt"), "%s", err);
    cr_assert_null(strstr(err, "agents.a."), "a did not change: %s", err);
    cr_assert(strstr(err, "--resume-changed"), "says how to resume on purpose: %s", err);
    cr_assert(strstr(err, "new experiment"), "and how to start anew: %s", err);
    idx = chg_index();
    cr_assert_eq(json_object_size(idx), 2, "nothing mixed in");
    json_decref(idx);

    /* A question's text changed under the same id: refused too. */
    write_chg(job, 2, "Doubt everything.", "One, reworded?", false, "");
    cr_assert_eq(run(args, err, sizeof err), 2, "%s", err);
    cr_assert(strstr(err, "questions.q1"), "%s", err);

    /* What does not change results may change: weight, a description. */
    write_chg(job, 2, "Doubt everything.", "One?", true, "weight: 3\ndescription: again\n");
    cr_assert_eq(run(args, err, sizeof err), 0, "%s", err);
    idx = chg_index();
    cr_assert_eq(json_object_size(idx), 3);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(idx, "q3"),
                                                       "spec_fingerprint")), fp0);
    json_decref(idx);

    /* On purpose: the new spec resumes; its lines carry its fingerprint. */
    write_chg(job, 3, "Trust everything.", "One?", true, "");
    char path[256];
    snprintf(path, sizeof path, "%s/chg/task_manifest.json", dir);
    const char *again[] = {job, "--mock-token-delay-ms", "0", "--output", dir,
                           "--resume-changed", NULL};
    cr_assert_eq(run(again, err, sizeof err), 0, "%s", err);
    json_t *m = json_load_file(path, 0, NULL);
    cr_assert_eq(json_array_size(json_object_get(m, "earlier_specs")), 1);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(
        json_object_get(m, "earlier_specs"), 0), "fingerprint")), fp0);
    cr_assert_str_neq(json_string_value(json_object_get(m, "spec_fingerprint")), fp0);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(m, "spec"), "num_rounds")), 3);
    json_decref(m);
    free(fp0);
}

/* 1: some conversations failed, the run itself finished; 3: the run
 * failed (issue 35.6). */
Test(cmd_run, exit_status_tells_failures_from_a_failed_run, .init = setup, .fini = teardown,
     .timeout = 120)
{
    char job[128], err[8192], out[160];
    snprintf(job, sizeof job, "%s/fail.yaml", dir);
    /* Random words never hold "Answer: X": no re-prompt left, it fails. */
    write_text(job, "experiment: fails\nmodels:\n  m: {backend: mock, mock_mode: random}\n"
                    "agents:\n  - id: a\nmax_retries: 0\nsampling: {max_tokens: 8}\n"
                    "questions:\n  - {id: q1, text: \"One?\", choices: [x, y]}\n");
    const char *args[] = {job, "--mock-token-delay-ms", "0", "--output", dir, NULL};
    cr_assert_eq(run(args, err, sizeof err), 1, "%s", err);
    cr_assert(strstr(err, "0/1 succeeded") && strstr(err, "1 failed"), "%s", err);
    snprintf(out, sizeof out, "%s/fail.yaml/below", dir);   /* under a file */
    const char *bad[] = {job, "--mock-token-delay-ms", "0", "--output", out, NULL};
    cr_assert_eq(run(bad, err, sizeof err), 3, "%s", err);
    cr_assert(strstr(err, "cannot create"), "%s", err);
}
