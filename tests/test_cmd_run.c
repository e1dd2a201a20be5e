/* test_cmd_run.c - `parley run JOB.yaml`: exit statuses, spec errors with
 * FILE:LINE, Ctrl-C then resume. */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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
    /* Again: everything resumes as done. */
    rc = run(args, err, sizeof err);
    cr_assert_eq(rc, 0);
    cr_assert(strstr(err, "20 from an earlier run"), "%s", err);
    cr_assert_eq(index_lines(), 20);
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

Test(cmd_run, ctrl_c_is_graceful_and_resumable, .init = setup, .fini = teardown,
     .timeout = 120)
{
    char path[128];
    snprintf(path, sizeof path, "%s/stderr", dir);
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
    const char *args[] = {example(), "--backend", "mock", "--mock-token-delay-ms", "1",
                          "--output", dir, NULL};
    pid_t pid = spawn(args, fd);
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
    kill(pid, SIGINT);
    int st;
    waitpid(pid, &st, 0);
    close(fd);
    cr_assert(WIFEXITED(st));
    cr_assert_eq(WEXITSTATUS(st), 1, "interrupted: not every question succeeded");
    int before = index_lines();
    cr_assert_lt(before, 20);
    char err[4096];
    const char *fast[] = {example(), "--backend", "mock", "--mock-token-delay-ms", "0",
                          "--output", dir, NULL};
    cr_assert_eq(run(fast, err, sizeof err), 0, "%s", err);
    cr_assert_eq(index_lines(), 20);
}
