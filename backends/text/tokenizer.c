/* tokenizer.c - building a tokenizer from a vocabulary, encode (special
 * token partition, then the model's BPE per text fragment), decode, and
 * the small getters. Model specifics live in tokenizer_bpe.c and
 * tokenizer_spm.c, the gpt2 pre-tokenizer in pretokenize.c.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/text/tokenizer_internal.h"

/* Control tokens that end a turn in common chat formats (llama.cpp marks
 * the same texts as end-of-generation). */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>",
    "<|return|>", "<|call|>", "<turn|>", "<|tool_response>", NULL,
};

int pl_tok_ids_push(pl_tok_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        if (ids->cap > INT_MAX / 2)
            return -1;
        int cap = ids->cap ? 2 * ids->cap : 64;
        int32_t *v = realloc(ids->v, sizeof *v * (size_t)cap);
        if (!v)
            return -1;
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return 0;
}

static int copy_texts(pl_tokenizer *t, const pl_tokenizer_vocab *v)
{
    size_t total = 0;
    for (int32_t i = 0; i < v->n_tokens; i++)
        total += (v->token_lens[i] ? v->token_lens[i] : 24) + 1;
    if (total > UINT32_MAX / 2) /* offsets are 32-bit; bytes take as much */
        return -1;
    t->text = malloc(total);
    if (!t->text)
        return -1;
    size_t o = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        size_t n = v->token_lens[i];
        if (n)
            memcpy(t->text + o, v->tokens[i], n);
        else /* llama.cpp names empty tokens this way */
            n = (size_t)snprintf(t->text + o, 24, "[EMPTY_%d]", (int)i);
        t->text_off[i] = (uint32_t)o;
        t->text_len[i] = (uint32_t)n;
        t->text[o + n] = '\0';
        o += n + 1;
    }
    return 0;
}

static int alloc_arrays(pl_tokenizer *t, int32_t n)
{
    size_t un = (size_t)n;
    t->text_off = malloc(un * sizeof *t->text_off);
    t->text_len = malloc(un * sizeof *t->text_len);
    t->bytes_off = malloc(un * sizeof *t->bytes_off);
    t->bytes_len = malloc(un * sizeof *t->bytes_len);
    t->scores = calloc(un, sizeof *t->scores);
    t->types = malloc(un);
    t->eog = calloc(un, 1);
    return t->text_off && t->text_len && t->bytes_off && t->bytes_len &&
           t->scores && t->types && t->eog ? 0 : -1;
}

static int by_len_desc(const void *a, const void *b, void *ctx)
{
    const pl_tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = t->text_len[x], ly = t->text_len[y];
    if (lx != ly)
        return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int find_specials(pl_tokenizer *t)
{
    t->special = malloc(sizeof *t->special * (size_t)t->n_vocab);
    if (!t->special)
        return -1;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        int ty = t->types[i];
        if (ty == PL_TOKEN_TYPE_CONTROL || ty == PL_TOKEN_TYPE_USER_DEFINED ||
            ty == PL_TOKEN_TYPE_UNKNOWN)
            t->special[t->n_special++] = i;
    }
    qsort_r(t->special, (size_t)t->n_special, sizeof *t->special,
            by_len_desc, t);
    return 0;
}

static int32_t valid_id(const pl_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab ? id : -1;
}

/* A special token by its text, -1 when the vocabulary has none. */
static int32_t special_id(const pl_tokenizer *t, const char *text)
{
    for (int32_t k = 0; k < t->n_special; k++)
        if (!strcmp(pl_tok_text(t, t->special[k]), text))
            return t->special[k];
    return -1;
}

/* gpt-oss's harmony vocabulary (o200k_harmony), as llama.cpp reads it:
 * <|return|> and <|call|> end a reply, <|end|> only ends a message inside
 * it, and the markers of a reply's messages are text that the API parses
 * into channels (backends/text/harmony.h). */
static void harmony_specials(pl_tokenizer *t)
{
    static const char *const shown[] = {"<|channel|>", "<|message|>", "<|start|>",
                                        "<|constrain|>", "<|end|>"};
    int32_t ret = special_id(t, "<|return|>"), call = special_id(t, "<|call|>");
    if (ret < 0 || call < 0 || !t->eog[ret] || !t->eog[call])
        return;
    for (size_t i = 0; i < sizeof shown / sizeof shown[0]; i++) {
        int32_t id = special_id(t, shown[i]);
        if (id < 0)
            continue;
        t->types[id] = PL_TOKEN_TYPE_USER_DEFINED;
        if (id != t->eos)
            t->eog[id] = 0;
    }
}

static void set_specials(pl_tokenizer *t, const pl_tokenizer_vocab *v)
{
    bool spm = t->model == PL_TOKENIZER_MODEL_LLAMA;
    t->bos = valid_id(t, v->bos);
    t->eos = valid_id(t, v->eos);
    t->tail = v->tail_own ? valid_id(t, v->tail) : t->eos;
    t->unk = valid_id(t, v->unk);
    t->pad = valid_id(t, v->pad);
    t->eot = valid_id(t, v->eot);
    t->eom = valid_id(t, v->eom);
    t->add_bos = v->add_bos >= 0 ? v->add_bos : (spm || t->ignore_merges);
    t->add_eos = v->add_eos > 0;
    t->add_space_prefix = v->add_space_prefix >= 0 ? v->add_space_prefix : spm;
    t->space_prefix_first = v->space_prefix_first;
    t->space_prefix_if_none = v->space_prefix_if_none;
    t->nfc = v->nfc;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (t->types[i] != PL_TOKEN_TYPE_CONTROL)
            continue;
        for (const char *const *e = eog_texts; *e; e++)
            if (!strcmp(pl_tok_text(t, i), *e))
                t->eog[i] = 1;
    }
    int32_t ends[3] = {t->eos, t->eot, t->eom};
    for (int i = 0; i < 3; i++)
        if (ends[i] >= 0)
            t->eog[ends[i]] = 1;
    harmony_specials(t);
}

pl_tokenizer *pl_tokenizer_init(const pl_tokenizer_vocab *v, char *err,
                                size_t errlen)
{
    pl_tokenizer *t = NULL;
    if (v->model != PL_TOKENIZER_MODEL_GPT2 && v->model != PL_TOKENIZER_MODEL_LLAMA &&
        v->model != PL_TOKENIZER_MODEL_BERT) {
        snprintf(err, errlen, "unsupported tokenizer model %d", v->model);
        return NULL;
    }
    if (v->n_tokens <= 0 || !v->tokens || !v->token_lens) {
        snprintf(err, errlen, "tokenizer has no tokens");
        return NULL;
    }
    t = calloc(1, sizeof *t);
    if (!t)
        goto oom;
    t->model = v->model;
    t->n_vocab = v->n_tokens;
    if (alloc_arrays(t, v->n_tokens) || copy_texts(t, v))
        goto oom;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        t->scores[i] = v->scores ? v->scores[i] : 0.0f;
        int ty = v->types ? v->types[i] : PL_TOKEN_TYPE_NORMAL;
        t->types[i] = (int8_t)(ty >= 0 && ty <= 6 ? ty : 0);
    }
    if (pl_tok_strmap_init(&t->map, t) || find_specials(t) || pl_tok_trie_init(t))
        goto oom;
    int rc = t->model == PL_TOKENIZER_MODEL_GPT2   ? pl_tok_bpe_prepare(t, v, err, errlen)
             : t->model == PL_TOKENIZER_MODEL_BERT ? pl_tok_wpm_prepare(t, v, err, errlen)
                                                   : pl_tok_spm_prepare(t, err, errlen);
    if (rc)
        goto fail;
    set_specials(t, v);
    return t;
oom:
    snprintf(err, errlen, "out of memory loading the tokenizer");
fail:
    pl_tokenizer_free(t);
    return NULL;
}

void pl_tokenizer_free(pl_tokenizer *t)
{
    if (!t)
        return;
    pl_pretok_free(t->pre);
    pl_tok_pairmap_free(&t->merges);
    pl_tok_strmap_free(&t->map);
    free(t->special);
    free(t->spm_bridge);
    pl_tok_trie_free(&t->special_trie);
    free(t->eog);
    free(t->types);
    free(t->scores);
    free(t->bytes);
    free(t->bytes_len);
    free(t->bytes_off);
    free(t->text);
    free(t->text_len);
    free(t->text_off);
    free(t);
}

/* ---- encode ---- */

int pl_tok_frags_push(pl_tok_frags *f, int32_t id, size_t off, size_t len)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 16;
        pl_tok_frag *v = realloc(f->v, sizeof *v * cap);
        if (!v)
            return -1;
        f->v = v;
        f->cap = cap;
    }
    f->v[f->n++] = (pl_tok_frag){id, off, len};
    return 0;
}

/* One raw fragment through the model, NFC-normalised first where the
 * vocabulary asks for it. */
static int encode_raw(const pl_tokenizer *t, const char *s, size_t n,
                      bool prefix_space, pl_tok_ids *out)
{
    char *norm = NULL;
    if (t->nfc) {
        if (pl_tok_nfc(s, n, &norm, &n))
            return -1;
        s = norm;
    }
    int rc = t->model == PL_TOKENIZER_MODEL_GPT2   ? pl_tok_bpe_encode(t, s, n, out)
             : t->model == PL_TOKENIZER_MODEL_BERT ? pl_tok_wpm_encode(t, s, n, out)
                                                   : pl_tok_spm_encode(t, s, n, prefix_space, out);
    free(norm);
    return rc;
}

static int encode_frags(const pl_tokenizer *t, const char *text,
                        const pl_tok_frags *f, pl_tok_ids *out)
{
    bool prev_special = true;
    for (size_t i = 0; i < f->n; i++) {
        const pl_tok_frag *g = &f->v[i];
        int rc;
        if (g->id >= 0) {
            rc = pl_tok_ids_push(out, g->id);
            prev_special = true;
        } else {
            const char *s = text + g->off;
            bool lead = g->len && (s[0] == ' ' || (g->len >= 3 && !memcmp(s, "\xe2\x96\x81", 3)));
            bool prefix = t->add_space_prefix && prev_special &&
                          (!t->space_prefix_first || g->off == 0) &&
                          !(t->space_prefix_if_none && lead);
            rc = encode_raw(t, text + g->off, g->len, prefix, out);
            prev_special = false;
        }
        if (rc)
            return -1;
    }
    return 0;
}

int pl_tokenizer_encode(const pl_tokenizer *t, const char *text, size_t len,
                        bool add_special, bool parse_special, int32_t **ids,
                        int *n)
{
    pl_tok_ids out = {0};
    pl_tok_frags f = {0};
    *ids = NULL;
    *n = 0;
    if (pl_tok_partition(t, text, len, parse_special, &f))
        goto fail;
    if (add_special && t->add_bos && t->bos >= 0 &&
        pl_tok_ids_push(&out, t->bos))
        goto fail;
    if (encode_frags(t, text, &f, &out))
        goto fail;
    if (add_special && t->add_eos && t->tail >= 0 &&
        pl_tok_ids_push(&out, t->tail))
        goto fail;
    free(f.v);
    *ids = out.v;
    *n = out.n;
    return 0;
fail:
    free(f.v);
    free(out.v);
    return -1;
}

/* ---- decode and getters ---- */

const char *pl_tokenizer_token_bytes(const pl_tokenizer *t, int32_t id,
                                     size_t *len)
{
    if (id < 0 || id >= t->n_vocab) {
        *len = 0;
        return NULL;
    }
    *len = t->bytes_len[id];
    return t->bytes + t->bytes_off[id];
}

size_t pl_tokenizer_decode(const pl_tokenizer *t, const int32_t *ids, int n,
                           bool special, char *buf, size_t cap)
{
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        if (!special && pl_tokenizer_token_type(t, ids[i]) ==
                            PL_TOKEN_TYPE_CONTROL)
            continue;
        size_t len;
        const char *b = pl_tokenizer_token_bytes(t, ids[i], &len);
        if (o < cap)
            memcpy(buf + o, b, len < cap - o ? len : cap - o);
        o += len;
    }
    if (o < cap)
        buf[o] = '\0';
    return o;
}

int32_t pl_tokenizer_n_vocab(const pl_tokenizer *t) { return t->n_vocab; }
int32_t pl_tokenizer_bos(const pl_tokenizer *t) { return t->bos; }
int32_t pl_tokenizer_eos(const pl_tokenizer *t) { return t->eos; }

void pl_tokenizer_specials_get(const pl_tokenizer *t, pl_tokenizer_specials *out)
{
    *out = (pl_tokenizer_specials){.model = t->model, .bos = t->bos, .eos = t->eos,
                                   .unk = t->unk, .pad = t->pad, .eot = t->eot,
                                   .add_bos = t->add_bos, .add_eos = t->add_eos};
}

pl_token_type pl_tokenizer_token_type(const pl_tokenizer *t, int32_t id)
{
    if (id < 0 || id >= t->n_vocab)
        return PL_TOKEN_TYPE_UNDEFINED;
    return (pl_token_type)t->types[id];
}

bool pl_tokenizer_token_hidden(const pl_tokenizer *t, int32_t id)
{
    pl_token_type ty = pl_tokenizer_token_type(t, id);
    return ty == PL_TOKEN_TYPE_CONTROL || ty == PL_TOKEN_TYPE_UNUSED;
}

bool pl_tokenizer_is_eog(const pl_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && t->eog[id];
}

int32_t pl_tokenizer_find(const pl_tokenizer *t, const char *text, size_t len)
{
    return pl_tok_strmap_get(&t->map, t, text, len);
}
