/* remote_stream.c - an upstream's streamed reply: SSE events into deltas,
 * the finish reason and usage; error replies into OpenAI errors. */
#include <ctype.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#include "backends/remote/remote_req.h"

static json_t *first_choice(json_t *chunk)
{
    json_t *c = json_object_get(chunk, "choices");
    return json_is_array(c) && json_array_size(c) > 0 ? json_array_get(c, 0) : NULL;
}

static pl_finish finish_of(const char *s)
{
    if (!strcmp(s, "length"))
        return PL_FINISH_LENGTH;
    if (!strcmp(s, "abort"))
        return PL_FINISH_ABORT;
    return PL_FINISH_STOP;       /* stop, eos, tool_calls, content_filter, ... */
}

static bool grow_lp(remote_req *r, int n_lp, int n_top)
{
    if (n_lp > r->lp_cap) {
        void *p = realloc(r->lp, (size_t)n_lp * sizeof *r->lp);
        if (!p)
            return false;
        r->lp = p;
        r->lp_cap = n_lp;
    }
    if (n_top > r->top_cap) {
        void *p = realloc(r->top, (size_t)n_top * sizeof *r->top);
        if (!p)
            return false;
        r->top = p;
        r->top_cap = n_top;
    }
    return true;
}

static void set_tok(const char **s, size_t *len, json_t *v)
{
    *s = json_is_string(v) ? json_string_value(v) : "";
    *len = json_is_string(v) ? json_string_length(v) : 0;
}

/* Chat logprobs: {"content":[{token, logprob, top_logprobs:[{token, logprob}]}]}. */
static int chat_logprobs(remote_req *r, json_t *lp)
{
    json_t *content = json_object_get(lp, "content");
    if (!json_is_array(content))
        return 0;
    int n = (int)json_array_size(content), ntop = 0;
    for (int i = 0; i < n; i++)
        ntop += (int)json_array_size(json_object_get(json_array_get(content, i), "top_logprobs"));
    if (!grow_lp(r, n, ntop))
        return 0;
    pl_top_logprob *top = r->top;
    for (int i = 0; i < n; i++) {
        json_t *e = json_array_get(content, i), *tl = json_object_get(e, "top_logprobs");
        pl_token_logprob *t = &r->lp[i];
        set_tok(&t->token, &t->token_len, json_object_get(e, "token"));
        t->logprob = (float)json_number_value(json_object_get(e, "logprob"));
        t->top = top;
        t->n_top = (int)json_array_size(tl);
        for (int k = 0; k < t->n_top; k++, top++) {
            json_t *a = json_array_get(tl, (size_t)k);
            set_tok(&top->token, &top->token_len, json_object_get(a, "token"));
            top->logprob = (float)json_number_value(json_object_get(a, "logprob"));
        }
    }
    return n;
}

/* Completions logprobs: parallel arrays, top_logprobs as {token: logprob}. */
static int completion_logprobs(remote_req *r, json_t *lp)
{
    json_t *toks = json_object_get(lp, "tokens"), *tlp = json_object_get(lp, "token_logprobs");
    json_t *tops = json_object_get(lp, "top_logprobs");
    if (!json_is_array(toks))
        return 0;
    int n = (int)json_array_size(toks), ntop = 0;
    for (int i = 0; i < n; i++)
        ntop += (int)json_object_size(json_array_get(tops, (size_t)i));
    if (!grow_lp(r, n, ntop))
        return 0;
    pl_top_logprob *top = r->top;
    for (int i = 0; i < n; i++) {
        pl_token_logprob *t = &r->lp[i];
        set_tok(&t->token, &t->token_len, json_array_get(toks, (size_t)i));
        /* An echoed prompt's first token has null: no context (NaN). */
        json_t *l = json_array_get(tlp, (size_t)i);
        t->logprob = json_is_number(l) ? (float)json_number_value(l) : NAN;
        t->top = top;
        t->n_top = 0;
        const char *k;
        json_t *v;
        json_object_foreach(json_array_get(tops, (size_t)i), k, v) {
            top->token = k;
            top->token_len = strlen(k);
            top->logprob = (float)json_number_value(v);
            top++;
            t->n_top++;
        }
    }
    return n;
}

static void read_usage(remote_req *r, json_t *u)
{
    if (!json_is_object(u))
        return;
    r->prompt_tokens = (int)json_integer_value(json_object_get(u, "prompt_tokens"));
    r->completion_tokens = (int)json_integer_value(json_object_get(u, "completion_tokens"));
    json_t *d = json_object_get(u, "prompt_tokens_details");
    r->cached_tokens = (int)json_integer_value(json_object_get(d, "cached_tokens"));
}

/* Chat delta.tool_calls fragments into r->tc (pointers into the tree). */
static int tool_calls(remote_req *r, json_t *arr)
{
    int n = json_is_array(arr) ? (int)json_array_size(arr) : 0;
    if (n > r->tc_cap) {
        void *p = realloc(r->tc, (size_t)n * sizeof *r->tc);
        if (!p)
            return 0;
        r->tc = p;
        r->tc_cap = n;
    }
    for (int i = 0; i < n; i++) {
        json_t *e = json_array_get(arr, (size_t)i), *fn = json_object_get(e, "function");
        json_t *idx = json_object_get(e, "index"), *args = json_object_get(fn, "arguments");
        r->tc[i] = (pl_tool_call_delta){
            .index = json_is_integer(idx) ? (int)json_integer_value(idx) : i,
            .id = json_string_value(json_object_get(e, "id")),
            .name = json_string_value(json_object_get(fn, "name")),
            .arguments = json_string_value(args),
            .arguments_len = json_is_string(args) ? json_string_length(args) : 0};
    }
    return n;
}

/* Deliver text (and n_lp logprob entries in r->lp, n_tc tool-call
 * fragments in r->tc); -1 when the sink aborted r. */
static int deliver_text(remote_req *r, const char *text, size_t len, int n_lp, int n_tc)
{
    if (len == 0 && n_lp == 0 && n_tc == 0)
        return 0;
    if (!r->got_token) {
        r->got_token = true;
        r->ttft_ms = pl_remote_now_ms() - r->t_submit;
    }
    r->chunks++;
    pl_remote_req_arm(r, r->rb->o.token_timeout_ms);
    pl_delta d = {.text = len ? text : "", .len = len, .n_tokens = n_lp,
                  .logprobs = n_lp ? r->lp : NULL, .tool_calls = n_tc ? r->tc : NULL,
                  .n_tool_calls = n_tc};
    r->sink.on_delta(r->sink.ud, &d);
    return r->aborted ? -1 : 0;
}

/* Deliver one chunk's text and tool calls from its JSON tree. */
static int deliver(remote_req *r, json_t *choice)
{
    json_t *delta = json_object_get(choice, "delta");
    json_t *t = r->chat ? json_object_get(delta, "content") : json_object_get(choice, "text");
    json_t *lpj = json_object_get(choice, "logprobs");
    int n_lp = 0;
    if (json_is_object(lpj))
        n_lp = r->chat ? chat_logprobs(r, lpj) : completion_logprobs(r, lpj);
    int n_tc = r->chat ? tool_calls(r, json_object_get(delta, "tool_calls")) : 0;
    size_t len = json_is_string(t) ? json_string_length(t) : 0;
    return deliver_text(r, len ? json_string_value(t) : "", len, n_lp, n_tc);
}

/* An error object inside the stream (vLLM and others send one mid-way). */
static int stream_error(remote_req *r, json_t *chunk)
{
    json_t *e = json_object_get(chunk, "error");
    if (!e && json_is_string(json_object_get(chunk, "object")) &&
        !strcmp(json_string_value(json_object_get(chunk, "object")), "error"))
        e = chunk;
    if (!e)
        return 0;
    char *s = json_dumps(chunk, JSON_COMPACT);
    json_t *code = json_object_get(e, "code");
    long st = json_is_integer(code) ? (long)json_integer_value(code) : 502;
    pl_remote_error_from_body(&r->err, st >= 400 && st < 600 ? st : 502, s, s ? strlen(s) : 0);
    free(s);
    r->fail = RREQ_UPSTREAM_ERROR;
    return 1;
}

static int on_event(void *ud, const char *event, const char *data, size_t len)
{
    remote_req *r = ud;
    if (len == 6 && !memcmp(data, "[DONE]", 6)) {
        r->saw_done = true;
        return 0;
    }
    if (pl_chunk_scan_read(&r->scan, data, len, r->chat)) {   /* the common chunk */
        if (deliver_text(r, r->scan.buf, r->scan.len, 0, 0) < 0)
            return 1;
        if (r->scan.finish[0]) {
            r->finish = finish_of(r->scan.finish);
            r->tool_calls_finish = !strcmp(r->scan.finish, "tool_calls");
        }
        return 0;
    }
    /* "\u0000" is valid JSON text: deltas carry lengths, so it passes. */
    json_t *chunk = json_loadb(data, len, JSON_ALLOW_NUL, NULL);
    if (!json_is_object(chunk)) {
        json_decref(chunk);
        r->fail = RREQ_MALFORMED;
        return 1;
    }
    int rc = 0;
    if (!strcmp(event, "error")) {
        json_t *w = json_object_get(chunk, "error") ? json_incref(chunk)
                                                    : json_pack("{s:O}", "error", chunk);
        stream_error(r, w);
        json_decref(w);
        rc = 1;
        goto done;
    }
    if (stream_error(r, chunk)) {
        rc = 1;
        goto done;
    }
    read_usage(r, json_object_get(chunk, "usage"));
    json_t *choice = first_choice(chunk);
    if (!choice)
        goto done;
    if (deliver(r, choice) < 0) {
        rc = 1;
        goto done;
    }
    json_t *fr = json_object_get(choice, "finish_reason");
    if (json_is_string(fr)) {
        r->finish = finish_of(json_string_value(fr));
        r->tool_calls_finish = !strcmp(json_string_value(fr), "tool_calls");
    }
done:
    json_decref(chunk);
    return rc;
}

size_t pl_remote_on_write(char *p, size_t sz, size_t n, void *ud)
{
    remote_req *r = ud;
    size_t len = sz * n;
    if (r->aborted)
        return 0;
    if (!r->status)
        curl_easy_getinfo(r->x.easy, CURLINFO_RESPONSE_CODE, &r->status);
    if (r->status < 200 || r->status >= 300) {
        if (evbuffer_get_length(r->errbody) + len <= REMOTE_ERRBODY_MAX)
            evbuffer_add(r->errbody, p, len);
        return len;
    }
    r->in_cb = true;
    int rc = pl_sse_reader_feed(&r->sse, p, len, on_event, r);
    r->in_cb = false;
    if (rc < 0 && r->fail == RREQ_OK)
        r->fail = RREQ_MALFORMED;
    return rc != 0 || r->aborted ? 0 : len;
}

size_t pl_remote_on_header(char *p, size_t sz, size_t n, void *ud)
{
    remote_req *r = ud;
    size_t len = sz * n;
    if (len > 5 && !strncmp(p, "HTTP/", 5)) {
        r->status = 0;            /* a new response (after 100 Continue) */
        r->retry_after_ms = -1;
    } else if (len > 12 && !strncasecmp(p, "Retry-After:", 12)) {
        const char *v = p + 12;
        while (v < p + len && isspace((unsigned char)*v))
            v++;
        char *end;
        double s = strtod(v, &end);
        if (end > v && s >= 0)   /* at most a year: the product stays a long */
            r->retry_after_ms = (long)((s < 31536000 ? s : 31536000) * 1000.0);
    }
    return len;
}

/* {"error":{"message":..}} (OpenAI, vLLM), {"object":"error","message":..}
 * (older vLLM), {"detail":..} (FastAPI), {"error":"text"} (Ollama), text. */
void pl_remote_error_from_body(pl_err *e, long status, const char *body, size_t len)
{
    json_t *root = json_loadb(body, len, JSON_ALLOW_NUL, NULL);
    json_t *eo = json_object_get(root, "error");
    json_t *src = json_is_object(eo) ? eo : root;
    const char *msg = json_string_value(json_object_get(src, "message"));
    if (!msg)
        msg = json_string_value(eo);
    if (!msg)
        msg = json_string_value(json_object_get(root, "detail"));
    const char *type = json_string_value(json_object_get(src, "type"));
    const char *param = json_string_value(json_object_get(src, "param"));
    json_t *code = json_object_get(src, "code");
    int st = status >= 400 && status < 600 ? (int)status : 502;
    if (!type)
        type = st < 500 ? "invalid_request_error" : "server_error";
    char text[400];
    if (!msg) {
        size_t k = len < sizeof text - 1 ? len : sizeof text - 1;
        memcpy(text, body ? body : "", k);
        text[k] = '\0';
        msg = k ? text : "the upstream failed without a message";
    }
    pl_err_set(e, st, type, param, json_is_string(code) ? json_string_value(code) : NULL,
               "upstream: %s", msg);
    json_decref(root);
}
