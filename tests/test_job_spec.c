/* test_job_spec.c - the job schema: a valid spec, seed 000's spelling, and
 * every problem it lists. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/constrain/regex.h"
#include "src/jobs/job_spec.h"
#include "src/base/yaml_load.h"

static const char *good =
    "{\"experiment\": \"debate\","
    " \"models\": {\"m\": {\"backend\": \"mock\"}},"
    " \"agents\": ["
    "   {\"id\": \"a\", \"temperature\": 0.5, \"max_tokens\": 32},"
    "   {\"id\": \"b\", \"visible_to\": [\"a\"]},"
    "   {\"id\": \"mod\", \"role\": \"moderator\", \"speak_after_within_round\": [\"a\", \"b\"]}],"
    " \"num_rounds\": 3, \"max_retries\": 1,"
    " \"questions\": [{\"id\": \"q1\", \"text\": \"2+2?\", \"choices\": [\"3\", \"4\"], \"answer\": \"B\"},"
    "                 {\"text\": \"Sky?\", \"choices\": [\"blue\", \"green\"], \"answer\": 0, \"src\": \"x\"}]}";

static int parse_str(const char *json, pl_job_spec *s, pl_spec_problems *p)
{
    json_error_t je;
    json_t *root = json_loads(json, 0, &je);
    cr_assert_not_null(root, "test JSON: %s", je.text);
    memset(p, 0, sizeof *p);
    int rc = pl_job_spec_parse(root, NULL, s, p);
    json_decref(root);
    return rc;
}

static bool has_problem(const pl_spec_problems *p, const char *path, const char *needle)
{
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->v[i].path, path) && strstr(p->v[i].message, needle))
            return true;
    return false;
}

static void dump(const pl_spec_problems *p)
{
    for (int i = 0; i < p->n; i++)
        fprintf(stderr, "  %s: %s\n", p->v[i].path, p->v[i].message);
}

Test(job_spec, valid_spec)
{
    pl_job_spec s;
    pl_spec_problems p;
    int rc = parse_str(good, &s, &p);
    dump(&p);
    cr_assert_eq(rc, 0);
    cr_assert_str_eq(s.experiment, "debate");
    cr_assert_eq(s.n_agents, 3);
    cr_assert_eq(s.agents[2].deps, 3u);
    cr_assert_eq(s.agents[1].visible_to, 1u);
    cr_assert_eq(s.agents[0].visible_to, 7u);
    cr_assert_eq(s.agents[0].model, 0);
    cr_assert_float_eq(s.agents[0].sampling.temperature, 0.5, 1e-9);
    cr_assert_eq(s.agents[0].sampling.max_tokens, 32);
    cr_assert_eq(s.num_rounds, 3);
    cr_assert_eq(s.n_questions, 2);
    cr_assert_str_eq(s.questions[1].id, "q0001");
    cr_assert_eq(s.questions[0].answer, 1);
    cr_assert_eq(s.questions[1].answer, 0);
    cr_assert_str_eq(json_string_value(json_object_get(s.questions[1].metadata, "src")), "x");
    pl_job_spec_free(&s);
    pl_spec_problems_free(&p);
}

Test(job_spec, seed_000_spelling)
{
    const char *j =
        "{\"experiment_name\": \"e\","
        " \"model_definitions\": {\"llama\": {\"backend\": \"mock\","
        "     \"vllm_config\": {\"max_num_seqs_upper_bound\": 7}}},"
        " \"agent_definitions\": ["
        "   {\"agent_id\": \"spkr_000\", \"role\": \"participant\", \"model\": \"llama\"},"
        "   {\"agent_id\": \"mod_001\", \"role\": \"moderator\", \"model\": \"llama\","
        "    \"role_specific_config\": {\"speak_after_within_round\": [\"spkr_000\"]}}],"
        " \"questions\": [{\"id\": \"x\", \"text\": \"t\", \"choices\": [\"a\", \"b\"]}]}";
    pl_job_spec s;
    pl_spec_problems p;
    int rc = parse_str(j, &s, &p);
    dump(&p);
    cr_assert_eq(rc, 0);
    cr_assert_eq(s.models[0].max_num_seqs, 7);
    cr_assert_eq(s.agents[1].deps, 1u);
    cr_assert_str_eq(s.agents[0].id, "spkr_000");
    pl_job_spec_free(&s);
    pl_spec_problems_free(&p);
}

Test(job_spec, lists_every_problem)
{
    const char *j =
        "{\"experiment\": \"../evil\","
        " \"models\": {\"m\": {\"backend\": \"mock\"}, \"n\": 5},"
        " \"agents\": ["
        "   {\"id\": \"a\", \"model\": \"m\", \"speak_after_within_round\": [\"b\"]},"
        "   {\"id\": \"b\", \"model\": \"m\", \"speak_after_within_round\": [\"a\"]},"
        "   {\"id\": \"a\", \"model\": \"ghost\", \"visible_to\": [\"nobody\"], \"temperature\": 9},"
        "   {\"id\": \"c\", \"model\": \"m\", \"speak_after_within_round\": [\"c\"], \"colour\": 1}],"
        " \"num_rounds\": 0, \"max_retries\": -1,"
        " \"questions\": [{\"id\": \"q\", \"text\": \"t\"},"
        "                 {\"id\": \"q\", \"text\": \"u\", \"choices\": [\"x\", \"y\"], \"answer\": \"Z\"},"
        "                 {\"id\": \"../p\", \"choices\": [\"x\"]}],"
        " \"validation\": {\"extract_regex\": \"([\"},"
        " \"output_dir\": \"/etc\", \"surprise\": true}";
    pl_job_spec s;
    pl_spec_problems p;
    cr_assert_eq(parse_str(j, &s, &p), -1);
    dump(&p);
    cr_assert(has_problem(&p, "experiment", "must be"));
    cr_assert(has_problem(&p, "models.n", "must be a mapping"));
    cr_assert(has_problem(&p, "agents[2].model", "unknown model 'ghost'"));
    cr_assert(has_problem(&p, "agents[2].id", "duplicate agent id 'a'"));
    cr_assert(has_problem(&p, "agents[2].visible_to[0]", "unknown agent 'nobody'"));
    cr_assert(has_problem(&p, "agents[2].temperature", "0..2"));
    cr_assert(has_problem(&p, "agents[3].speak_after_within_round", "after itself"));
    cr_assert(has_problem(&p, "agents[3].colour", "unknown key"));
    cr_assert(has_problem(&p, "agents", "cycle among: a, b"));
    cr_assert(has_problem(&p, "num_rounds", "1..10000"));
    cr_assert(has_problem(&p, "max_retries", "0..100"));
    cr_assert(has_problem(&p, "questions[0].choices", "missing"));
    cr_assert(has_problem(&p, "questions[1].answer", "one of the choices"));
    cr_assert(has_problem(&p, "questions[1].id", "duplicate question id 'q'"));
    cr_assert(has_problem(&p, "questions[2].id", "must be"));
    cr_assert(has_problem(&p, "questions[2].text", "missing"));
    cr_assert(has_problem(&p, "questions[2].choices", "2.."));
    cr_assert(has_problem(&p, "validation.extract_regex", "invalid regex"));
    cr_assert(has_problem(&p, "output_dir", "not accepted over HTTP"));
    cr_assert(has_problem(&p, "surprise", "unknown key"));
    pl_spec_problems_free(&p);
}

Test(job_spec, missing_sections)
{
    pl_job_spec s;
    pl_spec_problems p;
    cr_assert_eq(parse_str("{}", &s, &p), -1);
    cr_assert(has_problem(&p, "experiment", "missing"));
    cr_assert(has_problem(&p, "models", "missing"));
    cr_assert(has_problem(&p, "agents", "missing"));
    cr_assert(has_problem(&p, "questions", "missing"));
    pl_spec_problems_free(&p);
    cr_assert_eq(parse_str("[1]", &s, &p), -1);
    cr_assert_eq(p.n, 1);
    pl_spec_problems_free(&p);
    /* Two models: an agent must name one. */
    cr_assert_eq(parse_str("{\"experiment\":\"e\",\"models\":{\"a\":{\"backend\":\"mock\"},"
                           "\"b\":{\"backend\":\"mock\"}},\"agents\":[{\"id\":\"x\"}],"
                           "\"questions\":[],\"validation\":false}", &s, &p), -1);
    cr_assert(has_problem(&p, "agents[0].model", "missing"));
    cr_assert(has_problem(&p, "questions", "no questions"));
    pl_spec_problems_free(&p);
}

Test(job_spec, extract_answer)
{
    pl_job_spec s;
    pl_spec_problems p;
    cr_assert_eq(parse_str(good, &s, &p), 0);
    pl_job_question *q = &s.questions[0];
    const char *t1 = "I think A. But on reflection... Answer: B";
    cr_assert_eq(pl_job_spec_extract(&s, q, t1, strlen(t1)), 1);
    const char *t2 = "the answer is clearly option because";
    cr_assert_eq(pl_job_spec_extract(&s, q, t2, strlen(t2)), -1);
    const char *t3 = "**Answer:** (a)";
    cr_assert_eq(pl_job_spec_extract(&s, q, t3, strlen(t3)), 0);
    const char *t4 = "Answer: C";           /* only 2 choices */
    cr_assert_eq(pl_job_spec_extract(&s, q, t4, strlen(t4)), -1);
    /* A reply that is only a choice counts (default extraction only). */
    const char *bare[] = {"B", " (b) ", "B) 4", "4", "A. 3"};
    int want[] = {1, 1, 1, 1, 0};
    for (int i = 0; i < 5; i++)
        cr_assert_eq(pl_job_spec_extract(&s, q, bare[i], strlen(bare[i])), want[i], "%s", bare[i]);
    const char *notbare[] = {"A) 3\nB) 4", "B) 5", "C", "maybe B", ""};
    for (int i = 0; i < 5; i++)
        cr_assert_eq(pl_job_spec_extract(&s, q, notbare[i], strlen(notbare[i])), -1, "%s",
                     notbare[i]);
    pl_job_spec_free(&s);
    pl_spec_problems_free(&p);
}

Test(job_spec, yaml_file_with_questions_file)
{
    char dir[] = "/tmp/pl_spec_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[256], qpath[256];
    snprintf(path, sizeof path, "%s/job.yaml", dir);
    snprintf(qpath, sizeof qpath, "%s/q.jsonl", dir);
    FILE *f = fopen(qpath, "w");
    fputs("{\"id\": \"a1\", \"text\": \"t\", \"choices\": [\"x\", \"y\"]}\n\n"
          "{\"id\": \"a2\", \"text\": \"t\", \"choices\": [\"x\", \"y\"], \"answer\": \"y\"}\n"
          "not json\n", f);
    fclose(f);
    f = fopen(path, "w");
    fputs("experiment: e\nmodels:\n  m: {backend: mock}\nagents:\n  - id: a\n"
          "    model: nope\nquestions_file: q.jsonl\n", f);
    fclose(f);
    pl_linemap lines;
    char err[256];
    json_t *root = pl_yaml_load_file(path, &lines, err, sizeof err);
    cr_assert_not_null(root, "%s", err);
    pl_job_spec s;
    pl_spec_problems p = {0};
    pl_job_spec_source src = {.base_dir = dir};
    cr_assert_eq(pl_job_spec_parse(root, &src, &s, &p), -1);
    dump(&p);
    cr_assert(has_problem(&p, "agents[0].model", "unknown model"));
    cr_assert_eq(pl_linemap_line(&lines, "agents[0].model"), 6);
    cr_assert(has_problem(&p, "q.jsonl:4", "invalid JSON"));
    cr_assert_eq(p.n, 2);
    pl_spec_problems_free(&p);
    json_decref(root);
    pl_linemap_free(&lines);
    unlink(qpath);
    unlink(path);
    rmdir(dir);
}

/* validation.mode: constrained; the answer grammar (checked with the
 * constraint engine's own matcher and with the extraction regex). */
Test(job_spec, constrained_mode)
{
    char buf[2048];
    pl_job_spec s;
    pl_spec_problems p;
    snprintf(buf, sizeof buf, "%.*s, \"validation\": {\"mode\": \"constrained\"}}",
             (int)strlen(good) - 1, good);
    cr_assert_eq(parse_str(buf, &s, &p), 0);
    cr_assert(s.constrained);
    char *re = pl_job_answer_regex(4);
    char err[256];
    pl_dfa *d = pl_regex_compile(re, strlen(re), 0, 4096, err, sizeof err);
    cr_assert_not_null(d, "%s", err);
    const char *ok[] = {"Answer: D", "Canberra is the capital.\nAnswer: C"};
    for (int i = 0; i < 2; i++)
        cr_expect(pl_dfa_match(d, ok[i], strlen(ok[i])), "%s", ok[i]);
    const char *two = "It is four.\nAnswer: B";   /* questions[0] has 2 choices */
    cr_expect_eq(pl_job_spec_extract(&s, &s.questions[0], two, strlen(two)), 1);
    const char *bad[] = {"Answer: E", "two\nlines\nAnswer: A", "Answer: A\n", "C"};
    for (int i = 0; i < 4; i++)
        cr_expect_not(pl_dfa_match(d, bad[i], strlen(bad[i])), "%s", bad[i]);
    pl_dfa_free(d);
    free(re);
    pl_job_spec_free(&s);
    pl_spec_problems_free(&p);
    snprintf(buf, sizeof buf, "%.*s, \"validation\": {\"mode\": \"guided\"}}",
             (int)strlen(good) - 1, good);
    cr_assert_eq(parse_str(buf, &s, &p), -1);
    cr_expect(has_problem(&p, "validation.mode", "reprompt or constrained"));
    dump(&p);
    pl_spec_problems_free(&p);
}

/* issue 35.3: no key is ignored, under role_specific_config either (a
 * misspelt speak_afterr_within_round used to vanish, so the moderator spoke
 * with everyone else), and an unknown id in visible_to is named. */
Test(job_spec, no_key_is_ignored)
{
    const char *j =
        "{\"experiment\": \"e\", \"models\": {\"m\": {}},"
        " \"agents\": [{\"id\": \"a\"}, {\"id\": \"b\", \"visible_to\": [\"a\", \"zed\"]},"
        "   {\"id\": \"mod\", \"role_specific_config\": {\"speak_afterr_within_round\": [\"a\"]}},"
        "   {\"id\": \"m2\", \"role_specific_config\": {\"visible_to\": [\"a\"],"
        "                                             \"speak_after_within_round\": [\"a\"]},"
        "    \"visible_to\": [\"b\"], \"sampling\": {\"temprature\": 1}}],"
        " \"validation\": {\"mode\": \"constrained\", \"agents\": [\"a\"]},"
        " \"questions\": [{\"text\": \"t\", \"choices\": [\"x\", \"y\"]}]}";
    pl_job_spec s;
    pl_spec_problems p;
    cr_assert_eq(parse_str(j, &s, &p), -1);
    dump(&p);
    cr_assert(has_problem(&p, "agents[2].role_specific_config.speak_afterr_within_round",
                          "unknown key"));
    cr_assert(has_problem(&p, "agents[1].visible_to[1]", "unknown agent 'zed'"));
    cr_assert(has_problem(&p, "agents[3].visible_to", "also given under role_specific_config"));
    cr_assert(has_problem(&p, "agents[3].sampling.temprature", "unknown key"));
    cr_assert(has_problem(&p, "validation.agents", "unknown key"));
    cr_assert_eq(p.n, 5, "nothing else");
    pl_spec_problems_free(&p);
}

/* visible_to may sit under role_specific_config, as speak_after does. */
Test(job_spec, relations_under_role_specific_config)
{
    const char *j =
        "{\"experiment\": \"e\", \"models\": {\"m\": {}},"
        " \"agents\": [{\"id\": \"a\", \"role_specific_config\": {\"visible_to\": [\"b\"]}},"
        "   {\"id\": \"b\", \"role_specific_config\": {\"speak_after_within_round\": [\"a\"]}}],"
        " \"validation\": false, \"questions\": [{\"text\": \"t\"}]}";
    pl_job_spec s;
    pl_spec_problems p;
    cr_assert_eq(parse_str(j, &s, &p), 0);
    cr_assert_eq(s.agents[0].visible_to, 2u);
    cr_assert_eq(s.agents[1].deps, 1u);
    pl_job_spec_free(&s);
    pl_spec_problems_free(&p);
}

/* Over HTTP a model definition is applied or refused, never dropped. */
Test(job_spec, served_model_definition_applied_or_refused)
{
    const char *j =
        "{\"experiment\": \"e\", \"model_definitions\": {\"m\": {\"backend\": \"vllm\","
        "   \"max_num_seqs\": 4, \"vllm_config\": {\"max_num_seqs_upper_bound\": 8,"
        "   \"gpu_memory_utilization\": 0.5}, \"mock_mode\": \"echo\"}},"
        " \"agents\": [{\"id\": \"a\"}], \"validation\": false, \"questions\": [{\"text\": \"t\"}]}";
    pl_job_spec s;
    pl_spec_problems p;
    cr_assert_eq(parse_str(j, &s, &p), 0);
    cr_assert_eq(s.models[0].max_num_seqs, 8, "the upper bound is the job's cap");
    cr_assert_eq(pl_job_spec_check_served(&s, 0, "cpu", &p), -1);
    dump(&p);
    cr_assert(has_problem(&p, "model_definitions.m.mock_mode", "not applied to a job over HTTP"));
    cr_assert(has_problem(&p, "model_definitions.m.vllm_config.gpu_memory_utilization",
                          "not applied"));
    cr_assert_eq(p.n, 2, "backend vllm is parley's engine; the caps apply");
    pl_spec_problems_free(&p);
    memset(&p, 0, sizeof p);
    cr_assert_eq(pl_job_spec_check_served(&s, 0, "mock", &p), -1);
    cr_assert(has_problem(&p, "model_definitions.m.backend", "serves 'm' with backend 'mock'"));
    pl_spec_problems_free(&p);
    pl_job_spec_free(&s);
}

/* The fingerprint: aliases and defaults do not change it; what changes
 * results does; neutral keys do not. */
Test(job_spec, canonical_fingerprint)
{
    const char *a =
        "{\"experiment\": \"e\", \"models\": {\"m\": {\"backend\": \"mock\", \"max_num_seqs\": 4}},"
        " \"agents\": [{\"id\": \"x\", \"system_prompt\": \"P\"}, {\"id\": \"y\","
        "   \"speak_after_within_round\": [\"x\"]}], \"num_rounds\": 2,"
        " \"questions\": [{\"id\": \"q\", \"text\": \"t\", \"choices\": [\"u\", \"v\"]}]}";
    const char *b =   /* seed spellings, defaults spelled out, a neutral key */
        "{\"experiment_name\": \"other\", \"weight\": 5, \"model_definitions\": {\"m\": {\"backend\":"
        "   \"mock\", \"vllm_config\": {\"max_num_seqs_upper_bound\": 9}}},"
        " \"agent_definitions\": [{\"agent_id\": \"x\", \"persona\": \"P\", \"temperature\": 1},"
        "   {\"agent_id\": \"y\", \"role_specific_config\": {\"speak_after_within_round\": [\"x\"]}}],"
        " \"num_rounds\": 2, \"max_retries\": 2, \"validation\": true,"
        " \"questions\": [{\"id\": \"q\", \"text\": \"t\", \"choices\": [\"u\", \"v\"]}]}";
    const char *c =   /* a persona changed */
        "{\"experiment\": \"e\", \"models\": {\"m\": {\"backend\": \"mock\"}},"
        " \"agents\": [{\"id\": \"x\", \"system_prompt\": \"Q\"}, {\"id\": \"y\","
        "   \"speak_after_within_round\": [\"x\"]}], \"num_rounds\": 2,"
        " \"questions\": [{\"id\": \"q\", \"text\": \"t\", \"choices\": [\"u\", \"v\"]}]}";
    const char *specs[3] = {a, b, c};
    char fp[3][65];
    for (int i = 0; i < 3; i++) {
        pl_job_spec s;
        pl_spec_problems p;
        cr_assert_eq(parse_str(specs[i], &s, &p), 0);
        json_t *canon = pl_job_spec_canonical(&s, NULL);
        cr_assert_not_null(canon);
        cr_assert_eq(pl_job_spec_fingerprint(canon, fp[i]), 0);
        json_decref(canon);
        pl_job_spec_free(&s);
        pl_spec_problems_free(&p);
    }
    cr_expect_str_eq(fp[0], fp[1]);
    cr_expect_str_neq(fp[0], fp[2]);
}
