/* oai_wire.c - OpenAI chat/completions and completions reply encoding.
 *
 * Stream chunks are composed straight into an evbuffer as text (a
 * per-reply constant prefix plus the escaped delta), so the token path
 * builds no JSON tree and allocates nothing of its own.
 */
#include "api/oai_wire.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/respond.h"
#include "src/base/json_dump.h"
#include "src/base/evbuf.h"

/* Append a string literal without its NUL. */
#define ADD_LIT(b, lit) evbuffer_add((b), (lit), strlen(lit))

/* JSON has no infinities: a masked token's -inf becomes OpenAI's -9999. */
static double lp_json(float lp)
{
    return isfinite(lp) ? (double)lp : -9999.0;
}

void pl_oai_put_string(struct evbuffer *b, const char *s, size_t len)
{
    ADD_LIT(b, "\"");
    pl_json_escape(b, s, len);
    ADD_LIT(b, "\"");
}

/* v in decimal. No printf: this runs for every streamed token. */
static void put_uint(struct evbuffer *b, unsigned long long v)
{
    char t[24];
    char *p = pl_json_fmt_uint(t + sizeof t, v);
    evbuffer_add(b, p, (size_t)(t + sizeof t - p));
}

/* [b0,b1,...]: the token's bytes, in one evbuffer_add per 64 bytes. */
static void put_bytes(struct evbuffer *b, const char *tok, size_t len)
{
    char t[64 * 4 + 2];
    size_t n = 0;
    t[n++] = '[';
    for (size_t i = 0; i < len; i++) {
        char d[4];
        char *p = pl_json_fmt_uint(d + sizeof d, (unsigned char)tok[i]);
        if (i)
            t[n++] = ',';
        memcpy(t + n, p, (size_t)(d + sizeof d - p));
        n += (size_t)(d + sizeof d - p);
        if (n > sizeof t - 5) {
            evbuffer_add(b, t, n);
            n = 0;
        }
    }
    t[n++] = ']';
    evbuffer_add(b, t, n);
}

/* One chat logprobs "content" entry. */
static void put_chat_entry(struct evbuffer *b, const pl_token_logprob *lp)
{
    ADD_LIT(b, "{\"token\":");
    pl_oai_put_string(b, lp->token, lp->token_len);
    evbuffer_add_printf(b, ",\"logprob\":%.6g,\"bytes\":", lp_json(lp->logprob));
    put_bytes(b, lp->token, lp->token_len);
    ADD_LIT(b, ",\"top_logprobs\":[");
    for (int k = 0; k < lp->n_top; k++) {
        ADD_LIT(b, ",{\"token\":" + (k == 0));
        pl_oai_put_string(b, lp->top[k].token, lp->top[k].token_len);
        evbuffer_add_printf(b, ",\"logprob\":%.6g,\"bytes\":", lp_json(lp->top[k].logprob));
        put_bytes(b, lp->top[k].token, lp->top[k].token_len);
        ADD_LIT(b, "}");
    }
    ADD_LIT(b, "]}");
}

/* One completions "top_logprobs" entry: {"token":logprob,...}; null for
 * an echoed prompt's first token (logprob NaN: it has no context). */
static void put_top_map(struct evbuffer *b, const pl_token_logprob *lp)
{
    if (isnan(lp->logprob)) {
        ADD_LIT(b, "null");
        return;
    }
    ADD_LIT(b, "{");
    for (int k = 0; k < lp->n_top; k++) {
        if (k)
            ADD_LIT(b, ",");
        pl_oai_put_string(b, lp->top[k].token, lp->top[k].token_len);
        evbuffer_add_printf(b, ":%.6g", lp_json(lp->top[k].logprob));
    }
    ADD_LIT(b, "}");
}

static const char *const completion_keys[4] = {"tokens", "token_logprobs", "top_logprobs",
                                               "text_offset"};

/*
 * Append d's entries to the body of array k (chat: the one "content" array;
 * completions: completion_keys[k]). first: the body is still empty. Only
 * the text_offset array advances *offset.
 */
static void put_body(struct evbuffer *b, int k, bool chat, bool first, const pl_delta *d,
                     size_t *offset)
{
    for (int i = 0; i < d->n_tokens; i++) {
        const pl_token_logprob *lp = &d->logprobs[i];
        if (!first || i)
            ADD_LIT(b, ",");
        if (chat) {
            put_chat_entry(b, lp);
        } else if (k == 0) {
            pl_oai_put_string(b, lp->token, lp->token_len);
        } else if (k == 1) {
            if (isnan(lp->logprob))
                ADD_LIT(b, "null");
            else
                evbuffer_add_printf(b, "%.6g", lp_json(lp->logprob));
        } else if (k == 2) {
            put_top_map(b, lp);
        } else {
            put_uint(b, *offset);
            *offset += lp->token_len;
        }
    }
}

static void put_key(struct evbuffer *b, int k, bool chat)
{
    ADD_LIT(b, k ? ",\"" : "{\"");
    ADD_LIT(b, chat ? "content" : completion_keys[k]);
    ADD_LIT(b, "\":[");
}

int pl_oai_logprobs_init(pl_oai_logprobs *lp, bool chat)
{
    memset(lp, 0, sizeof *lp);
    lp->chat = chat;
    for (int k = 0; k < (chat ? 1 : 4); k++)
        if (!(lp->arr[k] = evbuffer_new()))
            return -1;
    return 0;
}

void pl_oai_logprobs_free(pl_oai_logprobs *lp)
{
    for (int k = 0; k < 4; k++)
        if (lp->arr[k])
            evbuffer_free(lp->arr[k]);
    memset(lp, 0, sizeof *lp);
}

void pl_oai_logprobs_add(pl_oai_logprobs *lp, const pl_delta *d, size_t *offset)
{
    if (!d->logprobs || d->n_tokens <= 0)
        return;
    for (int k = 0; k < (lp->chat ? 1 : 4); k++)
        put_body(lp->arr[k], k, lp->chat, lp->n == 0, d, offset);
    lp->n += (size_t)d->n_tokens;
}

json_t *pl_oai_logprobs_json(pl_oai_logprobs *lp)
{
    if (lp->n == 0)
        return json_null();
    struct evbuffer *out = evbuffer_new();
    if (!out)
        return NULL;
    for (int k = 0; k < (lp->chat ? 1 : 4); k++) {
        put_key(out, k, lp->chat);
        evbuffer_add_buffer(out, lp->arr[k]);   /* moves: the bodies are used once */
        ADD_LIT(out, "]");
    }
    ADD_LIT(out, "}");
    size_t len = evbuffer_get_length(out);
    const char *text = (const char *)evbuffer_pullup(out, -1);
    json_t *o = text ? json_loadb(text, len, 0, NULL) : NULL;
    evbuffer_free(out);
    return o;
}

char *pl_oai_chunk_prefix(const char *id, bool chat, int64_t created, const char *model,
                          bool usage_null)
{
    struct evbuffer *b = evbuffer_new();
    if (!b)
        return NULL;
    evbuffer_add_printf(b, "data: {\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":",
                        id, chat ? "chat.completion.chunk" : "text_completion",
                        (long long)created);
    pl_oai_put_string(b, model, strlen(model));
    if (usage_null)          /* every chunk before the usage chunk, as OpenAI sends them */
        ADD_LIT(b, ",\"usage\":null");
    ADD_LIT(b, ",\"choices\":[");
    return pl_evbuffer_take(b);
}


static void put_chunk_start(struct evbuffer *b, const char *prefix, int index)
{
    evbuffer_add(b, prefix, strlen(prefix));
    ADD_LIT(b, "{\"index\":");
    put_uint(b, (unsigned)index);
    ADD_LIT(b, ",");
}

void pl_oai_put_role_chunk(struct evbuffer *b, const char *prefix, int index)
{
    put_chunk_start(b, prefix, index);
    ADD_LIT(b, "\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},"
               "\"logprobs\":null,\"finish_reason\":null}]}\n\n");
}

static void put_text_chunk(struct evbuffer *b, const char *prefix, bool chat, const char *key,
                           int index, const pl_delta *d, size_t *offset)
{
    put_chunk_start(b, prefix, index);
    ADD_LIT(b, chat ? "\"delta\":{\"" : "\"");
    ADD_LIT(b, key);
    ADD_LIT(b, "\":\"");
    pl_json_escape(b, d->text, d->len);
    ADD_LIT(b, chat ? "\"},\"logprobs\":" : "\",\"logprobs\":");
    if (d->logprobs) {
        for (int k = 0; k < (chat ? 1 : 4); k++) {
            put_key(b, k, chat);
            put_body(b, k, chat, true, d, offset);
            ADD_LIT(b, "]");
        }
        ADD_LIT(b, "}");
    } else {
        ADD_LIT(b, "null");
    }
    ADD_LIT(b, ",\"finish_reason\":null}]}\n\n");
}

void pl_oai_put_delta_chunk(struct evbuffer *b, const char *prefix, bool chat, int index,
                            const pl_delta *d, size_t *offset)
{
    put_text_chunk(b, prefix, chat, chat ? "content" : "text", index, d, offset);
}

void pl_oai_put_reasoning_chunk(struct evbuffer *b, const char *prefix, int index,
                                const pl_delta *d)
{
    size_t unused = 0;
    put_text_chunk(b, prefix, true, "reasoning_content", index, d, &unused);
}

void pl_oai_put_finish_chunk(struct evbuffer *b, const char *prefix, bool chat, int index,
                             pl_finish finish)
{
    put_chunk_start(b, prefix, index);
    evbuffer_add_printf(b, "%s\"logprobs\":null,\"finish_reason\":\"%s\"}]}\n\n",
                        chat ? "\"delta\":{}," : "\"text\":\"\",", pl_finish_name(finish));
}

json_t *pl_oai_usage_json(const pl_oai_usage *u)
{
    return json_pack("{s:i, s:i, s:i, s:{s:i}, s:{s:i}}", "prompt_tokens", u->prompt_tokens,
                     "completion_tokens", u->completion_tokens, "total_tokens",
                     u->prompt_tokens + u->completion_tokens, "prompt_tokens_details",
                     "cached_tokens", u->cached_tokens, "completion_tokens_details",
                     "reasoning_tokens", u->reasoning_tokens);
}

json_t *pl_oai_choice_json(bool chat, int index, const char *text, size_t len, json_t *lp,
                           pl_finish finish)
{
    /* Text cut inside a character (max_tokens, a byte-level token) is not
     * UTF-8: its broken sequences become U+FFFD, as the stream sends them. */
    json_t *t = pl_json_string_lossy(text, text ? len : 0);
    if (!lp)
        lp = json_null();
    const char *fr = pl_finish_name(finish);
    if (chat)
        return json_pack("{s:i, s:{s:s, s:o, s:n}, s:o, s:s?}", "index", index, "message",
                         "role", "assistant", "content", t, "refusal", "logprobs", lp,
                         "finish_reason", fr);
    return json_pack("{s:i, s:o, s:o, s:s?}", "index", index, "text", t, "logprobs", lp,
                     "finish_reason", fr);
}

json_t *pl_oai_reply_json(const char *id, bool chat, int64_t created, const char *model,
                          json_t *choices, const pl_oai_usage *u)
{
    json_t *usage = pl_oai_usage_json(u);
    if (!choices)   /* the usage chunk that ends a stream */
        return json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", id, "object",
                         chat ? "chat.completion.chunk" : "text_completion", "created",
                         (json_int_t)created, "model", model, "choices", "usage", usage);
    return json_pack("{s:s, s:s, s:I, s:s, s:o, s:o, s:n}", "id", id, "object",
                     chat ? "chat.completion" : "text_completion", "created",
                     (json_int_t)created, "model", model, "choices", choices, "usage", usage,
                     "system_fingerprint");
}
