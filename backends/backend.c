/* backend.c - shared helpers of the backend interface: errors, sampling
 * parameter defaults and copies, submit and abort through the request
 * metrics (req_metrics.h), the admission point of a backend. */
#include "backends/backend.h"
#include "backends/req_metrics.h"
#include "backends/text/reasoning_format.h"
#include "backends/text/tool_format.h"
#include "schedulers/dispatch.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *pl_finish_name(pl_finish f)
{
    switch (f) {
    case PL_FINISH_STOP: return "stop";
    case PL_FINISH_LENGTH: return "length";
    case PL_FINISH_ABORT: return "abort";
    case PL_FINISH_ERROR: return "error";
    default: return NULL;
    }
}

int pl_err_set(pl_err *e, int status, const char *type, const char *param,
               const char *code, const char *fmt, ...)
{
    if (!e)
        return -1;
    e->status = status;
    e->retry_after_s = 0;
    snprintf(e->type, sizeof e->type, "%s", type ? type : "invalid_request_error");
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

const char *pl_constraint_name(pl_constraint_kind k)
{
    switch (k) {
    case PL_CONSTRAINT_JSON_OBJECT: return "json_object";
    case PL_CONSTRAINT_JSON_SCHEMA: return "json_schema";
    case PL_CONSTRAINT_REGEX: return "regex";
    case PL_CONSTRAINT_CHOICE: return "choice";
    default: return "none";
    }
}

int pl_backend_check_constraint(pl_backend *b, pl_constraint_kind k, pl_err *err)
{
    return b->ops->check_constraint ? b->ops->check_constraint(b, k, err) : 0;
}

const pl_reasoning_format *pl_backend_reasoning_format(pl_backend *b)
{
    return b->ops->reasoning_format ? b->ops->reasoning_format(b) : NULL;
}

const pl_tool_format *pl_backend_tool_format(pl_backend *b)
{
    const pl_tool_format *f = b->ops->tool_format ? b->ops->tool_format(b) : NULL;
    return f ? f : &pl_tool_generic;
}

int pl_backend_vocab_size(pl_backend *b)
{
    return b->ops->vocab_size ? b->ops->vocab_size(b) : 0;
}

int pl_backend_embed_info(pl_backend *b, pl_embed_info *out)
{
    return b->ops->embed_info ? b->ops->embed_info(b, out) : -1;
}

int pl_backend_check_ids(const int32_t *ids, int n, int n_vocab, const char *param,
                         pl_err *err)
{
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab)
            return pl_err_set(err, 400, "invalid_request_error", param, NULL,
                              "%s: token id %d is out of range [0, %d) for this model", param,
                              (int)ids[i], n_vocab);
    return 0;
}

void pl_sampling_defaults(pl_sampling *s)
{
    memset(s, 0, sizeof *s);
    s->temperature = 1.0;
    s->top_p = 1.0;
    s->repetition_penalty = 1.0;
}

void pl_sampling_apply_model_defaults(pl_sampling *s, const json_t *body,
                                      const pl_sampling_model_defaults *d)
{
    if (!d || !body)
        return;
    json_t *b = (json_t *)body;
    if ((d->set & PL_SAMPLING_SET_TEMPERATURE) && !json_object_get(b, "temperature"))
        s->temperature = d->temperature;
    if ((d->set & PL_SAMPLING_SET_TOP_P) && !json_object_get(b, "top_p"))
        s->top_p = d->top_p;
    if ((d->set & PL_SAMPLING_SET_TOP_K) && !json_object_get(b, "top_k"))
        s->top_k = d->top_k;
    if ((d->set & PL_SAMPLING_SET_MIN_P) && !json_object_get(b, "min_p"))
        s->min_p = d->min_p;
    if ((d->set & PL_SAMPLING_SET_REPETITION_PENALTY) &&
        !json_object_get(b, "repetition_penalty"))
        s->repetition_penalty = d->repetition_penalty;
    if ((d->set & PL_SAMPLING_SET_MAX_TOKENS) && !json_object_get(b, "max_tokens") &&
        !json_object_get(b, "max_completion_tokens"))
        s->max_tokens = d->max_tokens;
}

int pl_sampling_copy(pl_sampling *dst, const pl_sampling *src)
{
    *dst = *src;
    dst->logit_bias = NULL;
    dst->constraint_text = NULL;
    for (int i = 0; i < PL_MAX_STOP; i++)
        dst->stop[i] = NULL;
    for (int i = 0; i < src->n_stop; i++)
        if (!(dst->stop[i] = strdup(src->stop[i])))
            goto fail;
    if (src->n_logit_bias > 0) {
        size_t sz = (size_t)src->n_logit_bias * sizeof *src->logit_bias;
        if (!(dst->logit_bias = malloc(sz)))
            goto fail;
        memcpy(dst->logit_bias, src->logit_bias, sz);
    }
    if (src->constraint_text && !(dst->constraint_text = strdup(src->constraint_text)))
        goto fail;
    return 0;
fail:
    pl_sampling_free(dst);
    return -1;
}

void pl_sampling_free(pl_sampling *s)
{
    for (int i = 0; i < PL_MAX_STOP; i++) {
        free(s->stop[i]);
        s->stop[i] = NULL;
    }
    free(s->logit_bias);
    s->logit_bias = NULL;
    free(s->constraint_text);
    s->constraint_text = NULL;
    s->constraint = PL_CONSTRAINT_NONE;
    s->n_stop = 0;
    s->n_logit_bias = 0;
}

int pl_backend_check_length(const pl_gen_request *req, int n, int max_len, pl_err *err)
{
    if (n < 1 || n >= max_len)
        return pl_err_set(err, 400, "invalid_request_error",
                          req->messages ? "messages" : "prompt",
                          n < 1 ? NULL : "context_length_exceeded",
                          "prompt has %d tokens; this model takes 1 to %d", n, max_len - 1);
    long want = (long)n + req->sampling.max_tokens;
    if (req->max_tokens_must_fit && req->sampling.max_tokens > 0 && want > max_len)
        return pl_err_set(err, 400, "invalid_request_error", "max_tokens",
                          "context_length_exceeded",
                          "This model's maximum context length is %d tokens. However, you "
                          "requested %ld tokens (%d in the %s, %d in the completion). Please "
                          "reduce the length of the %s or max_tokens.", max_len, want, n,
                          req->messages ? "messages" : "prompt", req->sampling.max_tokens,
                          req->messages ? "messages" : "prompt");
    return 0;
}

int pl_backend_submit(pl_backend *b, const pl_gen_request *r, pl_sink s,
                      uint64_t *id, pl_err *e)
{
    pl_sink tracked;
    pl_req_track *t = pl_req_track_begin(pl_backend_metrics(b), s, &tracked);
    if (b->ops->submit(b, r, tracked, id, e) < 0) {
        pl_req_track_rejected(t);
        return -1;
    }
    pl_req_track_submitted(t, *id);
    return 0;
}

void pl_backend_abort(pl_backend *b, uint64_t id)
{
    pl_req_metrics_abort(b->metrics, id);
    b->ops->abort(b, id);
}

void pl_backend_free(pl_backend *b)
{
    if (!b)
        return;
    /* The backend may finish its requests while it frees itself: the
     * trackers only use the metrics block, freed after. */
    struct pl_req_metrics *m = b->metrics;
    b->ops->free(b);
    pl_req_metrics_free(m);
}

static int dispatch_capacity(void *ud)
{
    return pl_backend_capacity(ud);
}

static bool dispatch_kv(void *ud, pl_dispatch_kv *out)
{
    pl_backend *b = ud;
    return b->ops->kv && b->ops->kv(b, out);
}

struct pl_dispatch *pl_backend_dispatch_new(pl_backend *b, int reserve)
{
    pl_dispatch_opts o = {.capacity = pl_backend_capacity(b), .reserve = reserve,
                          .capacity_fn = dispatch_capacity, .capacity_ud = b,
                          .kv_fn = dispatch_kv, .kv_ud = b};
    pl_dispatch *d = pl_dispatch_new(&o);
    if (d)
        pl_dispatch_refresh(d);
    return d;
}

json_t *pl_backend_admission_json(struct pl_dispatch *d)
{
    pl_dispatch_refresh(d);
    pl_dispatch_counts c;
    pl_dispatch_counts_get(d, &c);
    int in = c.jobs_inflight + c.interactive_inflight;
    json_t *o = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i}", "rule", c.has_kv ? "kv" : "slots",
                          "capacity", c.capacity, "upper_bound", c.upper_bound,
                          "interactive_reserve", c.reserve, "in_flight", in,
                          "peak_in_flight", c.inflight_peak);
    if (!o || !c.has_kv)
        return o;
    long room = (long)c.kv.free - c.kv.reserved;
    json_t *kv = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:I}",
                           "block_size", c.kv.block_size, "blocks_total", c.kv.total,
                           "blocks_free", c.kv.free, "blocks_kept", c.kv.kept,
                           "blocks_reserved", c.kv.reserved,
                           "need_blocks", c.need_blocks,
                           "prompt_tokens_estimate", c.kv.prompt_tokens,
                           "reply_tokens_estimate", c.kv.reply_tokens, "fits",
                           (json_int_t)(room > 0 && c.need_blocks > 0 ? room / c.need_blocks : 0));
    if (!kv || json_object_update(o, kv) < 0) {
        json_decref(kv);
        json_decref(o);
        return NULL;
    }
    json_decref(kv);
    return o;
}
