/* tokenizer_gguf.c - pl_tokenizer_from_gguf: gathers tokenizer.ggml.* from
 * a GGUF into a pl_tokenizer_vocab (with llama.cpp's defaults for absent
 * keys) and builds the tokenizer from it.
 *
 * "gemma4" (llama.cpp: BPE with the gemma4 pre-tokenizer) is SentencePiece-
 * style BPE: spaces become U+2581, merges run on raw UTF-8 with <0xNN> byte
 * fallback, no prefix space, BOS always added. It is read as the llama
 * model with each token's score minus the rank of the first merge making
 * it, as a Hugging Face tokenizer.json of that kind is (tokenizer_hf.c);
 * the file's scores (all -1000) are not used.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/text/tokenizer_internal.h"

typedef struct gguf_vocab {
    pl_tokenizer_vocab v;
    const char **tokens;
    uint32_t *token_lens;
    float *scores;
    int32_t *types;
    const char **merges;
    uint32_t *merge_lens;
    char *pre;
    char *wpm_text;              /* bert: the tokens back in "##" form */
    bool gemma4;                 /* scores from the merges (see above) */
} gguf_vocab;

static void gguf_vocab_free(gguf_vocab *g)
{
    free(g->tokens);
    free(g->token_lens);
    free(g->scores);
    free(g->types);
    free(g->merges);
    free(g->merge_lens);
    free(g->pre);
    free(g->wpm_text);
}

/* The array under key with the given element type, or NULL. */
static const pl_gguf_kv *find_array(const pl_gguf *g, const char *key,
                                    pl_gguf_type elem)
{
    const pl_gguf_kv *kv = pl_gguf_find(g, key);
    if (!kv || kv->type != PL_GGUF_TYPE_ARRAY || kv->v.arr.type != elem)
        return NULL;
    return kv;
}

static int read_strings(const pl_gguf_kv *kv, const char ***s, uint32_t **len)
{
    uint64_t n = kv->v.arr.n;
    *s = malloc(sizeof **s * (n ? n : 1));
    *len = malloc(sizeof **len * (n ? n : 1));
    if (!*s || !*len)
        return -1;
    for (uint64_t i = 0; i < n; i++) {
        pl_gguf_str str = pl_gguf_arr_str(kv, i);
        if (str.len > UINT32_MAX)
            return -1;
        (*s)[i] = str.ptr;
        (*len)[i] = (uint32_t)str.len;
    }
    return 0;
}

static int32_t get_id(const pl_gguf *g, const char *key, int32_t dflt)
{
    uint64_t u;
    if (pl_gguf_get_u64(g, key, &u) || u > INT32_MAX)
        return dflt;
    return (int32_t)u;
}

static int get_flag(const pl_gguf *g, const char *key)
{
    const pl_gguf_kv *kv = pl_gguf_find(g, key);
    if (!kv || kv->type != PL_GGUF_TYPE_BOOL)
        return -1;
    return kv->v.b ? 1 : 0;
}

/* tokenizer.ggml.model's values (llama.cpp's LLAMA_VOCAB_TYPE names). */
static const struct {
    const char *name;
    pl_tokenizer_model model;
    bool merge_scores;           /* scores from the merges (see above) */
} models_[] = {
    {"gpt2", PL_TOKENIZER_MODEL_GPT2, false},
    {"llama", PL_TOKENIZER_MODEL_LLAMA, false},
    {"bert", PL_TOKENIZER_MODEL_BERT, false},
    {"gemma4", PL_TOKENIZER_MODEL_LLAMA, true},
};
#define N_MODELS_ (sizeof models_ / sizeof *models_)

static int read_model(const pl_gguf *g, gguf_vocab *gv, char *err,
                      size_t errlen)
{
    pl_gguf_str s;
    if (pl_gguf_get_str(g, "tokenizer.ggml.model", &s)) {
        snprintf(err, errlen, "GGUF has no tokenizer.ggml.model");
        return -1;
    }
    size_t i = 0;
    while (i < N_MODELS_ && !(strlen(models_[i].name) == s.len &&
                              !memcmp(s.ptr, models_[i].name, s.len)))
        i++;
    if (i == N_MODELS_) {
        snprintf(err, errlen, "unsupported tokenizer.ggml.model '%.*s' "
                 "(supported: gpt2, llama, bert, gemma4)", (int)(s.len > 64 ? 64 : s.len),
                 s.ptr);
        return -1;
    }
    gv->v.model = models_[i].model;
    gv->gemma4 = models_[i].merge_scores;
    if (!pl_gguf_get_str(g, "tokenizer.ggml.pre", &s)) {
        gv->pre = strndup(s.ptr, s.len);
        if (!gv->pre)
            return -1;
        gv->v.pre = gv->pre;
    }
    return 0;
}

static int read_tokens(const pl_gguf *g, gguf_vocab *gv, char *err,
                       size_t errlen)
{
    const pl_gguf_kv *kv = find_array(g, "tokenizer.ggml.tokens",
                                      PL_GGUF_TYPE_STRING);
    if (!kv || kv->v.arr.n == 0 || kv->v.arr.n > INT32_MAX) {
        snprintf(err, errlen, "GGUF has no valid tokenizer.ggml.tokens");
        return -1;
    }
    uint64_t n = kv->v.arr.n;
    gv->v.n_tokens = (int32_t)n;
    if (read_strings(kv, &gv->tokens, &gv->token_lens))
        return -1;
    const pl_gguf_kv *sc = find_array(g, "tokenizer.ggml.scores",
                                      PL_GGUF_TYPE_FLOAT32);
    const pl_gguf_kv *ty = pl_gguf_find(g, "tokenizer.ggml.token_type");
    if (sc && sc->v.arr.n == n) {
        if (!(gv->scores = malloc(sizeof *gv->scores * n)))
            return -1;
        for (uint64_t i = 0; i < n; i++)
            gv->scores[i] = pl_gguf_arr_f32(sc, i);
    }
    if (ty && ty->type == PL_GGUF_TYPE_ARRAY && ty->v.arr.n == n &&
        ty->v.arr.type != PL_GGUF_TYPE_STRING) {
        if (!(gv->types = malloc(sizeof *gv->types * n)))
            return -1;
        for (uint64_t i = 0; i < n; i++)
            gv->types[i] = (int32_t)pl_gguf_arr_int(ty, i);
    }
    gv->v.tokens = gv->tokens;
    gv->v.token_lens = gv->token_lens;
    gv->v.scores = gv->scores;
    gv->v.types = gv->types;
    return 0;
}

static int read_merges(const pl_gguf *g, gguf_vocab *gv, char *err,
                       size_t errlen)
{
    const pl_gguf_kv *kv = find_array(g, "tokenizer.ggml.merges",
                                      PL_GGUF_TYPE_STRING);
    if (gv->v.model != PL_TOKENIZER_MODEL_GPT2 && !gv->gemma4)
        return 0;
    if (!kv || kv->v.arr.n > INT32_MAX) {
        snprintf(err, errlen, "%s tokenizer without tokenizer.ggml.merges",
                 gv->gemma4 ? "gemma4" : "gpt2");
        return -1;
    }
    gv->v.n_merges = (int32_t)kv->v.arr.n;
    if (read_strings(kv, &gv->merges, &gv->merge_lens))
        return -1;
    if (gv->gemma4)
        return 0;                /* they become scores (merge_scores) */
    gv->v.merges = gv->merges;
    gv->v.merge_lens = gv->merge_lens;
    return 0;
}

typedef struct tok_ref {
    const char *s;
    uint32_t len;
    int32_t id;
} tok_ref;

static int tok_ref_cmp(const void *a, const void *b)
{
    const tok_ref *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* gemma4: each token's score is minus the rank of the first merge whose
 * two sides make it; tokens no merge makes keep -inf (single symbols and
 * specials, never formed by merging). A merge is "left right", split at
 * the first space after its first byte, as llama.cpp does. */
static int merge_scores(gguf_vocab *gv, char *err, size_t errlen)
{
    if (!gv->gemma4)
        return 0;
    int32_t n = gv->v.n_tokens;
    tok_ref *refs = malloc(sizeof *refs * (size_t)n);
    char *buf = NULL;
    free(gv->scores);
    gv->scores = malloc(sizeof *gv->scores * (size_t)n);
    if (!refs || !gv->scores) {
        free(refs);
        return -1;
    }
    for (int32_t i = 0; i < n; i++) {
        refs[i] = (tok_ref){gv->tokens[i], gv->token_lens[i], i};
        gv->scores[i] = -INFINITY;
    }
    qsort(refs, (size_t)n, sizeof *refs, tok_ref_cmp);
    size_t cap = 0;
    for (int32_t m = 0; m < gv->v.n_merges; m++) {
        const char *s = gv->merges[m];
        uint32_t len = gv->merge_lens[m];
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp) {
            snprintf(err, errlen, "tokenizer.ggml.merges[%d]: not \"left right\"", m);
            free(refs), free(buf);
            return -1;
        }
        if (len > cap) {
            char *nb = realloc(buf, len);
            if (!nb) {
                free(refs), free(buf);
                return -1;
            }
            buf = nb, cap = len;
        }
        size_t l = (size_t)(sp - s);
        memcpy(buf, s, l);
        memcpy(buf + l, sp + 1, len - l - 1);
        tok_ref key = {buf, (uint32_t)(len - 1), -1};
        tok_ref *hit = bsearch(&key, refs, (size_t)n, sizeof *refs, tok_ref_cmp);
        if (hit && gv->scores[hit->id] == -INFINITY)
            gv->scores[hit->id] = -(float)m;
    }
    free(refs), free(buf);
    gv->v.scores = gv->scores;
    return 0;
}

#define PHANTOM "\xe2\x96\x81"   /* U+2581 */
#define PHANTOM_LEN 3

/* llama.cpp's converter (conversion/bert.py, phantom()) writes a BERT
 * vocabulary with U+2581 before each word-initial piece and "##" dropped
 * from continuation pieces, control tokens as they are. The WordPiece
 * tokenizer reads the tokenizers library's form, so each piece goes back:
 * "\u2581x" -> "x", "x" -> "##x". BertNormalizer's switches are the
 * library's defaults, lower-casing (and accent stripping with it) from
 * tokenizer.ggml.normalizer.lowercase (absent: on, as llama.cpp does). */
static int read_wordpiece(const pl_gguf *g, gguf_vocab *gv, char *err, size_t errlen)
{
    if (gv->v.model != PL_TOKENIZER_MODEL_BERT)
        return 0;
    if (!gv->types) {
        snprintf(err, errlen, "bert tokenizer without tokenizer.ggml.token_type");
        return -1;
    }
    size_t total = 0;
    for (int32_t i = 0; i < gv->v.n_tokens; i++)
        total += gv->token_lens[i] + 3;
    if (!(gv->wpm_text = malloc(total + 1)))
        return -1;
    size_t o = 0;
    for (int32_t i = 0; i < gv->v.n_tokens; i++) {
        const char *t = gv->tokens[i];
        uint32_t n = gv->token_lens[i];
        char *dst = gv->wpm_text + o;
        if (gv->types[i] == PL_TOKEN_TYPE_CONTROL) {
            memcpy(dst, t, n);
        } else if (n >= PHANTOM_LEN && !memcmp(t, PHANTOM, PHANTOM_LEN)) {
            n -= PHANTOM_LEN;
            memcpy(dst, t + PHANTOM_LEN, n);
        } else {
            memcpy(dst, "##", 2);
            memcpy(dst + 2, t, n);
            n += 2;
        }
        gv->tokens[i] = dst;
        gv->token_lens[i] = n;
        o += n;
    }
    int lc = get_flag(g, "tokenizer.ggml.normalizer.lowercase");
    gv->v.wpm_lowercase = lc != 0;
    gv->v.wpm_strip_accents = gv->v.wpm_lowercase;
    gv->v.wpm_clean_text = gv->v.wpm_chinese = true;
    gv->v.wpm_max_word_chars = 100;
    return 0;
}

static void read_specials(const pl_gguf *g, gguf_vocab *gv)
{
    bool spm = gv->v.model == PL_TOKENIZER_MODEL_LLAMA;
    /* llama.cpp's defaults when a key is absent */
    gv->v.bos = get_id(g, "tokenizer.ggml.bos_token_id", spm ? 1 : 11);
    gv->v.eos = get_id(g, "tokenizer.ggml.eos_token_id", spm ? 2 : 11);
    gv->v.unk = get_id(g, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1);
    gv->v.pad = get_id(g, "tokenizer.ggml.padding_token_id", -1);
    gv->v.eot = get_id(g, "tokenizer.ggml.eot_token_id", -1);
    gv->v.eom = get_id(g, "tokenizer.ggml.eom_token_id", -1);
    gv->v.add_bos = get_flag(g, "tokenizer.ggml.add_bos_token");
    gv->v.add_eos = get_flag(g, "tokenizer.ggml.add_eos_token");
    gv->v.add_space_prefix = get_flag(g, "tokenizer.ggml.add_space_prefix");
    if (gv->gemma4) {
        gv->v.add_bos = 1;       /* llama.cpp overrides a false add_bos */
        gv->v.add_space_prefix = 0;
    }
}

pl_tokenizer *pl_tokenizer_from_gguf(const pl_gguf *g, char *err,
                                     size_t errlen)
{
    gguf_vocab gv;
    pl_tokenizer *t = NULL;
    memset(&gv, 0, sizeof gv);
    err[0] = '\0';
    if (read_model(g, &gv, err, errlen) || read_tokens(g, &gv, err, errlen) ||
        read_merges(g, &gv, err, errlen) || merge_scores(&gv, err, errlen) ||
        read_wordpiece(g, &gv, err, errlen))
        goto done;
    read_specials(g, &gv);
    t = pl_tokenizer_init(&gv.v, err, errlen);
done:
    if (!t && !err[0])
        snprintf(err, errlen, "out of memory reading the tokenizer");
    gguf_vocab_free(&gv);
    return t;
}
