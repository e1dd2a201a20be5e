/* jobs_state.c - a job's conversation state, transcripts, status JSON and
 * subscribers. The driving logic is in jobs.c. */
#include <stdlib.h>
#include <string.h>

#include "src/base/json_pack.h"
#include "src/jobs/jobs_internal.h"

job_conv *job_conv_new(const pl_job_spec *s)
{
    size_t cells = (size_t)s->num_rounds * (size_t)s->n_agents;
    job_conv *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->hist = calloc((size_t)s->n_agents, sizeof *c->hist);
    c->finals = calloc(cells, sizeof *c->finals);
    c->answers = malloc(cells);
    c->attempts = json_array();
    if (!c->hist || !c->finals || !c->answers || !c->attempts) {
        job_conv_free(c, s);
        return NULL;
    }
    memset(c->answers, -1, cells);
    return c;
}

void job_conv_free(job_conv *c, const pl_job_spec *s)
{
    if (!c)
        return;
    for (int a = 0; c->hist && a < s->n_agents; a++) {
        for (int i = 0; i < c->hist[a].n; i++)
            free((char *)c->hist[a].m[i].content);
        free(c->hist[a].m);
    }
    free(c->hist);
    for (int i = 0; c->finals && i < s->num_rounds * s->n_agents; i++)
        free(c->finals[i]);
    free(c->finals);
    free(c->answers);
    json_decref(c->attempts);
    free(c->error);
    free(c);
}

int job_hist_push(job_hist *h, const char *role, char *content)
{
    if (!content)
        return -1;
    if (h->n == h->cap) {
        int cap = h->cap ? 2 * h->cap : 8;
        pl_chat_message *m = realloc(h->m, (size_t)cap * sizeof *m);
        if (!m) {
            free(content);
            return -1;
        }
        h->m = m;
        h->cap = cap;
    }
    h->m[h->n++] = (pl_chat_message){role, content};
    return 0;
}

/* ---- transcripts ---- */

static json_t *label_or_null(int answer)
{
    char l[2] = {answer >= 0 ? pl_job_choice_label(answer) : 0, 0};
    return answer >= 0 ? json_string(l) : json_null();
}

static json_t *rounds_json(pl_job *j, job_conv *c)
{
    const pl_job_spec *s = &j->spec;
    json_t *rounds = json_array();
    for (int r = 0; r < s->num_rounds; r++) {
        json_t *msgs = json_array();
        for (int a = 0; a < s->n_agents; a++) {
            int k = r * s->n_agents + a;
            if (!c->finals[k])
                continue;
            json_array_append_new(msgs, pl_json_pack(
                "{s:s, s:s?, s:s, s:s, s:o}", "agent_id", s->agents[a].id,
                "role", s->agents[a].role, "model", s->models[s->agents[a].model].name,
                "content", c->finals[k], "answer", label_or_null(c->answers[k])));
        }
        if (json_array_size(msgs) == 0) {
            json_decref(msgs);
            break;
        }
        json_array_append_new(rounds, pl_json_pack("{s:i, s:o}", "round", r, "messages", msgs));
    }
    return rounds;
}

/* Final answers: the last completed round's answers; the overall answer is
 * the majority, ties going to the agent listed last (e.g. the moderator). */
static json_t *summary_json(pl_job *j, job_conv *c, int q, int rounds_done)
{
    const pl_job_spec *s = &j->spec;
    int votes[PL_JOB_MAX_CHOICES] = {0}, best = -1;
    json_t *answers = json_object();
    int r = rounds_done - 1;
    for (int a = 0; r >= 0 && a < s->n_agents; a++) {
        int ans = c->answers[r * s->n_agents + a];
        json_object_set_new(answers, s->agents[a].id, label_or_null(ans));
        if (ans >= 0)
            votes[ans]++;
    }
    for (int a = 0; r >= 0 && a < s->n_agents; a++) {
        int ans = c->answers[r * s->n_agents + a];
        if (ans >= 0 && (best < 0 || votes[ans] >= votes[best]))
            best = ans;
    }
    int truth = s->questions[q].answer;
    return pl_json_pack("{s:o, s:o, s:o, s:i}", "final_answers", answers,
                     "final_answer", label_or_null(best), "correct",
                     truth < 0 || best < 0 ? json_null() : json_boolean(best == truth),
                     "rounds_completed", rounds_done);
}

static json_t *question_json(const pl_job_question *q)
{
    json_t *ch = json_array();
    for (int i = 0; i < q->n_choices; i++)
        json_array_append_new(ch, json_string(q->choices[i]));
    return pl_json_pack("{s:s, s:s, s:o, s:o, s:o}", "id", q->id, "text", q->text,
                     "choices", ch, "answer", label_or_null(q->answer), "metadata",
                     q->metadata ? json_incref(q->metadata) : json_object());
}

json_t *job_transcript_json(pl_job *j, int q, const char *status, const char *error)
{
    job_conv *c = j->conv[q];
    int done = pl_convs_rounds_completed(j->convs, q);
    json_t *agents = json_array();
    for (int a = 0; a < j->spec.n_agents; a++) {
        const pl_job_agent *ag = &j->spec.agents[a];
        json_array_append_new(agents, pl_json_pack("{s:s, s:s?, s:s}", "id", ag->id,
            "role", ag->role, "model", j->spec.models[ag->model].name));
    }
    json_t *t;
    if (!c)                      /* failed before its first request */
        t = pl_json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:[], s:[]}", "question_id",
            j->spec.questions[q].id, "experiment", j->spec.experiment, "job_id", j->id,
            "status", status, "question", question_json(&j->spec.questions[q]),
            "agents", agents, "rounds", "attempts");
    else
        t = pl_json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:i, s:o, s:O, s:o}",
        "question_id", j->spec.questions[q].id, "experiment", j->spec.experiment,
        "job_id", j->id, "status", status,
        "question", question_json(&j->spec.questions[q]), "agents", agents,
        "num_rounds", j->spec.num_rounds, "rounds", rounds_json(j, c),
        "attempts", c->attempts, "summary", summary_json(j, c, q, done));
    if (t && error)
        json_object_set_new(t, "error", json_string(error));
    if (t) {
        json_object_set_new(t, "spec_fingerprint", json_string(j->spec_fp));
        if (j->persist)
            json_object_set_new(t, "run_id", json_string(pl_persist_claimer(j->persist)));
    }
    return t;
}

/* ---- subscribers ---- */

void job_emit(pl_job *j, const pl_job_event *ev)
{
    for (int i = 0; i < j->n_subs; i++) {
        job_sub *s = &j->subs[i];
        if (s->fn && (ev->kind != PL_JOB_EV_TOKEN || s->tokens))
            s->fn(s->ud, ev);
    }
}

int pl_job_subscribe(pl_job *j, pl_job_event_fn fn, void *ud, bool tokens)
{
    int w = 0;
    for (int i = 0; i < j->n_subs; i++)       /* compact unsubscribed */
        if (j->subs[i].fn)
            j->subs[w++] = j->subs[i];
    j->n_subs = w;
    job_sub *v = realloc(j->subs, (size_t)(j->n_subs + 1) * sizeof *v);
    if (!v)
        return -1;
    j->subs = v;
    v[j->n_subs++] = (job_sub){++j->next_sub, fn, ud, tokens};
    j->token_subs += tokens;
    return j->next_sub;
}

void pl_job_unsubscribe(pl_job *j, int id)
{
    for (int i = 0; i < j->n_subs; i++) {
        if (j->subs[i].id == id && j->subs[i].fn) {
            j->token_subs -= j->subs[i].tokens;
            j->subs[i].fn = NULL;
        }
    }
}

/* ---- status ---- */

void pl_job_get_progress(const pl_job *j, pl_job_progress *p)
{
    pl_conv_counts c = {0};
    if (j->convs)
        pl_convs_counts(j->convs, &c);
    const int *n = j->qcount;
    memset(p, 0, sizeof *p);
    p->total = j->spec.n_questions;
    p->skipped = n[JOB_Q_SKIPPED];
    p->done_elsewhere = n[JOB_Q_ELSE_OK] + n[JOB_Q_ELSE_FAIL];
    p->write_failed = j->n_write_failed;
    p->succeeded = c.succeeded - j->n_write_failed + n[JOB_Q_SKIPPED] + n[JOB_Q_ELSE_OK];
    p->failed = c.failed - j->n_cancelled + j->n_write_failed + n[JOB_Q_ELSE_FAIL];
    p->cancelled = j->n_cancelled;
    p->active = c.active;
    p->waiting = n[JOB_Q_OPEN];
    p->elsewhere = n[JOB_Q_ELSEWHERE];
    p->saved = j->saved;
    p->persisted = j->persisted + n[JOB_Q_SKIPPED];
    p->answered = j->exp_answered + j->pend_answered;
    p->correct = j->exp_correct + j->pend_correct;
    p->run_answered = j->n_answered;
    p->run_correct = j->n_correct;
    p->reprompts = j->n_reprompts;
    p->round2plus_prompt_tokens = (long long)j->r2_prompt_tokens;
    p->round2plus_cached_tokens = (long long)j->r2_cached_tokens;
}

static json_t *entries_json(pl_job *j, pl_conv_pool pool, int k)
{
    pl_conv_entry e[64];
    int n = pl_convs_peek(j->convs, pool, e, k < 64 ? k : 64);
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, pl_json_pack("{s:s, s:i, s:s, s:s, s:i, s:b}",
            "question_id", j->spec.questions[e[i].conversation].id,
            "round", e[i].round, "agent_id", j->spec.agents[e[i].agent].id,
            "model", j->spec.models[e[i].model].name, "attempt", e[i].attempt,
            "reprompt", e[i].is_reprompt));
    return a;
}

json_t *pl_job_pools_json(pl_job *j, int k)
{
    pl_conv_counts c;
    pl_convs_counts(j->convs, &c);
    json_t *models = json_array();
    for (int m = 0; m < j->spec.n_models; m++) {
        int in, cap, ready;
        pl_convs_model_counts(j->convs, m, &in, &cap, &ready);
        json_array_append_new(models, pl_json_pack("{s:s, s:i, s:i, s:i}", "model",
            j->spec.models[m].name, "in_flight", in, "capacity", cap,
            "pre_departure", ready));
    }
    return pl_json_pack("{s:i, s:i, s:i, s:o, s:{s:o, s:o, s:o}}", "pending", c.pending,
        "pre_departure", c.ready, "in_flight", c.inflight, "models", models, "first",
        "pending", entries_json(j, PL_CONV_POOL_PENDING, k),
        "pre_departure", entries_json(j, PL_CONV_POOL_READY, k),
        "in_flight", entries_json(j, PL_CONV_POOL_INFLIGHT, k));
}

static json_t *ratio(int correct, int answered)
{
    return answered ? json_real((double)correct / answered) : json_null();
}

/* Accuracy over the experiment (README: the run summary's and status's),
 * and this run's share. */
static json_t *accuracy_json(const pl_job_progress *p)
{
    return pl_json_pack("{s:i, s:i, s:o, s:{s:i, s:i, s:o}}", "correct", p->correct,
                        "answered", p->answered, "ratio", ratio(p->correct, p->answered),
                        "this_run", "correct", p->run_correct, "answered", p->run_answered,
                        "ratio", ratio(p->run_correct, p->run_answered));
}

static json_t *progress_json(const pl_job_progress *p)
{
    return pl_json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}",
        "total", p->total, "skipped", p->skipped, "succeeded", p->succeeded, "failed",
        p->failed, "cancelled", p->cancelled, "active", p->active, "waiting", p->waiting,
        "elsewhere", p->elsewhere, "done_elsewhere", p->done_elsewhere, "write_failed",
        p->write_failed, "saved", p->saved, "persisted", p->persisted);
}

static int followers(const pl_job *j)
{
    int n = 0;
    for (int i = 0; i < j->n_subs; i++)
        n += j->subs[i].fn != NULL;
    return n;
}

json_t *pl_job_status_json(pl_job *j, int k)
{
    pl_job_progress p;
    pl_job_get_progress(j, &p);
    json_t *o = pl_json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:i, s:i, s:{s:I, s:I}, s:{s:i, s:i}}",
        "id", j->id, "experiment", j->spec.experiment, "state", pl_job_state_name(j->state),
        "spec_fingerprint", j->spec_fp, "progress", progress_json(&p),
        "accuracy", accuracy_json(&p), "transport_retries", j->transport_retries,
        "reprompts", p.reprompts, "cache", "round2plus_prompt_tokens",
        (json_int_t)p.round2plus_prompt_tokens, "round2plus_cached_tokens",
        (json_int_t)p.round2plus_cached_tokens, "followers", "events", followers(j),
        "tokens", j->token_subs);
    int rc = o ? 0 : -1;
    if (o && j->convs)
        rc |= json_object_set_new(o, "pools", pl_job_pools_json(j, k));
    if (o && j->error)
        rc |= json_object_set_new(o, "error", json_string(j->error));
    if (o && j->error_code)
        rc |= json_object_set_new(o, "error_code", json_string(j->error_code));
    if (o && j->dir)
        rc |= json_object_set_new(o, "output_dir", json_string(j->dir));
    if (rc) {                    /* out of memory: no partial status */
        json_decref(o);
        return NULL;
    }
    return o;
}
