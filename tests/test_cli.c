/* test_cli.c - the parley command line: exit statuses and error messages,
 * and a config file serving several models. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/helpers/server_proc.h"

/* Run parley with args; returns the exit status, stderr in err. */
static int run_parley(const char *const *args, char *err, size_t errlen)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        const char *argv[32] = {pl_test_bin()};
        int n = 1;
        for (int i = 0; args[i]; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        int devnull = open("/dev/null", 1);
        dup2(devnull, 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    size_t len = 0;
    ssize_t k;
    while (len < errlen - 1 && (k = read(fds[0], err + len, errlen - 1 - len)) > 0)
        len += (size_t)k;
    err[len] = '\0';
    close(fds[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char cfg_path[128];

static void write_cfg(const char *text)
{
    snprintf(cfg_path, sizeof cfg_path, "/tmp/parley-cli-%d.yaml", (int)getpid());
    FILE *f = fopen(cfg_path, "w");
    fputs(text, f);
    fclose(f);
}

Test(cli, bad_config_exits_2_naming_file_line_key)
{
    write_cfg("port: 0\nmodels:\n  a:\n    backend: mock\n    mock_capacity: -1\n");
    char err[2048];
    const char *args[] = {"serve", "--config", cfg_path, NULL};
    cr_expect_eq(run_parley(args, err, sizeof err), 2);
    char want[256];
    snprintf(want, sizeof want, "%s:5: key 'models.a.mock_capacity'", cfg_path);
    cr_expect(strstr(err, want), "stderr: %s", err);
    unlink(cfg_path);
}

Test(cli, missing_config_file)
{
    char err[2048];
    const char *args[] = {"serve", "--config", "/nonexistent/parley.yaml", NULL};
    cr_expect_eq(run_parley(args, err, sizeof err), 2);
    cr_expect(strstr(err, "/nonexistent/parley.yaml"), "%s", err);
}

Test(cli, bad_options_exit_2)
{
    char err[2048];
    const char *a1[] = {"serve", "--port", "99999", NULL};
    cr_expect_eq(run_parley(a1, err, sizeof err), 2);
    cr_expect(strstr(err, "--port"), "%s", err);
    const char *a2[] = {"frobnicate", NULL};
    cr_expect_eq(run_parley(a2, err, sizeof err), 2);
    const char *a3[] = {"serve", "--help", NULL};
    cr_expect_eq(run_parley(a3, err, sizeof err), 0);
}

Test(cli, config_serves_several_models)
{
    write_cfg("models:\n  alpha:\n    backend: mock\n  beta:\n    backend: mock\n"
              "    mock_mode: echo\n");
    pl_test_server srv;
    const char *args[] = {"--config", cfg_path, "--log-level", "warn", NULL};
    cr_assert_eq(pl_test_server_start(&srv, args), 0);
    char url[256];
    snprintf(url, sizeof url, "%s/v1/models", srv.url);
    pl_test_resp r;
    cr_assert_eq(pl_test_http("GET", url, NULL, 0, &r), 0);
    cr_expect(strstr(r.body, "\"alpha\"") && strstr(r.body, "\"beta\""), "%s", r.body);
    pl_test_resp_free(&r);
    /* /v1/models/{id}: the one model, or a 404 naming it. */
    snprintf(url, sizeof url, "%s/v1/models/beta", srv.url);
    cr_assert_eq(pl_test_http("GET", url, NULL, 0, &r), 0);
    cr_expect_eq(r.status, 200);
    json_t *m = json_loads(r.body, 0, NULL);
    cr_assert_not_null(m, "%s", r.body);
    cr_expect_str_eq(json_string_value(json_object_get(m, "id")), "beta");
    cr_expect_str_eq(json_string_value(json_object_get(m, "object")), "model");
    cr_expect_str_eq(json_string_value(json_object_get(m, "owned_by")), "parley");
    cr_expect_str_eq(json_string_value(json_object_get(m, "backend")), "mock");
    json_decref(m);
    pl_test_resp_free(&r);
    snprintf(url, sizeof url, "%s/v1/models/gamma", srv.url);
    cr_assert_eq(pl_test_http("GET", url, NULL, 0, &r), 0);
    cr_expect_eq(r.status, 404);
    m = json_loads(r.body, 0, NULL);
    json_t *e = json_object_get(m, "error");
    cr_expect_str_eq(json_string_value(json_object_get(e, "code")), "model_not_found");
    cr_expect_str_eq(json_string_value(json_object_get(e, "param")), "model");
    cr_expect(strstr(json_string_value(json_object_get(e, "message")), "'gamma'"), "%s", r.body);
    json_decref(m);
    pl_test_resp_free(&r);
    snprintf(url, sizeof url, "%s/v1/chat/completions", srv.url);
    const char *body = "{\"model\":\"beta\",\"messages\":[{\"role\":\"user\",\"content\":"
                       "\"echo these words\"}]}";
    cr_assert_eq(pl_test_http("POST", url, body, strlen(body), &r), 0);
    json_t *j = json_loads(r.body, 0, NULL);
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    cr_expect_str_eq(json_string_value(json_object_get(msg, "content")), "echo these words");
    json_decref(j);
    pl_test_resp_free(&r);
    cr_expect_eq(pl_test_server_stop(&srv), 0);
    unlink(cfg_path);
}

#include "backends/engine/cuda/cuda_runner.h"

Test(cli, cuda_without_gpu_exits_2)
{
    char why[256];
    if (pl_cuda_available(why, sizeof why))
        cr_skip_test("a GPU is present");
    char err[2048];
    const char *args[] = {"serve", "--backend", "cuda", "--port", "0", NULL};
    cr_expect_eq(run_parley(args, err, sizeof err), 2);
    cr_expect(strstr(err, "--backend cuda"), "%s", err);
}

Test(cli, bad_model_file_exits_2)
{
    char err[2048];
    const char *args[] = {"serve", "--backend", "cpu", "--model", "/etc/hostname", "--port", "0",
                          NULL};
    cr_expect_eq(run_parley(args, err, sizeof err), 2);
    cr_expect(strstr(err, "/etc/hostname") && strstr(err, "GGUF"), "%s", err);
}

/* Option precedence, end to end: defaults < PARLEY_* environment < config
 * file < command line. The port is observable (the server prints it); the
 * winning level asks for port 0 (an ephemeral port), the losing ones for
 * fixed ports no ephemeral port can equal. */
static int served_port(const char *env_port, const char *const *args)
{
    if (env_port)
        setenv("PARLEY_PORT", env_port, 1);
    else
        unsetenv("PARLEY_PORT");
    pl_test_server srv;
    int rc = pl_test_server_start_raw(&srv, args);
    unsetenv("PARLEY_PORT");
    cr_assert_eq(rc, 0, "server did not start");
    int port = pl_test_server_port(&srv);
    cr_assert_eq(pl_test_server_stop(&srv), 0);
    return port;
}

Test(cli, option_precedence_default_env_config_command_line, .timeout = 60)
{
    const char *plain[] = {"--host", "127.0.0.1", "--backend", "mock", "--log-level", "warn",
                           NULL};
    /* The environment beats the default (8000). */
    int p = served_port("0", plain);
    cr_expect(p > 0 && p != 8000, "env PARLEY_PORT=0 lost to the default: port %d", p);
    /* The config file beats the environment. */
    write_cfg("port: 0\n");
    const char *with_cfg[] = {"--host", "127.0.0.1", "--backend", "mock", "--log-level", "warn",
                              "--config", cfg_path, NULL};
    p = served_port("1111", with_cfg);
    cr_expect(p > 0 && p != 1111, "config port 0 lost to env 1111: port %d", p);
    /* The command line beats the config file (and the environment). */
    write_cfg("port: 29471\n");
    const char *with_cli[] = {"--host", "127.0.0.1", "--backend", "mock", "--log-level", "warn",
                              "--config", cfg_path, "--port", "0", NULL};
    p = served_port("1111", with_cli);
    cr_expect(p > 0 && p != 1111 && p != 29471, "--port 0 lost: port %d", p);
    /* The config file's value is used when the command line says nothing. */
    const char *cfg_only[] = {"--host", "127.0.0.1", "--backend", "mock", "--log-level", "warn",
                              "--config", cfg_path, NULL};
    p = served_port("0", cfg_only);
    cr_expect_eq(p, 29471, "config port 29471 lost to env 0: port %d", p);
    unlink(cfg_path);
}
