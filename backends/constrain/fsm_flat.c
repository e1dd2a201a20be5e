/* fsm_flat.c - packing a token FSM and its vocabulary into one flat blob
 * each (fsm_flat.h), for the CUDA runner's device copy: copied as is, the
 * pointers are the copy's base plus the blob's offsets. */
#include <stdlib.h>
#include <string.h>

#include "backends/constrain/fsm_flat.h"
#include "backends/constrain/token_fsm.h"

static size_t take(size_t *at, size_t bytes)
{
    size_t o = *at;
    *at += (bytes + 255) & ~(size_t)255;   /* each array 256-byte aligned */
    return o;
}

int pl_fsm_pack_tables(const pl_token_fsm *f, pl_fsm_blob *out)
{
    memset(out, 0, sizeof *out);
    size_t S = (size_t)f->n_states, at = 0;
    out->off[0] = take(&at, S * (size_t)f->words * 4);
    out->off[1] = take(&at, S * 256 * 4);
    out->off[2] = take(&at, S);
    out->bytes = at;
    unsigned char *d = calloc(1, at);
    if (!d)
        return -1;
    pl_token_fsm_fill(f);
    for (int s = 0; s < f->n_states; s++)
        memcpy(d + out->off[0] + (size_t)s * f->words * 4, pl_token_fsm_row(f, s),
               (size_t)f->words * 4);
    memcpy(d + out->off[1], f->dfa->trans, S * 256 * 4);
    memcpy(d + out->off[2], f->dfa->accept, S);
    out->data = d;
    return 0;
}

int pl_fsm_pack_vocab(const pl_vocab_trie *v, int32_t n_vocab, pl_fsm_blob *out)
{
    memset(out, 0, sizeof *out);
    size_t total = 0, len;
    for (int32_t t = 0; t < n_vocab; t++) {
        pl_vocab_trie_bytes(v, t, &len);
        total += len;
    }
    if (total > INT32_MAX)
        return -1;
    size_t at = 0;
    out->off[0] = take(&at, ((size_t)n_vocab + 1) * 4);
    out->off[1] = take(&at, total ? total : 1);
    out->off[2] = take(&at, (size_t)n_vocab);
    out->bytes = at;
    unsigned char *d = calloc(1, at);
    if (!d)
        return -1;
    int32_t *off = (int32_t *)(d + out->off[0]);
    size_t pos = 0;
    for (int32_t t = 0; t < n_vocab; t++) {
        const char *b = pl_vocab_trie_bytes(v, t, &len);
        off[t] = (int32_t)pos;
        if (len)
            memcpy(d + out->off[1] + pos, b, len);
        pos += len;
        d[out->off[2] + (size_t)t] = pl_vocab_trie_is_eog(v, t) ? 1 : 0;
    }
    off[n_vocab] = (int32_t)pos;
    out->data = d;
    return 0;
}

pl_fsm_tables pl_fsm_tables_at(const pl_fsm_blob *b, const void *base, const pl_token_fsm *f)
{
    const unsigned char *p = base;
    return (pl_fsm_tables){.mask = (const uint32_t *)(p + b->off[0]),
                           .trans = (const int32_t *)(p + b->off[1]),
                           .accept = p + b->off[2], .n_states = f->n_states,
                           .words = f->words};
}

pl_fsm_vocab pl_fsm_vocab_at(const pl_fsm_blob *b, const void *base, int32_t n_vocab)
{
    const unsigned char *p = base;
    return (pl_fsm_vocab){.n_vocab = n_vocab, .off = (const int32_t *)(p + b->off[0]),
                          .bytes = p + b->off[1], .eog = p + b->off[2]};
}

void pl_fsm_blob_free(pl_fsm_blob *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}
