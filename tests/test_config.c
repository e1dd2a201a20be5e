/* test_config.c - the option table, YAML/JSON loading, config errors. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/config.h"
#include "src/options.h"
#include "src/base/yaml_load.h"

static char path[256];

static void write_file(const char *ext, const char *text)
{
    snprintf(path, sizeof path, "/tmp/parley-test-config-%d-%ld%s", (int)getpid(),
             random(), ext);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static int load(const char *ext, const char *text, pl_opts *o, pl_config *c, char *err)
{
    char e[512];
    write_file(ext, text);
    cr_assert_eq(pl_opts_init(o, e, sizeof e), 0);
    int rc = pl_config_load(path, o, c, err, 512);
    unlink(path);
    return rc;
}

Test(options, defaults_and_args)
{
    pl_opts o;
    char err[256];
    cr_assert_eq(pl_opts_init(&o, err, sizeof err), 0);
    cr_expect_str_eq(o.host, "127.0.0.1");
    cr_expect_eq(o.port, 8000);
    cr_expect_eq(o.max_body_bytes, 4L << 20);
    cr_expect(o.engine.core.async);
    char *argv[] = {"parley", "serve", "--port", "0", "--backend=mock", "--no-async-scheduling",
                    "--mock-token-delay-ms", "5", "extra"};
    char *pos[2];
    int npos;
    cr_assert_eq(pl_opts_parse_args(&o, 9, argv, 2, pos, 2, &npos, err, sizeof err), 0, "%s", err);
    cr_expect_eq(o.port, 0);
    cr_expect_str_eq(o.backend, "mock");
    cr_expect_not(o.engine.core.async);
    cr_expect_eq(o.mock_token_delay_ms, 5);
    cr_expect_eq(npos, 1);
    cr_expect_str_eq(pos[0], "extra");
    pl_opts_free(&o);
}

Test(options, bad_args_are_named)
{
    pl_opts o;
    char err[256];
    char *pos[1];
    int npos;
    cr_assert_eq(pl_opts_init(&o, err, sizeof err), 0);
    char *a1[] = {"p", "s", "--port", "70000"};
    cr_expect_eq(pl_opts_parse_args(&o, 4, a1, 2, pos, 1, &npos, err, sizeof err), -1);
    cr_expect(strstr(err, "--port") && strstr(err, "0..65535"), "%s", err);
    char *a2[] = {"p", "s", "--backend", "tpu"};
    cr_expect_eq(pl_opts_parse_args(&o, 4, a2, 2, pos, 1, &npos, err, sizeof err), -1);
    cr_expect(strstr(err, "tpu"), "%s", err);
    char *a3[] = {"p", "s", "--frobnicate"};
    cr_expect_eq(pl_opts_parse_args(&o, 3, a3, 2, pos, 1, &npos, err, sizeof err), -1);
    cr_expect(strstr(err, "frobnicate"), "%s", err);
    char *a4[] = {"p", "s", "--port"};
    cr_expect_eq(pl_opts_parse_args(&o, 3, a4, 2, pos, 1, &npos, err, sizeof err), -1);
    pl_opts_free(&o);
}

Test(config, models_section_yaml)
{
    pl_opts o;
    pl_config c;
    char err[512];
    cr_assert_eq(load(".yaml",
                      "port: 9001\n"
                      "models:\n"
                      "  fast:\n"
                      "    backend: mock\n"
                      "    mock_capacity: 3\n"
                      "  big:\n"
                      "    backend: mock\n"
                      "    vllm_config:\n"
                      "      max_num_seqs_upper_bound: 110\n"
                      "    options:\n"
                      "      mock-token-delay-ms: 7\n", &o, &c, err), 0, "%s", err);
    cr_expect_eq(o.port, 9001);
    cr_assert_eq(c.n_models, 2);
    cr_expect_str_eq(c.models[0].name, "fast");
    cr_expect_eq(c.models[0].opts.mock_capacity, 3);
    cr_expect_eq(c.models[0].opts.port, 9001);
    cr_expect_eq(c.models[1].opts.engine.core.max_num_seqs, 110);
    cr_expect_eq(c.models[1].opts.mock_token_delay_ms, 7);
    pl_config_free(&c);
    pl_opts_free(&o);
}

Test(config, json_and_seed_alias)
{
    pl_opts o;
    pl_config c;
    char err[512];
    cr_assert_eq(load(".json",
                      "{\"model_definitions\": {\"m\": {\"backend\": \"mock\","
                      " \"vllm_config\": {\"max_num_seqs_upper_bound\": 256}}}}", &o, &c, err),
                 0, "%s", err);
    cr_expect_eq(c.n_models, 1);
    cr_expect_eq(c.models[0].opts.engine.core.max_num_seqs, 256);
    pl_config_free(&c);
    pl_opts_free(&o);
}

/* Each bad config: the error names the file, the line and the key. */
Test(config, errors_name_file_line_key)
{
    static const struct { const char *text, *key; int line; } cases[] = {
        {"port: 99999\n", "port", 1},
        {"models:\n  a:\n    backend: mock\n    mock_capacity: zero\n", "models.a.mock_capacity", 4},
        {"models:\n  a:\n    mock_capacity: 1\n", "models.a", 2},
        {"models:\n  a:\n    backend: mock\n    colour: red\n", "models.a.colour", 4},
        {"host: 1.2.3.4\nbogus: 1\n", "bogus", 2},
        {"models: []\n", "models", 1},
        {"models:\n  a:\n    backend: rocket\n", "models.a.backend", 3},
        {"models:\n  a:\n    backend: mock\n    vllm_config:\n      max_num_seqs_upper_bound: -4\n",
         "models.a.vllm_config.max_num_seqs_upper_bound", 5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pl_opts o;
        pl_config c;
        char err[512];
        cr_expect_eq(load(".yaml", cases[i].text, &o, &c, err), -1, "accepted: %s", cases[i].text);
        char want[256];
        snprintf(want, sizeof want, ":%d: key '%s'", cases[i].line, cases[i].key);
        cr_expect(strstr(err, want) && strstr(err, "parley-test-config"), "got '%s', want '%s'",
                  err, want);
        pl_opts_free(&o);
    }
}

Test(config, yaml_syntax_error_has_line)
{
    pl_opts o;
    pl_config c;
    char err[512];
    cr_expect_eq(load(".yaml", "port: 1\nmodels:\n  a: [1, 2\n", &o, &c, err), -1);
    cr_expect(strstr(err, ":4:") || strstr(err, ":3:"), "%s", err);
    pl_opts_free(&o);
}

Test(yaml_load, scalars_and_lines)
{
    pl_linemap lm;
    char err[256];
    const char *y = "a: 1\nb: 2.5\nc: true\nd: ~\ne: \"7\"\nf:\n  - x\n  - {g: h}\n";
    json_t *j = pl_yaml_load_buf("t", y, strlen(y), &lm, err, sizeof err);
    cr_assert_not_null(j, "%s", err);
    cr_expect(json_is_integer(json_object_get(j, "a")));
    cr_expect(json_is_real(json_object_get(j, "b")));
    cr_expect(json_is_true(json_object_get(j, "c")));
    cr_expect(json_is_null(json_object_get(j, "d")));
    cr_expect_str_eq(json_string_value(json_object_get(j, "e")), "7");
    cr_expect_eq(pl_linemap_line(&lm, "f[1].g"), 8);
    cr_expect_eq(pl_linemap_line(&lm, "f[0]"), 7);
    cr_expect_eq(pl_linemap_line(&lm, "f[1].nope"), 8);
    json_decref(j);
    pl_linemap_free(&lm);
}

Test(yaml_load, refuses_duplicates)
{
    char err[256];
    const char *y = "a: 1\na: 2\n";
    cr_expect_null(pl_yaml_load_buf("t", y, strlen(y), NULL, err, sizeof err));
    cr_expect(strstr(err, "t:2: duplicate"), "%s", err);
}

/* vllm_config: the upper bound and gpu_memory_utilization are mapped,
 * vLLM-only keys are accepted with one warning line naming them, a
 * misspelt key is an error with file, line and key. */
Test(config, vllm_config_mapped_warned_or_refused)
{
    pl_opts o;
    pl_config c;
    char err[512], log[128];
    snprintf(log, sizeof log, "/tmp/parley-test-config-%d.log", (int)getpid());
    fflush(stderr);
    int saved = dup(2);
    FILE *lf = freopen(log, "w", stderr);
    cr_assert_not_null(lf);
    int rc = load(".yaml", "models:\n  a:\n    backend: mock\n    vllm_config:\n"
                  "      max_num_seqs_upper_bound: 512\n      gpu_memory_utilization: 0.5\n"
                  "      attention_backend: FLASHINFER\n      enforce_eager: true\n",
                  &o, &c, err);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_eq(c.models[0].opts.engine.core.max_num_seqs, 512);
    cr_assert_float_eq(c.models[0].opts.engine.cuda.gpu_memory_utilization, 0.5, 1e-9);
    char buf[1024] = "";
    FILE *f = fopen(log, "r");
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    unlink(log);
    cr_assert(strstr(buf, ":4: models.a.vllm_config: vLLM-only keys ignored"), "%s", buf);
    cr_assert(strstr(buf, "attention_backend, enforce_eager"), "%s", buf);
    cr_assert_eq(strchr(buf, '\n'), strrchr(buf, '\n'), "one line: %s", buf);
    pl_config_free(&c);
    pl_opts_free(&o);

    rc = load(".yaml", "models:\n  a:\n    backend: mock\n    vllm_config:\n"
              "      max_num_seq_upper_bound: 512\n", &o, &c, err);
    cr_assert_eq(rc, -1);
    cr_assert(strstr(err, ".yaml:5: key 'models.a.vllm_config.max_num_seq_upper_bound': "
                          "unknown vllm_config key"), "%s", err);
    pl_opts_free(&o);
}

/* Seed 000's remote model definition loads as written. */
Test(config, seed_vllm_model_definition_loads)
{
    pl_opts o;
    pl_config c;
    char err[512];
    int rc = load(".yaml",
                  "model_definitions:\n"
                  "  llama31_8b:\n"
                  "    backend: vllm\n"
                  "    base_url: [\"http://gpu1:8000/v1\", \"http://gpu2:8000/v1\"]\n"
                  "    api_key_env: VLLM_KEY\n"
                  "    vllm_config:\n"
                  "      max_num_seqs_upper_bound: 256 # Upper bound\n"
                  "      attention_backend: FLASHINFER\n"
                  "  local:\n"
                  "    backend: ollama\n"
                  "    base_url: http://127.0.0.1:11434/v1\n"
                  "    upstream_model: llama3.2:3b\n",
                  &o, &c, err);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_eq(c.n_models, 2);
    cr_expect_str_eq(c.models[0].opts.backend, "vllm");
    cr_expect_str_eq(c.models[0].opts.base_url, "http://gpu1:8000/v1,http://gpu2:8000/v1");
    cr_expect_eq(c.models[0].opts.engine.core.max_num_seqs, 256);
    cr_expect_str_eq(c.models[0].opts.upstream_api_key_env, "VLLM_KEY");
    cr_expect_str_eq(c.models[1].opts.upstream_model, "llama3.2:3b");
    pl_config_free(&c);
    pl_opts_free(&o);
}

/* Seed 000's model definition without base_url: parley's engine serves
 * model_name (a Hugging Face name or folder). */
Test(config, seed_vllm_model_definition_without_base_url_is_local)
{
    pl_opts o;
    pl_config c;
    char err[512];
    int rc = load(".yaml",
                  "model_definitions:\n"
                  "  llama31_8b:\n"
                  "    backend: vllm\n"
                  "    model_name: meta-llama/Llama-3.1-8B-Instruct\n"
                  "    vllm_config:\n"
                  "      max_num_seqs_upper_bound: 256\n"
                  "      max_model_len: 4096\n"
                  "      attention_backend: FLASHINFER\n",
                  &o, &c, err);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_eq(c.n_models, 1);
    cr_expect_str_eq(c.models[0].opts.backend, "vllm");
    cr_expect_str_eq(c.models[0].opts.base_url, "");
    cr_expect_str_eq(c.models[0].opts.model, "meta-llama/Llama-3.1-8B-Instruct");
    cr_expect_eq(c.models[0].opts.engine.core.max_num_seqs, 256);
    cr_expect_eq(c.models[0].opts.engine.max_model_len, 4096);
    pl_config_free(&c);
    pl_opts_free(&o);
}

Test(config, remote_model_errors_name_file_line_key)
{
    static const struct { const char *text, *want; } cases[] = {
        {"models:\n  m:\n    backend: vllm\n", ":3: key 'models.m.backend': backend vllm needs "
         "model_name or base_url: model_name (a GGUF file, a Hugging Face checkpoint folder, or "
         "ORG/NAME in the local Hugging Face cache) runs it on parley's own engine; base_url (a "
         "vLLM server's URL with /v1) sends its requests to that server"},
        {"models:\n  m:\n    backend: sglang\n    base_url: ftp://x/v1\n",
         ":4: key 'models.m.base_url': key 'base_url': 'ftp://x/v1' is not an http"},
        {"models:\n  m:\n    backend: parley\n    base_url: [\"http://a/v1\", 7]\n",
         ":4: key 'models.m.base_url': key 'base_url[1]' must be a URL string"},
        {"models:\n  m:\n    backend: tgi\n", ":3: key 'models.m.backend': key 'backend': 'tgi' is not one of"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        pl_opts o;
        pl_config c;
        char err[512];
        cr_assert_eq(load(".yaml", cases[i].text, &o, &c, err), -1, "case %zu", i);
        cr_expect(strstr(err, cases[i].want), "case %zu: %s", i, err);
        pl_opts_free(&o);
    }
}

Test(options, upstream_is_repeatable_and_deduplicated)
{
    pl_opts o;
    char err[256];
    cr_assert_eq(pl_opts_init(&o, err, sizeof err), 0);
    char *argv[] = {"parley", "serve", "--upstream", "http://a:1/v1", "--upstream=http://b:2/v1",
                    "--upstream", "http://a:1/v1"};
    char *pos[1];
    int npos;
    cr_assert_eq(pl_opts_parse_args(&o, 7, argv, 2, pos, 1, &npos, err, sizeof err), 0, "%s", err);
    cr_expect_str_eq(o.upstream, "http://a:1/v1,http://b:2/v1");
    char *bad[] = {"parley", "serve", "--upstream", "gpu1:8000"};
    cr_assert_eq(pl_opts_parse_args(&o, 4, bad, 2, pos, 1, &npos, err, sizeof err), -1);
    cr_expect(strstr(err, "--upstream") && strstr(err, "not an http"), "%s", err);
    pl_opts_free(&o);
}

/* The CUDA kernel choices are options; their old environment variables are
 * aliases (below the command line and config), and a bad value names its
 * variable. */
Test(options, cuda_choices_and_env_aliases)
{
    pl_opts o;
    char err[256];
    char *pos[1];
    int npos;
    cr_assert_eq(pl_opts_init(&o, err, sizeof err), 0, "%s", err);
    cr_expect_eq(o.engine.cuda.decode_attn, PL_CUDA_DECODE_SPLIT);
    cr_expect_eq(o.engine.cuda.prefill_attn, PL_CUDA_PREFILL_TILED);
    cr_expect_not(o.engine.cuda.profile);
    cr_expect_eq(o.engine.cuda.inject, PL_CUDA_INJECT_NONE);
    cr_expect(o.engine.cuda.graphs);
    pl_opts_free(&o);

    setenv("PARLEY_CUDA_DECODE_ATTN", "rows", 1);
    setenv("PARLEY_CUDA_PREFILL_ATTN", "mma", 1);
    setenv("PARLEY_CUDA_PROFILE", "1", 1);
    setenv("PARLEY_CUDA_INJECT", "capture", 1);
    setenv("PARLEY_LOAD_THREADS", "3", 1);
    cr_assert_eq(pl_opts_init(&o, err, sizeof err), 0, "%s", err);
    cr_expect_eq(o.engine.cuda.decode_attn, PL_CUDA_DECODE_ROWS);
    cr_expect_eq(o.engine.cuda.prefill_attn, PL_CUDA_PREFILL_MMA);
    cr_expect(o.engine.cuda.profile);
    cr_expect_eq(o.engine.cuda.inject, PL_CUDA_INJECT_CAPTURE);
    cr_expect_eq(o.engine.cuda.load_threads, 3);
    char *argv[] = {"p", "s", "--cuda-decode-attn", "split16", "--no-cuda-profile"};
    cr_assert_eq(pl_opts_parse_args(&o, 5, argv, 2, pos, 1, &npos, err, sizeof err), 0, "%s",
                 err);
    cr_expect_eq(o.engine.cuda.decode_attn, PL_CUDA_DECODE_SPLIT16);
    cr_expect_not(o.engine.cuda.profile);
    char *bad[] = {"p", "s", "--cuda-decode-attn", "fast"};
    cr_expect_eq(pl_opts_parse_args(&o, 4, bad, 2, pos, 1, &npos, err, sizeof err), -1);
    cr_expect(strstr(err, "--cuda-decode-attn") && strstr(err, "split|rows|split16|mma"), "%s",
              err);
    pl_opts_free(&o);
    unsetenv("PARLEY_CUDA_PREFILL_ATTN");
    unsetenv("PARLEY_CUDA_PROFILE");
    unsetenv("PARLEY_CUDA_INJECT");
    unsetenv("PARLEY_LOAD_THREADS");

    setenv("PARLEY_CUDA_DECODE_ATTN", "fastest", 1);
    cr_expect_eq(pl_opts_init(&o, err, sizeof err), -1);
    cr_expect(strstr(err, "PARLEY_CUDA_DECODE_ATTN") && strstr(err, "fastest"), "%s", err);
    pl_opts_free(&o);
    unsetenv("PARLEY_CUDA_DECODE_ATTN");

    pl_config c;
    cr_assert_eq(load(".yaml", "models:\n  a:\n    backend: cuda\n    cuda_decode_attn: mma\n",
                      &o, &c, err), 0, "%s", err);
    cr_expect_eq(c.models[0].opts.engine.cuda.decode_attn, PL_CUDA_DECODE_MMA);
    pl_config_free(&c);
    pl_opts_free(&o);
    cr_expect_eq(load(".yaml", "models:\n  a:\n    backend: cuda\n    cuda_prefill_attn: 3\n",
                      &o, &c, err), -1);
    cr_expect(strstr(err, ":4: key 'models.a.cuda_prefill_attn'"), "%s", err);
    pl_opts_free(&o);
}

/* `parley run` reads its own flags from the table too: each command takes
 * only its options (a server option on `run` is an error, not ignored),
 * and an option's errors say what it expects. */
Test(options, run_flags_are_in_the_table)
{
    pl_opts o;
    char err[256];
    char *pos[2];
    int npos;
    unsigned run = PL_OPT_RUN | PL_OPT_MODEL;
    cr_assert_eq(pl_opts_init_run(&o, err, sizeof err), 0, "%s", err);
    cr_expect_eq(o.strategy, 0);
    cr_expect_float_eq(o.progress_interval, 5.0, 1e-12);
    char *ok[] = {"parley", "run", "job.yaml", "--strategy", "naive", "--kv-eviction=lru",
                  "--output", "/tmp/x", "--live", "--progress-interval", "0.5",
                  "--max-num-seqs", "8", "--log-level", "warn"};
    cr_assert_eq(pl_opts_parse_scope(&o, run, 15, ok, 2, pos, 2, &npos, err, sizeof err), 0,
                 "%s", err);
    cr_expect_eq(npos, 1);
    cr_expect_eq(o.strategy, 2);
    cr_expect_eq(o.kv_eviction, 1);
    cr_expect_str_eq(o.output, "/tmp/x");
    cr_expect(o.live);
    cr_expect_float_eq(o.progress_interval, 0.5, 1e-12);
    cr_expect_eq(o.engine.core.max_num_seqs, 8);
    cr_expect_str_eq(o.log_level, "warn");
    char *port[] = {"parley", "run", "job.yaml", "--port", "5"};
    cr_expect_eq(pl_opts_parse_scope(&o, run, 5, port, 2, pos, 2, &npos, err, sizeof err), -1);
    cr_expect(strstr(err, "unknown option '--port'"), "%s", err);
    char *lifo[] = {"parley", "run", "--strategy", "lifo"};
    cr_expect_eq(pl_opts_parse_scope(&o, run, 4, lifo, 2, pos, 2, &npos, err, sizeof err), -1);
    cr_expect_str_eq(err, "--strategy: expected parley, fcfs or naive, got 'lifo'");
    pl_opts_free(&o);
    /* serve takes no run flags, and run's environment alias is not read. */
    setenv("MAC_FAIRNESS_LIVE_STATUS", "sometimes", 1);
    cr_assert_eq(pl_opts_init(&o, err, sizeof err), 0, "%s", err);
    char *live[] = {"parley", "serve", "--live"};
    cr_expect_eq(pl_opts_parse_args(&o, 3, live, 2, pos, 2, &npos, err, sizeof err), -1);
    cr_expect(strstr(err, "unknown option '--live'"), "%s", err);
    pl_opts_free(&o);
    cr_expect_eq(pl_opts_init_run(&o, err, sizeof err), -1);
    cr_expect(strstr(err, "MAC_FAIRNESS_LIVE_STATUS"), "%s", err);
    pl_opts_free(&o);
    setenv("MAC_FAIRNESS_LIVE_STATUS", "1", 1);
    cr_assert_eq(pl_opts_init_run(&o, err, sizeof err), 0, "%s", err);
    cr_expect(o.live);
    pl_opts_free(&o);
    unsetenv("MAC_FAIRNESS_LIVE_STATUS");
}

/* --kv-cache-dtype: vLLM's values, its environment alias and its config
 * key; auto (bf16) by default. */
Test(options, kv_cache_dtype)
{
    pl_opts o;
    char err[256];
    char *pos[1];
    int npos;
    cr_assert_eq(pl_opts_init(&o, err, sizeof err), 0, "%s", err);
    cr_expect_eq(o.engine.cuda.kv_cache_dtype, PL_CUDA_KV_AUTO);
    char *argv[] = {"p", "s", "--kv-cache-dtype", "fp8_e4m3"};
    cr_assert_eq(pl_opts_parse_args(&o, 4, argv, 2, pos, 1, &npos, err, sizeof err), 0, "%s",
                 err);
    cr_expect_eq(o.engine.cuda.kv_cache_dtype, PL_CUDA_KV_FP8_E4M3);
    pl_opts_free(&o);
    setenv("PARLEY_KV_CACHE_DTYPE", "fp8", 1);
    cr_assert_eq(pl_opts_init(&o, err, sizeof err), 0, "%s", err);
    cr_expect_eq(o.engine.cuda.kv_cache_dtype, PL_CUDA_KV_FP8);
    pl_opts_free(&o);
    unsetenv("PARLEY_KV_CACHE_DTYPE");
    pl_config c;
    cr_assert_eq(load(".yaml", "models:\n  a:\n    backend: cuda\n    kv_cache_dtype: bf16\n",
                      &o, &c, err), 0, "%s", err);
    cr_expect_eq(c.models[0].opts.engine.cuda.kv_cache_dtype, PL_CUDA_KV_BF16);
    pl_config_free(&c);
    pl_opts_free(&o);
}
