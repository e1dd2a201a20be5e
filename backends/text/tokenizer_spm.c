/* tokenizer_spm.c - SentencePiece BPE ('llama' tokenizer model): spaces
 * become U+2581, symbols start as UTF-8 characters and the adjacent pair
 * whose concatenation is the highest-scoring token merges first;
 * characters that are no token fall back to <0xNN> byte tokens.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/text/tokenizer_internal.h"
#include "backends/text/tokenizer_merge.h"

static const char spm_space[3] = {(char)0xe2, (char)0x96, (char)0x81};

/* text with spaces escaped (and an optional leading one) into a new
 * buffer; *n gets its length. */
static char *spm_escape(const char *text, size_t len, bool prefix, size_t *n)
{
    char *e = malloc(3 * len + 4);
    if (!e)
        return NULL;
    size_t o = 0;
    if (prefix) {
        memcpy(e, spm_space, 3);
        o = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(e + o, spm_space, 3);
            o += 3;
        } else {
            e[o++] = text[i];
        }
    }
    *n = o;
    return e;
}

static int spm_try_pair(const pl_tokenizer *t, pl_tok_merge *m,
                        const char *s, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return 0;
    uint32_t size = m->sym[l].n + m->sym[r].n;
    int32_t id = pl_tok_strmap_get(&t->map, t, s + m->sym[l].off, size);
    if (id < 0 || t->scores[id] == -INFINITY) /* -inf: no merge makes it */
        return 0;
    pl_tok_pair p = {t->scores[id], l, r, size, id};
    return pl_tok_merge_push(m, p);
}

static int spm_emit(const pl_tokenizer *t, const pl_tok_merge *m,
                    const char *s, pl_tok_ids *out)
{
    for (int32_t k = 0; k >= 0; k = m->sym[k].next) {
        const pl_tok_sym *y = &m->sym[k];
        int32_t id = y->id >= 0 ? y->id : pl_tok_strmap_get(&t->map, t, s + y->off, y->n);
        if (id >= 0) {
            if (pl_tok_ids_push(out, id))
                return -1;
            continue;
        }
        for (uint32_t i = 0; i < y->n; i++) {
            int32_t b = t->byte_tok[(uint8_t)s[y->off + i]];
            if (b < 0)
                b = t->unk;
            if (b >= 0 && pl_tok_ids_push(out, b))
                return -1;
        }
    }
    return 0;
}

/* The merges of s[0..n) (n > 0), llama.cpp's llm_tokenizer_spm. */
static int spm_merge(const pl_tokenizer *t, pl_tok_merge *m, const char *s, size_t n,
                     pl_tok_ids *out)
{
    if (pl_tok_merge_reserve(m, n))
        return -1;
    size_t ns = pl_tok_merge_chars(m, s, n);
    for (size_t i = 1; i < ns; i++)
        if (spm_try_pair(t, m, s, (int32_t)i - 1, (int32_t)i))
            return -1;
    while (m->hn) {
        pl_tok_pair p = pl_tok_merge_pop(m);
        if (!pl_tok_pair_valid(m, &p))
            continue;
        pl_tok_merge_apply(m, &p);
        m->sym[p.left].id = p.merged;
        if (spm_try_pair(t, m, s, m->sym[p.left].prev, p.left) ||
            spm_try_pair(t, m, s, p.left, m->sym[p.left].next))
            return -1;
    }
    return spm_emit(t, m, s, out);
}

/* Words: the merges never join two symbols across a character followed by
 * U+2581 (where a word's space begins) unless a token has U+2581 after
 * another character (Gemma: one, ">▁</"); so the text splits there into
 * words, each merged alone with the same result (merges are local and
 * their order within a word is unchanged), and a word met again in the
 * same call is copied from its first encoding. */
typedef struct spm_word {
    uint64_t hash;
    size_t off, len;             /* in the escaped text */
    int first, n;                /* its ids in the output */
} spm_word;

typedef struct spm_call {
    const pl_tokenizer *t;
    const char *s;
    pl_tok_merge m;
    spm_word *memo;              /* (cap) hash 0: empty */
    size_t cap;
    pl_tok_ids *out;
} spm_call;

static uint64_t word_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h ? h : 1;
}

static int spm_word_encode(spm_call *c, size_t off, size_t len)
{
    uint64_t h = word_hash(c->s + off, len);
    size_t i = h & (c->cap - 1);
    for (; c->memo[i].hash; i = (i + 1) & (c->cap - 1)) {
        spm_word *w = &c->memo[i];
        if (w->hash != h || w->len != len || memcmp(c->s + w->off, c->s + off, len))
            continue;
        for (int k = 0; k < w->n; k++)
            if (pl_tok_ids_push(c->out, c->out->v[w->first + k]))
                return -1;
        return 0;
    }
    int first = c->out->n;
    if (spm_merge(c->t, &c->m, c->s + off, len, c->out))
        return -1;
    c->memo[i] = (spm_word){h, off, len, first, c->out->n - first};
    return 0;
}

static bool is_space_at(const char *s, size_t n, size_t o)
{
    return o + 3 <= n && !memcmp(s + o, spm_space, 3);
}

/* Bytes inside an occurrence of a bridging token: no word starts there.
 * NULL (and *none) when there is no occurrence. */
static uint8_t *bridged(const pl_tokenizer *t, const char *s, size_t n, bool *oom)
{
    uint8_t *in = NULL;
    *oom = false;
    for (int32_t b = 0; b < t->n_spm_bridge; b++) {
        const char *tx = pl_tok_text(t, t->spm_bridge[b]);
        size_t tl = t->text_len[t->spm_bridge[b]];
        for (const char *p = s; (p = memmem(p, n - (size_t)(p - s), tx, tl)); p++) {
            if (!in && !(in = calloc(n, 1))) {
                *oom = true;
                return NULL;
            }
            memset(in + (p - s) + 1, 1, tl - 1);
        }
    }
    return in;
}

/* Where each word of s[0..n) starts: the character offsets of a U+2581
 * after another character, outside bridging tokens; calls fn per word. */
static int spm_words(spm_call *c, size_t n, const uint8_t *in)
{
    static const uint8_t lut[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    size_t start = 0;
    bool prev_space = false;
    for (size_t o = 0; o < n;) {
        size_t cl = lut[(uint8_t)c->s[o] >> 4];
        cl = cl > n - o ? n - o : cl;
        bool sp = cl == 3 && is_space_at(c->s, n, o);
        if (sp && !prev_space && o > start && !(in && in[o])) {
            if (spm_word_encode(c, start, o - start))
                return -1;
            start = o;
        }
        prev_space = sp;
        o += cl;
    }
    return spm_word_encode(c, start, n - start);
}

int pl_tok_spm_encode(const pl_tokenizer *t, const char *text, size_t len,
                      bool prefix_space, pl_tok_ids *out)
{
    int rc = -1;
    size_t n;
    bool oom;
    spm_call c = {.t = t, .out = out};
    char *s = spm_escape(text, len, prefix_space, &n);
    uint8_t *in = NULL;
    if (!s)
        return -1;
    c.s = s;
    if (n == 0) {
        rc = 0;
        goto done;
    }
    if (t->n_spm_bridge < 0) {   /* a vocabulary that joins words freely */
        rc = spm_merge(t, &c.m, s, n, out);
        goto done;
    }
    in = bridged(t, s, n, &oom);
    for (c.cap = 16; c.cap < n / 2; c.cap *= 2)
        ;
    c.memo = calloc(c.cap, sizeof *c.memo);
    if (!oom && c.memo)
        rc = spm_words(&c, n, in);
done:
    pl_tok_merge_free(&c.m);
    free(c.memo);
    free(in);
    free(s);
    return rc;
}

/* <0xNN> -> NN, or -1. */
static int spm_byte_value(const char *s, size_t len)
{
    if (len != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
        return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' :
                c >= 'A' && c <= 'F' ? c - 'A' + 10 :
                c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Decoded bytes of a llama token (as llama.cpp's token_to_piece). */
static size_t spm_decode_token(const pl_tokenizer *t, int32_t id, char *out)
{
    const char *s = pl_tok_text(t, id);
    size_t len = t->text_len[id], o = 0;
    int type = t->types[id];
    if (type == PL_TOKEN_TYPE_BYTE && spm_byte_value(s, len) >= 0) {
        out[0] = (char)spm_byte_value(s, len);
        return 1;
    }
    if (type == PL_TOKEN_TYPE_UNKNOWN) {
        memcpy(out, "\xe2\x96\x85", 3); /* U+2585, as llama.cpp shows it */
        return 3;
    }
    if (type == PL_TOKEN_TYPE_CONTROL) {
        memcpy(out, s, len);
        return len;
    }
    for (size_t i = 0; i < len;) {
        if (i + 3 <= len && !memcmp(s + i, spm_space, 3)) {
            out[o++] = ' ';
            i += 3;
        } else {
            out[o++] = s[i++];
        }
    }
    return o;
}

/* The tokens that may join two words (a U+2581 after another character);
 * more than a few and the text is not split into words. */
static int find_bridges(pl_tokenizer *t)
{
    enum { MAX_BRIDGES = 16 };
    t->spm_bridge = malloc(sizeof *t->spm_bridge * MAX_BRIDGES);
    if (!t->spm_bridge)
        return -1;
    for (int32_t id = 0; id < t->n_vocab && t->n_spm_bridge >= 0; id++) {
        const char *s = pl_tok_text(t, id);
        size_t n = t->text_len[id];
        for (size_t o = 1; o < n; o++) {
            if (!is_space_at(s, n, o) || (o >= 3 && is_space_at(s, n, o - 3)))
                continue;
            if (t->n_spm_bridge == MAX_BRIDGES)
                t->n_spm_bridge = -1;
            else
                t->spm_bridge[t->n_spm_bridge++] = id;
            break;
        }
    }
    return 0;
}

int pl_tok_spm_prepare(pl_tokenizer *t, char *err, size_t errlen)
{
    if (find_bridges(t)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        t->byte_tok[b] = pl_tok_strmap_get(&t->map, t, s, 6);
    }
    size_t total = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        total += t->text_len[i] + 4;
    t->bytes = malloc(total + 1);
    if (!t->bytes) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t o = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        size_t n = spm_decode_token(t, i, t->bytes + o);
        t->bytes_off[i] = (uint32_t)o;
        t->bytes_len[i] = (uint32_t)n;
        t->bytes[o + n] = '\0';
        o += n + 1;
    }
    return 0;
}
