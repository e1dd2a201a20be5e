/* job_spec.c - the job schema: top level, models, agents and their
 * dependencies. Questions and answer validation are in job_questions.c. */
#include "src/jobs/job_spec.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/base/json_pack.h"
#include "src/jobs/job_spec_internal.h"

void pl_spec_problems_add(pl_spec_problems *p, const char *path,
                          const char *fmt, ...)
{
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 16;
        pl_spec_problem *v = realloc(p->v, (size_t)cap * sizeof *v);
        if (!v)
            return;
        p->v = v;
        p->cap = cap;
    }
    pl_spec_problem *e = &p->v[p->n++];
    snprintf(e->path, sizeof e->path, "%s", path);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

void pl_spec_problems_free(pl_spec_problems *p)
{
    free(p->v);
    memset(p, 0, sizeof *p);
}

json_t *pl_spec_problems_json(const pl_spec_problems *p)
{
    json_t *a = json_array();
    for (int i = 0; i < p->n; i++)
        json_array_append_new(a, pl_json_pack("{s:s, s:s}", "path", p->v[i].path,
                                           "message", p->v[i].message));
    return a;
}

bool pl_job_safe_name(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > 128 || name[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.'))
            return false;
    }
    return true;
}

/* ---- small readers that report instead of failing ---- */

/* The value of key, or of its alias; reports when both are given. */
json_t *spec_get2(spec_ctx *c, json_t *obj, const char *path, const char *key,
                  const char *alias, const char **used)
{
    json_t *a = json_object_get(obj, key), *b = alias ? json_object_get(obj, alias) : NULL;
    if (a && b)
        spec_problem(c, path, key, "give `%s` or `%s`, not both", key, alias);
    if (used)
        *used = a ? key : b ? alias : key;
    return a ? a : b;
}

void spec_problem(spec_ctx *c, const char *base, const char *key,
                  const char *fmt, ...)
{
    char path[160], msg[256];
    if (key && base && *base)
        snprintf(path, sizeof path, "%s.%s", base, key);
    else
        snprintf(path, sizeof path, "%s", key ? key : base);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pl_spec_problems_add(c->probs, path, "%s", msg);
}

char *spec_string(spec_ctx *c, const char *base, const char *key, json_t *v,
                  bool required)
{
    if (!v) {
        if (required)
            spec_problem(c, base, key, "missing required key");
        return NULL;
    }
    if (!json_is_string(v)) {
        spec_problem(c, base, key, "must be a string");
        return NULL;
    }
    return strdup(json_string_value(v));
}

bool spec_int(spec_ctx *c, const char *base, const char *key, json_t *v,
              long lo, long hi, int *out)
{
    if (!v)
        return false;
    if (!json_is_integer(v) || json_integer_value(v) < lo ||
        json_integer_value(v) > hi) {
        spec_problem(c, base, key, "must be an integer in %ld..%ld", lo, hi);
        return false;
    }
    *out = (int)json_integer_value(v);
    return true;
}

void spec_unknown_keys(spec_ctx *c, const char *base, json_t *obj,
                       const char *const *known)
{
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v) {
        bool ok = false;
        for (int i = 0; known[i] && !ok; i++)
            ok = !strcmp(known[i], k);
        if (!ok)
            spec_problem(c, base, k, "unknown key");
    }
}

/* ---- models ---- */

static void parse_model_vllm(spec_ctx *c, const char *base, json_t *v,
                             pl_job_model *m)
{
    if (!json_is_object(v)) {
        spec_problem(c, base, "vllm_config", "must be a mapping");
        return;
    }
    char p[320];
    snprintf(p, sizeof p, "%s.vllm_config", base);
    spec_int(c, p, "max_num_seqs_upper_bound",
             json_object_get(v, "max_num_seqs_upper_bound"), 1, 1000000,
             &m->max_num_seqs);
}

static void parse_models(spec_ctx *c, json_t *root)
{
    const char *sec = "models";
    json_t *ms = spec_get2(c, root, "", "models", "model_definitions", &sec);
    if (!ms) {
        spec_problem(c, "", "models", "missing required key (a mapping of name -> model)");
        return;
    }
    if (!json_is_object(ms) || json_object_size(ms) == 0) {
        spec_problem(c, "", sec, "must be a non-empty mapping of name -> model");
        return;
    }
    c->spec->models = calloc(json_object_size(ms), sizeof *c->spec->models);
    const char *name;
    json_t *v;
    json_object_foreach(ms, name, v) {
        char base[160];
        snprintf(base, sizeof base, "%s.%s", sec, name);
        pl_job_model *m = &c->spec->models[c->spec->n_models++];
        m->name = strdup(name);
        if (!json_is_object(v)) {
            spec_problem(c, base, NULL, "must be a mapping (backend and options)");
            continue;
        }
        /* backend is optional: the jobs API serves the model by name, and
         * `parley run` falls back to its --backend. */
        m->backend = spec_string(c, base, "backend", json_object_get(v, "backend"), false);
        m->options = json_incref(v);
        spec_int(c, base, "max_num_seqs", json_object_get(v, "max_num_seqs"), 1,
                 1000000, &m->max_num_seqs);
        json_t *vc = json_object_get(v, "vllm_config");
        if (vc)
            parse_model_vllm(c, base, vc, m);
    }
}

/* backend values that name how a served model of this kind is served:
 * seed 000's vllm is parley's engine (no base_url) or an upstream. */
static bool backend_matches(const char *want, const char *kind)
{
    static const char *const engine[] = {"auto", "cpu", "cuda", "vllm", "engine", NULL};
    static const char *const remote[] = {"auto", "vllm", "sglang", "llamacpp", "ollama",
                                         "openai", "parley", "remote", NULL};
    const char *const *ok = !strcmp(kind, "remote") ? remote
                          : !strcmp(kind, "cpu") || !strcmp(kind, "cuda") ? engine : NULL;
    if (!strcmp(want, kind) || (!strcmp(want, "auto") && strcmp(kind, "mock")))
        return true;
    for (int i = 0; ok && ok[i]; i++)
        if (!strcmp(ok[i], want))
            return true;
    return false;
}

int pl_job_spec_check_served(const pl_job_spec *s, int m, const char *kind,
                             pl_spec_problems *p)
{
    const pl_job_model *md = &s->models[m];
    int before = p->n;
    char base[200], sub[300];
    snprintf(base, sizeof base, "%s.%s",
             json_object_get(s->source, "model_definitions") ? "model_definitions" : "models",
             md->name);
    const char *k;
    json_t *v;
    json_object_foreach(md->options, k, v) {
        snprintf(sub, sizeof sub, "%s.%s", base, k);
        if (!strcmp(k, "backend")) {
            if (md->backend && !backend_matches(md->backend, kind))
                pl_spec_problems_add(p, sub, "the server serves '%s' with backend '%s', not "
                                     "'%s'", md->name, kind, md->backend);
        } else if (!strcmp(k, "vllm_config") && json_is_object(v)) {
            const char *vk;
            json_t *vv;
            json_object_foreach(v, vk, vv) {
                snprintf(sub, sizeof sub, "%s.vllm_config.%s", base, vk);
                if (strcmp(vk, "max_num_seqs_upper_bound"))
                    pl_spec_problems_add(p, sub, "not applied to a job over HTTP: the server's "
                                         "models are configured when it starts");
            }
        } else if (strcmp(k, "max_num_seqs")) {
            pl_spec_problems_add(p, sub, "not applied to a job over HTTP: the server's models "
                                 "are configured when it starts (a job may give backend, "
                                 "max_num_seqs and vllm_config.max_num_seqs_upper_bound)");
        }
    }
    return p->n > before ? -1 : 0;
}

int pl_job_spec_find_model(const pl_job_spec *s, const char *name)
{
    for (int i = 0; name && i < s->n_models; i++)
        if (!strcmp(s->models[i].name, name))
            return i;
    return -1;
}

int pl_job_spec_find_agent(const pl_job_spec *s, const char *id)
{
    for (int i = 0; id && i < s->n_agents; i++)
        if (s->agents[i].id && !strcmp(s->agents[i].id, id))
            return i;
    return -1;
}

/* ---- top level ---- */

static const char *const top_keys[] = {
    "experiment", "experiment_name", "models", "model_definitions", "agents",
    "agent_definitions", "num_rounds", "max_retries", "questions",
    "questions_file", "validation", "output_dir", "sampling", "description",
    "metadata", "weight", "prompt_layout", NULL,
};

static void parse_top(spec_ctx *c, json_t *root)
{
    pl_job_spec *s = c->spec;
    const char *k = "experiment";
    json_t *e = spec_get2(c, root, "", "experiment", "experiment_name", &k);
    s->experiment = spec_string(c, "", k ? k : "experiment", e, true);
    if (s->experiment && !pl_job_safe_name(s->experiment))
        spec_problem(c, "", k, "must be 1-128 characters of [A-Za-z0-9_.-], not starting with '.'");
    s->num_rounds = 1;
    json_t *nr = json_object_get(root, "num_rounds");
    if (nr)
        spec_int(c, "", "num_rounds", nr, 1, 10000, &s->num_rounds);
    s->max_retries = 2;
    spec_int(c, "", "max_retries", json_object_get(root, "max_retries"), 0, 100,
             &s->max_retries);
    s->weight = 1;
    json_t *w = json_object_get(root, "weight");
    if (w && (!json_is_number(w) || !(json_number_value(w) > 0) || json_number_value(w) > 1e6))
        spec_problem(c, "", "weight", "must be a number > 0 and <= 1e6 (default 1)");
    else if (w)
        s->weight = json_number_value(w);
    json_t *pl = json_object_get(root, "prompt_layout");
    const char *pls = json_string_value(pl);
    if (pl && (!pls || (strcmp(pls, "seed") && strcmp(pls, "shared_prefix"))))
        spec_problem(c, "", "prompt_layout", "must be \"seed\" (the default) or \"shared_prefix\"");
    else
        s->shared_prefix = pls && !strcmp(pls, "shared_prefix");
    json_t *od = json_object_get(root, "output_dir");
    if (od && !c->src->base_dir)
        spec_problem(c, "", "output_dir", "not accepted over HTTP: the server chooses where jobs are written");
    else if (od)
        s->output_dir = spec_string(c, "", "output_dir", od, false);
    spec_unknown_keys(c, "", root, top_keys);
}

int pl_job_spec_parse(json_t *root, const pl_job_spec_source *src,
                      pl_job_spec *spec, pl_spec_problems *probs)
{
    static const pl_job_spec_source api = {0};
    memset(spec, 0, sizeof *spec);
    spec_ctx c = {.spec = spec, .probs = probs, .src = src ? src : &api};
    int before = probs->n;
    if (!json_is_object(root)) {
        pl_spec_problems_add(probs, "", "the job must be a mapping (JSON object)");
        return -1;
    }
    spec->source = json_incref(root);
    parse_top(&c, root);
    parse_models(&c, root);
    spec_parse_agents(&c, root);
    spec_parse_validation(&c, root);
    spec_parse_questions(&c, root);
    if (probs->n > before) {
        pl_job_spec_free(spec);
        return -1;
    }
    return 0;
}

void pl_job_spec_free(pl_job_spec *s)
{
    for (int i = 0; i < s->n_models; i++) {
        free(s->models[i].name);
        free(s->models[i].backend);
        json_decref(s->models[i].options);
    }
    free(s->models);
    for (int i = 0; i < s->n_agents; i++) {
        free(s->agents[i].id);
        free(s->agents[i].role);
        free(s->agents[i].system_prompt);
        pl_sampling_free(&s->agents[i].sampling);
    }
    free(s->agents);
    for (int i = 0; i < s->n_questions; i++) {
        pl_job_question *q = &s->questions[i];
        free(q->id);
        free(q->text);
        for (int j = 0; j < q->n_choices; j++)
            free(q->choices[j]);
        free(q->choices);
        json_decref(q->metadata);
    }
    free(s->questions);
    spec_free_regex(s);
    free(s->extract_regex);
    free(s->experiment);
    free(s->output_dir);
    json_decref(s->source);
    memset(s, 0, sizeof *s);
}
