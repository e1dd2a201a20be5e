/* mock_echo.c - the mock's echoed prompt (pl_gen_request.echo): the
 * prompt's mock tokens with deterministic logprobs, delivered as the first
 * delta. A mock token is a word with the whitespace before it (the last
 * one keeps the whitespace after it too, so the pieces make up the prompt
 * exactly); a token-id prompt gives pieces "<id>" joined by spaces, as
 * mock_detokenize writes them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/mock/mock_internal.h"

static const char *const alt_words[] = {"the", "answer", "is", "clearly", "option"};
#define N_ALT (sizeof alt_words / sizeof alt_words[0])

static int32_t piece_id(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    size_t i = strspn(s, " \n\t\r");
    for (; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001B3ull;
    return (int32_t)(h & 0x7FFF);
}

void pl_mock_prompt_free(pl_mock_prompt *p)
{
    if (!p)
        return;
    free(p->text);
    free(p->ids);
    free(p->lp);
    free(p->top);
    free(p);
}

/* The pieces of a token-id prompt: "<id>" joined by spaces. */
static int id_pieces(pl_mock_prompt *p, const int32_t *ids, int n, size_t *off)
{
    p->text = malloc((size_t)n * 14 + 1);
    if (!p->text)
        return -1;
    for (int i = 0; i < n; i++) {
        off[i] = p->len;
        p->len += (size_t)sprintf(p->text + p->len, "%s<%d>", i ? " " : "", (int)ids[i]);
        p->ids[i] = ids[i];
    }
    off[n] = p->len;
    return 0;
}

/* The pieces of a text prompt: each word with the whitespace before it. */
static int text_pieces(pl_mock_prompt *p, const char *s, size_t *off)
{
    p->len = strlen(s);
    p->text = malloc(p->len + 1);
    if (!p->text)
        return -1;
    memcpy(p->text, s, p->len + 1);
    size_t i = 0;
    while (i < p->len) {
        size_t w = i + strspn(s + i, " \n\t\r");
        if (w == p->len)
            break;
        off[p->n++] = i;
        i = w + strcspn(s + w, " \n\t\r");
    }
    off[p->n] = p->len;
    for (int k = 0; k < p->n; k++)
        p->ids[k] = piece_id(s + off[k], off[k + 1] - off[k]);
    return 0;
}

static int count_words(const char *s)
{
    int n = 0;
    for (size_t i = 0; s[i];) {
        i += strspn(s + i, " \n\t\r");
        if (!s[i])
            break;
        n++;
        i += strcspn(s + i, " \n\t\r");
    }
    return n;
}

/* Logprobs: the first token none (NaN); the others from their id, in
 * [-2.5, -0.05], with k alternatives: the token itself first, then words
 * 0.75 nats apart. */
static void fill_logprobs(pl_mock_prompt *p, const size_t *off, int k)
{
    for (int i = 0; i < p->n; i++) {
        pl_token_logprob *t = &p->lp[i];
        t->token = p->text + off[i];
        t->token_len = off[i + 1] - off[i];
        t->logprob = i ? -0.05f - (float)(p->ids[i] % 100) * 0.0245f : NAN;
        t->n_top = i ? k : 0;
        t->top = i ? p->top + (size_t)i * (size_t)k : NULL;
        for (int j = 0; i && j < k; j++) {
            const char *w = alt_words[(size_t)(p->ids[i] + j) % N_ALT];
            pl_top_logprob *a = &p->top[(size_t)i * (size_t)k + (size_t)j];
            *a = j ? (pl_top_logprob){w, strlen(w), t->logprob - 0.75f * (float)j}
                   : (pl_top_logprob){t->token, t->token_len, t->logprob};
        }
    }
}

pl_mock_prompt *pl_mock_prompt_new(const pl_gen_request *req)
{
    pl_mock_prompt *p = calloc(1, sizeof *p);
    int cap = req->prompt_tokens ? req->n_prompt_tokens : req->prompt ? count_words(req->prompt) : 0;
    int k = req->sampling.logprobs ? req->sampling.top_logprobs : 0;
    size_t *off = malloc(sizeof *off * ((size_t)cap + 1));
    if (!p || !off)
        goto fail;
    p->ids = malloc(sizeof *p->ids * ((size_t)cap + 1));
    p->lp = calloc((size_t)cap + 1, sizeof *p->lp);
    p->top = calloc((size_t)cap * (size_t)k + 1, sizeof *p->top);
    if (!p->ids || !p->lp || !p->top)
        goto fail;
    if (req->prompt_tokens) {
        p->n = cap;
        if (id_pieces(p, req->prompt_tokens, cap, off) < 0)
            goto fail;
    } else if (text_pieces(p, req->prompt ? req->prompt : "", off) < 0) {
        goto fail;
    }
    fill_logprobs(p, off, k);
    p->delta = (pl_delta){.text = p->text, .len = p->len, .tokens = p->ids, .n_tokens = p->n,
                          .logprobs = req->sampling.logprobs ? p->lp : NULL, .prompt = true};
    free(off);
    return p;
fail:
    free(off);
    pl_mock_prompt_free(p);
    return NULL;
}
