/* job_agents.c - the job schema's agents: ids, models, sampling, and the
 * speak_after_within_round / visible_to relations between them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedulers/conversation.h"
#include "src/jobs/job_spec_internal.h"

static const char *const agent_keys[] = {
    "id", "agent_id", "role", "model", "system_prompt", "persona",
    "speak_after_within_round", "role_specific_config", "visible_to",
    "validate", "sampling", "description", "name", "temperature", "top_p",
    "top_k", "min_p", "max_tokens", "seed", "stop", "presence_penalty",
    "frequency_penalty", "repetition_penalty", NULL,
};

static const char *const sampling_keys[] = {
    "temperature", "top_p", "top_k", "min_p", "max_tokens", "seed", "stop",
    "presence_penalty", "frequency_penalty", "repetition_penalty", NULL,
};

static bool spec_num(spec_ctx *c, const char *base, const char *key, json_t *v,
                     double lo, double hi, double *out)
{
    if (!v)
        return false;
    if (!json_is_number(v) || json_number_value(v) < lo || json_number_value(v) > hi) {
        spec_problem(c, base, key, "must be a number in %g..%g", lo, hi);
        return false;
    }
    *out = json_number_value(v);
    return true;
}

static void parse_stop(spec_ctx *c, const char *base, json_t *v, pl_sampling *sp)
{
    if (json_is_string(v)) {
        pl_sampling_free(sp);
        sp->stop[0] = strdup(json_string_value(v));
        sp->n_stop = 1;
        return;
    }
    if (!json_is_array(v) || json_array_size(v) > PL_MAX_STOP) {
        spec_problem(c, base, "stop", "must be a string or a list of up to %d strings",
                     PL_MAX_STOP);
        return;
    }
    for (int i = 0; i < sp->n_stop; i++)
        free(sp->stop[i]);
    sp->n_stop = 0;
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) {
        if (!json_is_string(x) || !*json_string_value(x)) {
            spec_problem(c, base, "stop", "must hold non-empty strings");
            return;
        }
        sp->stop[sp->n_stop++] = strdup(json_string_value(x));
    }
}

/* Read the sampling keys present in obj onto *sp. */
static void parse_sampling(spec_ctx *c, const char *base, json_t *obj, pl_sampling *sp)
{
    spec_num(c, base, "temperature", json_object_get(obj, "temperature"), 0, 2, &sp->temperature);
    spec_num(c, base, "top_p", json_object_get(obj, "top_p"), 0, 1, &sp->top_p);
    spec_num(c, base, "min_p", json_object_get(obj, "min_p"), 0, 1, &sp->min_p);
    spec_num(c, base, "presence_penalty", json_object_get(obj, "presence_penalty"), -2, 2,
             &sp->presence_penalty);
    spec_num(c, base, "frequency_penalty", json_object_get(obj, "frequency_penalty"), -2, 2,
             &sp->frequency_penalty);
    spec_num(c, base, "repetition_penalty", json_object_get(obj, "repetition_penalty"),
             0.01, 10, &sp->repetition_penalty);
    spec_int(c, base, "top_k", json_object_get(obj, "top_k"), 0, 100000, &sp->top_k);
    spec_int(c, base, "max_tokens", json_object_get(obj, "max_tokens"), 1, 1 << 20,
             &sp->max_tokens);
    int seed;
    if (spec_int(c, base, "seed", json_object_get(obj, "seed"), 0, 2147483647L, &seed)) {
        sp->seed = (uint64_t)seed;
        sp->has_seed = true;
    }
    json_t *st = json_object_get(obj, "stop");
    if (st)
        parse_stop(c, base, st, sp);
}

/* Resolve a list of agent ids into a mask; reports unknown ids. */
static uint64_t parse_id_list(spec_ctx *c, const char *base, const char *key,
                              json_t *list)
{
    uint64_t mask = 0;
    if (!json_is_array(list)) {
        spec_problem(c, base, key, "must be a list of agent ids");
        return 0;
    }
    size_t i;
    json_t *x;
    json_array_foreach(list, i, x) {
        char p[160];
        snprintf(p, sizeof p, "%s.%s[%zu]", base, key, i);
        int j = json_is_string(x) ? pl_job_spec_find_agent(c->spec, json_string_value(x)) : -1;
        if (!json_is_string(x))
            spec_problem(c, p, NULL, "must be an agent id (string)");
        else if (j < 0)
            spec_problem(c, p, NULL, "unknown agent '%s'", json_string_value(x));
        else
            mask |= 1ull << j;
    }
    return mask;
}

static void parse_agent_basics(spec_ctx *c, const char *base, json_t *a,
                               pl_job_agent *ag, const pl_sampling *defaults)
{
    pl_job_spec *s = c->spec;
    const char *k = "id";
    json_t *id = spec_get2(c, a, base, "id", "agent_id", &k);
    ag->id = spec_string(c, base, k ? k : "id", id, true);
    if (ag->id && !pl_job_safe_name(ag->id))
        spec_problem(c, base, k, "must be 1-128 characters of [A-Za-z0-9_.-]");
    ag->role = spec_string(c, base, "role", json_object_get(a, "role"), false);
    json_t *sp = spec_get2(c, a, base, "system_prompt", "persona", &k);
    ag->system_prompt = spec_string(c, base, k ? k : "system_prompt", sp, false);
    json_t *m = json_object_get(a, "model");
    ag->model = -1;
    if (!m && s->n_models == 1)
        ag->model = 0;
    else if (!m)
        spec_problem(c, base, "model", "missing required key (the job has %d models)", s->n_models);
    else if (!json_is_string(m))
        spec_problem(c, base, "model", "must be a model name");
    else if ((ag->model = pl_job_spec_find_model(s, json_string_value(m))) < 0)
        spec_problem(c, base, "model", "unknown model '%s'", json_string_value(m));
    json_t *val = json_object_get(a, "validate");
    ag->validate = true;
    if (val && !json_is_boolean(val))
        spec_problem(c, base, "validate", "must be true or false");
    else if (val)
        ag->validate = json_is_true(val);
    pl_sampling_copy(&ag->sampling, defaults);
    parse_sampling(c, base, a, &ag->sampling);
    json_t *smp = json_object_get(a, "sampling");
    if (smp && !json_is_object(smp))
        spec_problem(c, base, "sampling", "must be a mapping");
    else if (smp) {
        char p[320];
        snprintf(p, sizeof p, "%s.sampling", base);
        parse_sampling(c, p, smp, &ag->sampling);
        spec_unknown_keys(c, p, smp, sampling_keys);
    }
    spec_unknown_keys(c, base, a, agent_keys);
}

static const char *const rsc_keys[] = {"speak_after_within_round", "visible_to", NULL};

/* key on the agent itself or under role_specific_config (seed 000), not
 * both; *base gets where it was found. */
static json_t *relation(spec_ctx *c, const char *base, const char *rbase, json_t *a,
                        json_t *rsc, const char *key, const char **where)
{
    json_t *v = json_object_get(a, key);
    json_t *v2 = json_is_object(rsc) ? json_object_get(rsc, key) : NULL;
    if (v && v2)
        spec_problem(c, base, key, "also given under role_specific_config: give it once");
    *where = v ? base : rbase;
    return v ? v : v2;
}

static void parse_agent_relations(spec_ctx *c, const char *base, json_t *a, int idx)
{
    pl_job_agent *ag = &c->spec->agents[idx];
    json_t *rsc = json_object_get(a, "role_specific_config");
    char rbase[320];
    snprintf(rbase, sizeof rbase, "%s.role_specific_config", base);
    if (rsc && !json_is_object(rsc))
        spec_problem(c, base, "role_specific_config", "must be a mapping");
    else if (rsc)
        spec_unknown_keys(c, rbase, rsc, rsc_keys);
    const char *where;
    json_t *deps = relation(c, base, rbase, a, rsc, "speak_after_within_round", &where);
    if (deps)
        ag->deps = parse_id_list(c, where, "speak_after_within_round", deps);
    if (ag->deps >> idx & 1) {
        spec_problem(c, where, "speak_after_within_round",
                     "agent '%s' cannot speak after itself", ag->id ? ag->id : "?");
        ag->deps &= ~(1ull << idx);
    }
    int n = c->spec->n_agents;
    json_t *vis = relation(c, base, rbase, a, rsc, "visible_to", &where);
    ag->visible_to = n == 64 ? ~0ull : (1ull << n) - 1;
    if (vis)
        ag->visible_to = parse_id_list(c, where, "visible_to", vis);
}

static void check_cycles(spec_ctx *c, const char *sec)
{
    pl_job_spec *s = c->spec;
    uint64_t placed = 0;
    bool progress = true;
    while (progress) {
        progress = false;
        for (int a = 0; a < s->n_agents; a++)
            if (!(placed >> a & 1) && (s->agents[a].deps & ~placed) == 0) {
                placed |= 1ull << a;
                progress = true;
            }
    }
    char list[200] = "";
    size_t len = 0;
    for (int a = 0; a < s->n_agents; a++)
        if (!(placed >> a & 1) && len < sizeof list - 1)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s",
                                    len ? ", " : "", s->agents[a].id ? s->agents[a].id : "?");
    if (len)
        spec_problem(c, "", sec, "speak_after_within_round has a dependency cycle among: %s", list);
}

/* The job-level `sampling` mapping: every agent's starting point. */
static void parse_job_sampling(spec_ctx *c, json_t *root, pl_sampling *defaults)
{
    pl_sampling_defaults(defaults);
    json_t *js = json_object_get(root, "sampling");
    if (js && !json_is_object(js))
        spec_problem(c, "", "sampling", "must be a mapping");
    else if (js) {
        parse_sampling(c, "sampling", js, defaults);
        spec_unknown_keys(c, "sampling", js, sampling_keys);
    }
}

void spec_parse_agents(spec_ctx *c, json_t *root)
{
    pl_job_spec *s = c->spec;
    const char *sec = "agents";
    json_t *as = spec_get2(c, root, "", "agents", "agent_definitions", &sec);
    if (!as || !json_is_array(as) || json_array_size(as) == 0) {
        spec_problem(c, "", sec ? sec : "agents", "%s", as ? "must be a non-empty list of agents"
                                                   : "missing required key (a list of agents)");
        return;
    }
    if (json_array_size(as) > PL_CONV_MAX_AGENTS) {
        spec_problem(c, "", sec, "at most %d agents", PL_CONV_MAX_AGENTS);
        return;
    }
    pl_sampling defaults;
    parse_job_sampling(c, root, &defaults);
    s->agents = calloc(json_array_size(as), sizeof *s->agents);
    size_t i;
    json_t *a;
    json_array_foreach(as, i, a) {
        char base[160];
        snprintf(base, sizeof base, "%s[%zu]", sec, i);
        pl_job_agent *ag = &s->agents[s->n_agents++];
        if (!json_is_object(a)) {
            spec_problem(c, base, NULL, "must be a mapping");
            pl_sampling_defaults(&ag->sampling);
            continue;
        }
        parse_agent_basics(c, base, a, ag, &defaults);
        for (size_t j = 0; j < i && ag->id; j++)
            if (s->agents[j].id && !strcmp(s->agents[j].id, ag->id))
                spec_problem(c, base, "id", "duplicate agent id '%s' (also %s[%zu])",
                             ag->id, sec, j);
    }
    pl_sampling_free(&defaults);
    json_array_foreach(as, i, a) {
        char base[160];
        snprintf(base, sizeof base, "%s[%zu]", sec, i);
        if (json_is_object(a))
            parse_agent_relations(c, base, a, (int)i);
    }
    check_cycles(c, sec);
}
