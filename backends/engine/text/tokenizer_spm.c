/* tokenizer_spm.c - SentencePiece BPE ('llama' tokenizer model): spaces
 * become U+2581, symbols start as UTF-8 characters and the adjacent pair
 * whose concatenation is the highest-scoring token merges first;
 * characters that are no token fall back to <0xNN> byte tokens.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/engine/text/tokenizer_internal.h"
#include "backends/engine/text/tokenizer_merge.h"

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
    if (id < 0)
        return 0;
    pl_tok_pair p = {t->scores[id], l, r, size, id};
    return pl_tok_merge_push(m, p);
}

static int spm_emit(const pl_tokenizer *t, const pl_tok_merge *m,
                    const char *s, pl_tok_ids *out)
{
    for (int32_t k = 0; k >= 0; k = m->sym[k].next) {
        const pl_tok_sym *y = &m->sym[k];
        int32_t id = pl_tok_strmap_get(&t->map, t, s + y->off, y->n);
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

int pl_tok_spm_encode(const pl_tokenizer *t, const char *text, size_t len,
                      bool prefix_space, pl_tok_ids *out)
{
    int rc = -1;
    pl_tok_merge m = {0};
    size_t n;
    char *s = spm_escape(text, len, prefix_space, &n);
    if (!s)
        return -1;
    if (n == 0) {
        rc = 0;
        goto done;
    }
    if (pl_tok_merge_reserve(&m, n))
        goto done;
    size_t ns = pl_tok_merge_chars(&m, s, n);
    for (size_t i = 1; i < ns; i++)
        if (spm_try_pair(t, &m, s, (int32_t)i - 1, (int32_t)i))
            goto done;
    while (m.hn) {
        pl_tok_pair p = pl_tok_merge_pop(&m);
        if (!pl_tok_pair_valid(&m, &p))
            continue;
        pl_tok_merge_apply(&m, &p);
        if (spm_try_pair(t, &m, s, m.sym[p.left].prev, p.left) ||
            spm_try_pair(t, &m, s, p.left, m.sym[p.left].next))
            goto done;
    }
    rc = spm_emit(t, &m, s, out);
done:
    pl_tok_merge_free(&m);
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

int pl_tok_spm_prepare(pl_tokenizer *t, char *err, size_t errlen)
{
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
