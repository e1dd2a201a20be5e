/* token_fsm.c - the vocabulary trie and the per-state token masks.
 *
 * The trie is stored in preorder (node i's subtree is i..skip[i]), so the
 * mask of a state is one linear scan: a node's parent is the last node
 * visited one level up, and a dead node skips its whole subtree. */
#include "backends/constrain/token_fsm.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct pl_vocab_trie {
    int32_t n_vocab;
    char *bytes;                 /* all tokens' bytes */
    int64_t *off;                /* (n_vocab + 1) */
    uint8_t *eog;                /* (n_vocab) */
    int32_t *eog_ids;
    int n_eog;
    int n_nodes;
    uint8_t *node_byte;          /* (n_nodes) */
    uint16_t *node_depth;        /* (n_nodes) 1.. */
    int32_t *node_skip;          /* (n_nodes) first node after the subtree */
    int32_t *node_tok;           /* (n_nodes) first token ending here, -1 */
    int32_t *tok_next;           /* (n_vocab) next token with the same bytes */
    int max_depth;
};

const char *pl_vocab_trie_bytes(const pl_vocab_trie *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab) {
        *len = 0;
        return NULL;
    }
    *len = (size_t)(t->off[id + 1] - t->off[id]);
    return t->bytes + t->off[id];
}

bool pl_vocab_trie_is_eog(const pl_vocab_trie *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && t->eog[id];
}

void pl_vocab_trie_free(pl_vocab_trie *t)
{
    if (!t)
        return;
    free(t->bytes);
    free(t->off);
    free(t->eog);
    free(t->eog_ids);
    free(t->node_byte);
    free(t->node_depth);
    free(t->node_skip);
    free(t->node_tok);
    free(t->tok_next);
    free(t);
}

static int copy_vocab_(pl_vocab_trie *t, const pl_vocab_source *src)
{
    size_t total = 0, len;
    for (int32_t i = 0; i < src->n_vocab; i++)
        if (src->token_bytes(src->ud, i, &len))
            total += len;
    t->bytes = malloc(total + 1);
    t->off = malloc(sizeof *t->off * ((size_t)src->n_vocab + 1));
    t->eog = calloc((size_t)src->n_vocab, 1);
    t->eog_ids = malloc(sizeof *t->eog_ids * (size_t)src->n_vocab);
    if (!t->bytes || !t->off || !t->eog || !t->eog_ids)
        return -1;
    size_t at = 0;
    for (int32_t i = 0; i < src->n_vocab; i++) {
        t->off[i] = (int64_t)at;
        const char *b = src->token_bytes(src->ud, i, &len);
        if (src->is_eog(src->ud, i)) {
            t->eog[i] = 1;
            t->eog_ids[t->n_eog++] = i;
            continue;             /* an end token adds no text to match */
        }
        if (b && len) {
            memcpy(t->bytes + at, b, len);
            at += len;
        }
    }
    t->off[src->n_vocab] = (int64_t)at;
    return 0;
}

/* Tokens by bytes, then by length (a prefix first), then by id. */
static int cmp_trie_(const void *x, const void *y, void *ud)
{
    const pl_vocab_trie *t = ud;
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    size_t la, lb;
    const char *pa = pl_vocab_trie_bytes(t, a, &la);
    const char *pb = pl_vocab_trie_bytes(t, b, &lb);
    int c = memcmp(pa, pb, la < lb ? la : lb);
    if (c)
        return c;
    if (la != lb)
        return la < lb ? -1 : 1;
    return (a > b) - (a < b);
}

/* Preorder trie of the sorted byte strings (shared prefixes once). */
static int build_trie_(pl_vocab_trie *t, int32_t *order, int n)
{
    size_t cap = (size_t)(t->off[t->n_vocab]) + 1;
    t->node_byte = malloc(cap);
    t->node_depth = malloc(sizeof *t->node_depth * cap);
    t->node_skip = malloc(sizeof *t->node_skip * cap);
    t->node_tok = malloc(sizeof *t->node_tok * cap);
    int32_t *stack = malloc(sizeof *stack * (cap + 1));
    if (!t->node_byte || !t->node_depth || !t->node_skip || !t->node_tok || !stack) {
        free(stack);
        return -1;
    }
    int depth = 0;
    size_t prev_len = 0;
    const char *prev = NULL;
    for (int k = 0; k < n; k++) {
        size_t len;
        const char *b = pl_vocab_trie_bytes(t, order[k], &len);
        size_t lcp = 0;
        while (prev && lcp < len && lcp < prev_len && prev[lcp] == b[lcp])
            lcp++;
        while ((size_t)depth > lcp)
            t->node_skip[stack[--depth]] = t->n_nodes;
        for (size_t i = lcp; i < len; i++) {
            int32_t id = t->n_nodes++;
            t->node_byte[id] = (uint8_t)b[i];
            t->node_depth[id] = (uint16_t)(i + 1 > 65535 ? 65535 : i + 1);
            t->node_tok[id] = -1;
            stack[depth++] = id;
        }
        if ((int)len > t->max_depth)
            t->max_depth = (int)len;
        int32_t node = stack[depth - 1];
        t->tok_next[order[k]] = t->node_tok[node];
        t->node_tok[node] = order[k];
        prev = b;
        prev_len = len;
    }
    while (depth > 0)
        t->node_skip[stack[--depth]] = t->n_nodes;
    free(stack);
    return 0;
}

pl_vocab_trie *pl_vocab_trie_new(const pl_vocab_source *src)
{
    pl_vocab_trie *t = calloc(1, sizeof *t);
    int32_t *order = NULL;
    if (!t)
        return NULL;
    t->n_vocab = src->n_vocab;
    t->tok_next = malloc(sizeof *t->tok_next * ((size_t)src->n_vocab + 1));
    order = malloc(sizeof *order * ((size_t)src->n_vocab + 1));
    if (!t->tok_next || !order || copy_vocab_(t, src) < 0)
        goto fail;
    int n = 0;
    for (int32_t i = 0; i < src->n_vocab; i++)
        if (t->off[i + 1] > t->off[i] && t->off[i + 1] - t->off[i] < 65535)
            order[n++] = i;
    qsort_r(order, (size_t)n, sizeof *order, cmp_trie_, t);
    if (build_trie_(t, order, n) < 0)
        goto fail;
    free(order);
    return t;
fail:
    free(order);
    pl_vocab_trie_free(t);
    return NULL;
}

/* The mask of one DFA state: one scan of the trie. */
static void state_mask_(const pl_vocab_trie *t, const pl_dfa *d, int32_t q, int32_t *st,
                        uint32_t *row)
{
    st[0] = q;
    for (int32_t i = 0; i < t->n_nodes;) {
        int dep = t->node_depth[i];
        int32_t nq = d->trans[(size_t)st[dep - 1] * 256 + t->node_byte[i]];
        if (nq < 0) {
            i = t->node_skip[i];
            continue;
        }
        st[dep] = nq;
        for (int32_t k = t->node_tok[i]; k >= 0; k = t->tok_next[k])
            row[k >> 5] |= 1u << (k & 31);
        i++;
    }
    if (d->accept[q])
        for (int k = 0; k < t->n_eog; k++)
            row[t->eog_ids[k] >> 5] |= 1u << (t->eog_ids[k] & 31);
}

static double now_ms_(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

const uint32_t *pl_token_fsm_row(const pl_token_fsm *cf, int32_t q)
{
    pl_token_fsm *f = (pl_token_fsm *)cf;
    uint32_t *row = f->mask + (size_t)q * (size_t)f->words;
    if (__atomic_load_n(&f->ready[q], __ATOMIC_ACQUIRE))
        return row;
    pthread_mutex_lock(f->mu_);
    if (!f->ready[q]) {
        state_mask_(f->vocab, f->dfa, q, f->scratch_, row);
        __atomic_store_n(&f->ready[q], 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(f->mu_);
    return row;
}

void pl_token_fsm_fill(const pl_token_fsm *f)
{
    for (int32_t q = 0; q < f->n_states; q++)
        pl_token_fsm_row(f, q);
}

static void fsm_free_(pl_token_fsm *f)
{
    if (f->mu_)
        pthread_mutex_destroy(f->mu_);
    free(f->mu_);
    free(f->scratch_);
    free(f->ready);
    free(f->mask);
    free(f->final);
    free(f);
}

pl_token_fsm *pl_token_fsm_new(const pl_vocab_trie *v, pl_dfa *dfa)
{
    double t0 = now_ms_();
    pl_token_fsm *f = calloc(1, sizeof *f);
    if (!f)
        goto fail;
    f->n_states = dfa->n_states;
    f->n_vocab = v->n_vocab;
    f->words = (v->n_vocab + 31) / 32;
    /* calloc: rows never visited are never touched, so cost no memory */
    f->mask = calloc((size_t)f->n_states * (size_t)f->words, sizeof *f->mask);
    f->final = calloc((size_t)f->n_states, 1);
    f->ready = calloc((size_t)f->n_states, 1);
    f->scratch_ = malloc(sizeof *f->scratch_ * ((size_t)v->max_depth + 2));
    f->mu_ = malloc(sizeof(pthread_mutex_t));
    if (!f->mask || !f->final || !f->ready || !f->scratch_ || !f->mu_) {
        free(f->mu_);
        f->mu_ = NULL;
        goto fail;
    }
    pthread_mutex_init(f->mu_, NULL);
    for (int32_t q = 0; q < f->n_states; q++) {
        bool goes_on = false;
        for (int b = 0; b < 256 && !goes_on; b++)
            goes_on = dfa->trans[(size_t)q * 256 + (size_t)b] >= 0;
        f->final[q] = dfa->accept[q] && !goes_on;
    }
    f->dfa = dfa;
    f->vocab = v;
    f->refs = 1;
    f->compile_ms = now_ms_() - t0;
    return f;
fail:
    if (f)
        fsm_free_(f);
    pl_dfa_free(dfa);
    return NULL;
}

void pl_token_fsm_retain(const pl_token_fsm *f)
{
    __atomic_fetch_add(&((pl_token_fsm *)f)->refs, 1, __ATOMIC_RELAXED);
}

void pl_token_fsm_release(const pl_token_fsm *cf)
{
    pl_token_fsm *f = (pl_token_fsm *)cf;
    if (!f || __atomic_fetch_sub(&f->refs, 1, __ATOMIC_ACQ_REL) != 1)
        return;
    pl_dfa_free(f->dfa);
    fsm_free_(f);
}

int32_t pl_token_fsm_next(const pl_token_fsm *f, int32_t state, int32_t tok)
{
    if (state < 0 || state >= f->n_states || tok < 0 || tok >= f->n_vocab)
        return -1;
    if (pl_vocab_trie_is_eog(f->vocab, tok))
        return f->dfa->accept[state] ? state : -1;
    size_t len;
    const char *b = pl_vocab_trie_bytes(f->vocab, tok, &len);
    if (!len)
        return -1;
    int32_t q = state;
    for (size_t i = 0; i < len && q >= 0; i++)
        q = f->dfa->trans[(size_t)q * 256 + (unsigned char)b[i]];
    return q;
}
