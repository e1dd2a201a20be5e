/* engine_prep.c - a request's preparation before the engine thread takes
 * it: its constraint automaton, its prompt's ids, the length checks and
 * the engine's copy of it.
 *
 * Nothing heavy runs on the event loop (DESIGN.md): a constraint not yet
 * compiled (tens of milliseconds for a 20-property schema) and a text
 * prompt above PREP_INLINE_BYTES are prepared on the engine's prepare
 * workers (an I/O pool of its own, pl_engine_options.prepare_threads), and
 * the request reaches the inbox from the main loop when they are done.
 * The rest stays inline, where it is cheaper than a hand-off and its
 * errors stay synchronous: a cached automaton is a lookup, a schema is
 * checked (written as a regex and parsed, ~0.2 ms for 20 properties)
 * before it is compiled, so a bad one is a 400 from submit; a prompt of
 * token ids is a copy, and text tokenises at ~20 MB/s (8 KiB: ~0.4 ms).
 * What a worker finds (a DFA too large, a prompt too long) comes back as
 * the request's result before its first token (the backend's late_errors).
 *
 * Threads: submit and a worker's completion (prep_done_) run on the main
 * thread (asserted); prep_work_ on a worker, where it reads only its own
 * eng_prep, what is fixed once the engine is open (the text hooks, the
 * geometry, the runner's abilities) and the locked constraint cache.
 */
#include "backends/engine/engine_prep.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "backends/engine/engine_chan.h"
#include "backends/engine/engine_kv.h"
#include "backends/engine/engine_req.h"
#include "src/base/io_pool.h"

#define PREP_INLINE_BYTES 8192   /* text prompts up to this tokenise inline */
#define PREP_NICE 10             /* workers yield the CPU to the engine's steps */

/* A request on its way through a worker: an owned copy of what the
 * engine reads from pl_gen_request, and what the worker made of it. */
typedef struct eng_prep {
    pl_engine *e;
    uint64_t id;
    double t_submit;
    pl_gen_request req;          /* its pointers point into the fields below */
    pl_chat_message *msgs;       /* each string and tool_calls owned */
    json_t *tools;               /* the rest of the chat's, owned */
    char *effort, *identity;
    char *prompt;
    int32_t *tokens;
    const pl_token_fsm *fsm;     /* from the cache already, or compiled here */
    eng_req *r;                  /* the result; NULL with err */
    pl_err err;
    int kv_held;                 /* blocks counted while it prepares
                                    (pl_engine_kv_hold_) */
} eng_prep;

/* Token ids from a client name tokens of this vocabulary: 400 otherwise,
 * as OpenAI and vLLM answer (never ignored). */
int pl_engine_check_ids_(pl_engine *e, const int32_t *ids, int n, const char *param,
                         pl_err *err)
{
    return pl_backend_check_ids(ids, n, e->n_vocab, param, err);
}

int pl_engine_prompt_ids_(pl_engine *e, const pl_gen_request *req, int32_t **ids, int *n,
                          pl_err *err)
{
    if (req->prompt_tokens) {
        if (pl_engine_check_ids_(e, req->prompt_tokens, req->n_prompt_tokens, "prompt", err) < 0)
            return -1;
        *n = req->n_prompt_tokens;
        *ids = malloc((size_t)(*n > 0 ? *n : 1) * sizeof **ids);
        if (!*ids)
            return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
        memcpy(*ids, req->prompt_tokens, (size_t)*n * sizeof **ids);
        return 0;
    }
    if (!e->text.encode)
        return pl_err_set(err, 400, "invalid_request_error", "prompt", NULL,
                          "this engine accepts token ids only");
    return e->text.encode(e->text.ud, req, true, ids, n, err);
}

static int check_bias_(pl_engine *e, const pl_sampling *sp, pl_err *err)
{
    for (int i = 0; i < sp->n_logit_bias; i++)
        if (pl_engine_check_ids_(e, &sp->logit_bias[i].token, 1, "logit_bias", err) < 0)
            return -1;
    return 0;
}

/* The constraint from the cache, or a check of its text (so a bad one is
 * a 400 now) and *compile. 0, or -1 with *err. Main thread. */
static int constraint_inline_(pl_engine *e, const pl_sampling *sp, const pl_token_fsm **fsm,
                              bool *compile, pl_err *err)
{
    *fsm = NULL;
    *compile = false;
    if (sp->constraint == PL_CONSTRAINT_NONE)
        return 0;
    if (!e->runner->can_constrain || !e->constraints)
        return pl_err_set(err, 400, "invalid_request_error", "response_format",
                          "unsupported_parameter",
                          "structured outputs are not supported by the %s runner yet",
                          e->runner->ops->name);
    int rc = pl_constraint_lookup(e->constraints, sp->constraint, sp->constraint_text, fsm, err);
    if (rc != 0)
        return rc > 0 ? 0 : -1;
    if (pl_constraint_check(sp->constraint, sp->constraint_text, e->base.json_ws, err) < 0)
        return -1;
    if (!e->prep) {              /* --prepare-threads 0: compile here */
        *fsm = pl_constraint_get(e->constraints, sp->constraint, sp->constraint_text, err);
        return *fsm ? 0 : -1;
    }
    *compile = true;
    return 0;
}

static size_t prompt_bytes_(const pl_gen_request *req)
{
    size_t n = req->prompt ? strlen(req->prompt) : 0;
    for (int i = 0; i < req->n_messages; i++)
        n += strlen(req->messages[i].content ? req->messages[i].content : "");
    return n;
}

/* Tokens a text prompt has at most, before it is tokenised: a token of
 * text covers at least one byte, and the template's special tokens and
 * headers are allowed PREP_TEMPLATE_TOKENS a message (and the prompt's
 * BOS). Admission counts this while a worker tokenises (a burst of long
 * prompts counted by the running estimate was admitted past the cache);
 * the real count replaces it when the worker is done. 0 for token ids:
 * the estimate, as before. */
#define PREP_TEMPLATE_TOKENS 64
static int prompt_bound_(const pl_gen_request *req)
{
    if (req->prompt_tokens)
        return 0;
    size_t n = prompt_bytes_(req) + (size_t)PREP_TEMPLATE_TOKENS * ((size_t)req->n_messages + 1);
    return n > (size_t)1 << 30 ? 1 << 30 : (int)n;
}

/* ---- the worker's half ---- */

static void prep_free_(eng_prep *p)
{
    if (!p)
        return;
    for (int i = 0; p->msgs && i < p->req.n_messages; i++) {
        free((char *)p->msgs[i].role);
        free((char *)p->msgs[i].content);
        free((char *)p->msgs[i].reasoning);
        json_decref(p->msgs[i].tool_calls);
    }
    free(p->msgs);
    json_decref(p->tools);
    free(p->effort);
    free(p->identity);
    free(p->prompt);
    free(p->tokens);
    pl_sampling_free(&p->req.sampling);
    pl_token_fsm_release(p->fsm);
    pl_engine_req_free_(p->r);
    free(p);
}

static char *dup_or_null_(const char *s, bool *oom)
{
    char *d = s ? strdup(s) : NULL;
    *oom |= s && !d;
    return d;
}

static json_t *json_copy_or_null_(json_t *v, bool *oom)
{
    json_t *d = v ? json_deep_copy(v) : NULL;
    *oom |= v && !d;
    return d;
}

/* The chat's messages and template arguments, owned (the caller's are
 * borrowed for submit only). */
static void copy_chat_(eng_prep *p, const pl_gen_request *req, bool *oom)
{
    p->req.tools = p->tools = json_copy_or_null_(req->tools, oom);
    p->req.reasoning_effort = p->effort = dup_or_null_(req->reasoning_effort, oom);
    p->req.model_identity = p->identity = dup_or_null_(req->model_identity, oom);
    if (!req->messages)
        return;
    p->msgs = calloc((size_t)req->n_messages + 1, sizeof *p->msgs);
    *oom |= !p->msgs;
    for (int i = 0; p->msgs && i < req->n_messages; i++) {
        const pl_chat_message *m = &req->messages[i];
        p->msgs[i].role = dup_or_null_(m->role, oom);
        p->msgs[i].content = dup_or_null_(m->content, oom);
        p->msgs[i].reasoning = dup_or_null_(m->reasoning, oom);
        p->msgs[i].tool_calls = json_copy_or_null_(m->tool_calls, oom);
    }
    p->req.messages = p->msgs;
}

/* An owned copy of what preparation and the engine read from req. */
static eng_prep *prep_new_(pl_engine *e, const pl_gen_request *req, const pl_token_fsm *fsm)
{
    eng_prep *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    bool oom = false;
    p->e = e;
    p->req = *req;
    p->req.oai_body = NULL;
    p->fsm = fsm;
    if (pl_sampling_copy(&p->req.sampling, &req->sampling) < 0) {
        memset(&p->req.sampling, 0, sizeof p->req.sampling);
        oom = true;
    }
    p->req.prompt = p->prompt = dup_or_null_(req->prompt, &oom);
    if (req->prompt_tokens) {
        size_t n = (size_t)(req->n_prompt_tokens > 0 ? req->n_prompt_tokens : 1);
        p->req.prompt_tokens = p->tokens = malloc(n * sizeof *p->tokens);
        oom |= !p->tokens;
        if (p->tokens)
            memcpy(p->tokens, req->prompt_tokens,
                   (size_t)req->n_prompt_tokens * sizeof *p->tokens);
    }
    copy_chat_(p, req, &oom);
    if (oom) {
        p->fsm = NULL;           /* the caller still owns it */
        prep_free_(p);
        return NULL;
    }
    return p;
}

/* A worker runs below the engine's threads: on a machine whose cores the
 * steps fill (the CPU runner), a compile then takes the time they leave
 * instead of stretching every stream's next step. The pool's threads are
 * the engine's own, so the priority stays with them. */
static void prep_nice_(void)
{
    static __thread bool done;
    if (!done)
        (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), PREP_NICE);
    done = true;
}

static void prep_work_(void *ud)
{
    eng_prep *p = ud;
    prep_nice_();
    pl_engine *e = p->e;
    const pl_sampling *sp = &p->req.sampling;
    if (sp->constraint != PL_CONSTRAINT_NONE && !p->fsm &&
        !(p->fsm = pl_constraint_get(e->constraints, sp->constraint, sp->constraint_text,
                                     &p->err)))
        return;
    int32_t *ids = NULL;
    int n = 0;
    if (pl_engine_prompt_ids_(e, &p->req, &ids, &n, &p->err) < 0)
        return;
    p->r = pl_engine_req_new_(e, &p->req, ids, n, p->fsm, &p->err);
    p->fsm = NULL;               /* pl_engine_req_new_ took it */
}

/* Back on the main loop: into the inbox, or the error to the sink; nothing
 * when the request was aborted meanwhile or the engine is closing. */
static void prep_done_(void *ud)
{
    eng_prep *p = ud;
    pl_engine *e = p->e;
    PL_ASSERT_ON_THREAD(&e->main_role);
    pl_engine_kv_unhold_(e, p->kv_held);
    eng_sub *s = e->closing ? NULL : pl_engine_sub_find_(e, p->id);
    eng_msg *m = s && p->r ? calloc(1, sizeof *m) : NULL;
    eng_msg *pause = m && s->paused ? calloc(1, sizeof *pause) : NULL;
    if (m && s->paused && !pause) {
        free(m);
        m = NULL;
    }
    if (s && !m) {
        pl_sink sink = s->sink;
        pl_engine_sub_remove_(e, p->id);
        if (p->r)
            pl_err_set(&p->err, 500, "server_error", NULL, NULL, "out of memory");
        pl_result res = {.finish = PL_FINISH_ERROR, .error = &p->err};
        sink.on_done(sink.ud, &res);
    } else if (m) {
        s->preparing = false;
        p->r->id = p->id;
        p->r->t_submit = p->t_submit;
        *m = (eng_msg){.type = ENG_MSG_SUBMIT, .id = p->id, .req = p->r};
        if (pause)           /* paused while preparing: from its first step */
            *pause = (eng_msg){.type = ENG_MSG_PAUSE, .id = p->id};
        pl_engine_kv_submit_(e, p->r);
        p->r = NULL;
        pl_engine_inbox_push2_(e, m, pause);
    }
    prep_free_(p);
}

/* ---- submit ---- */

/* Queue r (prepared) for the engine thread under a new id. */
static int submit_ready_(pl_engine *e, eng_req *r, pl_sink sink, uint64_t *id, pl_err *err)
{
    eng_msg *m = calloc(1, sizeof *m);
    r->id = ++e->next_id;
    r->t_submit = pl_engine_now_ms_();
    if (!m || pl_engine_sub_add_(e, r->id, sink) < 0) {
        free(m);
        pl_engine_req_free_(r);
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    pl_engine_kv_submit_(e, r);
    *m = (eng_msg){.type = ENG_MSG_SUBMIT, .id = r->id, .req = r};
    *id = r->id;
    pl_engine_inbox_push_(e, m);
    return 0;
}

/* Hand req to a worker; its sink is registered now, as preparing. */
static int submit_prep_(pl_engine *e, const pl_gen_request *req, const pl_token_fsm *fsm,
                        pl_sink sink, uint64_t *id, pl_err *err)
{
    eng_prep *p = prep_new_(e, req, fsm);
    if (!p) {
        pl_token_fsm_release(fsm);
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    p->id = ++e->next_id;
    p->t_submit = pl_engine_now_ms_();
    if (pl_engine_sub_add_(e, p->id, sink) < 0)
        goto oom;
    if (pl_io_pool_post(e->prep, prep_work_, prep_done_, p) < 0) {
        pl_engine_sub_remove_(e, p->id);
        goto oom;
    }
    pl_engine_sub_find_(e, p->id)->preparing = true;
    p->kv_held = pl_engine_kv_hold_(e, prompt_bound_(req), req->sampling.max_tokens);
    *id = p->id;
    return 0;
oom:
    prep_free_(p);
    return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
}

int pl_engine_submit_(pl_backend *b, const pl_gen_request *req, pl_sink sink, uint64_t *id,
                      pl_err *err)
{
    pl_engine *e = (pl_engine *)b;
    PL_ASSERT_ON_THREAD(&e->main_role);
    const pl_token_fsm *fsm = NULL;
    bool compile;
    if (check_bias_(e, &req->sampling, err) < 0 ||
        constraint_inline_(e, &req->sampling, &fsm, &compile, err) < 0)
        return -1;
    bool big = !req->prompt_tokens && prompt_bytes_(req) > PREP_INLINE_BYTES;
    if (e->prep && (compile || big))
        return submit_prep_(e, req, fsm, sink, id, err);
    int32_t *ids = NULL;
    int n = 0;
    if (pl_engine_prompt_ids_(e, req, &ids, &n, err) < 0) {
        pl_token_fsm_release(fsm);
        return -1;
    }
    eng_req *r = pl_engine_req_new_(e, req, ids, n, fsm, err);
    return r ? submit_ready_(e, r, sink, id, err) : -1;
}

int pl_engine_prep_init_(pl_engine *e, int threads)
{
    PL_ASSERT_ON_THREAD(&e->main_role);
    if (threads <= 0)
        return 0;
    e->prep = pl_io_pool_new(e->base.base, threads);
    if (!e->prep)
        return -1;
    e->ops.late_errors = true;   /* a worker's errors come after submit */
    return 0;
}

void pl_engine_prep_free_(pl_engine *e)
{
    PL_ASSERT_ON_THREAD(&e->main_role);
    e->closing = true;           /* prepared requests are dropped, not sent */
    pl_io_pool_free(e->prep);    /* waits for the workers, runs prep_done_ */
    e->prep = NULL;
}
