/* options.c - the one option table, and the parsers it drives. */
#include "src/options.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "src/base/log.h"

#define OPT(name, type, lo, hi, def, env, choices, field, scope, help) \
    {name, type, lo, hi, def, env, choices, offsetof(pl_opts, field), scope, help, NULL}
/* An option whose errors say what it expects in words. */
#define OPTX(name, type, lo, hi, def, env, choices, field, scope, help, expect) \
    {name, type, lo, hi, def, env, choices, offsetof(pl_opts, field), scope, help, expect}
#define S PL_OPT_SERVE
#define M (PL_OPT_SERVE | PL_OPT_MODEL)
#define R PL_OPT_RUN

const pl_option pl_options[] = {
    OPT("host", PL_OPT_STRING, 0, 0, "127.0.0.1", "PARLEY_HOST", NULL, host, S,
        "address to bind"),
    OPT("port", PL_OPT_INT, 0, 65535, "8000", "PARLEY_PORT", NULL, port, S,
        "port to bind (0 picks a free port)"),
    OPT("backend", PL_OPT_STRING, 0, 0, "auto", "PARLEY_BACKEND",
        "auto|cpu|cuda|mock|vllm|sglang|llamacpp|ollama|openai|parley", backend, M,
        "backend for the model: auto picks cuda when a GPU is present, else cpu; "
        "vllm..parley: an OpenAI-compatible upstream at base_url"),
    OPT("config", PL_OPT_STRING, 0, 0, "", "PARLEY_CONFIG", NULL, config, S,
        "YAML or JSON config file (models section)"),
    OPT("model", PL_OPT_STRING, 0, 0, "", "PARLEY_MODEL", NULL, model, M,
        "GGUF file, Hugging Face checkpoint folder, or ORG/NAME in the local Hugging Face "
        "cache (offline) (default: the embedded SmolLM2-135M-Instruct)"),
    OPT("model-dir", PL_OPT_STRING, 0, 0, "", "PARLEY_MODEL_DIR", NULL, model_dir, M,
        "where the default model is cached (default: ~/.cache/parley/models, as "
        "scripts/fetch_model.sh)"),
    OPT("served-model-name", PL_OPT_STRING, 0, 0, "", NULL, NULL, served_model_name, S,
        "model name clients use (default: derived from the model)"),
    OPT("threads", PL_OPT_INT, 0, 1024, "0", "PARLEY_THREADS", NULL, engine.cpu.threads, M,
        "CPU runner threads (0 = all cores)"),
    OPT("mock-token-delay-ms", PL_OPT_INT, 0, 60000, "0", NULL, NULL, mock_token_delay_ms, M,
        "mock backend: delay between tokens"),
    OPT("mock-capacity", PL_OPT_INT, 1, 1000000, "256", NULL, NULL, mock_capacity, M,
        "mock backend: concurrent sequences"),
    OPT("mock-seed", PL_OPT_INT, 0, 2147483647, "0", NULL, NULL, mock_seed, M,
        "mock backend: seed of the token generator"),
    OPT("mock-mode", PL_OPT_STRING, 0, 0, "random", NULL, "random|echo", mock_mode, M,
        "mock backend: seeded random words, or echo the prompt"),
    OPT("mock-reasoning", PL_OPT_STRING, 0, 0, "none", NULL, "none|qwen3|qwen35|harmony",
        mock_reasoning, M, "mock backend: the reasoning format its replies are read in "
        "(harmony: also its tool format)"),
    OPT("max-body-bytes", PL_OPT_LONG, 1024, 1073741824, "4194304", NULL, NULL,
        max_body_bytes, S, "largest request body accepted (413 above)"),
    OPT("stream-buffer-bytes", PL_OPT_LONG, 4096, 1073741824, "262144", NULL, NULL,
        stream_buffer_bytes, S, "pending output per stream before delivery pauses"),
    OPT("shutdown-timeout", PL_OPT_INT, 0, 3600, "30", NULL, NULL, shutdown_timeout, S,
        "on SIGTERM or SIGINT: seconds the requests in flight get to finish before their "
        "connections are closed (a second signal stops at once)"),
    OPT("chat-template", PL_OPT_STRING, 0, 0, "", NULL, NULL, engine.chat_template, M,
        "override the chat template: chatml|llama3|llama2|mistral|gemma|phi3|zephyr"),
    OPT("chat-template-strict", PL_OPT_BOOL, 0, 0, "false", NULL, NULL,
        engine.chat_template_strict, M, "fail instead of falling back to ChatML"),
    OPT("structured-whitespace", PL_OPT_ENUM, 0, 0, "flexible", NULL, "flexible|compact",
        engine.core.json_ws, M,
        "JSON under response_format, guided_json and tool calls: flexible allows the line "
        "breaks and indentation models write (bounded), compact only \", \" and \": \""),
    OPT("max-num-seqs", PL_OPT_INT, 1, 65536, "256", NULL, NULL, engine.core.max_num_seqs, M,
        "upper bound of concurrent sequences"),
    OPT("capacity", PL_OPT_ENUM, 0, 0, "kv", NULL, "kv|worst-case", engine.core.capacity_rule, M,
        "how many requests a model takes at once: kv admits each by the KV blocks it needs "
        "(its prompt and max_tokens, or the running estimate of a reply when smaller) "
        "against the blocks free now, up to --max-num-seqs; worst-case is seed 000's "
        "min(--max-num-seqs, KV tokens / max_model_len)"),
    OPT("max-num-batched-tokens", PL_OPT_INT, 16, 1048576, "2048", NULL, NULL,
        engine.core.max_num_batched_tokens, M, "token budget of one engine step"),
    OPT("block-size", PL_OPT_INT, 1, 256, "16", NULL, NULL, engine.core.block_size, M,
        "KV cache block size in tokens"),
    OPT("kv-cache-mb", PL_OPT_INT, 1, 1048576, "2048", NULL, NULL, engine.kv_cache_mb, M,
        "CPU KV cache size in MiB"),
    OPT("max-model-len", PL_OPT_INT, 0, 1048576, "0", NULL, NULL, engine.max_model_len, M,
        "context length (0: on CPU the model's where the KV cache holds 4 sequences of it, "
        "else the longest it holds 4 of, at least min(the model's, 2048); on CUDA the "
        "model's, capped by the KV cache)"),
    OPT("prepare-threads", PL_OPT_INT, 0, 64, "2", NULL, NULL, engine.core.prepare_threads, M,
        "engine: threads that compile new structured-output constraints and tokenise large "
        "prompts off the event loop (0: on the event loop, as before; for comparison)"),
    OPT("async-scheduling", PL_OPT_BOOL, 0, 0, "true", NULL, NULL, engine.core.async, M,
        "schedule step N+1 while step N runs (--no-async-scheduling for sync)"),
    OPT("prefix-caching", PL_OPT_BOOL, 0, 0, "true", NULL, NULL, engine.core.prefix_caching, M,
        "reuse cached KV blocks of shared prompt prefixes"),
    OPT("prefix-checkpoint-blocks", PL_OPT_INT, 0, 1048576, "4", NULL, NULL,
        engine.core.ckpt_every, M,
        "hybrid models (recurrent layers): checkpoint the recurrent state every this many KV "
        "blocks of a prompt, so a prefix hit resumes there (0: none such; every prompt's last "
        "block boundary is checkpointed either way, and a debate round's shared prefix where "
        "jobs' retention hints name it)"),
    OPT("kv-cache-f16", PL_OPT_BOOL, 0, 0, "true", NULL, NULL, engine.cpu.kv_f16, M,
        "CPU: K/V cache in IEEE halves, as llama.cpp keeps it: twice the tokens per MiB, and "
        "half the bytes attention reads per token (--no-kv-cache-f16: floats)"),
    OPT("kv-cache-groups", PL_OPT_BOOL, 0, 0, "true", NULL, NULL, engine.cpu.kv_groups, M,
        "CPU: K/V cache groups: sliding-window layers keep the blocks of their window only "
        "and full layers every block, from one pool (--no-kv-cache-groups: every layer "
        "keeps the whole context, as before)"),
    OPT("cpu-amx", PL_OPT_BOOL, 0, 0, "false", NULL, NULL, engine.cpu.amx, M,
        "CPU: Q4_0/Q4_1/Q8_0 matmuls from 16 rows on AMX-INT8 tiles, with the same "
        "outputs as without; needs an AMX CPU, checked at start"),
    OPT("pooling", PL_OPT_STRING, 0, 0, "", NULL, NULL, engine.pooling, M,
        "embedding models: mean|cls|last, how token rows become one vector (default: the model's own, "
        "sentence-transformers' Pooling module, else mean); on a decoder (llama, qwen3, ...) it "
        "serves /v1/embeddings from the final hidden states instead of generating, on the CPU "
        "(vLLM's --runner pooling; Qwen3-Embedding: last)"),
    OPT("max-embed-inputs", PL_OPT_INT, 1, 1000000, "2048", NULL, NULL, max_embed_inputs, S,
        "POST /v1/embeddings: most inputs in one request (400 above)"),
    OPT("revision", PL_OPT_STRING, 0, 0, "", NULL, NULL, engine.revision, M,
        "--model ORG/NAME: the revision in the local Hugging Face cache, a ref (main) or a "
        "snapshot's commit hash (default: refs/main)"),
    OPT("cpu-weight-type", PL_OPT_STRING, 0, 0, "auto", NULL,
        "auto|f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q6_k", engine.cpu.weight_type, M,
        "CPU: the GGUF type a Hugging Face checkpoint's weight matrices become at load; auto "
        "keeps each in its own precision (bf16, f16, f32; FP8 as bf16), as vLLM serves it "
        "(a GGUF model keeps its own types; CUDA takes checkpoints as bf16)"),
    OPT("batch-invariant", PL_OPT_BOOL, 0, 0, "true", NULL, NULL, engine.cpu.batch_invariant, M,
        "CPU: quantised kernels for every batch size, so a request's tokens do not depend "
        "on what it is batched with (--no-batch-invariant: f32 GEMM for big batches)"),
    OPT("gpu-memory-utilization", PL_OPT_DOUBLE, 0.05, 1.0, "0.9", NULL, NULL,
        engine.cuda.gpu_memory_utilization, M, "fraction of GPU memory for weights and KV cache"),
    OPT("cuda-graphs", PL_OPT_BOOL, 0, 0, "true", NULL, NULL, engine.cuda.graphs, M,
        "capture decode steps in CUDA graphs (--no-cuda-graphs disables)"),
    OPT("cuda-decode-attn", PL_OPT_ENUM, 0, 0, "split", "PARLEY_CUDA_DECODE_ATTN",
        "split|rows|split16|mma", engine.cuda.decode_attn, M,
        "CUDA decode attention: split-KV with a warp per key (where the shape has a kernel, "
        "else rows), one block per row, split-KV with 16 lanes per key, or split-KV on "
        "tensor cores"),
    OPT("cuda-prefill-attn", PL_OPT_ENUM, 0, 0, "tiled", "PARLEY_CUDA_PREFILL_ATTN",
        "tiled|mma", engine.cuda.prefill_attn, M,
        "CUDA prefill attention: 32x32 tiles, or tensor cores where the head size has a kernel"),
    OPT("cuda-profile", PL_OPT_BOOL, 0, 0, "false", "PARLEY_CUDA_PROFILE", NULL,
        engine.cuda.profile, M,
        "CUDA: device time per phase of the forward pass, logged when the model closes "
        "(needs --no-cuda-graphs; every step then waits for itself)"),
    OPT("cuda-inject", PL_OPT_ENUM, 0, 0, "none", "PARLEY_CUDA_INJECT", "none|capture",
        engine.cuda.inject, M, "CUDA fault injection for tests: capture makes every CUDA graph "
        "capture fail (the runner then steps eagerly)"),
    OPT("kv-cache-dtype", PL_OPT_ENUM, 0, 0, "auto", "PARLEY_KV_CACHE_DTYPE",
        "auto|bf16|fp8|fp8_e4m3", engine.cuda.kv_cache_dtype, M,
        "CUDA: K/V cache element type, as vLLM's flag: auto (bf16), or fp8 (= fp8_e4m3: OCP "
        "E4M3 with a scale per KV head, twice the tokens in the same memory)"),
    OPT("load-threads", PL_OPT_INT, 0, 1024, "0", "PARLEY_LOAD_THREADS", NULL,
        engine.cuda.load_threads, M, "CUDA: threads converting weights at load (0 = the online "
        "CPUs, at most 32)"),
    OPT("base-url", PL_OPT_URLS, 0, 0, "", NULL, NULL, base_url, M,
        "remote backends: the upstream's OpenAI base URL with /v1 (repeat, or a list in "
        "config, for replicas)"),
    OPT("upstream", PL_OPT_URLS, 0, 0, "", NULL, NULL, upstream, M,
        "serve every model this OpenAI-compatible upstream lists (repeatable; upstreams "
        "listing the same model are its replicas)"),
    OPT("upstream-api-key", PL_OPT_STRING, 0, 0, "", NULL, NULL, upstream_api_key, M,
        "remote backends: bearer token sent upstream (model config: api_key)"),
    OPT("upstream-api-key-env", PL_OPT_STRING, 0, 0, "", NULL, NULL, upstream_api_key_env, M,
        "remote backends: environment variable holding the bearer token (model config: "
        "api_key_env)"),
    OPT("upstream-model", PL_OPT_STRING, 0, 0, "", NULL, NULL, upstream_model, M,
        "remote backends: the model id at the upstream (default: the model's name, or the "
        "only model it lists)"),
    OPT("upstream-connect-timeout-ms", PL_OPT_INT, 1, 600000, "3000", NULL, NULL,
        upstream_connect_timeout_ms, M, "remote backends: connect timeout"),
    OPT("upstream-first-token-timeout-ms", PL_OPT_INT, 0, 86400000, "300000", NULL, NULL,
        upstream_first_token_timeout_ms, M,
        "remote backends: request sent -> first token, else retry or fail (0: none)"),
    OPT("upstream-token-timeout-ms", PL_OPT_INT, 0, 86400000, "60000", NULL, NULL,
        upstream_token_timeout_ms, M,
        "remote backends: longest gap between tokens before the stream fails (0: none)"),
    OPT("upstream-attempts", PL_OPT_INT, 1, 100, "3", NULL, NULL, upstream_attempts, M,
        "remote backends: tries before the first token (refused, 5xx, 429, timeouts)"),
    OPT("upstream-health-interval-ms", PL_OPT_INT, 50, 3600000, "2000", NULL, NULL,
        upstream_health_interval_ms, M, "remote backends: health check period"),
    OPT("upstream-probe-timeout-ms", PL_OPT_INT, 0, 600000, "20000", NULL, NULL,
        upstream_probe_timeout_ms, M,
        "remote backends: start-up wait for the probes that check each upstream enforces "
        "constraints (0: no probe; constraints are sent unverified)"),
    OPT("upstream-affinity", PL_OPT_BOOL, 0, 0, "true", NULL, NULL, upstream_affinity, M,
        "remote backends: send a conversation back to the replica that served it"),
    OPT("upstream-embed-dimensions", PL_OPT_INT, 0, 1048576, "0", NULL, NULL,
        upstream_embed_dim, M,
        "remote backends: the upstream model embeds, in vectors of this length, where its "
        "/v1/models does not say so (vLLM --runner pooling, llama-server --embeddings, "
        "Ollama); 0: only what a parley upstream's /v1/models says"),
    OPT("api-key", PL_OPT_LIST, 0, 0, "", "PARLEY_API_KEY", NULL, api_key, S,
        "require 'Authorization: Bearer KEY' on every endpoint but /health (repeatable)"),
    OPT("api-key-file", PL_OPT_STRING, 0, 0, "", NULL, NULL, api_key_file, S,
        "file of API keys, one per line ('#' starts a comment)"),
    OPT("allowed-origins", PL_OPT_STRING, 0, 0, "", NULL, NULL, allowed_origins, S,
        "browser origins allowed to call (comma-separated, '*' for any; others get 403)"),
    OPT("allowed-hosts", PL_OPT_STRING, 0, 0, "", NULL, NULL, allowed_hosts, S,
        "without --api-key: Host names requests may use besides localhost and the address "
        "listened on (comma-separated, '.example.com' for a domain and its subdomains, '*' "
        "for any; others get 403, which stops DNS rebinding)"),
    OPT("rate-limit-rpm", PL_OPT_INT, 0, 100000000, "0", NULL, NULL, rate_limit_rpm, S,
        "requests per minute per API key (0 = no limit; 429 above)"),
    OPT("rate-limit-tpm", PL_OPT_INT, 0, 2000000000, "0", NULL, NULL, rate_limit_tpm, S,
        "tokens per minute per API key (0 = no limit; 429 above)"),
    OPT("max-header-bytes", PL_OPT_LONG, 1024, 16777216, "65536", NULL, NULL,
        max_header_bytes, S, "largest request line + headers (431 above)"),
    OPT("idle-timeout", PL_OPT_INT, 1, 86400, "60", NULL, NULL, idle_timeout, S,
        "seconds before an idle keep-alive connection is closed"),
    OPT("header-timeout", PL_OPT_INT, 1, 3600, "20", NULL, NULL, header_timeout, S,
        "seconds a request's head may take to arrive (408 after)"),
    OPT("body-timeout", PL_OPT_INT, 1, 86400, "60", NULL, NULL, body_timeout, S,
        "seconds a request's body may take to arrive (408 after)"),
    OPT("max-connections", PL_OPT_INT, 1, 1000000, "1000", NULL, NULL, max_connections, S,
        "open connections served at once (503 beyond)"),
    OPT("stream-stall-timeout", PL_OPT_INT, 1, 86400, "60", NULL, NULL, stream_stall_timeout,
        S, "seconds a stream's client may go without reading (acknowledging nothing sent "
        "to it, or leaving delivery paused) before the stream is aborted"),
    OPT("job-retention", PL_OPT_INT, 0, 31536000, "3600", NULL, NULL, job_retention, S,
        "seconds a finished job stays listed (its files stay on disk)"),
    OPT("max-job-questions", PL_OPT_INT, 1, 100000000, "100000", NULL, NULL,
        max_job_questions, S, "most questions in one job"),
    OPT("max-job-bytes", PL_OPT_LONG, 1024, 1073741824, "67108864", NULL, NULL, max_job_bytes,
        S, "largest job spec accepted by POST /v1/jobs (413 above)"),
    OPT("interactive-reserve", PL_OPT_INT, -1, 65536, "-1", NULL, NULL, interactive_reserve,
        S, "slots of each model that jobs leave free for OpenAI requests (-1: 10% of the "
        "capacity, rounded up; in-flight OpenAI requests always count against jobs)"),
    OPT("log-level", PL_OPT_STRING, 0, 0, "info", "PARLEY_LOG", "debug|info|warn|error|quiet",
        log_level, S | R, "log verbosity"),
    OPT("log-format", PL_OPT_STRING, 0, 0, "text", "PARLEY_LOG_FORMAT", "text|json", log_format,
        S | R, "log lines as text, or one JSON object per line"),
    OPT("access-log", PL_OPT_BOOL, 0, 0, "true", NULL, NULL, access_log, S,
        "log one line per HTTP request at info level: method, path, status, duration, "
        "tokens, request id (--no-access-log disables)"),
    OPT("jobs-dir", PL_OPT_STRING, 0, 0, "parley-jobs", "PARLEY_JOBS_DIR", NULL, jobs_dir, S,
        "serve: directory the jobs API writes experiments under"),
    OPT("output", PL_OPT_STRING, 0, 0, "", NULL, NULL, output, R,
        "write OUTPUT/<experiment>/... under this directory (default: the job's output_dir, "
        "else ./output)"),
    OPT("live", PL_OPT_BOOL, 0, 0, "false", "MAC_FAIRNESS_LIVE_STATUS", NULL, live, R,
        "full-screen view of the scheduler's pools (MAC_FAIRNESS_LIVE_STATUS=1 as in seed 000)"),
    OPTX("progress-interval", PL_OPT_DOUBLE, 0, 86400, "5", NULL, NULL, progress_interval, R,
         "when stderr is not a terminal, one status line every this many seconds (0: none)",
         "seconds in [0, 86400]"),
    OPT("stats", PL_OPT_STRING, 0, 0, "", NULL, NULL, stats, R,
        "write the strategy, makespan and backend statistics to this file (JSON)"),
    OPTX("strategy", PL_OPT_ENUM, 0, 0, "parley", NULL, "parley|fcfs|naive", strategy, R,
         "dispatch policy: parley (seed 000's priority heap); fcfs: first ready, first served; "
         "naive: one request at a time, conversation by conversation (benchmark baselines)",
         "parley, fcfs or naive"),
    OPTX("kv-eviction", PL_OPT_ENUM, 0, 0, "next-need", NULL, "next-need|lru", kv_eviction, R,
         "next-need: the job tells the engine how soon each conversation needs its cached "
         "prefix (finished ones are evicted first); lru: no hints (a baseline)",
         "lru or next-need"),
    OPT("resume-changed", PL_OPT_BOOL, 0, 0, "false", NULL, NULL, resume_changed, R,
        "resume an experiment whose results were made with another job spec (they mix on "
        "purpose; index lines carry each line's spec_fingerprint); without it such a run is "
        "refused"),
};
const size_t pl_n_options = sizeof pl_options / sizeof pl_options[0];

#undef S
#undef M
#undef R

static void *opt_field(pl_opts *o, const pl_option *d)
{
    return (char *)o + d->offset;
}

static int opt_is_text(pl_opt_type t)
{
    return t == PL_OPT_STRING || t == PL_OPT_URLS || t == PL_OPT_LIST;
}

/* Add one URL to a comma-separated list (a URL already there is kept once,
 * so parsing the command line twice adds nothing). */
static int opt_add_url(char **f, const char *v, char *err, size_t errlen)
{
    if (strncmp(v, "http://", 7) != 0 && strncmp(v, "https://", 8) != 0) {
        snprintf(err, errlen, "'%s' is not an http:// or https:// URL", v);
        return -1;
    }
    if (strchr(v, ',') || strchr(v, ' ')) {
        snprintf(err, errlen, "'%s': a URL has no commas or spaces", v);
        return -1;
    }
    size_t n = strlen(v);
    for (const char *p = *f; p && *p;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (len == n && !strncmp(p, v, n))
            return 0;
        p = c ? c + 1 : NULL;
    }
    size_t old = *f ? strlen(*f) : 0;
    char *s = malloc(old + n + 2);
    if (!s)
        return -1;
    snprintf(s, old + n + 2, "%s%s%s", old ? *f : "", old ? "," : "", v);
    free(*f);
    *f = s;
    return 0;
}

/* The index of v in "a|b|c", or -1. */
static int opt_choice_index(const char *choices, const char *v)
{
    size_t n = strlen(v);
    int i = 0;
    for (const char *p = choices; p && *p; i++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0)
            return i;
        p = bar ? bar + 1 : NULL;
    }
    return -1;
}

/* Parse text into the option's field. */
static int opt_parse_text(pl_opts *o, const pl_option *d, const char *v, char *err,
                          size_t errlen)
{
    void *f = opt_field(o, d);
    char *end;
    errno = 0;
    switch (d->type) {
    case PL_OPT_URLS:
        if (!*v) {
            free(*(char **)f);
            *(char **)f = strdup("");
            return 0;
        }
        return opt_add_url((char **)f, v, err, errlen);
    case PL_OPT_LIST: {
        char *old = *(char **)f;
        size_t ol = old ? strlen(old) : 0, nl = strlen(v);
        if (!nl)
            return 0;
        char *n = malloc(ol + nl + 2);
        if (!n) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        if (ol)
            memcpy(n, old, ol), n[ol++] = '\n';
        memcpy(n + ol, v, nl + 1);
        free(old);
        *(char **)f = n;
        return 0;
    }
    case PL_OPT_STRING:
    case PL_OPT_ENUM: {
        int k = d->choices ? opt_choice_index(d->choices, v) : 0;
        if (k < 0) {
            snprintf(err, errlen, "'%s' is not one of %s", v, d->choices);
            return -1;
        }
        if (d->type == PL_OPT_ENUM) {
            *(int *)f = k;
            return 0;
        }
        free(*(char **)f);
        *(char **)f = strdup(v);
        return 0;
    }
    case PL_OPT_BOOL:
        if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes"))
            *(bool *)f = true;
        else if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no"))
            *(bool *)f = false;
        else {
            snprintf(err, errlen, "'%s' is not a boolean (true or false)", v);
            return -1;
        }
        return 0;
    case PL_OPT_DOUBLE: {
        double x = strtod(v, &end);
        if (end == v || *end || errno || !isfinite(x) || x < d->min || x > d->max) {
            snprintf(err, errlen, "'%s' must be a number in %g..%g", v, d->min, d->max);
            return -1;
        }
        *(double *)f = x;
        return 0;
    }
    case PL_OPT_INT:
    case PL_OPT_LONG: {
        long long x = strtoll(v, &end, 10);
        if (end == v || *end || errno || x < (long long)d->min || x > (long long)d->max) {
            snprintf(err, errlen, "'%s' must be an integer in %.0f..%.0f", v, d->min, d->max);
            return -1;
        }
        if (d->type == PL_OPT_INT)
            *(int *)f = (int)x;
        else
            *(long *)f = (long)x;
        return 0;
    }
    }
    return -1;
}

/* opt_parse_text, with the option's own words for what it expects. */
static int opt_set_text(pl_opts *o, const pl_option *d, const char *v, char *err,
                        size_t errlen)
{
    if (opt_parse_text(o, d, v, err, errlen) == 0)
        return 0;
    if (d->expect)
        snprintf(err, errlen, "expected %s, got '%s'", d->expect, v);
    return -1;
}

/* Find by name; '_' and '-' are the same. */
static const pl_option *opt_find(const char *name, size_t len)
{
    for (size_t i = 0; i < pl_n_options; i++) {
        const char *n = pl_options[i].name;
        if (strlen(n) != len)
            continue;
        size_t j = 0;
        for (; j < len; j++) {
            char a = name[j] == '_' ? '-' : name[j];
            if (a != n[j])
                break;
        }
        if (j == len)
            return &pl_options[i];
    }
    return NULL;
}

/* Defaults, then the environment of the options in env_scope. */
static int opts_init(pl_opts *o, unsigned env_scope, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    for (size_t i = 0; i < pl_n_options; i++) {
        const pl_option *d = &pl_options[i];
        if (opt_set_text(o, d, d->def, err, errlen) < 0)
            return -1;
        const char *env = d->env && (d->scope & env_scope) ? getenv(d->env) : NULL;
        if (env && *env) {
            char e2[256];
            if (opt_set_text(o, d, env, e2, sizeof e2) < 0) {
                snprintf(err, errlen, "environment %s: %s", d->env, e2);
                return -1;
            }
        }
    }
    return 0;
}

int pl_opts_init(pl_opts *o, char *err, size_t errlen)
{
    return opts_init(o, PL_OPT_SERVE | PL_OPT_MODEL, err, errlen);
}

int pl_opts_init_run(pl_opts *o, char *err, size_t errlen)
{
    return opts_init(o, PL_OPT_MODEL | PL_OPT_RUN, err, errlen);
}

void pl_opts_copy(pl_opts *dst, const pl_opts *src)
{
    *dst = *src;
    for (size_t i = 0; i < pl_n_options; i++) {
        if (!opt_is_text(pl_options[i].type))
            continue;
        char **f = (char **)opt_field(dst, &pl_options[i]);
        if (*f)
            *f = strdup(*f);
    }
}

void pl_opts_free(pl_opts *o)
{
    for (size_t i = 0; i < pl_n_options; i++) {
        if (!opt_is_text(pl_options[i].type))
            continue;
        char **f = (char **)opt_field(o, &pl_options[i]);
        free(*f);
        *f = NULL;
    }
}

int pl_opts_parse_args(pl_opts *o, int argc, char **argv, int first,
                       char **positional, int max_pos, int *n_pos,
                       char *err, size_t errlen)
{
    return pl_opts_parse_scope(o, PL_OPT_SERVE | PL_OPT_MODEL, argc, argv, first, positional,
                               max_pos, n_pos, err, errlen);
}

int pl_opts_parse_scope(pl_opts *o, unsigned scope_mask, int argc, char **argv, int first,
                        char **positional, int max_pos, int *n_pos, char *err,
                        size_t errlen)
{
    *n_pos = 0;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return 1;
        if (strncmp(a, "--", 2) != 0) {
            if (*n_pos >= max_pos) {
                snprintf(err, errlen, "unexpected argument '%s'", a);
                return -1;
            }
            positional[(*n_pos)++] = argv[i];
            continue;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const pl_option *d = opt_find(name, len);
        const char *val = eq ? eq + 1 : NULL;
        if (!d && len > 3 && !strncmp(name, "no-", 3) && !eq) {
            d = opt_find(name + 3, len - 3);
            if (d && d->type == PL_OPT_BOOL)
                val = "false";
            else
                d = NULL;
        }
        if (!d || !(d->scope & scope_mask)) {
            snprintf(err, errlen, "unknown option '--%.*s' (see --help)", (int)len, name);
            return -1;
        }
        if (!val && d->type == PL_OPT_BOOL)
            val = "true";
        if (!val) {
            if (i + 1 >= argc) {
                snprintf(err, errlen, "--%s: needs a value", d->name);
                return -1;
            }
            val = argv[++i];
        }
        char e2[256];
        if (opt_set_text(o, d, val, e2, sizeof e2) < 0) {
            snprintf(err, errlen, "--%s: %s", d->name, e2);
            return -1;
        }
    }
    return 0;
}

/* A URL list from config: a string or a list of strings replaces it. */
static int opt_set_urls_json(pl_opts *o, const pl_option *d, const char *key, json_t *v,
                             char *err, size_t errlen)
{
    char **f = (char **)opt_field(o, d), e2[256];
    if (!json_is_string(v) && !(json_is_array(v) && json_array_size(v) > 0)) {
        snprintf(err, errlen, "key '%s' must be a URL or a non-empty list of URLs", key);
        return -1;
    }
    free(*f);
    *f = NULL;
    size_t i, n = json_is_array(v) ? json_array_size(v) : 1;
    for (i = 0; i < n; i++) {
        json_t *x = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_string(x)) {
            snprintf(err, errlen, "key '%s[%zu]' must be a URL string", key, i);
            return -1;
        }
        if (opt_add_url(f, json_string_value(x), e2, sizeof e2) < 0) {
            snprintf(err, errlen, "key '%s': %s", key, e2);
            return -1;
        }
    }
    return 0;
}

int pl_opts_set_json(pl_opts *o, const char *key, json_t *v, unsigned scope_mask,
                     char *err, size_t errlen)
{
    /* In a model's mapping, api_key is the key sent to its upstream (the
     * server's own keys are --api-key). */
    const char *name = key;
    if (!(scope_mask & PL_OPT_SERVE) && opt_find(key, strlen(key)) &&
        (!strcmp(key, "api_key") || !strcmp(key, "api-key")))
        name = "upstream-api-key";
    else if (!(scope_mask & PL_OPT_SERVE) &&
             (!strcmp(key, "api_key_env") || !strcmp(key, "api-key-env")))
        name = "upstream-api-key-env";
    const pl_option *d = opt_find(name, strlen(name));
    if (!d || !(d->scope & scope_mask)) {
        snprintf(err, errlen, "unknown key '%s'", key);
        return -1;
    }
    char text[64];
    const char *s = text;
    if (d->type == PL_OPT_URLS)
        return opt_set_urls_json(o, d, key, v, err, errlen);
    if (json_is_array(v) && d->type == PL_OPT_LIST) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            char e2[256];
            if (!json_is_string(x) || opt_set_text(o, d, json_string_value(x), e2, sizeof e2)) {
                snprintf(err, errlen, "key '%s' must be a list of strings", key);
                return -1;
            }
        }
        return 0;
    }
    if (json_is_string(v) && (d->type == PL_OPT_STRING || d->type == PL_OPT_LIST ||
                              d->type == PL_OPT_ENUM))
        s = json_string_value(v);
    else if (json_is_boolean(v) && d->type == PL_OPT_BOOL)
        s = json_is_true(v) ? "true" : "false";
    else if (json_is_integer(v) && !opt_is_text(d->type) && d->type != PL_OPT_BOOL)
        snprintf(text, sizeof text, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v) && d->type == PL_OPT_DOUBLE)
        snprintf(text, sizeof text, "%.17g", json_real_value(v));
    else {
        static const char *tn[] = {"a string", "an integer", "an integer", "a number",
                                   "a boolean", "a URL list", "a string or a list of strings",
                                   "a string"};
        snprintf(err, errlen, "key '%s' must be %s", key, tn[d->type]);
        return -1;
    }
    char e2[256];
    if (opt_set_text(o, d, s, e2, sizeof e2) < 0) {
        snprintf(err, errlen, "key '%s': %s", key, e2);
        return -1;
    }
    return 0;
}

void pl_opts_print_help(FILE *f, unsigned scope_mask)
{
    for (size_t i = 0; i < pl_n_options; i++) {
        const pl_option *d = &pl_options[i];
        if (!(d->scope & scope_mask))
            continue;
        char lhs[64];
        snprintf(lhs, sizeof lhs, d->type == PL_OPT_BOOL ? "--[no-]%s"
                                  : d->type == PL_OPT_URLS ? "--%s URL" : "--%s VALUE",
                 d->name);
        if (d->type == PL_OPT_LIST)
            strncat(lhs, " ...", sizeof lhs - strlen(lhs) - 1);
        fprintf(f, "  %-30s %s", lhs, d->help);
        if (d->choices)
            fprintf(f, " [%s]", d->choices);
        if (d->def && *d->def)
            fprintf(f, " (default %s)", d->def);
        if (d->env)
            fprintf(f, " [env %s]", d->env);
        fputc('\n', f);
    }
}

void pl_opts_apply_log(const pl_opts *o)
{
    static const char *names[] = {"debug", "info", "warn", "error", "quiet"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(o->log_level, names[i]))
            pl_log_set_level((pl_log_level)i);
    pl_log_set_json(!strcmp(o->log_format, "json"));
}
