/* engine_text.c - what one sampled token does to its request: the
 * end-of-generation and length checks, the text it adds, stop strings,
 * and the delta that carries it to the sink. Runs on the engine thread
 * (asserted in the functions engine_text.h declares).
 *
 * Each generated token gives one delta with its id (and its logprobs when
 * asked), an end-of-generation one too: it adds no text, but clients that
 * score replies (lm-evaluation-harness slices echo + logprobs by position)
 * count it as usage does. Text is held back while it could still be the
 * start of a stop string or ends inside a UTF-8 sequence, so a delta never
 * shows either; such a delta has the id and empty text, and the held text
 * comes with a later delta (at the latest the last one). Out of memory on this
 * path ends the request with a 500 (its DONE was reserved when it
 * arrived): never a reply with text silently missing.
 */
#include "backends/engine/engine_text.h"

#include <stdlib.h>
#include <string.h>

#include "backends/engine/engine_chan.h"
#include "backends/engine/engine_req.h"
#include "backends/stopstr.h"

static int realloc_into_(void **p, size_t bytes)
{
    void *np = realloc(*p, bytes);
    if (!np)
        return -1;
    *p = np;
    return 0;
}

/* Room for `need` tokens (and their logprobs) in a recycled message. */
static int reserve_tokens_(eng_msg *m, int need)
{
    if (need <= m->tok_cap)
        return 0;
    int nc = m->tok_cap ? m->tok_cap * 2 : 4;
    while (nc < need)
        nc *= 2;
    size_t n = (size_t)nc, top = n * PL_MAX_TOP_LOGPROBS;
    if (realloc_into_((void **)&m->tokens, n * sizeof *m->tokens) < 0 ||
        realloc_into_((void **)&m->lp, n * sizeof *m->lp) < 0 ||
        realloc_into_((void **)&m->top_ids, top * sizeof *m->top_ids) < 0 ||
        realloc_into_((void **)&m->top_lp, top * sizeof *m->top_lp) < 0)
        return -1;
    m->tok_cap = nc;
    return 0;
}

static int pending_append_(eng_req *r, const char *b, size_t n)
{
    if (r->pending_len + n > r->pending_cap) {
        size_t nc = r->pending_cap ? r->pending_cap * 2 : 256;
        while (nc < r->pending_len + n)
            nc *= 2;
        char *np = realloc(r->pending, nc);
        if (!np)
            return -1;
        r->pending = np;
        r->pending_cap = nc;
    }
    memcpy(r->pending + r->pending_len, b, n);
    r->pending_len += n;
    return 0;
}

static int add_token_(pl_engine *e, eng_req *r, eng_msg *m, int32_t tok,
                      const pl_step_output *out, int k)
{
    (void)e;
    if (reserve_tokens_(m, m->n + 1) < 0)
        return -1;
    if (r->sp.logprobs) {
        int n_top = r->sp.top_logprobs;
        m->has_logprobs = true;
        m->n_top = n_top;
        m->lp[m->n] = out->logprob ? out->logprob[k] : 0.0f;
        for (int j = 0; j < n_top; j++) {
            size_t src = (size_t)k * PL_MAX_TOP_LOGPROBS + (size_t)j;
            size_t dst = (size_t)m->n * (size_t)n_top + (size_t)j;
            m->top_ids[dst] = out->top_ids ? out->top_ids[src] : tok;
            m->top_lp[dst] = out->top_logprobs ? out->top_logprobs[src] : 0.0f;
        }
    }
    m->tokens[m->n++] = tok;
    return 0;
}

/* Move `n` bytes of pending text into the open delta m. */
static int take_text_(eng_req *r, eng_msg *m, size_t n)
{
    if (m->len + n + 1 > m->text_cap) {
        size_t nc = m->text_cap ? m->text_cap : 64;
        while (nc < m->len + n + 1)
            nc *= 2;
        char *np = realloc(m->text, nc);
        if (!np)
            return -1;
        m->text = np;
        m->text_cap = nc;
    }
    if (n) {
        memcpy(m->text + m->len, r->pending, n);
        memmove(r->pending, r->pending + n, r->pending_len - n);
        r->pending_len -= n;
    }
    m->len += n;
    m->text[m->len] = '\0';
    return 0;
}

/* Append tok's bytes and release what is safe. Returns 1 when a stop
 * string matched (the text after it is dropped), 0, or -1 on out of
 * memory. */
static int text_step_(pl_engine *e, eng_req *r, eng_msg *m, int32_t tok, bool final)
{
    size_t len = 0;
    const char *b = e->text.token_bytes(e->text.ud, tok, &len);
    if (b && len && pending_append_(r, b, len) < 0)
        return -1;
    int which;
    size_t emit = pl_stopstr_scan_at(r->pending, r->pending_len, r->sp.stop,
                                     r->sp.n_stop, &which);
    bool stopped = which >= 0;
    if (stopped) {
        r->stop_index = which + 1;
        r->pending_len = emit;
        final = true;
    }
    if (!final)
        emit = pl_utf8_complete_len(r->pending, emit);
    else
        emit = r->pending_len;
    if (take_text_(r, m, emit) < 0)
        return -1;
    return stopped;
}

/* A delta for r, queued by delta_end_ once it is whole. */
static eng_msg *new_delta_(pl_engine *e, eng_req *r)
{
    eng_msg *m = pl_engine_msg_get_(e);
    if (!m)
        return NULL;
    m->type = ENG_MSG_DELTA;
    m->id = r->id;
    return m;
}

/* Queue m when it was built (rc >= 0); else it goes back to the cache, so
 * that no half-built delta reaches a sink. Returns rc. */
static int delta_end_(pl_engine *e, eng_msg *m, int rc)
{
    if (rc >= 0) {
        pl_engine_queue_push_(&e->pending_out, m);
    } else {
        m->next = e->local_free;
        e->local_free = m;
    }
    return rc;
}

void pl_engine_fail_oom_(pl_engine *e, eng_req *r, pl_batch_seq *s)
{
    PL_ASSERT_ON_THREAD(&e->engine_role);
    pl_err err;
    pl_err_set(&err, 500, "server_error", NULL, NULL,
               "out of memory producing the reply");
    pl_engine_emit_done_(e, r, PL_FINISH_ERROR, &err);
    pl_batch_finish(e->batch, s);
}

/* The delta of tok: its id (and logprobs) and the text it releases.
 * Returns 1 when a stop string matched, 0, -1 on out of memory. */
static int token_delta_(pl_engine *e, eng_req *r, int32_t tok, bool eog, bool final,
                        const pl_step_output *out, int k)
{
    eng_msg *m = new_delta_(e, r);
    if (!m)
        return -1;
    if (add_token_(e, r, m, tok, out, k) < 0)
        return delta_end_(e, m, -1);
    if (eog)                                     /* flush what was held */
        return delta_end_(e, m, take_text_(r, m, r->pending_len));
    return delta_end_(e, m, text_step_(e, r, m, tok, final));
}

void pl_engine_on_token_(pl_engine *e, pl_batch_seq *s, int32_t tok,
                         const pl_step_output *out, int k)
{
    PL_ASSERT_ON_THREAD(&e->engine_role);
    eng_req *r = s->ud;
    if (r->t_first == 0)
        r->t_first = pl_engine_now_ms_();
    bool eog = !r->sp.ignore_eos && e->text.is_eog(e->text.ud, tok);
    bool length = pl_batch_seq_generated(s) >= s->max_new;
    pl_finish f = eog ? PL_FINISH_STOP : length ? PL_FINISH_LENGTH
                                                : PL_FINISH_NONE;
    if (r->fsm && !eog) {
        /* A state where only the end is allowed ends it now; a refused id
         * (never sampled: a broken invariant) ends it too. */
        int32_t st = pl_token_fsm_next(r->fsm, s->sampling.fsm_state, tok);
        s->sampling.fsm_state = st;
        if (st < 0 || r->fsm->final[st])
            f = PL_FINISH_STOP;
    }
    int rc = token_delta_(e, r, tok, eog, f != PL_FINISH_NONE, out, k);
    if (rc < 0) {
        pl_engine_fail_oom_(e, r, s);
        return;
    }
    if (rc == 1)
        f = PL_FINISH_STOP;
    if (f == PL_FINISH_NONE)
        return;
    pl_engine_emit_done_(e, r, f, NULL);
    pl_batch_finish(e->batch, s);
}

void pl_engine_prompt_rows_(pl_engine *e, const pl_batch_step *st,
                            const pl_step_output *out)
{
    PL_ASSERT_ON_THREAD(&e->engine_role);
    const pl_step_input *in = &st->in;
    for (int k = 0; k < in->n_seqs; k++) {
        pl_batch_seq *s = st->seqs[k];
        eng_req *r = s->ud;
        if (!r || !r->plp || s->state == PL_SEQ_FINISHED)
            continue;
        int end = in->seq_first_row[k] + in->seq_n_rows[k];
        for (int row = in->seq_first_row[k]; row < end; row++) {
            int pos = in->positions[row] + 1;    /* the prompt id it scores */
            if (in->row_next[row] < 0 || pos >= r->n_prompt)
                continue;
            r->plp[pos] = out->row_lp[row];
            for (int j = 0; j < r->n_top_prompt; j++) {
                size_t src = (size_t)row * PL_MAX_TOP_LOGPROBS + (size_t)j;
                size_t dst = (size_t)pos * (size_t)r->n_top_prompt + (size_t)j;
                r->ptop_ids[dst] = out->row_top_ids[src];
                r->ptop_lp[dst] = out->row_top_lp[src];
            }
        }
    }
}

/* The echoed prompt's text, ids and logprobs into m. -1 on out of memory. */
static int prompt_delta_(pl_engine *e, eng_req *r, eng_msg *m, const pl_batch_seq *s)
{
    if (reserve_tokens_(m, s->n_prompt) < 0 || take_text_(r, m, 0) < 0)
        return -1;
    m->prompt = true;
    for (int i = 0; i < s->n_prompt; i++) {
        size_t len = 0;
        const char *b = e->text.token_bytes(e->text.ud, s->tokens[i], &len);
        if (b && len && (pending_append_(r, b, len) < 0 || take_text_(r, m, len) < 0))
            return -1;
        m->tokens[m->n++] = s->tokens[i];
    }
    if (!r->plp)
        return 0;
    int k = r->n_top_prompt;
    m->has_logprobs = true;
    m->n_top = k;
    memcpy(m->lp, r->plp, sizeof *m->lp * (size_t)s->n_prompt);
    memcpy(m->top_ids, r->ptop_ids, sizeof *m->top_ids * (size_t)s->n_prompt * (size_t)k);
    memcpy(m->top_lp, r->ptop_lp, sizeof *m->top_lp * (size_t)s->n_prompt * (size_t)k);
    return 0;
}

int pl_engine_emit_prompt_(pl_engine *e, eng_req *r, const pl_batch_seq *s)
{
    PL_ASSERT_ON_THREAD(&e->engine_role);
    r->echo_sent = true;
    eng_msg *m = new_delta_(e, r);
    return m ? delta_end_(e, m, prompt_delta_(e, r, m, s)) : -1;
}
