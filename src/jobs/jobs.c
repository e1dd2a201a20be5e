/* jobs.c - driving a job: open its output, dispatch agent requests to the
 * backends, apply completions (state first, then I/O), persist in batches. */
#include "src/jobs/jobs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "src/base/json_pack.h"
#include "src/base/log.h"
#include "src/base/utf8.h"
#include "src/jobs/jobs_internal.h"
#include "src/jobs/prompt.h"

const char *pl_job_state_name(pl_job_state s)
{
    static const char *n[] = {"starting", "running", "completed", "cancelled", "error"};
    return s <= PL_JOB_ERROR ? n[s] : "?";
}

const char *pl_job_event_name(pl_job_event_kind k)
{
    static const char *n[] = {"message_started", "token", "message_completed",
                              "reprompt", "conversation_completed",
                              "conversation_failed", "job_completed"};
    return k <= PL_JOB_EV_JOB_COMPLETED ? n[k] : "?";
}

/* ---- creation ---- */

static void job_submit(void *ud, pl_conv_req *cr);
static bool job_may_go(void *ud);
static void finish_conv(pl_job *j, int q, bool ok, const char *error);

/* Each model's admission point: the served model's (shared with other jobs
 * and the OpenAI endpoints), or our own when the caller has none. */
static int attach_dispatch(pl_job *j, pl_dispatch **shared)
{
    j->dispatch = calloc((size_t)j->n_models, sizeof *j->dispatch);
    if (!j->dispatch)
        return -1;
    j->own_dispatch = !shared;
    for (int m = 0; m < j->n_models; m++) {
        j->dispatch[m] = shared ? shared[m] : pl_backend_dispatch_new(j->backends[m], 0);
        if (!j->dispatch[m])
            return -1;
    }
    return 0;
}

/* The job's conversations, one client of each model's dispatch; a model's
 * max_num_seqs bounds the job's requests on it. */
static pl_convs *make_convs(pl_job *j)
{
    const pl_job_spec *s = &j->spec;
    int model[PL_CONV_MAX_AGENTS], max_tokens[PL_CONV_MAX_AGENTS], cap[s->n_models];
    uint64_t deps[PL_CONV_MAX_AGENTS];
    for (int a = 0; a < s->n_agents; a++) {
        model[a] = s->agents[a].model;
        deps[a] = s->agents[a].deps;
        max_tokens[a] = s->agents[a].sampling.max_tokens;
    }
    for (int m = 0; m < s->n_models; m++)
        cap[m] = s->models[m].max_num_seqs;
    pl_convs_config cfg = {
        .n_agents = s->n_agents, .n_models = s->n_models, .num_rounds = s->num_rounds,
        .max_retries = s->max_retries, .n_conversations = s->n_questions,
        .agent_model = model, .agent_deps = deps, .agent_max_tokens = max_tokens,
        .policy = (pl_dispatch_policy)j->policy,
        .dispatch = j->dispatch, .name = j->id, .weight = s->weight, .model_cap = cap,
        .submit = job_submit, .may_go = job_may_go, .ud = j,
    };
    return pl_convs_new(&cfg);
}

pl_job *pl_job_new(pl_job_spec *spec, const pl_job_opts *o, char *err,
                   size_t errlen)
{
    pl_job *j = calloc(1, sizeof *j);
    if (!j) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    j->spec = *spec;
    memset(spec, 0, sizeof *spec);
    json_decref(j->spec.source);         /* the whole tree as given: not needed */
    j->spec.source = NULL;
    j->id = strdup(o->id ? o->id : "job");
    j->base = o->base;
    j->io = o->io;
    j->n_models = j->spec.n_models;
    j->backends = malloc((size_t)j->n_models * sizeof *j->backends);
    j->on_finished = o->on_finished;
    j->fin_ud = o->ud;
    j->output_root = strdup(j->spec.output_dir ? j->spec.output_dir
                            : o->output_root ? o->output_root : "output");
    j->conv = calloc((size_t)j->spec.n_questions + 1, sizeof *j->conv);
    if (!j->id || !j->backends || !j->output_root || !j->conv) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    memcpy(j->backends, o->backends, (size_t)j->n_models * sizeof *j->backends);
    j->policy = o->policy;
    j->no_hints = o->no_retention_hints;
    if (attach_dispatch(j, o->dispatch) < 0) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (!(j->convs = make_convs(j))) {
        snprintf(err, errlen, "invalid scheduler configuration");
        goto fail;
    }
    if (job_claims_init(j, o) < 0) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    return j;
fail:
    j->finished_called = true;
    pl_job_free(j);
    return NULL;
}

/* ---- opening the output (I/O thread) ---- */

typedef struct open_ctx {
    pl_job *j;
    char *root, *experiment;
    pl_persist *p;
    pl_persist_step step;
    int rc;
    const char *code;
    char err[1000];
} open_ctx;

/* Open, check the spec, register the questions, claim the first ones. */
static void open_work(void *ud)
{
    open_ctx *c = ud;
    pl_job *j = c->j;
    c->code = "open_failed";
    c->p = pl_persist_open(c->root, c->experiment, c->err, sizeof c->err);
    if (!c->p)
        return;
    pl_persist_spec ps = {j->spec_fp, j->canonical, NULL, j->resume_changed};
    const char **fps = malloc(((size_t)j->spec.n_questions + 1) * sizeof *fps);
    for (int q = 0; fps && q < j->spec.n_questions; q++)
        fps[q] = j->qfp[q];
    ps.question_fps = fps;
    c->rc = fps ? pl_persist_register(c->p, j->ids, j->spec.n_questions, &ps, c->err,
                                      sizeof c->err) : -1;
    free(fps);
    if (c->rc == PL_PERSIST_SPEC_CHANGED)
        c->code = "spec_changed";
    else if (c->rc == 0 && (c->rc = pl_persist_step_run(c->p, &c->step, true)) < 0)
        snprintf(c->err, sizeof c->err, "%s", c->step.error);
    if (c->rc != 0) {
        pl_persist_close(c->p);
        c->p = NULL;
    }
}

static void open_done(void *ud)
{
    open_ctx *c = ud;
    pl_job *j = c->j;
    j->opening = false;
    j->persist = c->p;
    if (!c->p && j->state == PL_JOB_STARTING) {
        j->state = PL_JOB_ERROR;
        j->error = strdup(c->err);
        j->error_code = strdup(c->code);
    }
    if (j->state == PL_JOB_STARTING) {
        j->dir = strdup(pl_persist_dir(j->persist));
        j->state = PL_JOB_RUNNING;
        j->exp_answered = c->step.answered;
        j->exp_correct = c->step.correct;
        job_claims_apply(j, j->step_states, true);
        job_pump(j);
        job_flush(j);
    }
    free(c->root);
    free(c->experiment);
    free(c);
    job_check_finished(j);
}

int pl_job_start(pl_job *j)
{
    open_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    c->j = j;
    c->root = strdup(j->output_root);
    c->experiment = strdup(j->spec.experiment);
    c->step = (pl_persist_step){.ids = j->ids, .n_ids = j->spec.n_questions,
                                .want = j->claim_window, .states = j->step_states};
    j->state = PL_JOB_STARTING;
    j->opening = true;
    if (!c->root || !c->experiment || pl_io_pool_post(j->io, open_work, open_done, c) < 0) {
        free(c->root);
        free(c->experiment);
        free(c);
        j->opening = false;
        j->state = PL_JOB_ERROR;
        j->error = strdup("cannot start the job");
        j->error_code = strdup("start_failed");
        return -1;
    }
    return 0;
}

/* ---- dispatch ---- */

/* Out of memory drops the text and marks the request: it fails with an
 * error when it completes (never a silently shortened reply). */
static void jr_append(job_req *r, const char *s, size_t n)
{
    if (r->oom)
        return;
    if (r->len + n + 1 > r->cap) {
        size_t cap = (r->len + n + 1) * 2;
        char *t = realloc(r->text, cap < 256 ? 256 : cap);
        if (!t) {
            r->oom = true;
            return;
        }
        r->text = t;
        r->cap = cap < 256 ? 256 : cap;
    }
    memcpy(r->text + r->len, s, n);
    r->len += n;
    r->text[r->len] = '\0';
}

static void emit_msg(pl_job *j, pl_job_event_kind k, const pl_conv_req *cr,
                     const char *text, size_t len, int answer, bool valid)
{
    pl_job_event ev = {.kind = k, .question_id = j->spec.questions[cr->conversation].id,
                       .round = cr->round, .attempt = cr->attempt,
                       .agent_id = j->spec.agents[cr->agent].id, .text = text,
                       .len = len, .answer = answer, .valid = valid};
    job_emit(j, &ev);
}

/* A first attempt opens the round: the system prompt once, then the
 * round's user message. Re-prompts already appended their correction. */
static int open_round(pl_job *j, job_conv *c, const pl_conv_req *cr)
{
    const pl_job_agent *ag = &j->spec.agents[cr->agent];
    job_hist *h = &c->hist[cr->agent];
    if (j->spec.shared_prefix) {
        /* Rebuilt each round: the shared part, then the agent's part. */
        pl_chat_message *m;
        int n;
        if (pl_prompt_shared(&j->spec, &j->spec.questions[cr->conversation], cr->agent,
                             cr->round, (const char *const *)c->finals, &m, &n) < 0)
            return -1;
        if (pl_prompt_fold(m, &n) < 0) {
            pl_prompt_messages_free(m, n);
            return -1;
        }
        pl_prompt_messages_free(h->m, h->n);
        *h = (job_hist){m, n, n};
        return 0;
    }
    if (h->n == 0 && ag->system_prompt &&
        job_hist_push(h, "system", strdup(ag->system_prompt)) < 0)
        return -1;
    char *u = pl_prompt_round_user(&j->spec, &j->spec.questions[cr->conversation],
                                   cr->agent, cr->round, (const char *const *)c->finals);
    return job_hist_push(h, "user", u);
}

/* Resubmissions of one request after transport failures. */
#define JOB_TRANSPORT_RETRIES 3

static void on_delta(void *ud, const pl_delta *d);
static void on_done(void *ud, const pl_result *r);
static int send_req(pl_job *j, job_req *jr, pl_err *err);
static void complete_req(pl_job *j, job_req *jr, const char *error);

/* The remote backend's routing key: requests with one key share a prompt
 * prefix, so they go to the replica whose prefix cache holds it. Under the
 * shared_prefix layout that is the whole conversation (0: its
 * conversation_key); under the seed layout each agent's history is its
 * own prefix (its own system prompt first), so the key is the agent's
 * thread: one key for the conversation would route its agents, which speak
 * in parallel, as one and remember only the last one's replica. */
static uint64_t job_affinity_key(const pl_job *j, const pl_conv_req *cr)
{
    if (j->spec.shared_prefix)
        return 0;
    return ((uint64_t)(uintptr_t)j * 0x9E3779B97F4A7C15ull) ^
           ((uint64_t)(cr->conversation + 1) << 32) ^ (uint64_t)(cr->agent + 1);
}

/* A retention hint: no later request of the conversation reuses this
 * reply's KV. In the last round none does (the conversation's end releases
 * the rest); under shared_prefix only the closer's reply is reused (the
 * next round continues its turn), the others' are quoted, so prefilled
 * anew. Only sent with hints on (--kv-eviction next-need). */
static bool job_reply_private(const pl_job *j, const pl_conv_req *cr)
{
    if (j->no_hints)
        return false;
    if (cr->round == j->spec.num_rounds - 1)
        return true;
    return j->spec.shared_prefix && cr->agent != pl_prompt_closer(&j->spec);
}

/* Submit jr's request: the agent's history, its sampling, the conversation
 * (the engine's retention hints) and the routing key. */
static int send_req(pl_job *j, job_req *jr, pl_err *err)
{
    const pl_conv_req *cr = jr->cr;
    const pl_job_agent *ag = &j->spec.agents[cr->agent];
    job_hist *h = &j->conv[cr->conversation]->hist[cr->agent];
    pl_gen_request req = {
        .messages = h->m, .n_messages = h->n, .add_generation_prompt = true,
        .sampling = ag->sampling,
        .priority = pl_dispatch_engine_priority((pl_dispatch_policy)j->policy, &cr->d.key),
        .conversation_key = job_conv_key(j, cr->conversation),
        .affinity_key = job_affinity_key(j, cr),
        .reply_private = job_reply_private(j, cr),
    };
    int nc = j->spec.questions[cr->conversation].n_choices;
    if (j->spec.constrained && j->spec.validation && ag->validate && nc > 0) {
        if (!j->answer_rx[nc] && !(j->answer_rx[nc] = pl_job_answer_regex(nc)))
            return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
        req.sampling.constraint = PL_CONSTRAINT_REGEX;   /* borrowed for submit */
        req.sampling.constraint_text = j->answer_rx[nc];
    }
    pl_sink sink = {on_delta, on_done, jr};
    return pl_backend_submit(j->backends[cr->model], &req, sink, &jr->backend_id, err);
}

/* An upstream that failed or went away (429, 502-504: the remote backend's
 * transport errors, retried there before the first token) is worth another
 * try; a bad request or an engine error is not. */
static bool transient(const pl_result *r)
{
    return r->finish == PL_FINISH_ERROR && r->error &&
           (r->error->status == 429 || (r->error->status >= 502 && r->error->status <= 504));
}

/* Its model's dispatch admitted cr: build its prompt and send it. Out of
 * memory or a refusal ends it at once with the error (its conversation
 * fails and says why). */
static void job_submit(void *ud, pl_conv_req *cr)
{
    pl_job *j = ud;
    int q = cr->conversation;
    job_hint_now(j, cr->model, q);
    job_req *jr = calloc(1, sizeof *jr);
    if (!j->conv[q])
        j->conv[q] = job_conv_new(&j->spec);
    job_conv *c = j->conv[q];
    if (!jr || !c || (cr->attempt == 0 && open_round(j, c, cr) < 0)) {
        free(jr);
        if (pl_convs_complete(j->convs, cr, PL_CONV_ERROR, 0) & PL_CONV_EV_FAILED)
            finish_conv(j, q, false, "out of memory building the prompt");
        return;
    }
    jr->job = j;
    jr->cr = cr;
    cr->ud = jr;
    pl_err err = {0};
    emit_msg(j, PL_JOB_EV_MESSAGE_STARTED, cr, NULL, 0, -1, false);
    if (send_req(j, jr, &err) < 0)
        complete_req(j, jr, err.message[0] ? err.message : "backend refused the request");
}

/* The I/O keeps up: finished transcripts and summaries in memory stay
 * under their bounds (jobs_internal.h). */
static bool io_keeps_up(const pl_job *j)
{
    return j->n_saving < JOB_MAX_UNSAVED && j->n_queue + j->n_batch < JOB_MAX_UNCOMMITTED;
}

static bool job_may_go(void *ud)
{
    const pl_job *j = ud;
    return j->state == PL_JOB_RUNNING && io_keeps_up(j);
}

/* A slot on any of our models goes to whichever client's turn it is, ours
 * or another job's. */
void job_pump(pl_job *j)
{
    if (j->state == PL_JOB_RUNNING)
        pl_convs_pump(j->convs);
}

static void on_delta(void *ud, const pl_delta *d)
{
    job_req *jr = ud;
    jr_append(jr, d->text, d->len);
    if (jr->job->token_subs > 0 && d->len > 0)
        emit_msg(jr->job, PL_JOB_EV_TOKEN, jr->cr, d->text, d->len, -1, false);
}

static void on_done(void *ud, const pl_result *r)
{
    job_req *jr = ud;
    pl_job *jj = jr->job;
    if (transient(r) && jr->transport_retries < JOB_TRANSPORT_RETRIES &&
        jj->state == PL_JOB_RUNNING) {
        pl_err err = {0};
        jr->transport_retries++;
        jj->transport_retries++;
        jr->len = 0;             /* the partial reply is dropped */
        jr->oom = false;
        if (send_req(jj, jr, &err) == 0)
            return;
    }
    jr->prompt_tokens = r->prompt_tokens;
    jr->completion_tokens = r->completion_tokens;
    jr->cached_tokens = r->cached_tokens;
    const char *error = NULL;
    if (r->finish == PL_FINISH_ERROR)
        error = r->error && r->error->message[0] ? r->error->message : "backend error";
    else if (jr->oom)
        error = "out of memory keeping the reply";
    else if (r->finish == PL_FINISH_ABORT)
        error = "aborted by the backend";
    pl_job *j = jr->job;
    complete_req(j, jr, error);
    job_pump(j);
}

/* ---- completion ---- */

/* The reply in the transcript's attempts. -1 on out of memory. */
static int record_attempt(job_conv *c, pl_job *j, const job_req *jr, int ans,
                          bool valid, const char *error, const char *reasoning)
{
    const pl_conv_req *cr = jr->cr;
    json_t *a = pl_json_pack("{s:i, s:s, s:i, s:s, s:o, s:b, s:i, s:i, s:i}", "round", cr->round,
        "agent_id", j->spec.agents[cr->agent].id, "attempt", cr->attempt,
        "content", jr->text ? jr->text : "", "answer",
        ans >= 0 ? json_sprintf("%c", pl_job_choice_label(ans)) : json_null(),
        "valid", valid, "prompt_tokens", jr->prompt_tokens,
        "completion_tokens", jr->completion_tokens, "cached_tokens", jr->cached_tokens);
    if (a && error && json_object_set_new(a, "error", json_string(error)) < 0)
        goto fail;
    if (a && reasoning && json_object_set_new(a, "reasoning", json_string(reasoning)) < 0)
        goto fail;
    if (a && jr->transport_retries &&
        json_object_set_new(a, "transport_retries", json_integer(jr->transport_retries)) < 0)
        goto fail;
    return json_array_append_new(c->attempts, a);
fail:
    json_decref(a);
    return -1;
}

/* Keep the reply (owned; NULL: out of memory): the accepted message of
 * its round, or a failed attempt followed by the correction (append-only
 * history either way). -1 on out of memory: the conversation cannot go
 * on without it. */
static int keep_reply(pl_job *j, job_conv *c, const pl_conv_req *saved, char *text,
                      int ans, pl_conv_outcome o, unsigned flags)
{
    int k = saved->round * j->spec.n_agents + saved->agent;
    job_hist *h = &c->hist[saved->agent];
    if (!text)
        return -1;
    if (o == PL_CONV_OK) {
        c->finals[k] = text;
        c->answers[k] = (int8_t)ans;
        return job_hist_push(h, "assistant", strdup(text));
    }
    if (flags & PL_CONV_EV_REPROMPT) {
        j->n_reprompts++;
        int rc = job_hist_push(h, "assistant", text);
        if (rc == 0)
            rc = job_hist_push(h, "user", pl_prompt_correction(
                                   &j->spec, &j->spec.questions[saved->conversation]));
        emit_msg(j, PL_JOB_EV_REPROMPT, saved, NULL, 0, -1, false);
        return rc;
    }
    free(text);
    return 0;
}

#define JOB_NOMEM_REPLY "out of memory keeping the reply"

/* The reply taken in: its text made valid UTF-8, then (unless it failed)
 * its reasoning set apart by its model's format. A model may stop inside
 * a character or emit bytes that are none, and jansson refuses such text:
 * every writer of the transcript would fail, so each ill-formed sequence
 * becomes U+FFFD here, as the API's replies have it. -1: out of memory. */
static int take_reply(pl_job *j, job_req *jr, bool failed, char **reasoning)
{
    if (jr->text && !pl_utf8_valid(jr->text, jr->len)) {
        size_t n;
        char *t = pl_utf8_lossy(jr->text, jr->len, &n);
        if (!t)
            return -1;
        free(jr->text);
        jr->text = t;
        jr->len = n;
    }
    const struct pl_reasoning_format *fmt =
        pl_backend_reasoning_format(j->backends[jr->cr->model]);
    if (!failed && pl_job_reply_split(fmt, &jr->text, &jr->len, reasoning) < 0)
        return -1;
    jr->cap = jr->text ? jr->len + 1 : 0;
    return 0;
}

/* Why the conversation failed, for its transcript and event. */
static void fail_reason(const pl_job *j, const pl_conv_req *saved, const char *error,
                        unsigned flags, char *msg, size_t n)
{
    const char *ag = j->spec.agents[saved->agent].id;
    if (error)
        snprintf(msg, n, "agent %s, round %d: %s", ag, saved->round, error);
    else if (flags & PL_CONV_EV_NOMEM)
        snprintf(msg, n, "agent %s, round %d: out of memory queueing the next request", ag,
                 saved->round);
    else
        snprintf(msg, n, "agent %s, round %d: no valid answer after %d re-prompts", ag,
                 saved->round, j->spec.max_retries);
}

static void complete_req(pl_job *j, job_req *jr, const char *error)
{
    pl_conv_req saved = *jr->cr;
    int q = saved.conversation;
    job_conv *c = j->conv[q];
    bool live = pl_convs_status(j->convs, q) == PL_CONV_STATUS_ACTIVE && c;
    const pl_job_agent *ag = &j->spec.agents[saved.agent];
    const pl_job_question *qq = &j->spec.questions[q];
    char *reasoning = NULL;
    if (live && take_reply(j, jr, error != NULL, &reasoning) < 0 && !error)
        error = JOB_NOMEM_REPLY;
    int ans = error || !live ? -1 : pl_job_spec_extract(&j->spec, qq, jr->text, jr->len);
    bool need = j->spec.validation && ag->validate && qq->n_choices > 0;
    pl_conv_outcome o = error ? PL_CONV_ERROR : (need && ans < 0) ? PL_CONV_INVALID : PL_CONV_OK;
    if (live && record_attempt(c, j, jr, ans, o == PL_CONV_OK, error, reasoning) < 0 &&
        !error) {
        error = JOB_NOMEM_REPLY;
        o = PL_CONV_ERROR;
    }
    free(reasoning);
    int fresh = jr->prompt_tokens - jr->cached_tokens;
    if (saved.round >= 1) {
        j->r2_prompt_tokens += (uint64_t)jr->prompt_tokens;
        j->r2_cached_tokens += (uint64_t)jr->cached_tokens;
    }
    unsigned flags = pl_convs_complete(j->convs, jr->cr, o,
                                       (double)jr->completion_tokens + (fresh > 0 ? fresh : 0));
    job_send_hints(j);
    char *text = jr->text ? jr->text : strdup("");
    free(jr);
    if (!live || (flags & PL_CONV_EV_STALE)) {
        free(text);
        return;
    }
    emit_msg(j, PL_JOB_EV_MESSAGE_COMPLETED, &saved, text ? text : "", text ? strlen(text) : 0,
             ans, o == PL_CONV_OK);
    if (keep_reply(j, c, &saved, text, ans, o, flags) < 0 && pl_convs_fail(j->convs, q)) {
        flags = (flags & ~PL_CONV_EV_SUCCEEDED) | PL_CONV_EV_FAILED;
        error = JOB_NOMEM_REPLY;
    }
    if (flags & PL_CONV_EV_FAILED) {
        char msg[300];
        fail_reason(j, &saved, error, flags, msg, sizeof msg);
        finish_conv(j, q, false, msg);
    } else if (flags & PL_CONV_EV_SUCCEEDED) {
        finish_conv(j, q, true, NULL);
    }
}

/* Abort what a failed conversation (q < 0: every one) still has in flight. */
static void abort_conv_inflight(pl_job *j, int q)
{
    pl_conv_req *r = pl_convs_inflight_first(j->convs), *next;
    for (; r; r = next) {
        next = pl_convs_inflight_next(r);
        if (q >= 0 && r->conversation != q)
            continue;
        job_req *jr = r->ud;
        if (jr)
            pl_backend_abort(j->backends[r->model], jr->backend_id);
        pl_convs_complete(j->convs, r, PL_CONV_ERROR, 0);
        if (jr)
            free(jr->text);
        free(jr);
    }
}

/* A finished question is in its transcript: keep only its id (events,
 * lookups) and answer. Its text, choices and metadata go. */
static void release_question(pl_job_question *qq)
{
    free(qq->text);
    qq->text = NULL;
    for (int i = 0; i < qq->n_choices; i++)
        free(qq->choices[i]);
    free(qq->choices);
    qq->choices = NULL;
    qq->n_choices = 0;
    json_decref(qq->metadata);
    qq->metadata = NULL;
}

static void finish_conv(pl_job *j, int q, bool ok, const char *error)
{
    if (!pl_convs_finalize(j->convs, q))
        return;
    if (!ok)
        abort_conv_inflight(j, q);
    json_t *t = job_transcript_json(j, q, ok ? "succeeded" : "failed", error);
    if (!t && ok) {
        /* Nothing can be written: it stays pending on disk (a re-run does
         * it again) and its followers hear why. */
        ok = false;
        error = "out of memory building the transcript";
    }
    j->n_terminal++;
    pl_job_event ev = {.kind = ok ? PL_JOB_EV_CONVERSATION_COMPLETED
                                  : PL_JOB_EV_CONVERSATION_FAILED,
                       .question_id = j->spec.questions[q].id, .answer = -1,
                       .error = error};
    const char *fa = json_string_value(json_object_get(json_object_get(t, "summary"),
                                                       "final_answer"));
    if (fa) {
        ev.answer = fa[0] - 'A';
        ev.text = fa;
        ev.len = strlen(fa);
    }
    json_t *correct = json_object_get(json_object_get(t, "summary"), "correct");
    if (ok && json_is_boolean(correct)) {
        j->n_answered++;
        j->n_correct += json_is_true(correct);
        j->pend_answered++;
        j->pend_correct += json_is_true(correct);
    }
    job_qstate_set(j, q, JOB_Q_DONE);
    j->n_mine_live--;
    job_emit(j, &ev);
    job_conv_free(j->conv[q], &j->spec);
    j->conv[q] = NULL;
    release_question(&j->spec.questions[q]);
    if (t)
        job_save(j, q, ok, error, t);
}

void job_start_conv(pl_job *j, int q)
{
    if (pl_convs_start(j->convs, q) < 0)
        finish_conv(j, q, false, "out of memory queueing its first round");
}

/* Leave the models' dispatches: what the job held there goes to the
 * other clients at once. */
static void leave_dispatch(pl_job *j)
{
    if (!j->convs)
        return;
    pl_convs_detach(j->convs);
    pl_convs_pump(j->convs);
}

void job_check_finished(pl_job *j)
{
    bool done;
    if (j->state == PL_JOB_RUNNING)
        done = job_claims_all_done(j);
    else
        done = j->state != PL_JOB_STARTING;
    if (!done || j->writing || j->n_queue > 0 || j->n_saving > 0 || j->retry_pending ||
        j->opening || j->finished_called)
        return;
    if (j->state == PL_JOB_RUNNING)
        j->state = PL_JOB_COMPLETED;
    if (j->poll_pending) {
        evtimer_del(j->poll_ev);
        j->poll_pending = false;
    }
    /* Done with the experiment: its claims on what did not finish (a
     * cancel, an error) go free for the next run at once. Quick: the
     * heartbeat thread wakes at once, one unlink. */
    pl_persist_close(j->persist);
    j->persist = NULL;
    j->finished_called = true;
    leave_dispatch(j);
    pl_job_event ev = {.kind = PL_JOB_EV_JOB_COMPLETED, .answer = -1, .error = j->error};
    job_emit(j, &ev);
    if (j->on_finished)
        j->on_finished(j->fin_ud, j);
}

/* ---- cancel, free, accessors ---- */

void job_stop(pl_job *j, pl_job_state final)
{
    if (j->state != PL_JOB_RUNNING && j->state != PL_JOB_STARTING)
        return;
    j->state = final;
    /* Stopped conversations are not failures: nothing is written for
     * them, so they stay pending and a re-run resumes them. */
    for (int q = 0; j->convs && q < j->spec.n_questions; q++)
        if (pl_convs_status(j->convs, q) == PL_CONV_STATUS_ACTIVE) {
            pl_convs_fail(j->convs, q);
            j->n_cancelled++;
        }
    if (j->convs) {
        abort_conv_inflight(j, -1);
        job_send_hints(j);               /* their caches may go now */
        pl_convs_pump(j->convs);         /* our slots go to the others */
    }
    job_check_finished(j);
}

void pl_job_cancel(pl_job *j)
{
    job_stop(j, PL_JOB_CANCELLED);
}

void job_fail_io(pl_job *j, const char *code, const char *msg)
{
    if (!j->error) {
        j->error = strdup(msg);
        j->error_code = strdup(code);
    }
    job_stop(j, PL_JOB_ERROR);
}

void pl_job_free(pl_job *j)
{
    if (!j)
        return;
    j->finished_called = true;           /* no callbacks from here on */
    pl_job_cancel(j);
    job_save_drain(j);
    leave_dispatch(j);
    pl_convs_free(j->convs);
    for (int m = 0; j->own_dispatch && j->dispatch && m < j->n_models; m++)
        pl_dispatch_free(j->dispatch[m]);
    free(j->dispatch);
    for (int q = 0; j->conv && q < j->spec.n_questions; q++)
        job_conv_free(j->conv[q], &j->spec);
    free(j->conv);
    job_claims_free(j);
    free(j->error_code);
    free(j->hint_sent);
    free(j->hint_need);
    pl_persist_close(j->persist);
    pl_job_spec_free(&j->spec);
    free(j->subs);
    for (int i = 0; i <= PL_JOB_MAX_CHOICES; i++)
        free(j->answer_rx[i]);
    free(j->backends);
    free(j->output_root);
    free(j->dir);
    free(j->error);
    free(j->id);
    free(j);
}

pl_job_state pl_job_get_state(const pl_job *j) { return j->state; }
const char *pl_job_id(const pl_job *j) { return j->id; }
const pl_job_spec *pl_job_get_spec(const pl_job *j) { return &j->spec; }
const char *pl_job_dir(const pl_job *j) { return j->dir; }
const char *pl_job_error(const pl_job *j) { return j->error; }
const char *pl_job_error_code(const pl_job *j) { return j->error_code; }
const char *pl_job_fingerprint(const pl_job *j) { return j->spec_fp; }

json_t *pl_job_transcript(pl_job *j, const char *qid)
{
    for (int q = 0; q < j->spec.n_questions; q++) {
        if (strcmp(j->spec.questions[q].id, qid) != 0)
            continue;
        if (j->conv[q])
            return job_transcript_json(j, q, "running", NULL);
        json_t *t = job_saving_transcript(j, q);
        if (t)
            return t;
        return j->dir ? pl_persist_read_transcript(j->dir, qid) : NULL;
    }
    return NULL;
}
