/* mock.c - the deterministic mock backend. */
#include "backends/mock/mock.h"

#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "backends/mock/mock_internal.h"
#include "backends/stopstr.h"

static const char *mock_words[] = {
    "the", "answer", "is", "clearly", "option", "because", "we", "consider",
    "evidence", "and", "reason", "about", "each", "choice", "carefully", "so",
    "agents", "agree", "that", "this", "seems", "most", "likely", "correct",
    "given", "what", "was", "said", "in", "round", "one", "debate",
};
#define MOCK_NWORDS (sizeof mock_words / sizeof mock_words[0])
#define MOCK_BURST 64    /* tokens per callback when the delay is 0 */

typedef struct mock_req {
    uint64_t id;
    pl_sink sink;
    struct mock_backend *mb;
    struct event *timer;
    pl_sampling sp;
    uint64_t rng;
    char *echo;          /* echo mode: the words to replay */
    size_t echo_pos;
    int produced, limit; /* limit: max tokens, or a natural stop point */
    int natural_stop;    /* 1: reaching limit finishes with "stop" */
    int prompt_tokens;
    int stop_index;      /* pl_result.stop_index */
    pl_mock_prompt *prompt;   /* echo: the prompt delta not yet delivered */
    bool score_only;     /* echo with max_tokens 0: nothing generated */
    int paused, running;
    char *text;          /* produced text not yet emitted */
    size_t text_len, text_cap;
    char word[128];      /* the last token's text, for its logprobs */
    pl_token_logprob lp; /* the last token's logprobs (when asked) */
    pl_top_logprob top[PL_MAX_TOP_LOGPROBS];
    struct mock_req *qnext;   /* FIFO of requests waiting for capacity */
} mock_req;

typedef struct mock_backend {
    pl_backend base;
    pl_mock_opts o;
    mock_req **slots;         /* id = (generation << 24) | slot */
    uint32_t *gen;
    uint32_t n_slots;
    uint32_t *free_slots;
    uint32_t n_free;
    mock_req *qhead, *qtail;
    pl_mock_counts counts;
    int fail_next;
    pl_mock_dfa_cache dfa_cache;  /* constraints answered so far */
} mock_backend;

static void mock_tick(evutil_socket_t fd, short what, void *arg);

static uint64_t mock_rand(uint64_t *s)
{
    /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t mock_hash(const char *s, uint64_t h)
{
    for (; s && *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001B3ull;
    return h;
}

static int mock_count_words(const char *s)
{
    int n = 0, in = 0;
    for (; s && *s; s++) {
        int sp = (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r');
        if (!sp && !in)
            n++;
        in = !sp;
    }
    return n;
}

/* ---- id slots: O(1) lookup that stays safe after a request is freed ---- */

static int mock_slot_alloc(mock_backend *mb, mock_req *r)
{
    if (mb->n_free == 0) {
        uint32_t n = mb->n_slots ? mb->n_slots * 2 : 64;
        if (n >= (1u << 24))
            return -1;
        mock_req **slots = realloc(mb->slots, n * sizeof *mb->slots);
        if (slots)
            mb->slots = slots;
        uint32_t *gen = slots ? realloc(mb->gen, n * sizeof *mb->gen) : NULL;
        if (gen)
            mb->gen = gen;
        uint32_t *fs = gen ? realloc(mb->free_slots, n * sizeof *mb->free_slots) : NULL;
        if (!fs)
            return -1;               /* the arrays grown so far stay valid */
        mb->free_slots = fs;
        for (uint32_t i = mb->n_slots; i < n; i++) {
            mb->slots[i] = NULL;
            mb->gen[i] = 0;
            mb->free_slots[mb->n_free++] = n - 1 - (i - mb->n_slots);
        }
        mb->n_slots = n;
    }
    uint32_t s = mb->free_slots[--mb->n_free];
    mb->slots[s] = r;
    mb->gen[s]++;
    r->id = ((uint64_t)mb->gen[s] << 24) | s;
    return 0;
}

static mock_req *mock_lookup(mock_backend *mb, uint64_t id)
{
    uint32_t s = (uint32_t)(id & 0xFFFFFF);
    if (s >= mb->n_slots || mb->gen[s] != (uint32_t)(id >> 24))
        return NULL;
    return mb->slots[s];
}

static void mock_req_free(mock_req *r)
{
    mock_backend *mb = r->mb;
    uint32_t s = (uint32_t)(r->id & 0xFFFFFF);
    mb->slots[s] = NULL;
    mb->gen[s]++;
    mb->free_slots[mb->n_free++] = s;
    if (r->running)
        mb->counts.active--;
    if (r->paused)
        mb->counts.paused--;
    if (r->timer)
        event_free(r->timer);
    pl_sampling_free(&r->sp);
    pl_mock_prompt_free(r->prompt);
    free(r->echo);
    free(r->text);
    free(r);
}

/* ---- the FIFO of requests waiting for capacity ---- */

static void mock_enqueue(mock_backend *mb, mock_req *r)
{
    if (mb->qtail)
        mb->qtail->qnext = r;
    else
        mb->qhead = r;
    mb->qtail = r;
    mb->counts.queued++;
    if (mb->counts.queued > mb->counts.queued_peak)
        mb->counts.queued_peak = mb->counts.queued;
}

static void mock_schedule(mock_req *r)
{
    struct timeval tv = {r->mb->o.token_delay_ms / 1000,
                         (r->mb->o.token_delay_ms % 1000) * 1000};
    if (!r->paused)
        evtimer_add(r->timer, &tv);
}

static void mock_start_queued(mock_backend *mb)
{
    while (mb->qhead && mb->counts.active < mb->o.capacity) {
        mock_req *r = mb->qhead;
        mb->qhead = r->qnext;
        if (!mb->qhead)
            mb->qtail = NULL;
        mb->counts.queued--;
        r->running = 1;
        mb->counts.active++;
        mock_schedule(r);
    }
}

static void mock_unqueue(mock_backend *mb, mock_req *r)
{
    mock_req **pp = &mb->qhead, *prev = NULL;
    for (; *pp; prev = *pp, pp = &(*pp)->qnext) {
        if (*pp == r) {
            *pp = r->qnext;
            if (mb->qtail == r)
                mb->qtail = prev;
            mb->counts.queued--;
            return;
        }
    }
}

/* ---- token production ---- */

/* Echo mode: whether every word of the prompt has been replayed. */
static bool mock_echo_done(const mock_req *r)
{
    const char *p = r->echo + r->echo_pos;
    return !p[strspn(p, " \n\t\r")];
}

static int mock_next_word(mock_req *r, char *out, size_t cap)
{
    const char *w;
    size_t wl;
    if (r->echo) {
        const char *p = r->echo + r->echo_pos;
        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
            p++;
        if (!*p)
            return -1;
        w = p;
        wl = strcspn(p, " \n\t\r");
        r->echo_pos = (size_t)(p + wl - r->echo);
    } else {
        w = mock_words[mock_rand(&r->rng) % MOCK_NWORDS];
        wl = strlen(w);
    }
    if (wl + 2 > cap)
        wl = cap - 2;
    size_t n = 0;
    if (r->produced > 0)
        out[n++] = ' ';
    memcpy(out + n, w, wl);
    out[n + wl] = '\0';
    return (int)(n + wl);
}

/* -1 on out of memory. */
static int mock_text_append(mock_req *r, const char *s, size_t n)
{
    if (r->text_len + n + 1 > r->text_cap) {
        size_t cap = (r->text_len + n + 1) * 2;
        char *t = realloc(r->text, cap);
        if (!t)
            return -1;
        r->text = t;
        r->text_cap = cap;
    }
    memcpy(r->text + r->text_len, s, n);
    r->text_len += n;
    return 0;
}

/* End r (freed) with f; err for PL_FINISH_ERROR. */
static void mock_finish_err(mock_req *r, pl_finish f, const pl_err *err)
{
    mock_backend *mb = r->mb;
    pl_result res = {.finish = f, .prompt_tokens = r->prompt_tokens,
                     .completion_tokens = r->produced, .error = err,
                     .stop_index = r->stop_index};
    pl_sink sink = r->sink;
    mb->counts.completed++;
    mock_req_free(r);
    mock_start_queued(mb);
    sink.on_done(sink.ud, &res);
}

static void mock_finish(mock_req *r, pl_finish f)
{
    mock_finish_err(r, f, NULL);
}

/* Deliver a delta; returns 0, or -1 when the sink aborted the request. */
static int mock_deliver(mock_req *r, const pl_delta *d)
{
    mock_backend *mb = r->mb;
    uint64_t id = r->id;
    r->sink.on_delta(r->sink.ud, d);
    return mock_lookup(mb, id) == r ? 0 : -1;
}

/* Emit what may be emitted; returns 1 if a stop string ended the request,
 * -1 if the sink aborted it (r is gone). */
/* Deterministic logprobs for the token just produced: the token's own
 * log-probability comes from its hash (in [-2.5, -0.05]); the alternatives
 * are the chosen token first, then vocabulary words 0.75 nats apart, so
 * the list is sorted and the chosen token is the most likely. */
static const pl_token_logprob *mock_logprobs(mock_req *r, int32_t tok)
{
    if (!r->sp.logprobs)
        return NULL;
    float lp = -0.05f - (float)(tok % 100) * 0.0245f;
    r->lp = (pl_token_logprob){.token = r->word, .token_len = strlen(r->word), .logprob = lp,
                               .n_top = r->sp.top_logprobs, .top = r->top};
    for (int k = 0; k < r->sp.top_logprobs && k < PL_MAX_TOP_LOGPROBS; k++) {
        const char *w = k == 0 ? r->word : mock_words[(tok + k) % MOCK_NWORDS];
        r->top[k] = (pl_top_logprob){.token = w, .token_len = strlen(w),
                                     .logprob = lp - 0.75f * (float)k};
    }
    return &r->lp;
}

static int mock_emit(mock_req *r, int32_t tok)
{
    int which;
    size_t n = pl_stopstr_scan_at(r->text, r->text_len, r->sp.stop, r->sp.n_stop, &which);
    bool stopped = which >= 0;
    if (stopped)
        r->stop_index = which + 1;
    if (n > 0 || tok >= 0) {
        pl_delta d = {.text = r->text, .len = n, .tokens = &tok, .n_tokens = tok >= 0,
                      .logprobs = tok >= 0 ? mock_logprobs(r, tok) : NULL};
        if (mock_deliver(r, &d) < 0)
            return -1;
    }
    if (stopped)
        return 1;
    memmove(r->text, r->text + n, r->text_len - n);
    r->text_len -= n;
    return 0;
}

/* Produce one token; returns 1 when the request finished or was aborted
 * (r is freed). */
static int mock_step(mock_req *r)
{
    char word[128];
    int wl = r->produced < r->limit ? mock_next_word(r, word, sizeof word) : -1;
    if (wl < 0) {
        /* Echo mode stops when the prompt is replayed; cut short by
         * max_tokens it is a "length" finish like any other. The natural
         * stop of random words is the model's end-of-sequence: a token of
         * its own, counted and given logprobs as the engine gives its EOS
         * (echoed and forced text end as a grammar's final state does). */
        bool stop = !r->score_only && (r->natural_stop || (r->echo && mock_echo_done(r)));
        bool eos = stop && r->natural_stop && !r->echo;
        int32_t tok = PL_MOCK_EOS;
        if (eos) {
            r->word[0] = '\0';
            r->produced++;
        }
        /* Flush held-back text: the stop string never completed. */
        if (r->text_len || eos) {
            pl_delta d = {.text = r->text ? r->text : "", .len = r->text_len, .tokens = &tok,
                          .n_tokens = eos, .logprobs = eos ? mock_logprobs(r, tok) : NULL};
            if (mock_deliver(r, &d) < 0)
                return 1;
        }
        mock_finish(r, stop ? PL_FINISH_STOP : PL_FINISH_LENGTH);
        return 1;
    }
    int32_t tok = (int32_t)(mock_hash(word, 1469598103934665603ull) & 0x7FFF);
    memcpy(r->word, word, (size_t)wl + 1);
    r->produced++;
    if (mock_text_append(r, word, (size_t)wl) < 0) {
        pl_err err;
        pl_err_set(&err, 500, "server_error", NULL, NULL, "out of memory producing the reply");
        mock_finish_err(r, PL_FINISH_ERROR, &err);
        return 1;
    }
    int rc = mock_emit(r, tok);
    if (rc > 0)
        mock_finish(r, PL_FINISH_STOP);
    return rc != 0;
}

static void mock_tick(evutil_socket_t fd, short what, void *arg)
{
    mock_req *r = arg;
    mock_backend *mb = r->mb;
    uint64_t id = r->id;
    int burst = mb->o.token_delay_ms > 0 ? 1 : MOCK_BURST;
    if (r->prompt) {             /* echo: the prompt comes first */
        pl_mock_prompt *p = r->prompt;
        r->prompt = NULL;
        int rc = mock_deliver(r, &p->delta);
        pl_mock_prompt_free(p);
        if (rc < 0 || mock_lookup(mb, id) != r || r->paused)
            return;
    }
    for (int i = 0; i < burst; i++) {
        if (mock_step(r))
            return;
        /* The sink may have aborted or paused the request. */
        if (mock_lookup(mb, id) != r || r->paused)
            return;
    }
    mock_schedule(r);
}

/* The engine's contract for client token ids: a prompt of ids and
 * logit_bias name ids of the vocabulary. */
static int mock_check_ids(const pl_gen_request *req, pl_err *err)
{
    if (req->prompt_tokens && pl_backend_check_ids(req->prompt_tokens, req->n_prompt_tokens,
                                                   PL_MOCK_VOCAB, "prompt", err) < 0)
        return -1;
    for (int i = 0; i < req->sampling.n_logit_bias; i++)
        if (pl_backend_check_ids(&req->sampling.logit_bias[i].token, 1, PL_MOCK_VOCAB,
                                 "logit_bias", err) < 0)
            return -1;
    return 0;
}

static int mock_submit(pl_backend *b, const pl_gen_request *req, pl_sink sink,
                       uint64_t *id, pl_err *err)
{
    mock_backend *mb = (mock_backend *)b;
    if (mb->fail_next > 0) {
        mb->fail_next--;
        return pl_err_set(err, 503, "server_error", NULL, "mock_failure",
                          "mock backend: scripted failure");
    }
    if (mock_check_ids(req, err) < 0)
        return -1;
    mock_req *r = calloc(1, sizeof *r);
    if (!r || pl_sampling_copy(&r->sp, &req->sampling) < 0 || mock_slot_alloc(mb, r) < 0) {
        free(r);
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    r->mb = mb;
    r->sink = sink;
    uint64_t h = mock_hash(req->prompt, mb->o.seed * 0x9E3779B97F4A7C15ull + 1);
    const char *last_user = req->prompt;
    for (int i = 0; i < req->n_messages; i++) {
        h = mock_hash(req->messages[i].role, h);
        h = mock_hash(req->messages[i].content, h);
        r->prompt_tokens += mock_count_words(req->messages[i].content) + 3;
        if (!strcmp(req->messages[i].role, "user"))
            last_user = req->messages[i].content;
    }
    r->prompt_tokens += mock_count_words(req->prompt) + req->n_prompt_tokens;
    /* As the engine: a prompt that fills the context is refused, and so is
     * an API request whose max_tokens does not fit beside it; otherwise the
     * completion stops where the context ends (finish "length"). */
    int room = mb->o.max_model_len - r->prompt_tokens;
    int n_check = r->prompt_tokens > 0 ? r->prompt_tokens : 1;   /* an empty prompt is fine */
    if (pl_backend_check_length(req, n_check, mb->o.max_model_len, err) < 0) {
        mock_req_free(r);
        return -1;
    }
    r->rng = req->sampling.has_seed ? req->sampling.seed ^ h : h;
    char *forced = pl_mock_constrained_text(&mb->dfa_cache, &req->sampling, mb->o.json_ws,
                                            mock_rand, &r->rng, err);
    if (forced == (char *)-1) {
        mock_req_free(r);
        return -1;
    }
    if (forced)
        r->echo = forced;
    else if (mb->o.echo)
        r->echo = strdup(last_user ? last_user : "");
    if (req->echo && !(r->prompt = pl_mock_prompt_new(req))) {
        mock_req_free(r);
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    r->score_only = req->echo && req->score_only;
    r->limit = r->score_only ? 0 : req->sampling.max_tokens;
    if (r->limit > room)
        r->limit = room;             /* finishes with "length" */
    if (forced && r->limit <= 0 && !r->score_only) {
        r->limit = room;          /* the forced text ends it, or the context */
    } else if (r->limit <= 0 && !r->score_only) {
        r->limit = 8 + (int)(mock_rand(&r->rng) % 24);
        r->natural_stop = 1;
        if (r->limit > room) {           /* the context ends first */
            r->limit = room;
            r->natural_stop = 0;
        }
    }
    r->timer = evtimer_new(b->base, mock_tick, r);
    mb->counts.submitted++;
    *id = r->id;
    if (mb->counts.active < mb->o.capacity) {
        r->running = 1;
        mb->counts.active++;
        mock_schedule(r);
    } else {
        mock_enqueue(mb, r);
    }
    return 0;
}

static void mock_abort(pl_backend *b, uint64_t id)
{
    mock_backend *mb = (mock_backend *)b;
    mock_req *r = mock_lookup(mb, id);
    if (!r)
        return;
    if (!r->running)
        mock_unqueue(mb, r);
    mb->counts.aborted++;
    mock_req_free(r);
    mock_start_queued(mb);
}

static void mock_set_paused(pl_backend *b, uint64_t id, bool paused)
{
    mock_req *r = mock_lookup((mock_backend *)b, id);
    if (!r || r->paused == (int)paused)
        return;
    r->paused = paused;
    ((mock_backend *)b)->counts.paused += paused ? 1 : -1;
    if (paused)
        evtimer_del(r->timer);
    else if (r->running)
        mock_schedule(r);
}

static int mock_capacity(pl_backend *b)
{
    return ((mock_backend *)b)->o.capacity;
}

static json_t *mock_stats(pl_backend *b)
{
    mock_backend *mb = (mock_backend *)b;
    return json_pack("{s:s, s:i, s:i, s:i, s:i, s:I, s:I, s:I}", "backend", "mock",
                     "capacity", mb->o.capacity, "in_flight", mb->counts.active,
                     "waiting", mb->counts.queued, "paused", mb->counts.paused, "submitted",
                     (json_int_t)mb->counts.submitted, "completed",
                     (json_int_t)mb->counts.completed, "aborted",
                     (json_int_t)mb->counts.aborted);
}

/* Mock tokens: one per whitespace-separated word, ids from a hash. */
static int mock_tokenize(pl_backend *b, const pl_gen_request *req, bool add_special,
                         int32_t **ids, int *n, pl_err *err)
{
    size_t cap = 16, len = 0;
    int32_t *out = malloc(cap * sizeof *out);
    if (!out)
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    for (int m = -1; m < req->n_messages; m++) {
        const char *s = m < 0 ? req->prompt : req->messages[m].content;
        while (s && *s) {
            s += strspn(s, " \n\t\r");
            size_t wl = strcspn(s, " \n\t\r");
            if (!wl)
                break;
            if (len == cap) {
                int32_t *o = realloc(out, (cap *= 2) * sizeof *out);
                if (!o) {
                    free(out);
                    return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
                }
                out = o;
            }
            char w[128];
            snprintf(w, sizeof w, "%.*s", (int)(wl < 127 ? wl : 127), s);
            out[len++] = (int32_t)(mock_hash(w, 1469598103934665603ull) & 0x7FFF);
            s += wl;
        }
    }
    *ids = out;
    *n = (int)len;
    return 0;
}

static int mock_detokenize(pl_backend *b, const int32_t *ids, int n, char **text,
                           pl_err *err)
{
    if (pl_backend_check_ids(ids, n, PL_MOCK_VOCAB, "tokens", err) < 0)
        return -1;
    size_t cap = (size_t)n * 8 + 1, len = 0;
    char *out = malloc(cap);
    if (!out)
        return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        char w[16];
        int k = snprintf(w, sizeof w, "%s<%d>", i ? " " : "", ids[i]);
        if (len + (size_t)k + 1 > cap) {
            char *o = realloc(out, cap = (len + (size_t)k + 1) * 2);
            if (!o) {
                free(out);
                return pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
            }
            out = o;
        }
        memcpy(out + len, w, (size_t)k + 1);
        len += (size_t)k;
    }
    *text = out;
    return 0;
}

static int mock_max_model_len(pl_backend *b)
{
    return ((mock_backend *)b)->o.max_model_len;
}

/* The mock's "tokenizer" hashes whitespace-separated words: no special
 * tokens, no chat template of its own. */
static json_t *mock_tokenizer_info(pl_backend *b, pl_err *err)
{
    json_t *j = json_pack("{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:n, s:i}", "tokenizer_class",
                          "mock", "bos_token", "eos_token", "pad_token", "unk_token",
                          "add_bos_token", 0, "add_eos_token", 0, "chat_template",
                          "model_max_length", ((mock_backend *)b)->o.max_model_len);
    if (!j)
        pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    return j;
}

static int mock_vocab_size(pl_backend *b)
{
    return PL_MOCK_VOCAB;
}

static void mock_free(pl_backend *b)
{
    mock_backend *mb = (mock_backend *)b;
    for (uint32_t i = 0; i < mb->n_slots; i++)
        if (mb->slots[i])
            mock_req_free(mb->slots[i]);
    free(mb->slots);
    free(mb->gen);
    free(mb->free_slots);
    pl_mock_dfa_cache_clear(&mb->dfa_cache);
    free(mb->base.model);
    free(mb);
}

static const struct pl_reasoning_format *mock_reasoning_format(pl_backend *b)
{
    return ((mock_backend *)b)->o.reasoning;
}

static const struct pl_tool_format *mock_tool_format(pl_backend *b)
{
    return ((mock_backend *)b)->o.tools;
}

static const pl_backend_ops mock_ops = {
    .kind = "mock",
    .submit = mock_submit,
    .abort = mock_abort,
    .set_paused = mock_set_paused,
    .capacity = mock_capacity,
    .stats = mock_stats,
    .tokenize = mock_tokenize,
    .detokenize = mock_detokenize,
    .max_model_len = mock_max_model_len,
    .tokenizer_info = mock_tokenizer_info,
    .free = mock_free,
    .tool_format = mock_tool_format,
    .reasoning_format = mock_reasoning_format,
    .vocab_size = mock_vocab_size,
};

pl_backend *pl_mock_new(struct event_base *base, const pl_mock_opts *o)
{
    mock_backend *mb = calloc(1, sizeof *mb);
    if (!mb)
        return NULL;
    mb->base.ops = &mock_ops;
    mb->base.base = base;
    mb->base.model = strdup(o->model ? o->model : "mock");
    mb->o = *o;
    mb->o.model = mb->base.model;
    mb->base.json_ws = o->json_ws;
    if (mb->o.capacity < 1)
        mb->o.capacity = 1;
    if (mb->o.max_model_len <= 0)
        mb->o.max_model_len = 1 << 20;  /* --max-model-len sets a real one */
    return &mb->base;
}

pl_mock_counts pl_mock_get_counts(pl_backend *b)
{
    return ((mock_backend *)b)->counts;
}

void pl_mock_fail_next(pl_backend *b, int n)
{
    ((mock_backend *)b)->fail_next = n;
}
