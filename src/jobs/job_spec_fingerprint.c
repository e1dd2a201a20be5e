/* job_spec_fingerprint.c - the job spec's canonical form and fingerprint:
 * what a re-run of an experiment must match so that its results do not mix
 * with results made under another configuration (persist.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/base/json_pack.h"
#include "src/base/sha256.h"
#include "src/jobs/job_spec.h"

/* Model keys that change how fast or where a model serves, not what it
 * says ('-' and '_' alike): a re-run may change them. */
static const char *const neutral_keys[] = {
    "max_num_seqs", "max_num_seqs_upper_bound", "max_num_batched_tokens", "block_size",
    "kv_cache_mb", "threads", "mock_token_delay_ms", "mock_capacity", "async_scheduling",
    "prefix_caching", "enable_prefix_caching", "cuda_graphs", "gpu_memory_utilization",
    "base_url", "upstream", "upstream_api_key", "upstream_api_key_env",
    "upstream_connect_timeout_ms", "upstream_first_token_timeout_ms",
    "upstream_token_timeout_ms", "upstream_attempts", "upstream_health_interval_ms",
    "upstream_affinity", "tensor_parallel_size", "pipeline_parallel_size",
    "data_parallel_size", "enforce_eager", "swap_space", "disable_log_stats",
    "disable_log_requests", "download_dir", "num_gpu_blocks_override", NULL,
};

static bool neutral(const char *key)
{
    for (int i = 0; neutral_keys[i]; i++) {
        const char *a = neutral_keys[i], *b = key;
        while (*a && (*a == *b || (*a == '_' && *b == '-')))
            a++, b++;
        if (!*a && !*b)
            return true;
    }
    return false;
}

/* A model's mapping without its neutral keys (vllm_config's too). */
static json_t *model_options(json_t *opts)
{
    json_t *o = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(opts, k, v) {
        if (neutral(k))
            continue;
        json_t *x = json_is_object(v) ? model_options(v) : json_incref(v);
        if (json_is_object(v) && json_object_size(x) == 0)
            json_decref(x);
        else
            json_object_set_new(o, k, x);
    }
    return o;
}

static json_t *id_list(const pl_job_spec *s, uint64_t mask)
{
    json_t *a = json_array();
    for (int j = 0; j < s->n_agents; j++)
        if (mask >> j & 1)
            json_array_append_new(a, json_string(s->agents[j].id));
    return a;
}

static json_t *sampling_json(const pl_sampling *sp)
{
    json_t *stop = json_array();
    for (int i = 0; i < sp->n_stop; i++)
        json_array_append_new(stop, json_string(sp->stop[i]));
    json_t *o = pl_json_pack("{s:f, s:f, s:i, s:f, s:f, s:f, s:f, s:i, s:o}",
        "temperature", sp->temperature, "top_p", sp->top_p, "top_k", sp->top_k,
        "min_p", sp->min_p, "presence_penalty", sp->presence_penalty, "frequency_penalty",
        sp->frequency_penalty, "repetition_penalty", sp->repetition_penalty,
        "max_tokens", sp->max_tokens, "stop", stop);
    if (o)
        json_object_set_new(o, "seed", sp->has_seed ? json_integer((json_int_t)sp->seed)
                                                    : json_null());
    return o;
}

static json_t *agents_json(const pl_job_spec *s)
{
    json_t *a = json_array();
    for (int i = 0; a && i < s->n_agents; i++) {
        const pl_job_agent *ag = &s->agents[i];
        json_t *o = pl_json_pack("{s:s, s:s?, s:s, s:s?, s:o, s:o, s:b, s:o}", "id", ag->id,
            "role", ag->role, "model", s->models[ag->model].name, "system_prompt",
            ag->system_prompt, "speak_after_within_round", id_list(s, ag->deps),
            "visible_to", id_list(s, ag->visible_to), "validate", ag->validate,
            "sampling", sampling_json(&ag->sampling));
        if (!o || json_array_append_new(a, o) < 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

static json_t *models_json(const pl_job_spec *s, const char *const *served)
{
    json_t *m = json_object();
    for (int i = 0; m && i < s->n_models; i++) {
        json_t *o = pl_json_pack("{s:o, s:s?}", "options", model_options(s->models[i].options),
                                 "served", served ? served[i] : NULL);
        if (!o || json_object_set_new(m, s->models[i].name, o) < 0) {
            json_decref(m);
            return NULL;
        }
    }
    return m;
}

json_t *pl_job_spec_canonical(const pl_job_spec *s, const char *const *served)
{
    return pl_json_pack("{s:o, s:o, s:i, s:i, s:{s:b, s:s, s:s}, s:s}",
        "agents", agents_json(s), "models", models_json(s, served),
        "num_rounds", s->num_rounds, "max_retries", s->max_retries,
        "validation", "enabled", s->validation, "extract_regex", s->extract_regex,
        "mode", s->constrained ? "constrained" : "reprompt",
        "prompt_layout", s->shared_prefix ? "shared_prefix" : "seed");
}

int pl_job_spec_fingerprint(json_t *canonical, char out[65])
{
    char *s = json_dumps(canonical, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
    if (!s)
        return -1;
    pl_sha256_hex(s, strlen(s), out);
    free(s);
    return 0;
}

int pl_job_question_fingerprint(const pl_job_question *q, char out[17])
{
    json_t *ch = json_array();
    for (int i = 0; ch && i < q->n_choices; i++)
        json_array_append_new(ch, json_string(q->choices[i]));
    json_t *o = pl_json_pack("{s:s?, s:o, s:i}", "text", q->text, "choices", ch,
                             "answer", q->answer);
    char full[65];
    int rc = o ? pl_job_spec_fingerprint(o, full) : -1;
    json_decref(o);
    if (rc == 0)
        snprintf(out, 17, "%.16s", full);
    return rc;
}
