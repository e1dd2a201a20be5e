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
#include <pty.h>
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
    const char *args[] = {example(), "--backend", "mock", "--mock-token-delay-ms", "2",
                          "--output", dir, "--progress-interval", "0.2", NULL};
    cr_assert_eq(run(args, err, sizeof err), 0, "%s", err);
    int lines = 0;
    for (const char *p = err; (p = strstr(p, "progress: ")); p++)
        lines++;
    cr_assert_geq(lines, 2, "status lines on a non-terminal stderr: %s", err);
    cr_assert(strstr(err, "/20 conversations | ok "), "%s", err);
    cr_assert(strstr(err, "| in-flight "), "%s", err);
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
    const char *args[] = {example(), "--backend", "mock", "--mock-token-delay-ms", "2",
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
}
