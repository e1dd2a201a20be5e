/* remote_body.c - the body sent upstream for one backend request.
 *
 * A request from the OpenAI API is passed on as the client wrote it
 * (sampling parameters, logprobs, stop, seed, extension fields such as
 * vLLM's guided decoding or chat_template_kwargs), with the model renamed
 * and streaming forced on. n is fanned out by the API (one backend request
 * per choice, each with its own seed), so each upstream request asks for 1.
 * A job's request is built from its messages and sampling parameters. A
 * constraint goes in the fields the upstream's kind enforces
 * (remote_constrain.c).
 */
#include <math.h>
#include <string.h>

#include "backends/remote/remote_internal.h"
#include "src/base/json_dump.h"

static void put_common(json_t *o, const char *model)
{
    json_object_set_new(o, "model", json_string(model));
    json_object_set_new(o, "stream", json_true());
    json_object_set_new(o, "stream_options", json_pack("{s:b}", "include_usage", 1));
}

static json_t *messages_json(const pl_gen_request *req)
{
    json_t *a = json_array();
    for (int i = 0; i < req->n_messages; i++)
        json_array_append_new(a, json_pack("{s:s, s:s}", "role", req->messages[i].role,
                                           "content", req->messages[i].content ? req->messages[i].content : ""));
    return a;
}

static json_t *prompt_json(const pl_gen_request *req)
{
    if (req->prompt)
        return json_string(req->prompt);
    json_t *a = json_array();
    for (int i = 0; i < req->n_prompt_tokens; i++)
        json_array_append_new(a, json_integer(req->prompt_tokens[i]));
    return a;
}

/* Parameters OpenAI itself rejects are only sent to engines that take them. */
static void put_sampling(json_t *o, const pl_sampling *s, pl_remote_kind kind)
{
    bool ext = kind != PL_REMOTE_OPENAI;
    json_object_set_new(o, "temperature", json_real(s->temperature));
    json_object_set_new(o, "top_p", json_real(s->top_p));
    if (s->max_tokens > 0)
        json_object_set_new(o, "max_tokens", json_integer(s->max_tokens));
    if (s->presence_penalty != 0)
        json_object_set_new(o, "presence_penalty", json_real(s->presence_penalty));
    if (s->frequency_penalty != 0)
        json_object_set_new(o, "frequency_penalty", json_real(s->frequency_penalty));
    if (ext && s->top_k > 0)
        json_object_set_new(o, "top_k", json_integer(s->top_k));
    if (ext && s->min_p > 0)
        json_object_set_new(o, "min_p", json_real(s->min_p));
    if (ext && fabs(s->repetition_penalty - 1.0) > 1e-9)
        json_object_set_new(o, "repetition_penalty", json_real(s->repetition_penalty));
    if (ext && s->ignore_eos)
        json_object_set_new(o, "ignore_eos", json_true());
    if (s->n_stop > 0) {
        json_t *a = json_array();
        for (int i = 0; i < s->n_stop; i++)
            json_array_append_new(a, json_string(s->stop[i]));
        json_object_set_new(o, "stop", a);
    }
    if (s->n_logit_bias > 0) {
        json_t *lb = json_object();
        for (int i = 0; i < s->n_logit_bias; i++) {
            char k[16];
            snprintf(k, sizeof k, "%d", (int)s->logit_bias[i].token);
            json_object_set_new(lb, k, json_real(s->logit_bias[i].bias));
        }
        json_object_set_new(o, "logit_bias", lb);
    }
}

static void put_logprobs(json_t *o, const pl_sampling *s, bool chat)
{
    if (!s->logprobs)
        return;
    if (chat) {
        json_object_set_new(o, "logprobs", json_true());
        if (s->top_logprobs > 0)
            json_object_set_new(o, "top_logprobs", json_integer(s->top_logprobs));
    } else {
        json_object_set_new(o, "logprobs", json_integer(s->top_logprobs));
    }
}

json_t *pl_remote_body_json(const pl_gen_request *req, const remote_target *t, pl_err *err)
{
    bool chat = req->messages != NULL;
    json_t *o;
    if (req->oai_body) {
        o = json_copy(req->oai_body);          /* shallow: values shared, keys ours */
        json_object_del(o, "n");
        json_object_del(o, "best_of");
        if (!chat)                              /* one prompt of a batch */
            json_object_set_new(o, "prompt", prompt_json(req));
    } else {
        o = json_object();
        if (chat)
            json_object_set_new(o, "messages", messages_json(req));
        else
            json_object_set_new(o, "prompt", prompt_json(req));
        put_sampling(o, &req->sampling, t->kind);
        put_logprobs(o, &req->sampling, chat);
    }
    if (!o) {
        pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    if (pl_remote_put_constraint(o, req, t, err) < 0) {
        json_decref(o);
        return NULL;
    }
    put_common(o, t->model);
    if (req->sampling.has_seed)
        json_object_set_new(o, "seed", json_integer((json_int_t)(req->sampling.seed & 0x7FFFFFFFFFFFFFFFull)));
    return o;
}

char *pl_remote_body(const pl_gen_request *req, remote_backend *rb, pl_err *err)
{
    if (pl_remote_check_constraint(rb, req->sampling.constraint, req->messages != NULL,
                                   req->oai_body, NULL, err) < 0)
        return NULL;
    remote_target t = pl_remote_target_of(rb);
    json_t *o = pl_remote_body_json(req, &t, err);
    char *s = o ? pl_json_dumps(o, NULL) : NULL;
    if (o && !s)
        pl_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    json_decref(o);
    return s;
}
