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

#include "src/base/cpu_features.h"
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

/* ---- chat templates and the KV cache size, on real models ---- */

static const char *tiny_qwen2(void)
{
    static char p[1024];
    const char *src = getenv("PARLEY_SRC");
    snprintf(p, sizeof p, "%s/tests/fixtures/tiny_qwen2.gguf", src ? src : ".");
    return p;
}

/* tiny_qwen2.gguf's ids of <|im_start|> and <|im_end|> (control tokens:
 * /detokenize leaves them out of the text). */
#define IM_START 263
#define IM_END 264
static int n_im_start, n_im_end;

/* The prompt the server builds for one user message "hi": /tokenize with
 * the generation prompt (counting the ChatML control tokens), then the
 * text of /detokenize of those ids. */
static char *rendered_prompt(const pl_test_server *srv)
{
    char url[256];
    snprintf(url, sizeof url, "%s/tokenize", srv->url);
    const char *body = "{\"model\":\"tiny\",\"add_generation_prompt\":true,"
                       "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    pl_test_resp r;
    cr_assert_eq(pl_test_http("POST", url, body, strlen(body), &r), 0);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *t = json_loads(r.body, 0, NULL);
    pl_test_resp_free(&r);
    json_t *toks = json_object_get(t, "tokens");
    n_im_start = n_im_end = 0;
    for (size_t i = 0; i < json_array_size(toks); i++) {
        json_int_t id = json_integer_value(json_array_get(toks, i));
        n_im_start += id == IM_START;
        n_im_end += id == IM_END;
    }
    char *ids = json_dumps(toks, 0);
    json_decref(t);
    char dbody[4096];
    snprintf(dbody, sizeof dbody, "{\"model\":\"tiny\",\"tokens\":%s}", ids);
    free(ids);
    snprintf(url, sizeof url, "%s/detokenize", srv->url);
    cr_assert_eq(pl_test_http("POST", url, dbody, strlen(dbody), &r), 0);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *d = json_loads(r.body, 0, NULL);
    pl_test_resp_free(&r);
    char *text = strdup(json_string_value(json_object_get(d, "prompt")));
    json_decref(d);
    return text;
}

static char *prompt_with(const char *const *extra)
{
    /* A small cache: meson's MALLOC_PERTURB_ makes calloc touch every page
     * of the default 2 GiB one. */
    const char *args[16] = {"--backend", "cpu", "--model", tiny_qwen2(), "--threads", "1",
                            "--served-model-name", "tiny", "--log-level", "error",
                            "--kv-cache-mb", "4"};
    int n = 12;
    for (int i = 0; extra[i]; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    pl_test_server srv;
    cr_assert_eq(pl_test_server_start(&srv, args), 0, "server did not start");
    char *text = rendered_prompt(&srv);
    cr_assert_eq(pl_test_server_stop(&srv), 0);
    return text;
}

/* tiny_qwen2.gguf carries a chat template of no known family. */
Test(cli, unknown_template_falls_back_to_chatml_or_is_refused, .timeout = 60)
{
    const char *none[] = {NULL};
    char *text = prompt_with(none);
    /* ChatML: <|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n */
    cr_expect_str_eq(text, "user\nhi\nassistant\n");
    cr_expect(n_im_start == 2 && n_im_end == 1, "%d <|im_start|>, %d <|im_end|>", n_im_start,
              n_im_end);
    free(text);
    char err[2048];
    const char *strict[] = {"serve", "--backend", "cpu", "--model", tiny_qwen2(), "--port", "0",
                            "--chat-template-strict", NULL};
    cr_expect_eq(run_parley(strict, err, sizeof err), 2);
    cr_expect(strstr(err, "chat template is not one parley knows") &&
              strstr(err, "--chat-template"), "%s", err);
}

Test(cli, chat_template_option_overrides_the_model, .timeout = 60)
{
    const char *llama3[] = {"--chat-template", "llama3", NULL};
    char *text = prompt_with(llama3);
    cr_expect(strstr(text, "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>") &&
              strstr(text, "<|start_header_id|>assistant<|end_header_id|>\n\n"), "%s", text);
    cr_expect(n_im_start == 0 && n_im_end == 0, "ChatML tokens in a llama3 prompt");
    free(text);
    /* --chat-template-strict does not object to an explicit template. */
    const char *strict[] = {"--chat-template", "chatml", "--chat-template-strict", NULL};
    text = prompt_with(strict);
    cr_expect_str_eq(text, "user\nhi\nassistant\n");
    cr_expect(n_im_start == 2 && n_im_end == 1);
    free(text);
    char err[2048];
    const char *bad[] = {"serve", "--backend", "cpu", "--model", tiny_qwen2(), "--port", "0",
                         "--chat-template", "frobnicate", NULL};
    cr_expect_eq(run_parley(bad, err, sizeof err), 2);
    cr_expect(strstr(err, "unknown --chat-template 'frobnicate'") && strstr(err, "llama3"),
              "%s", err);
}

Test(cli, kv_cache_too_small_exits_2, .timeout = 60)
{
    char err[2048];
    /* 2 layers x K,V x 2 heads x 16 dims x 2 bytes (halves, the default) =
     * 256 B per token: 1 MiB holds 4096 tokens, fewer than one 8192-token
     * sequence; with floats (--no-kv-cache-f16) 2048, fewer than one of 4096. */
    const char *args[] = {"serve", "--backend", "cpu", "--model", tiny_qwen2(), "--port", "0",
                          "--kv-cache-mb", "1", "--max-model-len", "8192", NULL};
    cr_expect_eq(run_parley(args, err, sizeof err), 2);
    cr_expect(strstr(err, "--kv-cache-mb 1 holds 256 blocks; one 8192-token sequence needs 512"),
              "%s", err);
    const char *f32[] = {"serve", "--backend", "cpu", "--model", tiny_qwen2(), "--port", "0",
                         "--kv-cache-mb", "1", "--max-model-len", "4096", "--no-kv-cache-f16",
                         NULL};
    cr_expect_eq(run_parley(f32, err, sizeof err), 2);
    cr_expect(strstr(err, "--kv-cache-mb 1 holds 128 blocks; one 4096-token sequence needs 256"),
              "%s", err);
}

/* --cpu-amx on a CPU without AMX-INT8 (or without Linux's leave): a clear
 * error at start, not a fault at the first tile instruction. */
Test(cli, cpu_amx_without_amx_exits_2, .timeout = 60)
{
    if (pl_cpu_features()->amx_int8)
        cr_skip_test("this CPU has AMX-INT8 (test_cpu_amx covers it)");
    char err[2048];
    const char *args[] = {"serve", "--backend", "cpu", "--model", tiny_qwen2(), "--port", "0",
                          "--cpu-amx", NULL};
    cr_expect_eq(run_parley(args, err, sizeof err), 2);
    cr_expect(strstr(err, "--cpu-amx: this CPU has no AMX-INT8"), "%s", err);
}

/* --kv-cache-dtype fp8 is the CUDA runner's: the CPU engine refuses it at
 * start instead of ignoring it; a value not in the table names the choices. */
Test(cli, kv_cache_dtype_fp8_on_cpu_exits_2, .timeout = 60)
{
    char err[2048];
    const char *args[] = {"serve", "--backend", "cpu", "--model", tiny_qwen2(), "--port", "0",
                          "--kv-cache-dtype", "fp8", NULL};
    cr_expect_eq(run_parley(args, err, sizeof err), 2);
    cr_expect(strstr(err, "--kv-cache-dtype fp8 needs the CUDA backend"), "%s", err);
    const char *bad[] = {"serve", "--backend", "cpu", "--model", tiny_qwen2(), "--port", "0",
                         "--kv-cache-dtype", "fp9", NULL};
    cr_expect_eq(run_parley(bad, err, sizeof err), 2);
    cr_expect(strstr(err, "fp9") && strstr(err, "auto|bf16|fp8|fp8_e4m3"), "%s", err);
}
