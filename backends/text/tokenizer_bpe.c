/* tokenizer_bpe.c - gpt2-style byte-level BPE: every byte of a word maps
 * to one printable "byte-level" character (GPT-2's bytes_to_unicode), then
 * adjacent symbols are merged lowest merge rank first.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/text/tokenizer_internal.h"
#include "backends/text/tokenizer_merge.h"

static int byte_is_printable(int b)
{
    return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) ||
           (b >= 0xae && b <= 0xff);
}

/* GPT-2's bytes_to_unicode: printable bytes map to themselves, the other
 * 68 to U+0100.. in byte order. */
static uint32_t byte_to_cp(int b)
{
    if (byte_is_printable(b))
        return (uint32_t)b;
    if (b <= 0x20)
        return 256u + (uint32_t)b;
    if (b <= 0xa0)
        return 256u + 33u + (uint32_t)(b - 0x7f);
    return 256u + 67u; /* 0xad */
}

int pl_tok_bpe_unbyte(uint32_t cp)
{
    if (cp < 256)
        return byte_is_printable((int)cp) ? (int)cp : -1;
    if (cp < 256 + 33)
        return (int)(cp - 256);
    if (cp < 256 + 67)
        return (int)(cp - 256 - 33 + 0x7f);
    if (cp == 256 + 67)
        return 0xad;
    return -1;
}

typedef struct bpe_ctx {
    const pl_tokenizer *t;
    pl_tok_ids *out;
    pl_tok_merge m;
    char *enc;                   /* byte-level text of the word */
    size_t enc_cap;
} bpe_ctx;

static void bpe_try_pair(bpe_ctx *c, int32_t l, int32_t r, int *fail)
{
    if (l < 0 || r < 0)
        return;
    const pl_tok_sym *a = &c->m.sym[l], *b = &c->m.sym[r];
    if (a->id < 0 || b->id < 0)
        return;
    int32_t merged;
    int32_t rank = pl_tok_pairmap_get(&c->t->merges, a->id, b->id, &merged);
    if (rank < 0)
        return;
    pl_tok_pair p = {-(float)rank, l, r, a->n + b->n, merged};
    if (pl_tok_merge_push(&c->m, p))
        *fail = 1;
}

/* Emit a symbol whose text is no token: its bytes one by one where the
 * single byte is a token (llama.cpp does the same). */
static int bpe_emit_bytes(bpe_ctx *c, const char *w, int32_t s)
{
    const pl_tok_sym *y = &c->m.sym[s];
    for (uint32_t i = 0; i < y->n; i++) {
        uint8_t b = (uint8_t)w[y->off + i];
        if (byte_to_cp(b) < 0x80 && c->t->byte_tok[b] >= 0 &&
            pl_tok_ids_push(c->out, c->t->byte_tok[b]))
            return -1;
    }
    return 0;
}

/* Encode the byte-level form of the word; returns the id of the whole
 * word when it is a token (llama3's ignore_merges), else -1. */
static int32_t bpe_whole_word(bpe_ctx *c, const char *w, size_t len)
{
    if (2 * len > c->enc_cap) {
        char *e = realloc(c->enc, 2 * len);
        if (!e)
            return -1;
        c->enc = e;
        c->enc_cap = 2 * len;
    }
    size_t o = 0;
    for (size_t i = 0; i < len; i++)
        o += pl_tok_utf8_put(byte_to_cp((uint8_t)w[i]), c->enc + o);
    return pl_tok_strmap_get(&c->t->map, c->t, c->enc, o);
}

static int bpe_word(void *ctx, const char *w, size_t len)
{
    bpe_ctx *c = ctx;
    int fail = 0;
    if (c->t->ignore_merges) {
        int32_t id = bpe_whole_word(c, w, len);
        if (id >= 0)
            return pl_tok_ids_push(c->out, id);
    }
    if (pl_tok_merge_reserve(&c->m, len))
        return -1;
    for (size_t i = 0; i < len; i++) /* one symbol per byte */
        c->m.sym[i] = (pl_tok_sym){(uint32_t)i, 1, (int32_t)i - 1,
                                   i + 1 == len ? -1 : (int32_t)i + 1,
                                   c->t->byte_tok[(uint8_t)w[i]]};
    for (size_t i = 1; i < len; i++)
        bpe_try_pair(c, (int32_t)i - 1, (int32_t)i, &fail);
    while (c->m.hn && !fail) {
        pl_tok_pair p = pl_tok_merge_pop(&c->m);
        if (!pl_tok_pair_valid(&c->m, &p))
            continue;
        pl_tok_merge_apply(&c->m, &p);
        c->m.sym[p.left].id = p.merged;
        bpe_try_pair(c, c->m.sym[p.left].prev, p.left, &fail);
        bpe_try_pair(c, p.left, c->m.sym[p.left].next, &fail);
    }
    if (fail)
        return -1;
    for (int32_t s = 0; s >= 0; s = c->m.sym[s].next) {
        int32_t id = c->m.sym[s].id;
        int rc = id >= 0 ? pl_tok_ids_push(c->out, id) : bpe_emit_bytes(c, w, s);
        if (rc)
            return -1;
    }
    return 0;
}

int pl_tok_bpe_encode(const pl_tokenizer *t, const char *text, size_t len,
                      pl_tok_ids *out)
{
    bpe_ctx c = {.t = t, .out = out};
    int rc = pl_pretok_split(t->pre, text, len, bpe_word, &c);
    pl_tok_merge_free(&c.m);
    free(c.enc);
    return rc;
}

/* Decoded bytes of a gpt2 token: byte-level chars back to bytes; other
 * characters (added tokens) are copied as they are. */
static size_t bpe_decode_token(const char *s, size_t len, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t n = pl_tok_utf8_len((uint8_t)s[i]);
        if (n > len - i)
            n = len - i;
        uint32_t cp = (uint8_t)s[i];
        if (n == 2 && ((uint8_t)s[i + 1] & 0xc0) == 0x80)
            cp = (uint32_t)(s[i] & 0x1f) << 6 | (s[i + 1] & 0x3f);
        int b = (n <= 2 && (n == 2 || cp < 0x80)) ? pl_tok_bpe_unbyte(cp) : -1;
        if (b >= 0) {
            out[o++] = (char)b;
        } else {
            memcpy(out + o, s + i, n);
            o += n;
        }
        i += n;
    }
    return o;
}

static int bpe_set_bytes(pl_tokenizer *t)
{
    size_t total = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        total += t->text_len[i] + 1;
    t->bytes = malloc(total + 1);
    if (!t->bytes)
        return -1;
    size_t o = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        const char *s = pl_tok_text(t, i);
        size_t n;
        if (t->types[i] == PL_TOKEN_TYPE_NORMAL ||
            t->types[i] == PL_TOKEN_TYPE_UNDEFINED ||
            t->types[i] == PL_TOKEN_TYPE_BYTE) {
            n = bpe_decode_token(s, t->text_len[i], t->bytes + o);
        } else {
            n = t->text_len[i];
            memcpy(t->bytes + o, s, n);
        }
        t->bytes_off[i] = (uint32_t)o;
        t->bytes_len[i] = (uint32_t)n;
        t->bytes[o + n] = '\0';
        o += n + 1;
    }
    return 0;
}

static int bpe_set_merges(pl_tokenizer *t, const pl_tokenizer_vocab *v)
{
    if (pl_tok_pairmap_init(&t->merges, (uint32_t)v->n_merges))
        return -1;
    for (int32_t r = 0; r < v->n_merges; r++) {
        const char *s = v->merges[r];
        size_t len = v->merge_lens[r];
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp)
            continue;
        size_t ll = (size_t)(sp - s);
        int32_t l = pl_tok_strmap_get(&t->map, t, s, ll);
        int32_t rr = pl_tok_strmap_get(&t->map, t, sp + 1, len - ll - 1);
        if (l < 0 || rr < 0)
            continue;
        /* the merged text is left and right without the space */
        char buf[512];
        int32_t m = -1;
        if (len - 1 <= sizeof buf) {
            memcpy(buf, s, ll);
            memcpy(buf + ll, sp + 1, len - ll - 1);
            m = pl_tok_strmap_get(&t->map, t, buf, len - 1);
        }
        pl_tok_pairmap_put(&t->merges, l, rr, r, m);
    }
    return 0;
}

int pl_tok_bpe_prepare(pl_tokenizer *t, const pl_tokenizer_vocab *v,
                       char *err, size_t errlen)
{
    for (int b = 0; b < 256; b++) {
        char s[4];
        size_t n = pl_tok_utf8_put(byte_to_cp(b), s);
        t->byte_tok[b] = pl_tok_strmap_get(&t->map, t, s, n);
    }
    t->pre = v->pre_regex ? pl_pretok_init_regex(v->pre_regex, v->n_pre_regex, err, errlen)
                          : pl_pretok_init(v->pre, &t->ignore_merges, err, errlen);
    if (!t->pre)
        return -1;
    if (v->ignore_merges)
        t->ignore_merges = v->ignore_merges > 0;
    if (bpe_set_merges(t, v) || bpe_set_bytes(t)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}
